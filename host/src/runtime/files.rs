//! # A component's file system: its data directory and mounts, opened once, and the guards on them
//!
//! A component's directories are a grant built once, at load ([`FileGrants::open`]): the
//! data directory (created if missing, at `/data`) and each mount (`[[components.mounts]]`,
//! which must exist, read-only or read-write at the guest path the operator chose) are
//! opened then, the real path of each is read back from its descriptor, and wasmtime-wasi
//! preopens that very descriptor (through its `/proc/self/fd` link). Every store gets the
//! same open descriptors, never the paths again, so nothing that happens to a path later
//! (a rename, a symlink put in its place) can point a later call somewhere else. A grant
//! that may be written is inside or around no other grant, the component's own or
//! another's (`Runtime::load_*`); read-only mounts may share a directory.
//!
//! Inside a grant, wasmtime-wasi's sandbox (cap-std's) resolves every path a guest opens
//! beneath the preopened descriptor: `..` past the top and symlinks that lead out (absolute,
//! or climbing) are refused, whoever made them. A read-only mount refuses every change
//! (`not-permitted`). A read-write mount's `quota_mb` and the data directory's
//! `data_quota_mb` are enforced in `quota.rs`.
//!
//! wasmtime-wasi confines every path a guest opens to the directory, but some of its
//! `wasi:filesystem` functions make the host hold what the call's limits do not see; they
//! are shadowed here, in front of wasmtime-wasi's own implementation, which still does
//! the work:
//!
//! - `open-at` counts the call's open descriptors against `open_files` and the server's
//!   descriptor budget (ledger.rs) before it opens another, and opens regular files and
//!   directories only: a FIFO, a device or a socket that sits in a mount (a guest cannot
//!   make one, a host process can) would block a host thread in `open` (a FIFO with no
//!   writer) or in its reads, where no stop reaches it (`access`). It opens the name
//!   itself, without waiting, and looks at what it opened (opening.rs): no look at the
//!   name beforehand that another call or a host process could make stale;
//! - `read-via-stream`, `write-via-stream` and `append-via-stream` charge each stream's
//!   64 KiB buffer to `host_memory_bytes` and its descriptor to `open_files`, until the
//!   stream drops;
//! - `read-directory`, which copies the whole listing into host memory, measures the
//!   directory first and charges the listing to `host_memory_bytes` while it lives;
//! - `symlink-at` refuses targets with `..`: wasmtime-wasi already refuses absolute ones,
//!   and a guest's link could otherwise point outside its directory for whoever follows
//!   it on the host. Every link a guest makes points down, so no chain of them leads out;
//!   this holds in the data directory and in every read-write mount alike (and the link
//!   is charged to the grant's quota as a name). Links the host left that climb are not
//!   renamed or linked elsewhere, nor carried up inside a directory (moves.rs);
//! - `open-at` also notes which grant each new descriptor lies under (as the preopens
//!   shadowed in `quota.rs` do), for the quota, charges the name it creates and gives back
//!   what a truncation frees; `write-via-stream` and `append-via-stream` hand out
//!   quota.rs's charging stream for files under a grant with a quota.
//!
//! Refusals are WASI error codes the guest can handle: `insufficient-memory` for host
//! memory, `quota` for descriptors, `not-permitted` for a link.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::{Component as PathPart, Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime::{Result, StoreContextMut};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtx};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DirectoryEntryStream, ErrorCode, HostDescriptor, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsError, FsResult, InputStream, OutputStream};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::guest::GuestState;
use super::ledger::{Refusal, STREAM_BUFFER_BYTES, StreamCharge};
use super::moves;
use super::opening;
use super::quota::{self, Quota};
use super::streams::{FileReader, FileWriter};

/// Where the tool's data directory appears inside the guest.
pub const GUEST_DATA_DIR: &str = "/data";

/// The `wasi:filesystem/types` instance wasmtime-wasi 48 defines (older 0.2 imports
/// resolve to it).
pub(crate) const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";
/// Its `wasi:filesystem/preopens` instance.
pub(crate) const FILESYSTEM_PREOPENS: &str = "wasi:filesystem/preopens@0.2.12";

