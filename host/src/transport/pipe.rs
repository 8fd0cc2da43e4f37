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
    /// Take over stdout if it is a pipe or a socket of its own; `None` otherwise.
    pub fn stdout() -> Option<Self> {
        Self::unless_shared(1, &[0, 2])
    }

    /// Take over `fd` if it is a pipe or a socket and none of `others` is the same file;
    /// `None` otherwise. Non-blocking mode belongs to the open file, which every duplicate
    /// shares: were stdin the same socket (socat's `EXEC:`, systemd's and inetd's socket
    /// activation), its blocking reads would fail with `WouldBlock`; were stderr the same
    /// pipe (`2>&1`), log lines would be lost. Such a descriptor is written by tokio's
    /// blocking-pool stdout instead.
    pub fn unless_shared(fd: RawFd, others: &[RawFd]) -> Option<Self> {
        let identity = |fd: RawFd| {
            // SAFETY: fstat fills the struct it is given, for any descriptor number.
            let mut stat: libc::stat = unsafe { std::mem::zeroed() };
            (unsafe { libc::fstat(fd, &mut stat) } == 0).then_some(stat)
        };
        let stat = identity(fd)?;
        let same = |other: &libc::stat| other.st_dev == stat.st_dev && other.st_ino == stat.st_ino;
        if others.iter().filter_map(|&other| identity(other)).any(|other| same(&other)) {
            return None;
        }
        // SAFETY: fcntl on a descriptor we own for the life of the process; the duplicate
        // is a fresh descriptor that `File` then owns.
        unsafe {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn nonblocking(fd: RawFd) -> bool {
        // SAFETY: F_GETFL on a descriptor this test owns.
        unsafe { libc::fcntl(fd, libc::F_GETFL) & libc::O_NONBLOCK != 0 }
    }

    #[tokio::test]
    async fn a_descriptor_shared_with_another_stream_is_left_blocking() {
        let (ours, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let duplicate = ours.try_clone().unwrap();
        // The same socket as "stdin" too: not taken over, and still blocking.
        assert!(Pipe::unless_shared(ours.as_raw_fd(), &[duplicate.as_raw_fd()]).is_none());
        assert!(!nonblocking(duplicate.as_raw_fd()));
        // A socket of its own is.
        let (other, _other_peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let pipe = Pipe::unless_shared(ours.as_raw_fd(), &[other.as_raw_fd()]).expect("taken over");
        assert!(nonblocking(pipe.as_raw_fd()));
    }
}
