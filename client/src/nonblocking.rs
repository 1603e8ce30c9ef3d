//! Async twin of the blocking client, on tokio.

use std::io;
use std::path::Path;
use std::time::Duration;

use rustix::net::{recv, RecvFlags};
use tcpmux_proto::{encode_request, ReplyLine, ReplyParser, ReplyProgress, ServiceName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs, UnixStream};

use crate::{accepted, parse_name, Error, Options};

/// Async [`crate::connect`]: the stream is returned once the server answered `+`.
pub async fn connect_async<A: ToSocketAddrs>(
    addr: A,
    name: &str,
    options: &Options,
) -> Result<TcpStream, Error> {
    let name = parse_name(name)?;
    let connecting = TcpStream::connect(addr);
    let mut stream = within(options.connect_timeout, connecting)
        .await
        .map_err(|_| Error::Connect(io::ErrorKind::TimedOut.into()))?
        .map_err(Error::Connect)?;
    within(options.reply_timeout, negotiate_async(&mut stream, &name))
        .await
        .map_err(|_| Error::ReplyTimeout)??;
    Ok(stream)
}

/// Async [`crate::connect_unix`].
pub async fn connect_unix_async<P: AsRef<Path>>(
    path: P,
    name: &str,
    options: &Options,
) -> Result<UnixStream, Error> {
    let name = parse_name(name)?;
    let mut stream = UnixStream::connect(path).await.map_err(Error::Connect)?;
    within(options.reply_timeout, negotiate_async(&mut stream, &name))
        .await
        .map_err(|_| Error::ReplyTimeout)??;
    Ok(stream)
}

/// Async [`crate::negotiate`] on an already connected stream.
pub async fn negotiate_async<S: AsyncPeek + AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    name: &ServiceName,
) -> Result<ReplyLine, Error> {
    stream.write_all(&encode_request(name)).await?;
    let mut parser = ReplyParser::new();
    let mut buf = [0u8; 512];
    loop {
        let n = stream.peek_bytes(&mut buf).await?;
        if n == 0 {
            return Err(Error::NoReply);
        }
        match parser.feed(&buf[..n]) {
            ReplyProgress::NeedMore => {
                stream.read_exact(&mut buf[..n]).await?;
            }
            ReplyProgress::Done { reply, consumed } => {
                stream.read_exact(&mut buf[..consumed]).await?;
                return accepted(reply?);
            }
        }
    }
}

/// Streams whose pending input can be looked at without consuming it.
pub trait AsyncPeek {
    /// Copies pending input into `buf` without consuming it; 0 means EOF.
    #[allow(async_fn_in_trait)]
    async fn peek_bytes(&mut self, buf: &mut [u8]) -> io::Result<usize>;
}

impl AsyncPeek for TcpStream {
    async fn peek_bytes(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.peek(buf).await
    }
}

impl AsyncPeek for UnixStream {
    async fn peek_bytes(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let this = &*self;
        this.async_io(tokio::io::Interest::READABLE, || {
            recv(this, &mut *buf, RecvFlags::PEEK | RecvFlags::DONTWAIT)
                .map(|(n, _)| n)
                .map_err(io::Error::from)
        })
        .await
    }
}

/// `future`, bounded by `limit` when there is one.
pub(crate) async fn within<F: std::future::Future>(
    limit: Option<Duration>,
    future: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, future).await,
        None => Ok(future.await),
    }
}
