//! # Opening a name under a grant, never held by what a host process left there
//!
//! wasmtime-wasi's `open-at` opens whatever a name is. Opening a FIFO blocks the opening
//! thread until a peer comes (for reading with no writer, for writing with no reader),
//! which may be never, and no stop reaches a thread inside `open`; opening one at all wakes
//! a host process waiting at its other end, and opening a device may act on it. A guest
//! cannot make a FIFO, a device or a socket, but a host process can leave one in a mount.
//! So every name a guest opens, and every name Cordon opens on a guest's behalf
//! (moves.rs, quota.rs), is opened here:
//!
//! - with the same sandboxed resolution: cap-primitives' `open` (`openat2` with
//!   `RESOLVE_BENEATH`, or its walk where that is missing), of which wasmtime-wasi 48's own
//!   is a copy, and the same flags, permissions and errors as wasmtime-wasi's `open-at`;
//! - a name that is there is first opened with `O_PATH`, which opens nothing but the
//!   name's place: what it is is read from that descriptor (`fstat`), and only a regular
//!   file or a directory is then opened, through `/proc/self/fd` (the very inode looked
//!   at, whatever the name holds by then); anything else is refused (`access`, or
//!   `not-directory` when a directory was asked for) without ever being opened;
//! - an open that may create (`create` without `exclusive`) looks first, as above, and
//!   then opens the name with `O_CREAT` (the kernel's checks of a create apply, such as
//!   `fs.protected_regular`) while holding the grant's move lock (moves.rs; files.rs takes
//!   it), so that no other call can rename, link or symlink something else under the name
//!   between the look and the open (the lock goes with the blocking open, so a call
//!   stopped meanwhile does not let it go early); it keeps what it opened when it is a
//!   regular file. A host process that races a FIFO in finds the open does not wait for it
//!   (`O_NONBLOCK`). An exclusive create opens nothing that was there.
//!
//! Any other open is one look and one reopen of the very inode looked at: no lock is
//! needed against another call or a host process changing the name in between.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use cap_primitives::fs::{FollowSymlinks, OpenOptions, OpenOptionsExt};
use wasmtime_wasi::filesystem::{Descriptor, Dir, File};
use wasmtime_wasi::p2::bindings::filesystem::types::{DescriptorFlags, ErrorCode, OpenFlags, PathFlags};
use wasmtime_wasi::{FsPerms, OpenMode};

/// Open `path` under the directory `parent` as wasmtime-wasi's `open-at` would, save that
/// nothing but a regular file or a directory is opened, and no open blocks. Runs on a
/// blocking thread, as wasmtime-wasi's does.
pub(crate) async fn open_at(
    parent: &Dir,
    path_flags: PathFlags,
    path: String,
    open_flags: OpenFlags,
    flags: DescriptorFlags,
) -> Result<Descriptor, ErrorCode> {
    open_at_holding(parent, path_flags, path, open_flags, flags, ()).await
}

/// [`open_at`], with `held` (locks) kept until the open on its blocking thread is done,
/// even when the call that asked is stopped meanwhile: a stop drops the asking future, not
/// the blocking work, which must not find the locks gone.
pub(crate) async fn open_at_holding(
    parent: &Dir,
    path_flags: PathFlags,
    path: String,
    open_flags: OpenFlags,
    flags: DescriptorFlags,
    held: impl Send + 'static,
) -> Result<Descriptor, ErrorCode> {
    let (options, open_mode) = options(parent.perms, path_flags, open_flags, flags)?;
    let perms = parent.perms;
    let directory = parent.dir.clone();
    let wanted = Wanted {
        create: open_flags.contains(OpenFlags::CREATE),
        exclusive: open_flags.contains(OpenFlags::EXCLUSIVE),
        directory: open_flags.contains(OpenFlags::DIRECTORY),
        follow: path_flags.contains(PathFlags::SYMLINK_FOLLOW),
        truncate: open_flags.contains(OpenFlags::TRUNCATE),
        // The access `options` asks the system for (wasmtime-wasi's mapping).
        mode: open_mode,
    };
    let opened = tokio::task::spawn_blocking(move || {
        let _held = held;
        open_checked(&directory, Path::new(&path), &options, wanted)
    })
    .await
    .map_err(|_| ErrorCode::Io)??;
    match opened {
        Opened::Directory(dir) => Ok(Descriptor::Dir(Dir::new(dir, perms, open_mode, false))),
        Opened::File(_) if wanted.directory => Err(ErrorCode::NotDirectory),
        Opened::File(file) => Ok(Descriptor::File(File::new(file, perms, open_mode, false))),
    }
}

