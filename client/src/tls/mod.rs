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
use tcpmux_proto::{encode_request, ReplyLine, ReplyParser, ReplyProgress};

use crate::{accepted, parse_name, Error, Options};

/// The ALPN protocol offered to the server.
pub const ALPN: &[u8] = b"tcpmux";

#[cfg(feature = "async-tls")]
mod nonblocking;
#[cfg(feature = "async-tls")]
pub use nonblocking::{connect_async, list_async, negotiate_async, AsyncTlsStream};

/// A blocking TLS connection to a service.
pub type TlsStream = StreamOwned<ClientConnection, TcpStream>;

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
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
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

pub(crate) fn parse_server_name(name: &str) -> Result<ServerName<'static>, Error> {
    ServerName::try_from(name.to_owned())
        .map_err(|_| Error::Tls(format!("{name:?} is not a valid server name")))
}

/// A failed handshake as the library reports it: a certificate the client
/// refused is [`Error::Certificate`], anything else [`Error::Tls`].
pub(crate) fn handshake_error(e: io::Error) -> Error {
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
    queue_first(&mut session, &encode_request(&name))?;
    while session.is_handshaking() {
        session.complete_io(&mut socket).map_err(handshake_error)?;
    }
    let mut stream = StreamOwned::new(session, socket);
    // The client's Finished and the request, in one write.
    stream.flush()?;
    let reply = read_status_line(|byte| stream.read(byte))?;
    stream.sock.set_read_timeout(None)?;
    accepted(reply)?;
    Ok(stream)
}

/// Queues `request` in a session still to shake hands: rustls sends it
/// right behind the client's Finished, in the same segment (one packet and
/// one wake-up of the server fewer than a write after the handshake), and
/// never before the server's certificate has been verified.
fn queue_first(session: &mut ClientConnection, request: &[u8]) -> io::Result<()> {
    session.writer().write_all(request)
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
