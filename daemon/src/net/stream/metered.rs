//! A stream's bytes counted as they pass, for the connection's log line.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Counts the bytes that pass through a stream, for the per-connection log line.
#[derive(Debug)]
pub(crate) struct Metered<S> {
    inner: S,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Both directions have already ended (the client's EOF read, ours
    /// sent, as a relay that ran to its end leaves them): a graceful close
    /// has nothing left to send or drain.
    pub finished: bool,
}

impl<S> Metered<S> {
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            bytes_in: 0,
            bytes_out: 0,
            finished: false,
        }
    }

    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    pub(crate) fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.bytes_in += (buf.filled().len() - before) as u64;
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = poll {
            this.bytes_out += n as u64;
        }
        poll
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