/// What the guest's flags ask of the name.
#[derive(Clone, Copy)]
struct Wanted {
    create: bool,
    exclusive: bool,
    directory: bool,
    follow: bool,
    truncate: bool,
    mode: OpenMode,
}

/// What an open found.
enum Opened {
    File(std::fs::File),
    Directory(std::fs::File),
}

/// The options wasmtime-wasi 48's `Dir::open_at` gives the system for these flags, and the
/// mode it records, with its refusals (same codes, same order).
fn options(
    perms: FsPerms,
    path_flags: PathFlags,
    open_flags: OpenFlags,
    flags: DescriptorFlags,
) -> Result<(OpenOptions, OpenMode), ErrorCode> {
    let mut options = OpenOptions::new();
    let mut open_mode = OpenMode::empty();
    let create = open_flags.contains(OpenFlags::CREATE);
    if create {
        if open_flags.contains(OpenFlags::EXCLUSIVE) {
            options.create_new(true);
        } else {
            options.create(true);
        }
        options.write(true);
        open_mode |= OpenMode::WRITE;
    }
    if open_flags.contains(OpenFlags::TRUNCATE) {
        options.truncate(true).write(true);
        open_mode |= OpenMode::WRITE;
    }
    if flags.contains(DescriptorFlags::READ) {
        options.read(true);
        open_mode |= OpenMode::READ;
    }
    if flags.contains(DescriptorFlags::WRITE) {
        options.write(true);
        open_mode |= OpenMode::WRITE;
    } else {
        // Opened for reading when not for writing, as wasmtime-wasi does: the mode, not
        // the system, refuses what the guest did not ask for.
        options.read(true);
        open_mode |= OpenMode::READ;
    }
    let follow =
        if path_flags.contains(PathFlags::SYMLINK_FOLLOW) { FollowSymlinks::Yes } else { FollowSymlinks::No };
    options._cap_fs_ext_follow(follow);
    options.custom_flags(libc::O_NOCTTY);
    if flags.intersects(
        DescriptorFlags::FILE_INTEGRITY_SYNC
            | DescriptorFlags::DATA_INTEGRITY_SYNC
            | DescriptorFlags::REQUESTED_WRITE_SYNC,
    ) {
        return Err(ErrorCode::Unsupported);
    }
    if open_flags.contains(OpenFlags::DIRECTORY)
        && open_flags.intersects(OpenFlags::CREATE | OpenFlags::EXCLUSIVE | OpenFlags::TRUNCATE)
    {
        return Err(ErrorCode::Invalid);
    }
    if perms.write_not_permitted() && (create || open_mode.contains(OpenMode::WRITE)) {
        return Err(ErrorCode::NotPermitted);
    }
    Ok((options, open_mode))
}

/// Open the name as `options` ask, having looked at what it is first (module docs).
fn open_checked(
    directory: &Arc<std::fs::File>,
    path: &Path,
    options: &OpenOptions,
    wanted: Wanted,
) -> Result<Opened, ErrorCode> {
    if wanted.create && wanted.exclusive {
        // A new file or nothing: never an open of what was there.
        return Ok(Opened::File(cap_primitives::fs::open(directory, path, options)?));
    }
    if !wanted.create {
        return reopen(&look(directory, path, wanted.follow)?, wanted);
    }
    // Create, or open what is there: by the name, with `O_CREAT` (so that the kernel's
    // checks of a create, `fs.protected_regular`, apply), once a look has found nothing
    // or a file or a directory there. The caller holds the grant's move lock, so no other
    // call can put anything else under the name meanwhile; a host process that does finds
    // the open does not wait (`O_NONBLOCK`), and what it put there is refused.
    match look(directory, path, wanted.follow) {
        Ok(place) => refuse_unless_file_or_directory(&place.metadata()?, wanted)?,
        // Nothing there, or a link to a name not there yet: created through it.
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error.into()),
    }
    let mut create = options.clone();
    create.custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK);
    let opened = cap_primitives::fs::open(directory, path, &create)?;
    // A regular file is kept, whichever (a name removed meanwhile is made again, as
    // wasmtime-wasi would): it is what the open made or truncated.
    if !opened.metadata()?.file_type().is_file() {
        return Err(ErrorCode::Access);
    }
    clear_nonblocking(&opened)?;
    Ok(Opened::File(opened))
}

