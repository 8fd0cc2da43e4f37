//! # A component's file system: its data directory, opened once, and the guards on it
//!
//! A data directory is a grant built once, at load ([`DataDir::open`]): the directory is
//! opened then and every store gets the same open descriptor, never the path again, so
//! nothing that happens to the path later (a rename, a symlink put in its place) can
//! point a later call somewhere else. The runtime refuses data directories inside one
//! another (`Runtime::load_*`), so one component can never reach another's.
//!
//! wasmtime-wasi confines every path a guest opens to the directory, but some of its
//! `wasi:filesystem` functions make the host hold what the call's limits do not see; they
//! are shadowed here, in front of wasmtime-wasi's own implementation, which still does
//! the work:
//!
//! - `open-at` counts the call's open descriptors against `open_files` and the server's
//!   descriptor budget (ledger.rs) before it opens another;
//! - `read-via-stream`, `write-via-stream` and `append-via-stream` charge each stream's
//!   64 KiB buffer to `host_memory_bytes` and its descriptor to `open_files`, until the
//!   stream drops;
//! - `read-directory`, which copies the whole listing into host memory, measures the
//!   directory first and charges the listing to `host_memory_bytes` while it lives;
//! - `symlink-at` refuses targets with `..`: wasmtime-wasi already refuses absolute ones,
//!   and a guest's link could otherwise point outside its directory for whoever follows
//!   it on the host. Every link a guest makes points down, so no chain of them leads out.
//!
//! Refusals are WASI error codes the guest can handle: `insufficient-memory` for host
//! memory, `quota` for descriptors, `not-permitted` for a link.

use std::os::fd::AsRawFd;
use std::path::{Component as PathPart, Path, PathBuf};

use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime::{Result, StoreContextMut};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtx};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DirectoryEntryStream, ErrorCode, HostDescriptor, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsError, FsResult, InputStream, OutputStream};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::guest::GuestState;
use super::ledger::{Refusal, StreamCharge};

/// Where the tool's data directory appears inside the guest.
pub const GUEST_DATA_DIR: &str = "/data";

/// The `wasi:filesystem/types` instance wasmtime-wasi 48 defines (older 0.2 imports
/// resolve to it).
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Host memory a listing costs besides its names: the entry, its string, the vector slot.
const LISTING_ENTRY_BYTES: usize = 64;
/// Host memory a listing costs however small: the iterator, its box and lock.
const LISTING_BYTES: usize = 256;

/// A component's data directory, opened at load.
#[derive(Clone)]
pub(crate) struct DataDir {
    /// The directory's canonical path when it was opened, for messages and the nesting check.
    pub(crate) path: PathBuf,
    /// The file-system context every store of the component starts from: the open
    /// directory, preopened at [`GUEST_DATA_DIR`].
    filesystem: WasiFilesystemCtx,
}

impl DataDir {
    /// Create the directory if it is missing, and open it.
    pub(crate) fn open(path: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
        let canonical =
            path.canonicalize().map_err(|error| format!("cannot resolve {}: {error}", path.display()))?;
        let mut builder = WasiCtxBuilder::new();
        builder
            .preopened_dir(&canonical, GUEST_DATA_DIR, FsPerms::ReadWrite)
            .map_err(|error| format!("cannot open {}: {error:#}", canonical.display()))?;
        let filesystem = builder.build().filesystem().clone();
        Ok(Self { path: canonical, filesystem })
    }

    /// Whether one of `self` and `other` is inside the other (or they are the same).
    pub(crate) fn overlaps(&self, other: &DataDir) -> bool {
        self.path.starts_with(&other.path) || other.path.starts_with(&self.path)
    }

    pub(crate) fn filesystem(&self) -> WasiFilesystemCtx {
        self.filesystem.clone()
    }
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
                let open = count_descriptors(state.table());
                if let Err(refusal) = state.ledger().charge_descriptors(open + 1) {
                    return Ok((Err(refused(refusal)),));
                }
                let opened = state.filesystem_view().open_at(dir, path_flags, path, open_flags, flags).await;
                if opened.is_err() {
                    // Nothing was opened: give the descriptor back.
                    state.ledger().settle_descriptors(open);
                }
                wasi_result(opened)
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
            let mut view = state.filesystem_view();
            let stream = match view.read_via_stream(file, offset) {
                Ok(stream) => stream,
                Err(error) => return wasi_result(Err(error)),
            };
            let inner = view.table.delete(stream)?;
            let charged: DynInputStream = Box::new(Charged { inner, _charge: charge });
            Ok((Ok(view.table.push(charged)?),))
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
            let mut view = state.filesystem_view();
            let opened =
                if append { view.append_via_stream(file) } else { view.write_via_stream(file, offset) };
            let stream = match opened {
                Ok(stream) => stream,
                Err(error) => return wasi_result(Err(error)),
            };
            let inner = view.table.delete(stream)?;
            let charged: DynOutputStream = Box::new(Charged { inner, _charge: charge });
            Ok((Ok(view.table.push(charged)?),))
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
                wasi_result(store.data_mut().filesystem_view().symlink_at(dir, target, link).await)
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
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
fn wasi_result<T>(result: FsResult<T>) -> Result<(Result<T, ErrorCode>,)> {
    match result {
        Ok(value) => Ok((Ok(value),)),
        Err(error) => Ok((Err(FsError::downcast(error)?),)),
    }
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
