//! stdout as a non-blocking pipe on tokio's reactor.
//!
//! `tokio::io::stdout` does every write on the blocking thread pool, which costs two thread
//! hand-offs per message. When our stdout is a pipe or a socket (how an MCP client runs
//! us), we switch it to non-blocking mode and write it like any socket instead; anything
//! else (a terminal, a file) falls back to tokio's version. (stdin needs none of this: the
//! stdio transport reads it with blocking reads on a thread of its own.)

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::AsyncWrite;
use tokio::io::unix::AsyncFd;

/// A pipe (or socket) end in non-blocking mode, polled by the reactor.
pub struct Pipe {
    fd: AsyncFd<File>,
}

impl Pipe {
    /// Take over `fd` (stdout: 1) if it is a pipe or a socket; `None` otherwise.
    pub fn from_std(fd: RawFd) -> Option<Self> {
        // SAFETY: fstat and fcntl on a descriptor we own for the life of the process; the
        // duplicate is a fresh descriptor that `File` then owns.
        unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut stat) != 0 {
                return None;
            }
            let kind = stat.st_mode & libc::S_IFMT;
            if kind != libc::S_IFIFO && kind != libc::S_IFSOCK {
                return None;
            }
            let own = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
            if own < 0 {
                return None;
            }
            let flags = libc::fcntl(own, libc::F_GETFL);
            if flags < 0 || libc::fcntl(own, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
                libc::close(own);
                return None;
            }
            let file = File::from_raw_fd(own);
            AsyncFd::register(file).ok().map(|fd| Self { fd })
        }
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|fd| fd.get_ref().write(bytes)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsRawFd for Pipe {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.get_ref().as_raw_fd()
    }
}
