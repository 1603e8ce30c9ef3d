//! TCPMUX over TLS (the `tls` feature): the TLS handshake first, then the
//! ordinary negotiation inside it. The server's certificate is checked against
//! `--ca` or, without one, the system's trust store (rustls-native-certs reads
//! the same files as openssl and curl, so a CA the administrator installed is
//! trusted here too). A client certificate is sent when the server asks.
//!
//! ```no_run
//! use std::io::Read;
//! let tls = tcpmux::tls::TlsOptions::default();
//! let mut stream = tcpmux::tls::connect(("mux.example.com", 41397), "mux.example.com", "daytime", &tls, &Default::default())?;
//! let mut text = String::new();
//! stream.read_to_string(&mut text)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use tcpmux_proto::{encode_request, ReplyLine, ReplyParser, ReplyProgress, ServiceName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::{accepted, help_lines, parse_name, within, Error, Options};

/// The ALPN protocol offered to the server.
pub const ALPN: &[u8] = b"tcpmux";

/// A blocking TLS connection to a service.
pub type TlsStream = StreamOwned<ClientConnection, TcpStream>;
/// An async TLS connection to a service.
pub type AsyncTlsStream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// Whom to trust and what to present.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// PEM file of the CA(s) the server's certificate must chain to; `None`:
    /// the system's trust store.
    pub ca: Option<PathBuf>,
    /// PEM certificate chain and key to present when the server asks.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl TlsOptions {
    /// The rustls configuration these options describe.
    pub fn config(&self) -> Result<Arc<ClientConfig>, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        match &self.ca {
            Some(ca) => {
                for cert in certificates(ca)? {
                    roots
                        .add(cert)
                        .map_err(|e| Error::Tls(format!("{}: {e}", ca.display())))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(Error::Tls(
                        "the system's trust store has no CA certificate (install ca-certificates, or give --ca)".into(),
                    ));
                }
            }
        }
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(e.to_string()))?
            .with_root_certificates(roots);
        let mut config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = certificates(cert)?;
                let key_pem = read(key)?;
                let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
                    .map_err(|e| Error::Tls(format!("{}: {e}", key.display())))?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| Error::Tls(format!("{}: {e}", cert.display())))?
            }
        };
        config.alpn_protocols = vec![ALPN.to_vec()];
        Ok(Arc::new(config))
    }
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::Tls(format!("{}: {e}", path.display())))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Tls(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Tls(format!(
            "{}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

fn parse_server_name(name: &str) -> Result<ServerName<'static>, Error> {
    ServerName::try_from(name.to_owned())
        .map_err(|_| Error::Tls(format!("{name:?} is not a valid server name")))
}

/// A failed handshake as the library reports it: a certificate the client
/// refused is [`Error::Certificate`], anything else [`Error::Tls`].
fn handshake_error(e: io::Error) -> Error {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::InvalidCertificate(why)) => Error::Certificate(why.to_string()),
        Some(other) => Error::Tls(other.to_string()),
        None if e.kind() == io::ErrorKind::UnexpectedEof => {
            Error::Tls("the server closed the connection during the TLS handshake".into())
        }
        None => Error::Io(e),
    }
}

/// Connects to `addr`, checks its certificate for `server_name`, and asks for
/// the service `name` inside TLS. The stream is returned at the service's first
/// byte.
pub fn connect<A: ToSocketAddrs>(
    addr: A,
    server_name: &str,
    name: &str,
    tls: &TlsOptions,
    options: &Options,
) -> Result<TlsStream, Error> {
    let name = parse_name(name)?;
    let config = tls.config()?;
    let mut socket = crate::open(addr, options)?;
    socket.set_read_timeout(options.reply_timeout)?;
    let mut session = ClientConnection::new(config, parse_server_name(server_name)?)
        .map_err(|e| Error::Tls(e.to_string()))?;
    while session.is_handshaking() {
        session.complete_io(&mut socket).map_err(handshake_error)?;
    }
    let mut stream = StreamOwned::new(session, socket);
    stream.write_all(&encode_request(&name))?;
    stream.flush()?;
    let reply = read_status_line(|byte| stream.read(byte))?;
    stream.sock.set_read_timeout(None)?;
    accepted(reply)?;
    Ok(stream)
}

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
        let mut stream = handshake_async(socket, server_name, tls).await?;
        negotiate_async(&mut stream, &name).await?;
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
        let mut stream = handshake_async(socket, server_name, tls).await?;
        // HELP has no status line: the names, then the server's close.
        stream.write_all(b"help\r\n").await?;
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

/// The client handshake on `socket`, the certificate checked for `server_name`.
async fn handshake_async(
    socket: tokio::net::TcpStream,
    server_name: &str,
    tls: &TlsOptions,
) -> Result<AsyncTlsStream, Error> {
    let connector = tokio_rustls::TlsConnector::from(tls.config()?);
    connector
        .connect(parse_server_name(server_name)?, socket)
        .await
        .map_err(handshake_error)
}

/// Sends the request inside an established TLS stream and consumes exactly
/// the status line.
pub async fn negotiate_async<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    name: &ServiceName,
) -> Result<ReplyLine, Error> {
    stream.write_all(&encode_request(name)).await?;
    stream.flush().await?;
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

/// The status line, read a byte at a time through `read`.
fn read_status_line(
    mut read: impl FnMut(&mut [u8]) -> io::Result<usize>,
) -> Result<ReplyLine, Error> {
    let mut parser = ReplyParser::new();
    let mut byte = [0u8; 1];
    loop {
        match read(&mut byte) {
            Ok(0) => return Err(Error::NoReply),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Error::ReplyTimeout)
            }
            Err(e) => return Err(Error::Io(e)),
        }
        if let ReplyProgress::Done { reply, .. } = parser.feed(&byte) {
            return reply.map_err(Error::from);
        }
    }
}
