//! Connected sockets as the services and the relay see them: TCP or Unix;
//! `metered.rs` counts their bytes for the log.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::buffers::{self, Lent};
use crate::model::Endpoint;

mod metered;
pub(crate) use metered::Metered;

/// What [`Stream::peek_beyond`] saw: `len` bytes waiting, and whether the
/// client has ended its side (then no more will come).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peeked {
    pub len: usize,
    pub ended: bool,
}

/// A socket for `backend` bound to `source` with IP(V6)_TRANSPARENT set.
fn transparent_socket(
    backend: SocketAddr,
    source: SocketAddr,
) -> io::Result<tokio::net::TcpSocket> {
    let socket = match backend {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    let sock = socket2::SockRef::from(&socket);
    match backend {
        SocketAddr::V4(_) => sock.set_ip_transparent_v4(true)?,
        SocketAddr::V6(_) => sock.set_ip_transparent_v6(true)?,
    }
    socket.bind(source)?;
    Ok(socket)
}

/// A connected stream socket: a client, or a proxy's backend.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Connects to a proxy's backend (TCP_NODELAY set), for clients and health checks.
    pub async fn connect(endpoint: &Endpoint) -> io::Result<Stream> {
        match endpoint {
            Endpoint::Tcp(addr) => {
                let stream = TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                Ok(Stream::Tcp(stream))
            }
            Endpoint::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path).await?)),
        }
    }

    /// Connects to a TCP backend from `source` (a client's address) when it
    /// is given and of the backend's family: IP_TRANSPARENT lets the socket
    /// take an address that is not this host's. The client's port is kept
    /// when free, so the backend sees exactly the client; else any port.
    pub async fn connect_from(
        endpoint: &Endpoint,
        source: Option<SocketAddr>,
    ) -> io::Result<Stream> {
        let (Endpoint::Tcp(addr), Some(source)) = (endpoint, source) else {
            return Stream::connect(endpoint).await;
        };
        if addr.is_ipv4() != source.is_ipv4() {
            return Stream::connect(endpoint).await;
        }
        let socket = transparent_socket(*addr, source).or_else(|e| match e.kind() {
            io::ErrorKind::AddrInUse => transparent_socket(*addr, SocketAddr::new(source.ip(), 0)),
            _ => Err(e),
        })?;
        let stream = socket.connect(*addr).await?;
        stream.set_nodelay(true)?;
        Ok(Stream::Tcp(stream))
    }

    /// Runs a raw non-blocking operation once the socket is ready for `interest`,
    /// again after each `WouldBlock` (which clears tokio's readiness, so the next
    /// wait really waits); returns its first other result. tokio's `async_io`.
    pub async fn async_io<R>(
        &self,
        interest: Interest,
        op: impl FnMut() -> io::Result<R>,
    ) -> io::Result<R> {
        match self {
            Stream::Tcp(s) => s.async_io(interest, op).await,
            Stream::Unix(s) => s.async_io(interest, op).await,
        }
    }

    /// Waits until the socket is ready for `interest` (tokio's `ready`).
    async fn ready(&self, interest: Interest) -> io::Result<tokio::io::Ready> {
        match self {
            Stream::Tcp(s) => s.ready(interest).await,
            Stream::Unix(s) => s.ready(interest).await,
        }
    }

    /// Runs a raw non-blocking operation once, now; a `WouldBlock` from it
    /// clears tokio's readiness, so the next wait really waits (tokio's
    /// `try_io`).
    fn try_io<R>(&self, interest: Interest, op: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            Stream::Tcp(s) => s.try_io(interest, op),
            Stream::Unix(s) => s.try_io(interest, op),
        }
    }

    /// Waits for input holding no buffer, then reads it into a buffer of `len`
    /// bytes lent for the moment (`buffers`); 0 bytes means EOF. Idle
    /// sessions that read this way hold no buffer memory.
    pub async fn read_lent(&self, len: usize) -> io::Result<(Lent, usize)> {
        let (buf, n, _) = self.read_lent_to_fin(len).await?;
        Ok((buf, n))
    }

    /// [`Stream::read_lent`], also saying whether the peer's FIN had already
    /// arrived with these bytes (then every read after this one returns at
    /// once, the last with the end): what a relay needs to send them on with
    /// the FIN behind them (`send`'s `more`).
    pub async fn read_lent_to_fin(&self, len: usize) -> io::Result<(Lent, usize, bool)> {
        loop {
            let ready = self.ready(Interest::READABLE).await?;
            let mut buf = buffers::lend(len);
            let full = buf.len();
            let mut got = None;
            // A read shorter than the buffer emptied the socket (epoll is
            // edge-triggered, and tokio reasons the same in its own
            // `poll_read`): reporting it as WouldBlock makes `try_io` clear
            // the readiness, so the next call waits for new input instead of
            // spending a read on EAGAIN. A readiness that turns out stale
            // clears the same way, and the buffer goes back before the wait.
            let read = self.try_io(Interest::READABLE, || {
                let n = rustix::io::read(self, &mut *buf)?;
                got = Some(n);
                if n == 0 || n == full {
                    Ok(())
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                }
            });
            match (got, read) {
                (Some(n), _) => return Ok((buf, n, ready.is_read_closed())),
                (None, Err(e)) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                (None, _) => continue,
            }
        }
    }

    /// Peeks into `buf` once more than `seen` bytes are waiting, or `buf` is
    /// full, or the client has ended its side (FIN or RST: then the bytes
    /// still queued, perhaps just `seen`, come back with `ended`). A peek
    /// consumes nothing, so "no more than before" is told apart from the end
    /// by the socket's read-closed readiness, never by the count alone: a
    /// loop that took an unchanged count for "would block" after FIN would
    /// find the socket readable again at once, for ever.
    pub async fn peek_beyond(&self, buf: &mut [u8], seen: usize) -> io::Result<Peeked> {
        self.until_readable(|ready| {
            let (n, _) = rustix::net::recv(self, &mut *buf, rustix::net::RecvFlags::PEEK)?;
            let ended = n == 0 || ready.is_read_closed();
            if n > seen || n == buf.len() || ended {
                Ok(Peeked { len: n, ended })
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            }
        })
        .await
    }

    /// Waits, holding no buffer, until more than `seen` bytes are queued or
    /// the client has ended its side (FIN or RST: then `ended`, with the
    /// count still queued, perhaps just `seen`). The count is the kernel's
    /// (FIONREAD), so a client that stalls mid-opening costs only the
    /// kernel's copy of what it sent. As in [`Stream::peek_beyond`], the end
    /// is told by the read-closed readiness, never by an unchanged count.
    pub async fn queued_beyond(&self, seen: usize) -> io::Result<Peeked> {
        self.until_readable(|ready| {
            let len = rustix::io::ioctl_fionread(self)? as usize;
            let ended = ready.is_read_closed();
            if len > seen || ended {
                Ok(Peeked { len, ended })
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            }
        })
        .await
    }

    /// Runs `op` each time the socket turns readable, with the readiness
    /// seen, until it returns other than `WouldBlock`; a `WouldBlock` clears
    /// that readiness, so the next wait is for new bytes (or the end), never
    /// a spin.
    async fn until_readable<R>(
        &self,
        mut op: impl FnMut(tokio::io::Ready) -> io::Result<R>,
    ) -> io::Result<R> {
        loop {
            let ready = self.ready(Interest::READABLE).await?;
            match self.try_io(Interest::READABLE, || op(ready)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }

    /// Peeks what is queued into `buf` now, without waiting (for a caller
    /// that knows from the kernel's count that bytes are queued).
    pub fn peek_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
        Ok(rustix::net::recv(self, buf, flags)?.0)
    }

    /// Whether the peer has closed or reset the connection, by a peek that
    /// does not wait (bytes waiting, or nothing yet, mean it has not).
    pub fn has_ended(&self) -> bool {
        let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
        match rustix::net::recv(self, &mut [0u8; 1], flags) {
            Ok((0, _)) => true,
            Ok(_) => false,
            Err(e) => e != rustix::io::Errno::AGAIN && e != rustix::io::Errno::INTR,
        }
    }

    /// Sends the last bytes before our FIN (the caller shuts down the write
    /// side next, without waiting on anything else first). Over TCP they are
    /// held back with MSG_MORE, so the FIN rides in their segment: one
    /// packet, and one wake-up of the peer, instead of two.
    pub async fn send_before_fin(&self, bytes: &[u8]) -> io::Result<()> {
        let mut sent = 0;
        // A poll function, not nested async fns: this future is part of
        // every session's (a refusal may end any of them), so it stays a
        // few words instead of tokio's readiness future and more.
        std::future::poll_fn(|cx| {
            while sent < bytes.len() {
                sent += std::task::ready!(self.poll_send(cx, &bytes[sent..], true))?;
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Sends some of `bytes` once the socket can take them; how many.
    /// `more`: the FIN (or more bytes) follows at once, so a partial segment
    /// may wait for it (MSG_MORE; TCP only).
    pub async fn send(&self, bytes: &[u8], more: bool) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_send(cx, bytes, more)).await
    }

    /// [`Stream::send`]'s poll for several slices, in one sendmsg(2): a
    /// TLS session's last records, held back for the FIN that follows.
    pub(crate) fn poll_send_vectored(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
        more: bool,
    ) -> Poll<io::Result<usize>> {
        let flags = self.send_flags(more);
        let mut control = rustix::net::SendAncillaryBuffer::default();
        self.poll_sending(cx, || rustix::net::sendmsg(self, bufs, &mut control, flags))
    }

    fn poll_send(&self, cx: &mut Context<'_>, bytes: &[u8], more: bool) -> Poll<io::Result<usize>> {
        let flags = self.send_flags(more);
        self.poll_sending(cx, || rustix::net::send(self, bytes, flags))
    }

    /// MSG_MORE (TCP only) when more bytes or the FIN follow at once.
    fn send_flags(&self, more: bool) -> rustix::net::SendFlags {
        let mut flags = rustix::net::SendFlags::NOSIGNAL;
        if more && matches!(self, Stream::Tcp(_)) {
            flags |= rustix::net::SendFlags::MORE;
        }
        flags
    }

    /// Runs `send` once the socket can take bytes, until it does other than
    /// `WouldBlock`; how many it took.
    fn poll_sending(
        &self,
        cx: &mut Context<'_>,
        mut send: impl FnMut() -> rustix::io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            match self {
                Stream::Tcp(s) => std::task::ready!(s.poll_write_ready(cx))?,
                Stream::Unix(s) => std::task::ready!(s.poll_write_ready(cx))?,
            }
            // A WouldBlock clears the readiness: the next poll waits.
            match self.try_io(Interest::WRITABLE, || send().map_err(io::Error::from)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                done => return Poll::Ready(done),
            }
        }
    }

    /// Sends FIN: the peer reads EOF, and may still send to us.
    pub fn shutdown_write(&self) -> io::Result<()> {
        socket2::SockRef::from(self).shutdown(std::net::Shutdown::Write)
    }

    /// The remote address of a TCP socket (`None` for Unix).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match self {
            Stream::Tcp(s) => s.peer_addr().ok(),
            Stream::Unix(_) => None,
        }
    }

    /// The local address of a TCP socket (`None` for Unix).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Stream::Tcp(s) => s.local_addr().ok(),
            Stream::Unix(_) => None,
        }
    }
}

impl std::os::fd::AsFd for Stream {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Tcp($s) => $e,
            Stream::Unix($s) => $e,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    /// One writev(2) for all of `bufs`. rustls hands its pending records
    /// over as one vectored write: a handshake's ServerHello,
    /// ChangeCipherSpec and encrypted flight then leave in one segment, not
    /// three (tokio's default writes only the first slice per call).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests;
