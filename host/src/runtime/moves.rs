//! # Directories a guest moves: no symlink the host left inside may come to lead out of the grant
//!
//! A guest's own symlinks point down (files.rs), but the host may have left links that
//! climb (`a/b/l -> ../../x`), which lead somewhere inside the grant from where they are.
//! `rename-at` and `link-at` of such a link itself are refused (files.rs,
//! `is_climbing_link`). Moving a *directory* up carries every link inside it up too:
//! `a/b/d/l -> ../../x` leads to `a/x`, but moved to `d/l` it would lead above the grant,
//! for every host program that follows it later (wasmtime-wasi's sandbox still refuses it
//! to guests). So before a directory moves closer to its grant's top, [`check_move`] reads
//! every symlink under it and refuses the move (`not-permitted`) when one would then climb
//! above the top. A move to the same depth or deeper changes nothing of that kind and is
//! not walked, so a rename in place costs two `fstat`-sized lookups.
//!
//! - A target is read lexically: each `..` one level up, each name one down. An absolute
//!   target leads where it did wherever the link is, and is left alone.
//! - Into another grant, depths do not compare: such a move is always walked, and refused
//!   when any link inside climbs out of the directory that moves.
//! - A directory that cannot be opened to be walked (unreadable to the server's user) is
//!   not moved up.
//! - The walk is bounded by [`MOVE_WALK_ENTRIES`]: a tree larger than that is not moved up
//!   (refused as above), so no move makes the host walk without end. It runs on a blocking
//!   thread, as wasmtime-wasi's own file-system calls do.
//! - What is walked is what moves: every rename, link and symlink in a grant holds the
//!   grant's move lock ([`lock_moves`]), which all versions and tenants of every component
//!   granted the directory share, so no other call can swap another directory in under
//!   the same name (nor make a path on the way lead elsewhere) between the walk and the
//!   rename. The host's own processes are not held by it.
//!
//! The locks are always taken in one order: a grant's move lock, then its quota's
//! (quota.rs). An open that may create a name holds the move lock too, from its look at
//! the name to its open of it (opening.rs), so that no call can put something else there
//! in between; any other open looks and opens through one descriptor, with no lock.
//!
//! The paths a move names are opened to be walked as a guest's opens are (opening.rs):
//! a FIFO on the way is refused, never waited on.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Component as PathPart, Path, PathBuf};
use std::sync::{Arc, Weak};

use tokio::sync::{Mutex, OwnedMutexGuard};
use wasmtime::Result;
use wasmtime::component::Resource;
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p2::bindings::filesystem::types::{DescriptorFlags, ErrorCode, OpenFlags, PathFlags};

use super::guest::GuestState;

/// The most entries a directory may hold, all levels together, to be moved up (and so the
/// most a move makes the host read).
pub(crate) const MOVE_WALK_ENTRIES: usize = 100_000;

/// The lock every rename, link and symlink in a granted directory takes, one at a time
/// (what a move walks stays as it was until it moves): one per directory, by its device
/// and inode, shared by whatever grants it (every loaded version and tenant of a
/// component) while anything holds it. A directory whose identity cannot be read gets
/// none: a lock of its own would not be shared with the other grants of that directory.
pub(crate) fn move_lock(directory: &std::fs::File) -> std::io::Result<Arc<Mutex<()>>> {
    use std::os::unix::fs::MetadataExt;
    let metadata = directory.metadata()?;
    let key = (metadata.dev(), metadata.ino());
    let mut live = LIVE_MOVE_LOCKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    live.retain(|_, lock| lock.strong_count() > 0);
    if let Some(lock) = live.get(&key).and_then(Weak::upgrade) {
        return Ok(lock);
    }
    let lock = Arc::default();
    live.insert(key, Arc::downgrade(&lock));
    Ok(lock)
}

/// Move locks by their directory's device and inode.
type MoveLocks = std::collections::HashMap<(u64, u64), Weak<Mutex<()>>>;

/// The move locks held now.
static LIVE_MOVE_LOCKS: std::sync::LazyLock<std::sync::Mutex<MoveLocks>> =
    std::sync::LazyLock::new(Default::default);