/// Host memory a listing costs besides its names: the entry, its string, the vector slot.
const LISTING_ENTRY_BYTES: usize = 64;
/// Host memory a listing costs however small: the iterator, its box and lock.
const LISTING_BYTES: usize = 256;

/// A host directory granted to a component besides its data directory
/// (`[[components.mounts]]` in the config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The host directory. It must exist when the component loads; it is opened then,
    /// once, and its path never read again.
    pub host: PathBuf,
    /// Where the guest sees it: an absolute path, without `.` or `..`.
    pub guest: String,
    /// Whether the guest may change what is in it (`rw`), or only read it (`ro`).
    pub writable: bool,
    /// For a writable mount, the most bytes its regular files may hold together
    /// (`quota.rs`). `None`: no limit but the disk's.
    pub quota_bytes: Option<u64>,
}

/// One directory a component is granted, opened at load.
pub(crate) struct Grant {
    /// The real path of the directory that was opened (read back from its descriptor, so
    /// it names what the guest gets even if the configured path was a symlink or changed
    /// since), for messages and the overlap check.
    pub(crate) path: PathBuf,
    /// Where the guest sees it.
    pub(crate) guest: String,
    pub(crate) writable: bool,
    /// The mount's quota, shared by every call of the component, and the limit this grant
    /// gives it ([`FileGrants::apply_limits`]: a count shared with a version that a reload
    /// replaces keeps its limit until this version is served).
    pub(crate) quota: Option<Arc<Quota>>,
    pub(crate) limit: u64,
    /// What its renames, links and symlinks wait on (moves.rs), shared by everything
    /// granted it.
    pub(crate) moves: Arc<tokio::sync::Mutex<()>>,
}

impl Grant {
    /// Whether `self` and `other` may not both be granted: one is inside the other (or
    /// they are the same) and either may be written. Two read-only grants may share a
    /// directory; a writable one shares it with nothing, so no guest can change what
    /// another grant shows, replace a directory inside it with a symlink for the next
    /// load, or write around a quota.
    pub(crate) fn conflicts_with(&self, other: &Grant) -> bool {
        (self.writable || other.writable)
            && (self.path.starts_with(&other.path) || other.path.starts_with(&self.path))
    }

    pub(crate) fn describe(&self) -> String {
        let mode = if self.writable { "rw" } else { "ro" };
        format!("{} at {} ({mode})", self.path.display(), self.guest)
    }
}

/// A component's file system: its data directory and mounts, each opened once, at load,
/// and every store gets the same open descriptors, never the paths again, so nothing that
/// happens to a path later (a rename, a symlink put in its place) can point a later call
/// somewhere else. The runtime refuses grants that overlap another component's where one
/// could be written (`Runtime::load_*`).
pub(crate) struct FileGrants {
    /// In preopen order: the data directory first when there is one.
    pub(crate) grants: Vec<Grant>,
    /// The file-system context every store of the component starts from.
    filesystem: WasiFilesystemCtx,
}

