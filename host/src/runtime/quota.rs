//! # A writable grant's quota (a mount's `quota_mb`, a data directory's `data_quota_mb`), enforced at every change
//!
//! **What is counted.** A grant's usage is the sum of the sizes (`st_size`) of the regular
//! files under it, each file (inode) counted once however many hard links it has, plus
//! [`ENTRY_BYTES`] (one 4 KiB block) for every name in it: each file, directory, symlink
//! and hard link. So a quota bounds the number of entries too (a guest creating empty
//! files would otherwise exhaust the host's inodes within any byte quota): a quota of
//! 1 MiB holds at most 256 names. Usage is measured once, when the component loads (a walk
//! of the tree), and from then on kept by the host as guests change it.
//!
//! **How it is enforced: exactly, before the bytes land.** Every `wasi:filesystem`
//! function that can change a file's size on a mount with a quota is shadowed here, in
//! front of wasmtime-wasi's own implementation:
//!
//! - `descriptor.write`, `descriptor.set-size` and the output streams of
//!   `write-via-stream` / `append-via-stream` (the streams are our own, streams.rs):
//!   the growth a write would cause (its end past the file's current size) is charged
//!   first; past the quota the write fails with `quota` and nothing is written. A write
//!   that does not grow the file (an overwrite) always passes, even over the quota.
//! - `open-at` with `create` (of a name that was not there), `create-directory-at`,
//!   `symlink-at` and `link-at` charge a name's [`ENTRY_BYTES`] first; past the quota they
//!   fail with `quota` and nothing is made.
//! - `open-at` with `truncate`, `unlink-file-at`, `remove-directory-at` and `rename-at`
//!   onto an existing name give back what they free: the name, and the bytes of a file
//!   whose last link it was.
//! - `rename-at` and `link-at` between two different grants are refused with
//!   `cross-device` when either has a quota, so no file moves its bytes out of the
//!   count.
//!
//! Each of these measures the file's size before and after (`fstat`) while holding the
//! mount's lock, which every change of size on the mount takes, so concurrent calls of the
//! component cannot race a measurement: the count moves by exactly what the file system
//! did. Refusals are the WASI error `quota` (a stream write fails with
//! `last-operation-failed`, whose `filesystem-error-code` is `quota`).
//!
//! **One count per directory.** A directory granted again while a quota still counts it
//! (a reload: the replaced version's calls may still run) shares that quota, its count and
//! its lock (`files.rs`), and measures it again, unless a change is under way. A new limit
//! replaces the old one for every call, the replaced version's too, once the new version
//! is served (a version refused at load changes nothing): two counts of one directory
//! would each miss what the other's calls write, and the directory could end up holding
//! both limits' worth.
//!
//! **Where it is not exact.** Changes made to the directory by anything but the guests of
//! this server (the operator, another process) are not seen until the next load.
//!
//! **Removed but still open.** A file whose last name is removed (unlinked, or renamed
//! over) keeps its blocks on disk while anything holds it open, so its bytes stay counted
//! until nothing does: the host opens it (read only) before the name goes, and asks the
//! kernel later whether anything else holds it (a write lease is granted only when
//! nothing does). Without that, a guest could fill the quota, hold the file, remove it
//! and do it again, a quota's worth per descriptor it may hold. Writes to it after the
//! removal are charged as any, and given back with it. The host's descriptor for such a
//! file is taken from the server's budget for guests (ledger.rs): with none left, the
//! file is not kept open and its bytes stay counted until the next load.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::component::{Linker, Resource};
use wasmtime::{Result, StoreContextMut};
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p2::bindings::filesystem::preopens::Host as _;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, Filesize, Host as _, HostDescriptor, OpenFlags, PathFlags,
};

use super::guest::GuestState;
use super::ledger::HeldDescriptor;
use super::moves;
use super::opening;

/// What one name in a grant (a file, directory, symlink or hard link) counts against its
/// quota besides a file's bytes: a file system block, about what an inode and its
/// directory entry cost the host's disk.
pub(crate) const ENTRY_BYTES: u64 = 4096;

