//! The client's byte stream as sessions and services see it: a plain socket,
//! or a TLS session over one, either perhaps behind bytes the negotiation read
//! past its line. The socket shortcuts (splice, sendfile, passing the
//! descriptor) need the plain kind with nothing read ahead; otherwise the
//! bytes go through the daemon, in user space.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tcpmux_proto::sniff::client_hello::ClientHello;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::ahead::Ahead;
use super::buffers::{self, Lent};
use super::stream::{Metered, Peeked, Stream};
use super::tls::{self, TlsConn};
use crate::model::{ServerConfigs, TlsClient};

/// A client connection.
#[derive(Debug)]
pub(crate) enum Conn {
    Plain(Stream),
    Tls(Box<TlsConn>),
    /// Bytes read past the request line (a client that did not wait for
    /// the `+`): they are read first, then the connection they came on.
    Early(Box<Early>),
    /// Consumed by a TLS handshake that failed or was cut short.
    Gone,
}

/// Input already read from a connection, ahead of what is still in it.
#[derive(Debug)]
pub(crate) struct Early {
    bytes: Ahead,
    /// A plain or TLS connection: never `Early` itself.
    then: Conn,
}

impl Conn {
    /// The socket itself, when the client speaks plaintext on it and every
    /// byte it sent is still there.
    pub(crate) fn plain(&self) -> Option<&Stream> {
        match self {
            Conn::Plain(stream) => Some(stream),
            Conn::Tls(_) | Conn::Early(_) | Conn::Gone => None,
        }
    }

    /// The plaintext socket under any bytes read ahead, for writing to it
    /// directly (a status line sent before a handoff).
    pub(crate) fn socket(&self) -> Option<&Stream> {
        match self {
            Conn::Early(early) => early.then.plain(),
            other => other.plain(),
        }
    }

    /// Passes on a cut (a backend that ended its TLS without close_notify):
    /// a TLS client's connection ends with no close_notify (true); a plain
    /// one has nothing else to say than its FIN, which the graceful close
    /// sends (false).
    pub(crate) async fn cut(&mut self) -> bool {
        match self {
            Conn::Tls(tls) => tls.cut().await.is_ok(),
            Conn::Early(early) => Box::pin(early.then.cut()).await,
            Conn::Plain(_) | Conn::Gone => false,
        }
    }

    /// Puts `bytes`, read past the negotiation, back in front of the
    /// connection's input; a `Vec` is kept as it is, not copied.
    pub(crate) fn unread(&mut self, bytes: impl Into<Vec<u8>>) {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return;
        }
        let then = std::mem::replace(self, Conn::Gone);
        *self = match then {
            Conn::Early(mut early) => {
                early.bytes.put_back(bytes);
                Conn::Early(early)
            }
            then => Conn::Early(Box::new(Early {
                bytes: Ahead::new(bytes),
                then,
            })),
        };
    }

    /// Once the bytes read ahead have all been read again, the connection
    /// is the one they came on.
    fn settle(&mut self) {
        if matches!(self, Conn::Early(early) if early.bytes.is_empty()) {
            drop(self.take_early());
        }
    }

    /// Takes the bytes read ahead, leaving the connection they came on
    /// (whose socket a relay may then splice).
    pub(crate) fn take_early(&mut self) -> Vec<u8> {
        match std::mem::replace(self, Conn::Gone) {
            Conn::Early(early) => {
                let Early { bytes, then } = *early;
                *self = then;
                bytes.into_pending()
            }
            other => {
                *self = other;
                Vec::new()
            }
        }
    }

    /// Turns a plain connection into a TLS one: the server handshake, once
    /// the ClientHello is whole (`hello`, when detection has already parsed
    /// it).
    pub(crate) async fn start_tls(
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
    pub(crate) async fn peek_beyond(&mut self, buf: &mut [u8], seen: usize) -> io::Result<Peeked> {
        match self {
            Conn::Plain(stream) => stream.peek_beyond(buf, seen).await,
            Conn::Tls(tls) => tls.peek_beyond(buf, seen).await,
            Conn::Early(early) => early.peek_beyond(buf, seen).await,
            Conn::Gone => Ok(Peeked {
                len: 0,
                ended: true,
            }),
        }
    }
}