impl FileGrants {
    /// Open the data directory (created if missing; its quota `data_quota_bytes`) and the
    /// mounts (which must exist); `None` when the component is granted no file system at
    /// all. A mount's quota is `quotas_from`'s for the same guest path when it has one: a
    /// component's tenants share its mounts, and so each mount's one quota, whatever data
    /// directory (each with a quota of its own) each has.
    ///
    /// A tenant's data directory (`of_tenant`) is a name inside the component's, where its
    /// guests may have written before tenants were configured: it must be a directory of
    /// its own, never a symlink (which could make two tenants share one, or lead anywhere).
    pub(crate) fn open(
        data_dir: Option<&Path>,
        data_quota_bytes: u64,
        mounts: &[Mount],
        quotas_from: Option<&FileGrants>,
        of_tenant: bool,
    ) -> Result<Option<Self>, String> {
        if data_dir.is_none() && mounts.is_empty() {
            return Ok(None);
        }
        let mut builder = WasiCtxBuilder::new();
        let mut grants: Vec<Grant> = Vec::new();
        if let Some(path) = data_dir {
            std::fs::create_dir_all(path)
                .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
            let no_follow = if of_tenant { libc::O_NOFOLLOW } else { 0 };
            let (dir, real) =
                open_directory_with(path, no_follow).map_err(|error| match error.raw_os_error() {
                    Some(libc::ELOOP) | Some(libc::ENOTDIR) => format!(
                        "the tenant's data directory {} is a symlink or not a directory (something wrote \
                         it there; a tenant's must be a directory of its own): remove it",
                        path.display()
                    ),
                    _ => format!("cannot open the data directory {}: {error}", path.display()),
                })?;
            if let Some(system) = system_tree_in(&real) {
                return Err(format!(
                    "the data directory {} is or holds {system}: grant a directory of its own",
                    path.display()
                ));
            }
            preopen(&mut builder, &dir, GUEST_DATA_DIR, FsPerms::ReadWrite)?;
            let quota = measured(data_quota_bytes, &dir, &real);
            grants.push(Grant {
                path: real,
                guest: GUEST_DATA_DIR.into(),
                writable: true,
                quota: Some(quota),
                limit: data_quota_bytes,
                moves: moves::move_lock(&dir)
                    .map_err(|error| format!("cannot read the data directory {}: {error}", path.display()))?,
            });
        }
        for mount in mounts {
            let guest = guest_path(&mount.guest)?;
            if grants.iter().any(|grant| grant.guest == guest) {
                return Err(format!("two grants are mounted at {guest}: each needs a guest path of its own"));
            }
            if !mount.writable && mount.quota_bytes.is_some() {
                return Err(format!(
                    "mount {guest} is read-only (`ro`) and has a quota_mb: a quota is for `rw` mounts"
                ));
            }
            let host = mount.host.display();
            let (dir, real) = open_directory(&mount.host).map_err(|error| match error.kind() {
                std::io::ErrorKind::NotFound => format!("mount {guest}: the host path {host} does not exist"),
                std::io::ErrorKind::NotADirectory => {
                    format!("mount {guest}: the host path {host} is not a directory")
                }
                _ => format!("mount {guest}: cannot open the host path {host}: {error}"),
            })?;
            if let Some(system) = system_tree_in(&real) {
                return Err(format!(
                    "mount {guest}: the host path {host} is or holds {system}, where a guest could read the \
                     server's own process (its environment, secrets among them; its memory; its open \
                     files) or the machine's devices: grant a directory of its own"
                ));
            }
            let perms = if mount.writable { FsPerms::ReadWrite } else { FsPerms::ReadOnly };
            preopen(&mut builder, &dir, &guest, perms)?;
            let shared = quotas_from
                .and_then(|shared| shared.grants.iter().find(|grant| grant.guest == guest))
                .and_then(|grant| grant.quota.clone());
            let quota = match (mount.quota_bytes, shared) {
                (Some(_), Some(shared)) => Some(shared),
                (Some(limit), None) => Some(measured(limit, &dir, &real)),
                (None, _) => None,
            };
            let moves = moves::move_lock(&dir)
                .map_err(|error| format!("mount {guest}: cannot read the host path {host}: {error}"))?;
            let limit = mount.quota_bytes.unwrap_or_default();
            grants.push(Grant { path: real, guest, writable: mount.writable, quota, limit, moves });
        }
        for (index, grant) in grants.iter().enumerate() {
            if let Some(other) = grants[index + 1..].iter().find(|other| grant.conflicts_with(other)) {
                return Err(format!(
                    "{} overlaps {}: a writable directory may not be inside or around another grant",
                    grant.describe(),
                    other.describe()
                ));
            }
        }
        let filesystem = builder.build().filesystem().clone();
        Ok(Some(Self { grants, filesystem }))
    }

    /// Give each quota this grant's limit: the version they belong to is served now.
    pub(crate) fn apply_limits(&self) {
        for grant in &self.grants {
            if let Some(quota) = &grant.quota {
                quota.set_limit(grant.limit);
            }
        }
    }