/// A mount's quota and what its files hold now; shared by every call of the component.
pub(crate) struct Quota {
    limit: AtomicU64,
    used: AtomicU64,
    /// Held across every measurement and change of a size on the mount.
    pub(crate) lock: Arc<tokio::sync::Mutex<()>>,
    /// Files whose last name was removed while something may still hold them open.
    orphans: std::sync::Mutex<Orphans>,
}

/// Files whose last name a guest removed, each held open by the host (one descriptor, read
/// only) so that it can tell when nothing else holds it: until then its blocks are still
/// on disk, and its bytes (and its name's [`ENTRY_BYTES`]) stay counted. Without this a
/// guest could fill the quota, keep the file open, remove it, and do it again: every file
/// it holds open would be quota past the count.
///
/// Whether something holds one is told later, not when its name goes: at the next charge
/// the quota cannot take, at the end of each call under the grant (its descriptors then
/// closed), or when more than [`ORPHANS_UNSWEPT`] wait. By then an `open` that found the
/// name just before it was removed has finished, and counts as holding the file.
struct Orphans {
    files: Vec<Orphan>,
    /// How many there may be before the next sweep ([`Quota::sweep`]).
    sweep_at: usize,
}

impl Default for Orphans {
    fn default() -> Self {
        Self { files: Vec::new(), sweep_at: ORPHANS_UNSWEPT }
    }
}

/// A removed file the host keeps open, and the descriptor that is, counted in the server's
/// budget: however many files guests remove while they hold them, the host's descriptors
/// for them stay within what guests may hold in all.
struct Orphan {
    file: Arc<std::fs::File>,
    _descriptor: HeldDescriptor,
}

/// Orphans kept unswept, beyond those that were still held at the last sweep.
const ORPHANS_UNSWEPT: usize = 64;

/// A write refused because it would take the mount past its quota; the guest sees `quota`.
#[derive(Debug, thiserror::Error)]
#[error("the mount's quota is used up")]
pub(crate) struct QuotaExceeded;

impl Quota {
    /// A quota of `limit` bytes over the directory `root`, measuring what it holds now.
    pub(crate) fn measure(limit: u64, root: &std::fs::File) -> std::io::Result<Self> {
        Ok(Self::counting(limit, usage(root)?))
    }

    fn counting(limit: u64, used: u64) -> Self {
        Self {
            limit: AtomicU64::new(limit),
            used: AtomicU64::new(used),
            lock: Default::default(),
            orphans: Default::default(),
        }
    }

    /// [`Quota::measure`], or, when the tree cannot be measured (nested past
    /// [`MEASURE_DEPTH`], unreadable), a quota counted as used up until the next load,
    /// with the reason: a guest that built such a tree can no longer grow it, and the
    /// component still loads for everyone else (its other tenants).
    pub(crate) fn measure_or_full(limit: u64, root: &std::fs::File) -> (Self, Option<std::io::Error>) {
        match Self::measure(limit, root) {
            Ok(quota) => (quota, None),
            Err(error) => (Self::counting(limit, limit), Some(error)),
        }
    }

    /// Measure `root` again (a reload granting it anew), unless a change is under way: the
    /// count then stays as it is until the next load.
    /// A tree that cannot be measured counts as used up, as at a first load.
    pub(crate) fn measure_again(&self, root: &std::fs::File) -> Result<(), std::io::Error> {
        let Ok(_measuring) = self.lock.try_lock() else { return Ok(()) };
        match usage(root) {
            Ok(used) => {
                let orphans = self.orphans.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let held: u64 = orphans.files.iter().map(|orphan| size_of(&orphan.file) + ENTRY_BYTES).sum();
                self.used.store(used.saturating_add(held), Ordering::Relaxed);
                Ok(())
            }
            Err(error) => {
                self.used.fetch_max(self.limit(), Ordering::Relaxed);
                Err(error)
            }
        }
    }

    /// The last name of `file` (opened by the host, read only, on `descriptor`) was
    /// removed: its bytes are given back once nothing else holds it open.
    fn orphaned(&self, file: Arc<std::fs::File>, descriptor: HeldDescriptor) {
        let mut orphans = self.orphans.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        orphans.files.push(Orphan { file, _descriptor: descriptor });
        if orphans.files.len() > orphans.sweep_at {
            self.sweep(&mut orphans);
        }
    }