/// `loop` for a link not followed, `access` (or `not-directory`, when one was asked for)
/// for anything but a regular file or a directory.
fn refuse_unless_file_or_directory(metadata: &std::fs::Metadata, wanted: Wanted) -> Result<(), ErrorCode> {
    let kind = metadata.file_type();
    if kind.is_symlink() {
        // Not followed (`O_NOFOLLOW`), as an open of it would refuse it.
        return Err(ErrorCode::Loop);
    }
    if !kind.is_file() && !kind.is_dir() {
        return Err(if wanted.directory { ErrorCode::NotDirectory } else { ErrorCode::Access });
    }
    Ok(())
}

/// Make reads and writes on `file` wait again, as on any file the guest opens.
fn clear_nonblocking(file: &std::fs::File) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: `fcntl` on a descriptor `file` owns and keeps open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The name's place, opened `O_PATH` (nothing behind it is opened), through the sandbox.
fn look(directory: &Arc<std::fs::File>, path: &Path, follow: bool) -> std::io::Result<std::fs::File> {
    let mut options = OpenOptions::new();
    options.read(true);
    options._cap_fs_ext_follow(if follow { FollowSymlinks::Yes } else { FollowSymlinks::No });
    options.custom_flags(libc::O_PATH);
    cap_primitives::fs::open(directory, path, &options)
}