/// Hold the move locks of the grants `dir` and `new_dir` lie under (one when it is the
/// same grant), taken in one order (by address), so that two changes between the same two
/// grants cannot each hold one and wait for the other; taken before a quota's lock.
pub(crate) fn lock_moves(
    state: &GuestState,
    dir: u32,
    new_dir: u32,
) -> impl Future<Output = Vec<OwnedMutexGuard<()>>> + Send + use<> {
    let mut locks: Vec<Arc<Mutex<()>>> =
        [dir, new_dir].into_iter().filter_map(|rep| state.move_lock_of(rep)).collect();
    locks.sort_by_key(|lock| Arc::as_ptr(lock) as usize);
    locks.dedup_by(|a, b| Arc::ptr_eq(a, b));
    async move {
        let mut guards = Vec::with_capacity(locks.len());
        for lock in locks {
            guards.push(lock.lock_owned().await);
        }
        guards
    }
}

/// Whether renaming `old_path` under `dir` to `new_path` under `new_dir` may go ahead:
/// `Ok(Err(not-permitted))` when it would move a directory up far enough that a symlink
/// inside it would lead above its grant, or when the tree is too large to tell. The caller
/// holds [`lock_moves`].
pub(crate) async fn check_move(
    state: &mut GuestState,
    dir: u32,
    old_path: &str,
    new_dir: u32,
    new_path: &str,
) -> Result<Result<(), ErrorCode>> {
    let (Some((old_parent, old_name)), Some((new_parent, _))) = (split(old_path), split(new_path)) else {
        // No name to move, or none to move to: wasmtime-wasi refuses such a rename.
        return Ok(Ok(()));
    };
    let from = match open_parent(state, dir, old_parent).await? {
        Ok(from) => from,
        // The rename fails the same way.
        Err(_) => return Ok(Ok(())),
    };
    let moved = match open_directory_no_follow(&from, &old_name) {
        Ok(moved) => moved,
        // Not a directory (a file; a link, files.rs), or nothing: nothing under it moves.
        Err(error) if matches!(error.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP | libc::ENOENT)) => {
            return Ok(Ok(()));
        }
        // A directory the host cannot read (or no descriptor left): it cannot be told.
        Err(_) => return Ok(Err(ErrorCode::NotPermitted)),
    };
    let to = match open_parent(state, new_dir, new_parent).await? {
        Ok(to) => to,
        Err(code) => return Ok(Err(code)),
    };
    let top = if state.grant_of(dir) == state.grant_of(new_dir) {
        let from_depth = state.depth_in_grant(dir, &from);
        let to_depth = state.depth_in_grant(new_dir, &to);
        if to_depth.is_some_and(|to| from_depth.is_some_and(|from| to >= from)) {
            return Ok(Ok(()));
        }
        // Unknown depths (a grant renamed on the host since load) count as the top.
        to_depth.unwrap_or(0) + 1
    } else {
        // Into another grant, depths do not compare: no link may climb out of what moves.
        0
    };
    let walked =
        tokio::task::spawn_blocking(move || carries_link_above(&moved, top, MOVE_WALK_ENTRIES)).await;
    Ok(match walked {
        Ok(false) => Ok(()),
        Ok(true) | Err(_) => Err(ErrorCode::NotPermitted),
    })
}

/// `path` as its parent (`.` for none) and its last name, when its last part is a name.
fn split(path: &str) -> Option<(String, std::ffi::OsString)> {
    let path = Path::new(path);
    let Some(PathPart::Normal(name)) = path.components().next_back() else {
        return None;
    };
    let parent = path.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Some((parent.to_str()?.to_owned(), name.to_owned()))
}

/// The directory `path` names under `dir`, resolved by the sandbox as the rename resolves
/// it, as a host file of its own (the guest's table is left as it was). Opened as a
/// guest's open is (opening.rs): a FIFO on the way is refused, not waited on.
async fn open_parent(
    state: &mut GuestState,
    dir: u32,
    path: String,
) -> Result<Result<Arc<std::fs::File>, ErrorCode>> {
    let directory = match super::files::directory_of(state.table(), &Resource::new_borrow(dir))? {
        Ok(directory) => directory,
        Err(code) => return Ok(Err(code)),
    };
    let opened = super::opening::open_at(
        &directory,
        PathFlags::SYMLINK_FOLLOW,
        path,
        OpenFlags::DIRECTORY,
        DescriptorFlags::READ,
    )
    .await;
    Ok(match opened {
        Ok(Descriptor::Dir(directory)) => Ok(directory.dir),
        Ok(Descriptor::File(_)) => Err(ErrorCode::NotDirectory),
        Err(code) => Err(code),
    })
}