    /// A call under the grant ended: its descriptors are closed, so give back what the
    /// orphans nothing holds now took.
    pub(crate) fn sweep_orphans(&self) {
        let mut orphans = self.orphans.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !orphans.files.is_empty() {
            self.sweep(&mut orphans);
        }
    }

    /// Give back what the orphans nothing else holds open took, and close them.
    fn sweep(&self, orphans: &mut Orphans) {
        orphans.files.retain(|orphan| {
            if held_elsewhere(&orphan.file) {
                return true;
            }
            self.release(size_of(&orphan.file) + ENTRY_BYTES);
            false
        });
        orphans.sweep_at = orphans.files.len() * 2 + ORPHANS_UNSWEPT;
    }

    /// Bytes the mount's files hold, as counted.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Its limit from now on is `limit`, for every call that counts against it.
    pub(crate) fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Give back `bytes` that something freed.
    fn release(&self, bytes: u64) {
        self.settle(0, bytes, 0);
    }

    /// Take `bytes` more, unless that would pass the limit, even after giving back what
    /// orphans no longer held took. Nothing (0) always passes.
    fn charge(&self, bytes: u64) -> bool {
        let take = || {
            self.used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                    used.checked_add(bytes).filter(|&total| total <= self.limit())
                })
                .is_ok()
        };
        if bytes == 0 || take() {
            return true;
        }
        let mut orphans = self.orphans.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if orphans.files.is_empty() {
            return false;
        }
        self.sweep(&mut orphans);
        take()
    }

    /// After a change that was charged `charged` bytes ahead, count what it really did to
    /// a file: its size went from `before` to `after`.
    fn settle(&self, charged: u64, before: u64, after: u64) {
        let change = i128::from(after) - i128::from(before) - i128::from(charged);
        let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            Some((i128::from(used) + change).clamp(0, i128::from(u64::MAX)) as u64)
        });
    }
}

/// The deepest a measured tree may nest (one descriptor held per level while it is walked).
pub(crate) const MEASURE_DEPTH: usize = 256;

/// An open directory stream, closed when dropped.
struct DirStream(*mut libc::DIR);

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: the stream came from `fdopendir` and is closed only here.
        unsafe { libc::closedir(self.0) };
    }
}

/// Open `name` under the directory `at` as a directory stream, without following a
/// symlink; `Ok(None)` when it is gone (removed meanwhile).
fn open_dir_at(at: libc::c_int, name: &std::ffi::CStr) -> std::io::Result<Option<DirStream>> {
    // SAFETY: plain libc calls; the descriptor is owned by the stream once `fdopendir`
    // succeeds, and closed here when it does not.
    unsafe {
        let fd = libc::openat(
            at,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        );
        if fd < 0 {
            let error = std::io::Error::last_os_error();
            return if error.kind() == std::io::ErrorKind::NotFound { Ok(None) } else { Err(error) };
        }
        let stream = libc::fdopendir(fd);
        if stream.is_null() {
            let error = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(error);
        }
        Ok(Some(DirStream(stream)))
    }
}

