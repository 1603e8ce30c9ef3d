//! TCPMUX over TLS on tokio (the `async-tls` feature): the async twins of
//! [`super::connect`] and HELP.

use std::io;

use tcpmux_proto::{encode_request, ReplyLine, ReplyParser, ReplyProgress, ServiceName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{handshake_error, parse_server_name, TlsOptions};
use crate::nonblocking::within;
use crate::{accepted, help_lines, parse_name, Error, Options};

/// An async TLS connection to a service.
pub type AsyncTlsStream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// Async [`connect`], on tokio.
pub async fn connect_async<A: tokio::net::ToSocketAddrs>(
    addr: A,
    server_name: &str,
    name: &str,
    tls: &TlsOptions,
    options: &Options,
) -> Result<AsyncTlsStream, Error> {
    let name = parse_name(name)?;
    let socket = open_async(addr, options).await?;
    let negotiation = async {
        let mut stream = handshake_async(socket, server_name, tls, &encode_request(&name)).await?;
        read_reply_async(&mut stream).await?;
        Ok::<_, Error>(stream)
    };
    within(options.reply_timeout, negotiation)
        .await
        .map_err(|_| Error::ReplyTimeout)?
}

/// The server's service names (HELP) over TLS.
pub async fn list_async<A: tokio::net::ToSocketAddrs>(
    addr: A,
    server_name: &str,
    tls: &TlsOptions,
    options: &Options,
) -> Result<Vec<String>, Error> {
    let socket = open_async(addr, options).await?;
    let help = async {
        // HELP has no status line: the names, then the server's close.
        let mut stream = handshake_async(socket, server_name, tls, b"help\r\n").await?;
        let mut text = Vec::new();
        stream.read_to_end(&mut text).await?;
        Ok::<_, Error>(help_lines(&text))
    };
    within(options.reply_timeout, help)
        .await
        .map_err(|_| Error::ReplyTimeout)?
}

/// A TCP connection to `addr`, within the connect timeout.
async fn open_async<A: tokio::net::ToSocketAddrs>(
    addr: A,
    options: &Options,
) -> Result<tokio::net::TcpStream, Error> {
    let socket = within(
        options.connect_timeout,
        tokio::net::TcpStream::connect(addr),
    )
    .await
    .map_err(|_| Error::Connect(io::ErrorKind::TimedOut.into()))?
    .map_err(Error::Connect)?;
    socket.set_nodelay(true)?;
    Ok(socket)
}

/// The client handshake on `socket`, the certificate checked for
/// `server_name`, with `first` queued before it ([`super::queue_first`]):
/// it leaves with the client's Finished.
async fn handshake_async(
    socket: tokio::net::TcpStream,
    server_name: &str,
    tls: &TlsOptions,
    first: &[u8],
) -> Result<AsyncTlsStream, Error> {
    let connector = tokio_rustls::TlsConnector::from(tls.config()?);
    let mut queued = Ok(());
    let handshake = connector.connect_with(parse_server_name(server_name)?, socket, |session| {
        queued = super::queue_first(session, first);
    });
    queued?;
    handshake.await.map_err(handshake_error)
}

/// Sends the request inside an established TLS stream and consumes exactly
/// the status line.
pub async fn negotiate_async<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    name: &ServiceName,
) -> Result<ReplyLine, Error> {
    stream.write_all(&encode_request(name)).await?;
    stream.flush().await?;
    read_reply_async(stream).await
}

/// Consumes exactly the status line, and says whether it accepts.
async fn read_reply_async<S: AsyncRead + Unpin>(stream: &mut S) -> Result<ReplyLine, Error> {
    let mut parser = ReplyParser::new();
    let mut byte = [0u8; 1];
    loop {
        // One byte at a time from the decrypted buffer, so nothing behind the
        // line is taken from the caller; no system call per byte.
        if stream.read(&mut byte).await? == 0 {
            return Err(Error::NoReply);
        }
        if let ReplyProgress::Done { reply, .. } = parser.feed(&byte) {
            return accepted(reply?);
        }
    }
}