impl Early {
    /// The bytes read ahead, then what the connection has beyond them.
    async fn peek_beyond(&mut self, buf: &mut [u8], seen: usize) -> io::Result<Peeked> {
        let pending = self.bytes.pending();
        let n = pending.len().min(buf.len());
        buf[..n].copy_from_slice(&pending[..n]);
        if n > seen || n == buf.len() {
            return Ok(Peeked {
                len: n,
                ended: false,
            });
        }
        let (rest, seen) = (&mut buf[n..], seen - n);
        let beyond = match &mut self.then {
            Conn::Plain(stream) => stream.peek_beyond(rest, seen).await?,
            Conn::Tls(tls) => tls.peek_beyond(rest, seen).await?,
            Conn::Early(_) | Conn::Gone => Peeked {
                len: 0,
                ended: true,
            },
        };
        Ok(Peeked {
            len: n + beyond.len,
            ended: beyond.ended,
        })
    }
}

impl Metered<Conn> {
    /// Waits for input holding no buffer, then reads it into one lent for the
    /// moment (`buffers`); 0 bytes means EOF.
    pub(crate) async fn read_lent(&mut self, len: usize) -> io::Result<(Lent, usize)> {
        let conn = self.get_mut();
        conn.settle();
        let (buf, n) = match conn {
            Conn::Plain(stream) => stream.read_lent(len).await?,
            // Lent for each poll only: waiting, a session holds no buffer
            // (it was 16 of an idle TLS echo session's 29 KB).
            Conn::Tls(tls) => buffers::read_lent(tls.as_mut(), len).await?,
            Conn::Early(early) => {
                let mut buf = buffers::lend(len);
                let mut filled = ReadBuf::new(&mut buf);
                early.bytes.read_into(&mut filled);
                let n = filled.filled().len();
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
        let this = self.get_mut();
        this.settle();
        match this {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Conn::Early(early) => {
                early.bytes.read_into(buf);
                // At once, so that a socket shortcut sees the plain socket
                // as soon as the last byte read ahead is read again.
                this.settle();
                Poll::Ready(Ok(()))
            }
            Conn::Gone => Poll::Ready(Ok(())),
        }
    }
}

impl Conn {
    /// Where a write goes: the plain or TLS connection (behind bytes read
    /// ahead, which only reads see), or nowhere once the handshake failed.
    /// Each poll below forwards to it, so the kinds are told apart once.
    fn writer(&mut self) -> Option<Pin<&mut (dyn AsyncWrite + Send + Unpin)>> {
        match self {
            Conn::Plain(s) => Some(Pin::new(s)),
            Conn::Tls(s) => Some(Pin::new(s.as_mut())),
            Conn::Early(early) => early.then.writer(),
            Conn::Gone => None,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().writer() {
            Some(writer) => writer.poll_write(cx, buf),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut()
            .writer()
            .map_or(Poll::Ready(Ok(())), |writer| writer.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut()
            .writer()
            .map_or(Poll::Ready(Ok(())), |writer| writer.poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn pair() -> (Conn, tokio::net::UnixStream) {
        let (ours, theirs) = tokio::net::UnixStream::pair().expect("socketpair");
        (Conn::Plain(Stream::Unix(ours)), theirs)
    }

    #[tokio::test]
    async fn bytes_read_ahead_come_first_then_the_socket_is_plain_again() {
        let (mut conn, mut client) = pair();
        conn.unread(b"ahead ");
        assert!(conn.plain().is_none() && conn.socket().is_some());
        client.write_all(b"behind").await.unwrap();
        client.shutdown().await.unwrap();
        let mut all = Vec::new();
        conn.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"ahead behind");
        assert!(conn.plain().is_some(), "{conn:?}");
    }

    #[tokio::test]
    async fn a_peek_sees_the_bytes_ahead_and_waits_only_beyond_them() {
        let (mut conn, mut client) = pair();
        conn.unread(b"abc");
        let mut buf = [0u8; 16];
        let peeked = conn.peek_beyond(&mut buf, 0).await.unwrap();
        assert_eq!((peeked.len, &buf[..3]), (3, &b"abc"[..]));
        client.write_all(b"de").await.unwrap();
        let peeked = conn.peek_beyond(&mut buf, 3).await.unwrap();
        assert_eq!(&buf[..peeked.len], b"abcde");
        drop(client);
        let peeked = conn.peek_beyond(&mut buf, 5).await.unwrap();
        assert!(peeked.ended && peeked.len == 5, "{peeked:?}");
        // Nothing was consumed by peeking.
        let mut all = Vec::new();
        conn.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"abcde");
    }

    #[tokio::test]
    async fn taken_early_bytes_leave_the_socket_and_partial_reads_keep_order() {
        let (mut conn, _client) = pair();
        conn.unread(b"0123456789");
        let mut two = [0u8; 2];
        conn.read_exact(&mut two).await.unwrap();
        assert_eq!(&two, b"01");
        conn.unread(b"x");
        assert_eq!(conn.take_early(), b"x23456789");
        assert!(conn.plain().is_some());
        assert!(conn.take_early().is_empty());
    }
}