/// Bytes of the regular files under `root`, each inode once, and [`ENTRY_BYTES`] for each
/// name. Walked by descriptors (each directory opened relative to its parent, each name
/// stat-ed relative to its directory), never by path, so no depth of nesting makes a path
/// too long; symlinks are not followed; a name removed meanwhile is skipped. Deeper than
/// [`MEASURE_DEPTH`] is an error.
fn usage(root: &std::fs::File) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0u64;
    let mut stack = Vec::new();
    stack.extend(open_dir_at(root.as_raw_fd(), c".")?);
    while let Some(dir) = stack.last() {
        // SAFETY: `dir` is an open stream; the entry it returns is read before the next
        // `readdir` on it.
        let (fd, entry) = unsafe { (libc::dirfd(dir.0), libc::readdir(dir.0)) };
        if entry.is_null() {
            stack.pop();
            continue;
        }
        // SAFETY: `d_name` is a NUL-terminated name within the entry.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_owned();
        if name.as_bytes() == b"." || name.as_bytes() == b".." {
            continue;
        }
        // SAFETY: `stat` is written by `fstatat` before it is read.
        let stat = unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            if libc::fstatat(fd, name.as_ptr(), &mut stat, libc::AT_SYMLINK_NOFOLLOW) != 0 {
                let error = std::io::Error::last_os_error();
                if error.kind() == std::io::ErrorKind::NotFound {
                    continue;
                }
                return Err(error);
            }
            stat
        };
        total = total.saturating_add(ENTRY_BYTES);
        match stat.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                if stack.len() >= MEASURE_DEPTH {
                    return Err(std::io::Error::other(format!(
                        "directories nest deeper than {MEASURE_DEPTH}"
                    )));
                }
                stack.extend(open_dir_at(fd, &name)?);
            }
            libc::S_IFREG if stat.st_nlink == 1 || seen.insert((stat.st_dev, stat.st_ino)) => {
                total = total.saturating_add(stat.st_size as u64);
            }
            _ => {}
        }
    }
    Ok(total)
}

/// Whether anything but the host's own read-only descriptor `file` holds the file open,
/// in this process or another: the kernel grants a write lease only when nothing does
/// (`fcntl(F_SETLEASE)`), and it is given up at once. Where no lease can be taken (a file
/// system without them, a file another user owns), the file counts as not held: every
/// file a guest makes is the server's user's.
fn held_elsewhere(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor `file` owns; a lease granted is released at once.
    unsafe {
        // An open of the file while the lease is held (one that found the name before it
        // went) breaks the lease, which signals its holder: SIGIO by default, which would
        // end the server. SIGURG's default is to be ignored.
        libc::fcntl(fd, F_SETSIG, libc::SIGURG);
        if libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK) == 0 {
            libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK);
            return false;
        }
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EAGAIN) {
        return true;
    }
    if error.raw_os_error() == Some(libc::EACCES) {
        // Another user's file (put there by the operator): not one a guest made.
        return false;
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "cannot take a file lease ({error}): a removed file a guest still holds open is \
             given back to its quota at once, so a guest may keep more than its quota on disk \
             until its call ends"
        );
    });
    false
}

/// `fcntl`'s command to choose the signal a lease break sends (Linux's `F_SETSIG`, which
/// the libc crate leaves out).
const F_SETSIG: libc::c_int = 10;

/// A file's size now.
fn size_of(file: &std::fs::File) -> u64 {
    file.metadata().map_or(0, |metadata| metadata.len())
}