/// Open what `place` is, with the access `wanted` asks, when it is a regular file or a
/// directory; refuse anything else unopened.
fn reopen(place: &std::fs::File, wanted: Wanted) -> Result<Opened, ErrorCode> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let metadata = place.metadata()?;
    refuse_unless_file_or_directory(&metadata, wanted)?;
    let kind = metadata.file_type();
    let reopened = std::fs::OpenOptions::new()
        .read(wanted.mode.contains(OpenMode::READ))
        .write(wanted.mode.contains(OpenMode::WRITE))
        .truncate(wanted.truncate)
        .custom_flags(libc::O_NOCTTY)
        .open(format!("/proc/self/fd/{}", place.as_raw_fd()))?;
    Ok(if kind.is_dir() { Opened::Directory(reopened) } else { Opened::File(reopened) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::Scratch;

    fn directory(path: &Path) -> Dir {
        let file = std::fs::File::open(path).unwrap();
        Dir::new(file, FsPerms::ReadWrite, OpenMode::READ | OpenMode::WRITE, false)
    }

    async fn open(
        parent: &Dir,
        path: &str,
        open_flags: OpenFlags,
        flags: DescriptorFlags,
    ) -> Result<Descriptor, ErrorCode> {
        open_at(parent, PathFlags::SYMLINK_FOLLOW, path.into(), open_flags, flags).await
    }

    /// A FIFO named `pipe` in `scratch`, as a host process would leave one.
    fn fifo_in(scratch: &Scratch) -> std::path::PathBuf {
        let fifo = scratch.path().join("pipe");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        fifo
    }

    /// A FIFO with no writer, opened to be read, would block wasmtime-wasi's open for
    /// good; here it is refused at once, read or written, through a link or not.
    #[tokio::test]
    async fn a_fifo_is_refused_without_waiting_for_a_peer() {
        let scratch = Scratch::new("opening-fifo");
        fifo_in(&scratch);
        std::os::unix::fs::symlink("pipe", scratch.path().join("link")).unwrap();
        let parent = directory(scratch.path());
        let opens = async {
            for path in ["pipe", "link"] {
                for flags in [DescriptorFlags::READ, DescriptorFlags::WRITE] {
                    let opened = open(&parent, path, OpenFlags::empty(), flags).await;
                    assert_eq!(opened.err(), Some(ErrorCode::Access), "{path} {flags:?}");
                }
                let create = open(&parent, path, OpenFlags::CREATE, DescriptorFlags::WRITE).await;
                assert_eq!(create.err(), Some(ErrorCode::Access), "{path}: there already");
                let directory = open(&parent, path, OpenFlags::DIRECTORY, DescriptorFlags::READ).await;
                assert_eq!(directory.err(), Some(ErrorCode::NotDirectory), "{path}");
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), opens)
            .await
            .expect("no open waits for a peer");
    }

    /// A refused FIFO is never opened: a host process waiting to write to it is not woken
    /// (to find its reader gone, `EPIPE`), and writes once a reader of its own comes.
    #[tokio::test]
    async fn a_refused_fifo_leaves_a_host_process_at_its_other_end_waiting() {
        let scratch = Scratch::new("opening-peer");
        let fifo = fifo_in(&scratch);
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                use std::io::Write as _;
                std::fs::OpenOptions::new().write(true).open(&fifo)?.write_all(b"x")
            })
        };
        let parent = directory(scratch.path());
        for _ in 0..50 {
            let opened = open(&parent, "pipe", OpenFlags::empty(), DescriptorFlags::READ).await;
            assert_eq!(opened.err(), Some(ErrorCode::Access));
        }
        let mut reader = std::fs::File::open(&fifo).unwrap();
        let mut read = Vec::new();
        std::io::Read::read_to_end(&mut reader, &mut read).unwrap();
        assert_eq!(read, b"x");
        writer.join().unwrap().expect("the host's writer wrote to its own reader");
    }

    /// Files and directories open as wasmtime-wasi opens them, with its refusals, and a
    /// file is left waiting on its reads and writes as usual.
    #[tokio::test]
    async fn files_and_directories_open_as_wasmtime_wasi_opens_them() {
        let scratch = Scratch::new("opening-files");
        std::fs::create_dir(scratch.path().join("sub")).unwrap();
        let parent = directory(scratch.path());
        let created = open(&parent, "new", OpenFlags::CREATE, DescriptorFlags::WRITE).await;
        let Ok(Descriptor::File(file)) = created else { panic!("a file is made") };
        // SAFETY: a descriptor `file` keeps open.
        let flags = unsafe { libc::fcntl(file.file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0, "a kept file blocks as usual");
        assert_eq!(file.open_mode, OpenMode::WRITE);
        // Opened again to create: the file that is there, as it is (no truncation unasked);
        // a directory there is one, not a file to make.
        std::fs::write(scratch.path().join("new"), b"kept").unwrap();
        let again = open(&parent, "new", OpenFlags::CREATE, DescriptorFlags::WRITE).await;
        assert!(matches!(again, Ok(Descriptor::File(_))));
        assert_eq!(std::fs::read(scratch.path().join("new")).unwrap(), b"kept");
        let over_directory = open(&parent, "sub", OpenFlags::CREATE, DescriptorFlags::WRITE).await;
        assert_eq!(over_directory.err(), Some(ErrorCode::IsDirectory));
        assert!(matches!(
            open(&parent, "sub", OpenFlags::DIRECTORY, DescriptorFlags::READ).await,
            Ok(Descriptor::Dir(_))
        ));
        assert_eq!(
            open(&parent, "new", OpenFlags::DIRECTORY, DescriptorFlags::READ).await.err(),
            Some(ErrorCode::NotDirectory)
        );
        assert_eq!(
            open(&parent, "new", OpenFlags::CREATE | OpenFlags::EXCLUSIVE, DescriptorFlags::WRITE)
                .await
                .err(),
            Some(ErrorCode::Exist)
        );
        assert_eq!(
            open(&parent, "sub", OpenFlags::DIRECTORY | OpenFlags::CREATE, DescriptorFlags::READ).await.err(),
            Some(ErrorCode::Invalid)
        );
        assert_eq!(
            open(&parent, "../x", OpenFlags::empty(), DescriptorFlags::READ).await.err(),
            Some(ErrorCode::NotPermitted)
        );
        assert_eq!(
            open(&parent, "missing", OpenFlags::empty(), DescriptorFlags::READ).await.err(),
            Some(ErrorCode::NoEntry)
        );
        let read_only =
            Dir::new(std::fs::File::open(scratch.path()).unwrap(), FsPerms::ReadOnly, OpenMode::READ, false);
        assert_eq!(
            open(&read_only, "new", OpenFlags::empty(), DescriptorFlags::WRITE).await.err(),
            Some(ErrorCode::NotPermitted)
        );
        assert!(matches!(
            open(&read_only, "new", OpenFlags::empty(), DescriptorFlags::READ).await,
            Ok(Descriptor::File(_))
        ));
        // Created through a link to a name not there yet, as wasmtime-wasi creates it.
        std::os::unix::fs::symlink("later", scratch.path().join("ahead")).unwrap();
        let ahead = open(&parent, "ahead", OpenFlags::CREATE, DescriptorFlags::WRITE).await;
        assert!(matches!(ahead, Ok(Descriptor::File(_))), "created through the link");
        assert!(scratch.path().join("later").is_file());
        std::os::unix::fs::symlink("new", scratch.path().join("link")).unwrap();
        let nofollow =
            open_at(&parent, PathFlags::empty(), "link".into(), OpenFlags::empty(), DescriptorFlags::READ)
                .await;
        assert_eq!(nofollow.err(), Some(ErrorCode::Loop));
    }
}
