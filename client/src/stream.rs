//! The client's one socket type: TCP or Unix, blocking, with the few operations
//! the library, the handoff backend and the `tcpmux` command need of either.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::Socket;

/// A connected stream socket, TCP or Unix.
#[derive(Debug)]
pub enum Stream {
    /// A TCP connection.
    Tcp(TcpStream),
    /// A Unix-socket connection.
    Unix(UnixStream),
}

impl Stream {
    /// A second handle on the same socket (one per direction of a relay).
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    /// Sends FIN: the peer reads EOF and may still send to us.
    pub fn shutdown_write(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
        }
    }

    /// Wraps a connected socket received as a bare descriptor, in blocking mode.
    pub(crate) fn from_fd(fd: OwnedFd) -> io::Result<Stream> {
        let is_tcp = matches!(
            rustix::net::getsockname(&fd).map(|a| a.address_family()),
            Ok(rustix::net::AddressFamily::INET | rustix::net::AddressFamily::INET6)
        );
        let stream = if is_tcp {
            let s = TcpStream::from(fd);
            s.set_nonblocking(false)?;
            Stream::Tcp(s)
        } else {
            let s = UnixStream::from(fd);
            s.set_nonblocking(false)?;
            Stream::Unix(s)
        };
        Ok(stream)
    }
}

impl From<TcpStream> for Stream {
    fn from(stream: TcpStream) -> Self {
        Stream::Tcp(stream)
    }
}

impl From<UnixStream> for Stream {
    fn from(stream: UnixStream) -> Self {
        Stream::Unix(stream)
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

impl Socket for Stream {
    fn set_read_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(limit),
            Stream::Unix(s) => s.set_read_timeout(limit),
        }
    }
}