/// Put the quota guards in front of wasmtime-wasi's functions (besides `open-at` and the
/// streams, which files.rs shadows: they call [`open_changing`] and [`write_charged`]).
pub(crate) fn shadow_quota(linker: &mut Linker<GuestState>) -> Result<()> {
    linker.allow_shadowing(true);
    // Which grant each preopen is, so that every descriptor opened under it is known.
    linker.instance(super::files::FILESYSTEM_PREOPENS)?.func_wrap(
        "get-directories",
        |mut store: StoreContextMut<'_, GuestState>, (): ()| {
            let state = store.data_mut();
            let directories = state.filesystem_view().get_directories()?;
            for (dir, guest) in &directories {
                state.tag_preopen(dir.rep(), guest);
            }
            Ok((directories,))
        },
    )?;
    let mut types = linker.instance(super::files::FILESYSTEM_TYPES)?;
    types.func_wrap(
        "filesystem-error-code",
        |mut store: StoreContextMut<'_, GuestState>, (error,): (Resource<wasmtime::Error>,)| {
            let state = store.data_mut();
            if state.table().get(&error)?.downcast_ref::<QuotaExceeded>().is_some() {
                return Ok((Some(ErrorCode::Quota),));
            }
            Ok((state.filesystem_view().filesystem_error_code(error)?,))
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.write",
        |mut store: StoreContextMut<'_, GuestState>,
         (fd, buffer, offset): (Resource<Descriptor>, Vec<u8>, Filesize)| {
            Box::new(async move {
                let state = store.data_mut();
                let (Some(quota), Some(file)) = (state.quota_of(fd.rep()), file_of(state, &fd)?) else {
                    return super::files::wasi_result(
                        state.filesystem_view().write(fd, buffer, offset).await,
                    );
                };
                let _lock = quota.lock.clone().lock_owned().await;
                let before = size_of(&file);
                let end = offset.saturating_add(buffer.len() as u64);
                let growth = end.saturating_sub(before);
                if !quota.charge(growth) {
                    return Ok((Err(ErrorCode::Quota),));
                }
                let written = state.filesystem_view().write(fd, buffer, offset).await;
                quota.settle(growth, before, size_of(&file));
                super::files::wasi_result(written)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.set-size",
        |mut store: StoreContextMut<'_, GuestState>, (fd, size): (Resource<Descriptor>, Filesize)| {
            Box::new(async move {
                let state = store.data_mut();
                let (Some(quota), Some(file)) = (state.quota_of(fd.rep()), file_of(state, &fd)?) else {
                    return super::files::wasi_result(state.filesystem_view().set_size(fd, size).await);
                };
                let _lock = quota.lock.clone().lock_owned().await;
                let before = size_of(&file);
                let growth = size.saturating_sub(before);
                if !quota.charge(growth) {
                    return Ok((Err(ErrorCode::Quota),));
                }
                let resized = state.filesystem_view().set_size(fd, size).await;
                quota.settle(growth, before, size_of(&file));
                super::files::wasi_result(resized)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.unlink-file-at",
        |mut store: StoreContextMut<'_, GuestState>, (dir, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                let Some(quota) = state.quota_of(dir.rep()) else {
                    return super::files::wasi_result(
                        state.filesystem_view().unlink_file_at(dir, path).await,
                    );
                };
                let _lock = quota.lock.clone().lock_owned().await;
                let removal = Removal::of(state, dir.rep(), &path).await;
                let unlinked = state.filesystem_view().unlink_file_at(dir, path).await;
                if unlinked.is_ok() {
                    removal.done(&quota);
                }
                super::files::wasi_result(unlinked)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.remove-directory-at",
        |mut store: StoreContextMut<'_, GuestState>, (dir, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                let Some(quota) = state.quota_of(dir.rep()) else {
                    return super::files::wasi_result(
                        state.filesystem_view().remove_directory_at(dir, path).await,
                    );
                };
                let _lock = quota.lock.clone().lock_owned().await;
                let removed = state.filesystem_view().remove_directory_at(dir, path).await;
                if removed.is_ok() {
                    quota.release(ENTRY_BYTES);
                }
                super::files::wasi_result(removed)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.create-directory-at",
        |mut store: StoreContextMut<'_, GuestState>, (dir, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                let entry = match NewEntry::charge(state.quota_of(dir.rep())).await {
                    Ok(entry) => entry,
                    Err(code) => return Ok((Err(code),)),
                };
                let created = state.filesystem_view().create_directory_at(dir, path).await;
                NewEntry::settle(entry, created.is_ok());
                super::files::wasi_result(created)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.rename-at",
        |mut store: StoreContextMut<'_, GuestState>,
         (dir, old_path, new_dir, new_path): (Resource<Descriptor>, String, Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(refusal) = crossing(state, dir.rep(), new_dir.rep()) {
                    return Ok((Err(refusal),));
                }
                // No other rename, link or symlink in the grant until this one is done.
                let _moves = moves::lock_moves(state, dir.rep(), new_dir.rep()).await;
                if super::files::is_climbing_link(state, dir.rep(), &old_path).await {
                    return Ok((Err(ErrorCode::NotPermitted),));
                }
                // A directory moved up must not carry a link the host left out of the grant.
                if let Err(code) = moves::check_move(state, dir.rep(), &old_path, new_dir.rep(), &new_path).await? {
                    return Ok((Err(code),));
                }
                let Some(quota) = state.quota_of(dir.rep()) else {
                    let renamed = state.filesystem_view().rename_at(dir, old_path, new_dir, new_path).await;
                    return super::files::wasi_result(renamed);
                };
                let _lock = quota.lock.clone().lock_owned().await;
                // The file a rename replaces is freed, unless it is the file renamed.
                let same = same_file(state, (dir.rep(), &old_path), (new_dir.rep(), &new_path)).await;
                let removal =
                    if same { Removal::Nothing } else { Removal::of(state, new_dir.rep(), &new_path).await };
                let renamed = state.filesystem_view().rename_at(dir, old_path, new_dir, new_path).await;
                if renamed.is_ok() {
                    removal.done(&quota);
                }
                super::files::wasi_result(renamed)
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.link-at",
        |mut store: StoreContextMut<'_, GuestState>,
         (dir, flags, old_path, new_dir, new_path): (
            Resource<Descriptor>,
            PathFlags,
            String,
            Resource<Descriptor>,
            String,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(refusal) = crossing(state, dir.rep(), new_dir.rep()) {
                    return Ok((Err(refusal),));
                }
                // No other rename, link or symlink in the grant until this one is done.
                let _moves = moves::lock_moves(state, dir.rep(), new_dir.rep()).await;
                if super::files::is_climbing_link(state, dir.rep(), &old_path).await {
                    return Ok((Err(ErrorCode::NotPermitted),));
                }
                let entry = match NewEntry::charge(state.quota_of(new_dir.rep())).await {
                    Ok(entry) => entry,
                    Err(code) => return Ok((Err(code),)),
                };
                let linked = state.filesystem_view().link_at(dir, flags, old_path, new_dir, new_path).await;
                NewEntry::settle(entry, linked.is_ok());
                super::files::wasi_result(linked)
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The open file behind `fd`, when it is a file.
fn file_of(state: &mut GuestState, fd: &Resource<Descriptor>) -> Result<Option<Arc<std::fs::File>>> {
    Ok(match state.table().get(fd)? {
        Descriptor::File(file) => Some(file.file.clone()),
        Descriptor::Dir(_) => None,
    })
}

/// `cross-device` for a rename or link between two different grants when either has a
/// quota: the file's bytes would leave one count without entering the other.
fn crossing(state: &GuestState, from: u32, to: u32) -> Option<ErrorCode> {
    let (from_grant, to_grant) = (state.grant_of(from), state.grant_of(to));
    let quota = state.quota_of(from).is_some() || state.quota_of(to).is_some();
    (quota && from_grant != to_grant).then_some(ErrorCode::CrossDevice)
}

/// What removing a name frees, told before it is removed (under the grant's lock).
enum Removal {
    /// No such name (or a rename onto itself).
    Nothing,
    /// A name and these bytes: a directory entry, a symlink, a hard link of a file with
    /// others; or the name only of a file's last name that the host could not open (its
    /// table full, or the server's descriptors for guests all in use): its bytes then stay
    /// counted until the next load measures again, since the host cannot tell when nothing
    /// holds the file any more.
    Freed(u64),
    /// A regular file's last name: the file, opened by the host on a descriptor of the
    /// server's budget, whose bytes are freed only once nothing holds it open ([`Orphans`]).
    LastLink(Arc<std::fs::File>, HeldDescriptor),
}

impl Removal {
    /// What removing the name `path` under the directory `dir` would free; looked up and
    /// opened through wasmtime-wasi, inside the sandbox.
    async fn of(state: &mut GuestState, dir: u32, path: &str) -> Self {
        let stat = state
            .filesystem_view()
            .stat_at(Resource::new_borrow(dir), PathFlags::empty(), path.to_owned())
            .await;
        let Ok(stat) = stat else { return Self::Nothing };
        if stat.type_ != DescriptorType::RegularFile || stat.link_count != 1 {
            return Self::Freed(ENTRY_BYTES);
        }
        let Some(descriptor) = HeldDescriptor::take(state.ledger().server_descriptors()) else {
            return Self::Freed(ENTRY_BYTES);
        };
        // Opened as a guest's open is (opening.rs): a FIFO a host process put there since
        // the look is refused, not waited on. Only the host keeps it: the guest never sees
        // this descriptor.
        let Ok(Ok(directory)) = super::files::directory_of(state.table(), &Resource::new_borrow(dir)) else {
            return Self::Freed(ENTRY_BYTES);
        };
        let opened = opening::open_at(
            &directory,
            PathFlags::empty(),
            path.to_owned(),
            OpenFlags::empty(),
            DescriptorFlags::READ,
        )
        .await;
        match opened {
            Ok(Descriptor::File(file)) => Self::LastLink(file.file, descriptor),
            // Not opened: its bytes stay counted.
            Ok(Descriptor::Dir(_)) | Err(_) => Self::Freed(ENTRY_BYTES),
        }
    }

    /// The name was removed: count what that freed.
    fn done(self, quota: &Quota) {
        match self {
            Self::Nothing => {}
            Self::Freed(bytes) => quota.release(bytes),
            Self::LastLink(file, descriptor) => quota.orphaned(file, descriptor),
        }
    }
}

/// A name about to be made under a grant with a quota (a directory, a symlink, a hard
/// link): the grant's lock, held until it is made, and the name's charge.
pub(crate) struct NewEntry {
    quota: Arc<Quota>,
    _lock: tokio::sync::OwnedMutexGuard<()>,
}

impl NewEntry {
    /// Before making a name under a grant with `quota` (none: nothing to charge); the
    /// error `quota` when it has no room for one more name.
    pub(crate) async fn charge(quota: Option<Arc<Quota>>) -> Result<Option<Self>, ErrorCode> {
        let Some(quota) = quota else { return Ok(None) };
        let lock = quota.lock.clone().lock_owned().await;
        if !quota.charge(ENTRY_BYTES) {
            return Err(ErrorCode::Quota);
        }
        Ok(Some(Self { quota, _lock: lock }))
    }

    /// The name was `made`, or not: then its charge is given back.
    pub(crate) fn settle(entry: Option<Self>, made: bool) {
        if let Some(entry) = entry
            && !made
        {
            entry.quota.release(ENTRY_BYTES);
        }
    }
}

/// Whether two paths name the same file (a rename onto itself frees nothing).
async fn same_file(state: &mut GuestState, (a, a_path): (u32, &str), (b, b_path): (u32, &str)) -> bool {
    let mut view = state.filesystem_view();
    let first = view.metadata_hash_at(Resource::new_borrow(a), PathFlags::empty(), a_path.to_owned()).await;
    let second = view.metadata_hash_at(Resource::new_borrow(b), PathFlags::empty(), b_path.to_owned()).await;
    matches!((first, second), (Ok(first), Ok(second)) if (first.lower, first.upper) == (second.lower, second.upper))
}

/// Before an `open-at` that may create or truncate under a grant with a quota: take the
/// grant's lock, measure the file it would truncate, and charge the name it would create
/// (`quota` when there is no room for it). Call [`OpenChange::settle`] after the open.
pub(crate) async fn open_changing(
    state: &mut GuestState,
    quota: Arc<Quota>,
    dir: u32,
    path_flags: PathFlags,
    path: &str,
    create: bool,
) -> Result<OpenChange, ErrorCode> {
    let lock = quota.lock.clone().lock_owned().await;
    let stat = state.filesystem_view().stat_at(Resource::new_borrow(dir), path_flags, path.to_owned()).await;
    let (before, new_entry) = match stat {
        Ok(stat) if stat.type_ == DescriptorType::RegularFile => (stat.size, false),
        Ok(_) => (0, false),
        Err(_) => (0, create),
    };
    if new_entry && !quota.charge(ENTRY_BYTES) {
        return Err(ErrorCode::Quota);
    }
    Ok(OpenChange { quota, before, new_entry, _lock: lock })
}

/// An `open-at` under a grant with a quota in progress: the grant's lock, the file's size
/// before, and whether a new name was charged.
pub(crate) struct OpenChange {
    quota: Arc<Quota>,
    before: u64,
    new_entry: bool,
    _lock: tokio::sync::OwnedMutexGuard<()>,
}

impl OpenChange {
    /// The open is done (`opened`, when it succeeded): count the file's size now, or give
    /// back the name it did not make.
    pub(crate) fn settle(self, state: &mut GuestState, opened: Option<&Resource<Descriptor>>) {
        match opened {
            Some(fd) => {
                if let Ok(Some(file)) = file_of(state, fd) {
                    self.quota.settle(0, self.before, size_of(&file));
                }
            }
            None if self.new_entry => self.quota.release(ENTRY_BYTES),
            None => {}
        }
    }
}

/// Write `bytes` at `position` (appended, atomically, when `None`), charging the growth
/// first (all of it for an append: the end may move meanwhile, by another's append).
pub(crate) fn write_charged(
    file: &std::fs::File,
    quota: &Quota,
    position: Option<u64>,
    bytes: &[u8],
) -> Result<(), wasmtime::Error> {
    let before = size_of(file);
    let growth = match position {
        Some(offset) => offset.saturating_add(bytes.len() as u64).saturating_sub(before),
        None => bytes.len() as u64,
    };
    if !quota.charge(growth) {
        return Err(QuotaExceeded.into());
    }
    let written = super::streams::write_plain(file, position, bytes);
    quota.settle(growth, before, size_of(file));
    written.map_err(wasmtime::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_counts_regular_files_once_per_inode_and_every_name() {
        let dir = std::env::temp_dir().join(format!("cordon-quota-usage-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a"), [0u8; 100]).unwrap();
        std::fs::write(dir.join("sub/b"), [0u8; 50]).unwrap();
        std::fs::hard_link(dir.join("a"), dir.join("sub/a-again")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        let quota = Quota::measure(1 << 20, &std::fs::File::open(&dir).unwrap()).unwrap();
        // Five names: a, sub, sub/b, sub/a-again, link.
        assert_eq!(quota.used(), 150 + 5 * ENTRY_BYTES);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `count` directories, each inside the last, named `name`: made by descriptors, since
    /// their path soon passes what a path may be.
    fn nest(root: &std::path::Path, name: &str, count: usize) {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let name = std::ffi::CString::new(name).unwrap();
        let mut dir: OwnedFd = std::fs::File::open(root).unwrap().into();
        for _ in 0..count {
            // SAFETY: plain libc calls on descriptors this test owns.
            dir = unsafe {
                assert_eq!(libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755), 0);
                let next = libc::openat(dir.as_raw_fd(), name.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                assert!(next >= 0);
                OwnedFd::from_raw_fd(next)
            };
        }
    }

    #[test]
    fn a_tree_nested_past_any_path_length_is_measured_and_one_past_the_depth_bound_counts_as_full() {
        let root = std::env::temp_dir().join(format!("cordon-quota-deep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (deep, deeper) = (root.join("deep"), root.join("deeper"));
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(&deeper).unwrap();
        // 40 levels of 255-byte names: about 10 KiB of path, past PATH_MAX (4 KiB).
        nest(&deep, &"d".repeat(255), 40);
        let quota = Quota::measure(1 << 30, &std::fs::File::open(&deep).unwrap()).unwrap();
        assert_eq!(quota.used(), 40 * ENTRY_BYTES);
        // Past the depth bound: not measured, so counted as full (and the load goes on).
        nest(&deeper, "d", MEASURE_DEPTH + 1);
        let (quota, error) = Quota::measure_or_full(1 << 30, &std::fs::File::open(&deeper).unwrap());
        assert!(error.unwrap().to_string().contains("deeper than"));
        assert_eq!(quota.used(), quota.limit());
        assert!(!quota.charge(1));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_charge_past_the_limit_is_refused_and_settling_counts_what_happened() {
        let quota = Quota::counting(100, 90);
        assert!(quota.charge(10));
        assert!(!quota.charge(1));
        assert!(quota.charge(0), "a write that grows nothing always passes");
        // Charged 10, but the file only grew by 4.
        quota.settle(10, 0, 4);
        assert_eq!(quota.used(), 94);
        // A truncation from 50 to 0.
        quota.settle(0, 50, 0);
        assert_eq!(quota.used(), 44);
    }

    #[test]
    fn a_file_is_held_elsewhere_while_another_descriptor_has_it_open_even_once_unlinked() {
        let dir = std::env::temp_dir().join(format!("cordon-lease-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let guest = std::fs::File::create(&path).unwrap();
        let host = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(held_elsewhere(&host));
        drop(guest);
        assert!(!held_elsewhere(&host));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
