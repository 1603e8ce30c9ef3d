//! The client's byte stream as sessions and services see it: a plain socket,
//! or a TLS session over one. The socket shortcuts (splice, sendfile, peeking
//! the kernel's buffer, passing the descriptor) need the plain kind; with TLS
//! the bytes go through the daemon, in user space.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tcpmux_proto::sniff::client_hello::ClientHello;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use super::buffers::{self, Lent};
use super::stream::{Metered, Peeked, Stream};
use super::tls::{self, TlsConn};
use crate::model::{ServerConfigs, TlsClient};

/// A client connection.
#[derive(Debug)]
pub enum Conn {
    Plain(Stream),
    Tls(Box<TlsConn>),
    /// Consumed by a TLS handshake that failed or was cut short.
    Gone,
}

impl Conn {
    /// The socket itself, when the client speaks plaintext on it.
    pub fn plain(&self) -> Option<&Stream> {
        match self {
            Conn::Plain(stream) => Some(stream),
            Conn::Tls(_) | Conn::Gone => None,
        }
    }

    /// Turns a plain connection into a TLS one: the server handshake, once
    /// the ClientHello is whole (`hello`, when detection has already parsed
    /// it).
    pub async fn start_tls(
        &mut self,
        configs: ServerConfigs,
        mut hello: Option<ClientHello>,
    ) -> io::Result<TlsClient> {
        // Waited for while the socket is still the connection's: a client
        // that stalls mid-ClientHello is closed gracefully at the timeout.
        if let (Conn::Plain(stream), None) = (&*self, &hello) {
            hello = tls::wait_for_hello(stream).await?;
        }
        let Conn::Plain(stream) = std::mem::replace(self, Conn::Gone) else {
            return Err(io::Error::other("TLS has already started"));
        };
        let (tls, client) = tls::accept(stream, configs, hello.as_ref()).await?;
        *self = Conn::Tls(Box::new(tls));
        Ok(client)
    }

    /// Copies pending input into `buf` without consuming it, once more than
    /// `seen` bytes are waiting, `buf` is full or the client has ended its
    /// side ([`Stream::peek_beyond`]; plaintext on a TLS session).
    pub async fn peek_beyond(&mut self, buf: &mut [u8], seen: usize) -> io::Result<Peeked> {
        match self {
            Conn::Plain(stream) => stream.peek_beyond(buf, seen).await,
            Conn::Tls(tls) => tls.peek_beyond(buf, seen).await,
            Conn::Gone => Ok(Peeked {
                len: 0,
                ended: true,
            }),
        }
    }
}

impl Metered<Conn> {
    /// Waits for input holding no buffer, then reads it into one lent for the
    /// moment (`buffers`); 0 bytes means EOF. A TLS session waits in the read:
    /// its own record buffers dwarf the one lent here.
    pub async fn read_lent(&mut self, len: usize) -> io::Result<(Lent, usize)> {
        let (buf, n) = match self.get_mut() {
            Conn::Plain(stream) => stream.read_lent(len).await?,
            Conn::Tls(tls) => {
                let mut buf = buffers::lend(len);
                let n = tls.read(&mut buf).await?;
                (buf, n)
            }
            Conn::Gone => (buffers::lend(0), 0),
        };
        self.bytes_in += n as u64;
        Ok((buf, n))
    }
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the TLS handshake failed")
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Conn::Gone => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Conn::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Conn::Gone => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Conn::Gone => Poll::Ready(Ok(())),
        }
    }
}