    /// The first pair of grants, one of `self` and one of `other`, that may not both be
    /// granted.
    pub(crate) fn conflict<'a>(&'a self, other: &'a FileGrants) -> Option<(&'a Grant, &'a Grant)> {
        self.grants
            .iter()
            .flat_map(|mine| other.grants.iter().map(move |theirs| (mine, theirs)))
            .find(|(mine, theirs)| mine.conflicts_with(theirs))
    }

    /// The index of the grant the guest sees at `guest`.
    pub(crate) fn index_of(&self, guest: &str) -> Option<usize> {
        self.grants.iter().position(|grant| grant.guest == guest)
    }

    pub(crate) fn filesystem(&self) -> WasiFilesystemCtx {
        self.filesystem.clone()
    }
}

/// The kernel's trees that a mount at `real` (a real path) would be or hold: `/proc` (the
/// server's `/proc/self/environ`, `mem` and `fd`), `/sys` and `/dev`.
fn system_tree_in(real: &Path) -> Option<&'static str> {
    ["/proc", "/sys", "/dev"]
        .into_iter()
        .find(|tree| real.starts_with(tree) || Path::new(tree).starts_with(real))
}

/// The quota of `limit` bytes over `dir` (at `path`), measured; a tree that cannot be
/// measured (a guest may have nested it too deep) is counted as full until the next load,
/// and said so, rather than failing the load for every tenant of the component.
fn measured(limit: u64, dir: &std::fs::File, path: &Path) -> Arc<Quota> {
    use std::os::unix::fs::MetadataExt;
    // A quota still counting this directory (the component's version that a reload
    // replaced, whose calls may still run) goes on counting it for the new one (whose limit
    // applies once it is served): two counts would each let writes fill the room the other
    // does not see.
    let key = dir.metadata().ok().map(|metadata| (metadata.dev(), metadata.ino()));
    let mut live = LIVE_QUOTAS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    live.retain(|_, quota| quota.strong_count() > 0);
    let unmeasured = |error: std::io::Error| {
        tracing::warn!(
            "cannot measure what {} holds ({error}): its quota counts as used up until the next load; \
             remove what is in it to write again",
            path.display()
        );
    };
    if let Some(counting) = key.and_then(|key| live.get(&key)).and_then(std::sync::Weak::upgrade) {
        // What the operator changed meanwhile is seen at a reload, as at a load.
        if let Err(error) = counting.measure_again(dir) {
            unmeasured(error);
        }
        return counting;
    }
    let (quota, error) = Quota::measure_or_full(limit, dir);
    if let Some(error) = error {
        unmeasured(error);
    }
    let quota = Arc::new(quota);
    if let Some(key) = key {
        live.insert(key, Arc::downgrade(&quota));
    }
    quota
}

/// A directory's device and inode.
type DirectoryKey = (u64, u64);

/// The quotas counting a directory now, by its device and inode: one count per directory,
/// however many loaded versions of a component grant it.
static LIVE_QUOTAS: std::sync::LazyLock<std::sync::Mutex<HashMap<DirectoryKey, std::sync::Weak<Quota>>>> =
    std::sync::LazyLock::new(Default::default);

/// Open `path` as a directory, and read back the real path of what was opened.
fn open_directory(path: &Path) -> std::io::Result<(std::fs::File, PathBuf)> {
    open_directory_with(path, 0)
}

/// [`open_directory`], with more open `flags` (`O_NOFOLLOW`).
fn open_directory_with(path: &Path, flags: libc::c_int) -> std::io::Result<(std::fs::File, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC | flags)
        .open(path)?;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))?;
    Ok((dir, real))
}

/// Preopen the directory `dir` holds at `guest`. wasmtime-wasi opens a path, so it is
/// given `dir`'s `/proc/self/fd` link, which reopens the very directory `dir` holds
/// without walking any path again: what was checked is what is granted.
fn preopen(
    builder: &mut WasiCtxBuilder,
    dir: &std::fs::File,
    guest: &str,
    perms: FsPerms,
) -> Result<(), String> {
    builder
        .preopened_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()), guest, perms)
        .map(drop)
        .map_err(|error| format!("cannot preopen {guest}: {error:#}"))
}