/// `name` in `parent`, opened as a directory when it is one (never through a symlink:
/// `ELOOP` for a link, `ENOTDIR` for a file).
fn open_directory_no_follow(parent: &std::fs::File, name: &std::ffi::OsStr) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `openat` on a descriptor `parent` keeps open; the new one is owned below.
    let fd = unsafe {
        libc::openat(
            parent.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// How many levels below its grant's top the directory `directory` lies, where `top` is
/// the real path of the grant's directory.
pub(crate) fn depth_below(top: &Path, directory: &std::fs::File) -> Option<usize> {
    let real = std::fs::read_link(format!("/proc/self/fd/{}", directory.as_raw_fd())).ok()?;
    Some(real.strip_prefix(top).ok()?.components().count())
}

/// Whether a symlink under `moved`, once `moved` lies `top` levels below its grant's top,
/// would lead above that top; also `true` when the tree holds more than `most_entries`
/// entries or cannot be read to the end.
fn carries_link_above(moved: &OwnedFd, top: usize, most_entries: usize) -> bool {
    let base = PathBuf::from(format!("/proc/self/fd/{}", moved.as_raw_fd()));
    // Directories still to read, by their path under `moved` and their depth below it.
    let mut pending = vec![(PathBuf::new(), 0_usize)];
    let mut entries = 0;
    while let Some((relative, depth)) = pending.pop() {
        let Ok(listing) = std::fs::read_dir(base.join(&relative)) else {
            return true;
        };
        for entry in listing {
            entries += 1;
            if entries > most_entries {
                return true;
            }
            let Ok(entry) = entry else { return true };
            let Ok(kind) = entry.file_type() else { return true };
            let path = relative.join(entry.file_name());
            if kind.is_dir() {
                pending.push((path, depth + 1));
            } else if kind.is_symlink() {
                let Ok(target) = std::fs::read_link(base.join(&path)) else {
                    return true;
                };
                if climbs_above(&target, top + depth) {
                    return true;
                }
            }
        }
    }
    false
}

/// Whether `target`, followed from a directory `depth` levels below a grant's top, would
/// pass above the top at any step. Absolute targets lead where they did from anywhere.
fn climbs_above(target: &Path, depth: usize) -> bool {
    let mut level = depth as i64;
    for part in target.components() {
        match part {
            PathPart::RootDir | PathPart::Prefix(_) => return false,
            PathPart::ParentDir => level -= 1,
            PathPart::Normal(_) => level += 1,
            PathPart::CurDir => {}
        }
        if level < 0 {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_climbs_above_the_top_only_when_some_step_passes_it() {
        assert!(!climbs_above(Path::new("../../x"), 2));
        assert!(climbs_above(Path::new("../../x"), 1));
        assert!(climbs_above(Path::new("a/../../../x"), 1), "a step above the top, though it ends inside");
        assert!(!climbs_above(Path::new("./a/b"), 0));
        assert!(!climbs_above(Path::new("/etc/passwd"), 0), "absolute targets are another matter");
    }

    #[test]
    fn a_rename_names_its_parent_and_last_name() {
        assert_eq!(split("a/b/d"), Some(("a/b".into(), "d".into())));
        assert_eq!(split("d"), Some((".".into(), "d".into())));
        assert_eq!(split("a/.."), None);
        assert_eq!(split(""), None);
    }

    #[test]
    fn a_walk_finds_a_deep_link_that_would_lead_out_and_stops_at_its_bound() {
        let root = std::env::temp_dir().join(format!("cordon-moves-{}", std::process::id()));
        std::fs::create_dir_all(root.join("d/s")).unwrap();
        std::os::unix::fs::symlink("../../../x", root.join("d/s/l")).unwrap();
        let moved = |path: &Path| -> OwnedFd { std::fs::File::open(path).unwrap().into() };
        let d = moved(&root.join("d"));
        // `d/s/l` climbs three levels from `d/s`: `d` must lie at least two below the top.
        assert!(carries_link_above(&d, 1, 10));
        assert!(!carries_link_above(&d, 2, 10));
        for index in 0..9 {
            std::fs::File::create(root.join(format!("d/s/{index}"))).unwrap();
        }
        // Eleven entries now: `s`, `l` and nine files.
        assert!(!carries_link_above(&d, 2, 11));
        assert!(carries_link_above(&d, 2, 10), "past the bound the tree is not walked to the end");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