/// A mount's guest path, normalized (`/a/b`): absolute, without `..`; `.` parts and
/// repeated or trailing slashes are dropped.
fn guest_path(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err(format!("the mount guest path {path:?} is not absolute (write it from `/`)"));
    }
    let mut parts = Vec::new();
    for part in Path::new(path).components() {
        match part {
            PathPart::RootDir | PathPart::CurDir => {}
            PathPart::Normal(name) => match name.to_str() {
                Some(name) if !name.contains('\0') => parts.push(name),
                _ => return Err(format!("the mount guest path {path:?} is not a plain path")),
            },
            PathPart::ParentDir | PathPart::Prefix(_) => {
                return Err(format!("the mount guest path {path:?} may not hold `..`"));
            }
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// Put the guards in front of wasmtime-wasi's `wasi:filesystem/types` functions.
pub(crate) fn shadow_filesystem(linker: &mut Linker<GuestState>) -> Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, GuestState>,
         (dir, path_flags, path, open_flags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                let parent = dir.rep();
                // An open that may create holds the grant's move lock from its look to its
                // open (opening.rs); taken before the quota's, one order everywhere.
                let may_create =
                    open_flags.contains(OpenFlags::CREATE) && !open_flags.contains(OpenFlags::EXCLUSIVE);
                let held_moves = match may_create {
                    true => Some(moves::lock_moves(state, parent, parent).await),
                    false => None,
                };
                // Under a grant with a quota, a new name is charged and a truncation gives
                // the file's bytes back (quota.rs).
                let change = match state.quota_of(parent) {
                    Some(quota) if open_flags.intersects(OpenFlags::TRUNCATE | OpenFlags::CREATE) => {
                        let create = open_flags.contains(OpenFlags::CREATE);
                        match quota::open_changing(state, quota, parent, path_flags, &path, create).await {
                            Ok(change) => Some(change),
                            Err(code) => return Ok((Err(code),)),
                        }
                    }
                    _ => None,
                };
                let open = count_descriptors(state.table());
                if let Err(refusal) = state.ledger().charge_descriptors(open + 1) {
                    if let Some(change) = change {
                        change.settle(state, None);
                    }
                    return Ok((Err(refused(refusal)),));
                }
                // Files and directories only, and no open that waits (opening.rs).
                let opened = match directory_of(state.table(), &dir)? {
                    Ok(directory) => {
                        opening::open_at_holding(&directory, path_flags, path, open_flags, flags, held_moves)
                            .await
                    }
                    Err(code) => Err(code),
                };
                let opened = match opened {
                    Ok(descriptor) => Ok(state.table().push(descriptor)?),
                    Err(code) => Err(code),
                };
                match &opened {
                    // What is opened under a grant belongs to that grant.
                    Ok(fd) => state.tag_descriptor(fd.rep(), parent),
                    // Nothing was opened: give the descriptor back.
                    Err(_) => state.ledger().settle_descriptors(open),
                }
                if let Some(change) = change {
                    change.settle(state, opened.as_ref().ok());
                }
                Ok((opened,))
            })
        },
    )?;
    types.func_wrap(
        "[method]descriptor.read-via-stream",
        |mut store: StoreContextMut<'_, GuestState>, (file, offset): (Resource<Descriptor>, u64)| {
            let state = store.data_mut();
            let charge = match charge_stream(state) {
                Ok(charge) => charge,
                Err(code) => return Ok((Err(code),)),
            };
            // wasmtime-wasi checks the descriptor (and answers its errors); the stream that
            // reads is ours (streams.rs).
            let mut view = state.filesystem_view();
            let checked = match view.read_via_stream(Resource::new_borrow(file.rep()), offset) {
                Ok(checked) => checked,
                Err(error) => return wasi_result(Err(error)),
            };
            view.table.delete(checked)?;
            let threads = state.ledger().stream_threads();
            let Descriptor::File(opened) = state.table().get(&file)? else {
                return Ok((Err(ErrorCode::BadDescriptor),));
            };
            let inner: DynInputStream = Box::new(FileReader::new(opened.file.clone(), offset, threads));
            let charged: DynInputStream = Box::new(Charged { inner, _charge: charge });
            Ok((Ok(state.table().push(charged)?),))
        },
    )?;
    for (name, append) in
        [("[method]descriptor.write-via-stream", false), ("[method]descriptor.append-via-stream", true)]
    {
        let wrap = move |state: &mut GuestState, file: Resource<Descriptor>, offset: u64| {
            let charge = match charge_stream(state) {
                Ok(charge) => charge,
                Err(code) => return Ok((Err(code),)),
            };
            // wasmtime-wasi checks the descriptor (and answers its errors); the stream that
            // writes is ours (streams.rs), and under a grant with a quota charges each write.
            let mut view = state.filesystem_view();
            let borrowed = Resource::new_borrow(file.rep());
            let checked = if append {
                view.append_via_stream(borrowed)
            } else {
                view.write_via_stream(borrowed, offset)
            };
            let checked = match checked {
                Ok(checked) => checked,
                Err(error) => return wasi_result(Err(error)),
            };
            view.table.delete(checked)?;
            let (quota, threads) = (state.quota_of(file.rep()), state.ledger().stream_threads());
            let Descriptor::File(opened) = state.table().get(&file)? else {
                return Ok((Err(ErrorCode::BadDescriptor),));
            };
            let position = (!append).then_some(offset);
            let inner: DynOutputStream =
                Box::new(FileWriter::new(opened.file.clone(), quota, position, threads));
            let charged: DynOutputStream = Box::new(Charged { inner, _charge: charge });
            Ok((Ok(state.table().push(charged)?),))
        };
        if append {
            types.func_wrap(
                name,
                move |mut store: StoreContextMut<'_, GuestState>, (file,): (Resource<Descriptor>,)| {
                    wrap(store.data_mut(), file, 0)
                },
            )?;
        } else {
            types.func_wrap(
                name,
                move |mut store: StoreContextMut<'_, GuestState>,
                      (file, offset): (Resource<Descriptor>, u64)| {
                    wrap(store.data_mut(), file, offset)
                },
            )?;
        }
    }
    types.func_wrap_async(
        "[method]descriptor.read-directory",
        |mut store: StoreContextMut<'_, GuestState>, (dir,): (Resource<Descriptor>,)| {
            Box::new(async move {
                let state = store.data_mut();
                state.settle_table_charges();
                let directory = match state.table().get(&dir)? {
                    Descriptor::Dir(directory) => Some(directory.dir.clone()),
                    // wasmtime-wasi answers a file with the right error.
                    Descriptor::File(_) => None,
                };
                let mut cost = 0;
                if let Some(directory) = directory {
                    let left = state.host_memory_left();
                    let measured = tokio::task::spawn_blocking(move || listing_cost(&directory, left)).await;
                    cost = match measured {
                        Ok(Some(cost)) => cost,
                        Ok(None) | Err(_) => return Ok((Err(ErrorCode::InsufficientMemory),)),
                    };
                    if state.ledger().charge_memory(cost).is_err() {
                        return Ok((Err(ErrorCode::InsufficientMemory),));
                    }
                }
                match state.filesystem_view().read_directory(dir).await {
                    Ok(listing) => {
                        state.track_charge::<DirectoryEntryStream>(listing.rep(), cost);
                        Ok((Ok(listing),))
                    }
                    Err(error) => {
                        state.ledger().release_memory(cost);
                        wasi_result::<Resource<DirectoryEntryStream>>(Err(error))
                    }
                }
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.symlink-at",
        |mut store: StoreContextMut<'_, GuestState>,
         (dir, target, link): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                if !points_down(&target) {
                    return Ok((Err(ErrorCode::NotPermitted),));
                }
                let state = store.data_mut();
                let _moves = moves::lock_moves(state, dir.rep(), dir.rep()).await;
                let entry = match quota::NewEntry::charge(state.quota_of(dir.rep())).await {
                    Ok(entry) => entry,
                    Err(code) => return Ok((Err(code),)),
                };
                let linked = state.filesystem_view().symlink_at(dir, target, link).await;
                quota::NewEntry::settle(entry, linked.is_ok());
                wasi_result(linked)
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The directory `descriptor` is, to open a name under (`not-directory` for a file, as
/// wasmtime-wasi answers), shared with the table's entry.
pub(crate) fn directory_of(
    table: &ResourceTable,
    descriptor: &Resource<Descriptor>,
) -> Result<Result<wasmtime_wasi::filesystem::Dir, ErrorCode>> {
    Ok(match table.get(descriptor)? {
        Descriptor::Dir(directory) => Ok(directory.clone()),
        Descriptor::File(_) => Err(ErrorCode::NotDirectory),
    })
}

/// Open descriptors (files and directories) in a call's table.
fn count_descriptors(table: &mut ResourceTable) -> usize {
    table.iter_mut().filter(|entry| entry.is::<Descriptor>()).count()
}

fn charge_stream(state: &mut GuestState) -> Result<StreamCharge, ErrorCode> {
    state.settle_table_charges();
    let open = count_descriptors(state.table());
    state.ledger().charge_stream(open).map_err(refused)
}

fn refused(refusal: Refusal) -> ErrorCode {
    match refusal {
        Refusal::HostMemory => ErrorCode::InsufficientMemory,
        Refusal::OpenFiles | Refusal::ServerDescriptors => ErrorCode::Quota,
    }
}

/// wasmtime-wasi's result as the guest gets it: an error code, or a trap.
pub(crate) fn wasi_result<T>(result: FsResult<T>) -> Result<(Result<T, ErrorCode>,)> {
    match result {
        Ok(value) => Ok((Ok(value),)),
        Err(error) => Ok((Err(FsError::downcast(error)?),)),
    }
}

/// Whether the name `path` under `dir` is a symlink whose relative target climbs (`..`):
/// one the host left there, since a guest's only point down. Given another place in the
/// tree (`rename-at`, `link-at`, neither of which follows it), it may lead out of the grant
/// from there, for whatever on the host follows it. (An absolute target leads where it
/// did wherever the link is.)
pub(crate) async fn is_climbing_link(state: &mut GuestState, dir: u32, path: &str) -> bool {
    let target = state.filesystem_view().readlink_at(Resource::new_borrow(dir), path.to_owned()).await;
    target.is_ok_and(|target| Path::new(&target).components().any(|part| part == PathPart::ParentDir))
}

/// Whether a symlink's target stays below the link: relative, and never climbing (`..`).
fn points_down(target: &str) -> bool {
    Path::new(target).components().all(|part| matches!(part, PathPart::Normal(_) | PathPart::CurDir))
}

/// What listing `directory` would cost in host memory, or `None` when it would cost more
/// than `budget` (counting stops there, so a huge directory is not walked to the end).
fn listing_cost(directory: &std::fs::File, budget: usize) -> Option<usize> {
    // A descriptor of its own, so the walk leaves the guest's descriptor's offset alone.
    // SAFETY: plain libc calls on a descriptor we own until `closedir` closes it.
    unsafe {
        let fd = libc::openat(
            directory.as_raw_fd(),
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            // wasmtime-wasi's own read will fail the same way and say why.
            return Some(LISTING_BYTES);
        }
        let stream = libc::fdopendir(fd);
        if stream.is_null() {
            libc::close(fd);
            return Some(LISTING_BYTES);
        }
        let mut cost = LISTING_BYTES;
        loop {
            let entry = libc::readdir(stream);
            if entry.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()).to_bytes();
            if name != b"." && name != b".." {
                cost += LISTING_ENTRY_BYTES + name.len();
            }
            if cost > budget {
                libc::closedir(stream);
                return None;
            }
        }
        libc::closedir(stream);
        Some(cost)
    }
}

/// A file stream carrying its charge on the call's ledger, given back when it drops.
struct Charged<S> {
    inner: S,
    _charge: StreamCharge,
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for Charged<DynInputStream> {
    async fn ready(&mut self) {
        self.inner.ready().await;
    }
}

#[wasmtime_wasi::async_trait]
impl InputStream for Charged<DynInputStream> {
    fn read(&mut self, size: usize) -> wasmtime_wasi::p2::StreamResult<bytes::Bytes> {
        self.inner.read(size)
    }
    async fn blocking_read(&mut self, size: usize) -> wasmtime_wasi::p2::StreamResult<bytes::Bytes> {
        self.inner.blocking_read(size).await
    }
    fn skip(&mut self, count: usize) -> wasmtime_wasi::p2::StreamResult<usize> {
        self.inner.skip(count)
    }
    async fn blocking_skip(&mut self, count: usize) -> wasmtime_wasi::p2::StreamResult<usize> {
        self.inner.blocking_skip(count).await
    }
    async fn cancel(&mut self) {
        self.inner.cancel().await;
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for Charged<DynOutputStream> {
    async fn ready(&mut self) {
        self.inner.ready().await;
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for Charged<DynOutputStream> {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        // wasmtime-wasi's file stream offers 64 KiB in `check-write` but takes any write,
        // and holds it in a blocking task until written: a guest's 16 MiB writes on many
        // streams would hold gigabytes. What the stream is charged is what it may take.
        if bytes.len() > STREAM_BUFFER_BYTES {
            return Err(wasmtime_wasi::p2::StreamError::trap("write of more bytes than check_write allowed"));
        }
        self.inner.write(bytes)
    }
    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        self.inner.flush()
    }
    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        self.inner.check_write()
    }
    async fn blocking_write_and_flush(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        self.inner.blocking_write_and_flush(bytes).await
    }
    fn write_zeroes(&mut self, count: usize) -> wasmtime_wasi::p2::StreamResult<()> {
        self.inner.write_zeroes(count)
    }
    async fn write_ready(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        self.inner.write_ready().await
    }
    async fn cancel(&mut self) {
        self.inner.cancel().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory granted again while its quota still counts it (a reload, with the old
    /// version's calls still running) shares that count, measured again, with the new
    /// limit if it has one. Before, a new limit started a count of its own, and the old
    /// version's calls wrote past it unseen.
    #[test]
    fn a_directory_granted_again_shares_the_quota_that_still_counts_it() {
        let dir = std::env::temp_dir().join(format!("cordon-quota-share-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let grants = |limit: u64| {
            let mount =
                Mount { host: dir.clone(), guest: "/m".into(), writable: true, quota_bytes: Some(limit) };
            FileGrants::open(None, 0, &[mount], None, false).unwrap().unwrap()
        };
        let grant = |limit: u64| grants(limit).grants[0].quota.clone().unwrap();
        let first = grant(1 << 20);
        let used = first.used();
        std::fs::write(dir.join("f"), [0u8; 100]).unwrap();
        let again = grant(1 << 20);
        assert!(Arc::ptr_eq(&first, &again), "one count for one directory");
        assert_eq!(first.used(), used + 100 + quota::ENTRY_BYTES, "measured again");
        let raised = grants(2 << 20);
        assert!(Arc::ptr_eq(&first, raised.grants[0].quota.as_ref().unwrap()), "a new limit, the same count");
        assert_eq!(first.limit(), 1 << 20, "not before the new version is served");
        raised.apply_limits();
        assert_eq!(first.limit(), 2 << 20, "the old version's calls count against the new limit");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn link_targets_must_point_down() {
        for target in ["file", "sub/file", "./sub", "a/b/c"] {
            assert!(points_down(target), "{target}");
        }
        for target in ["..", "../etc", "sub/../../x", "a/..", "/etc/passwd"] {
            assert!(!points_down(target), "{target}");
        }
    }

    #[test]
    fn a_listing_costs_its_entries_and_counting_stops_at_the_budget() {
        let dir = std::env::temp_dir().join(format!("cordon-listing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for index in 0..100 {
            std::fs::write(dir.join(format!("entry-{index:04}")), b"").unwrap();
        }
        let handle = std::fs::File::open(&dir).unwrap();
        let cost = listing_cost(&handle, usize::MAX).unwrap();
        assert_eq!(cost, LISTING_BYTES + 100 * (LISTING_ENTRY_BYTES + 10));
        assert_eq!(listing_cost(&handle, cost - 1), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
