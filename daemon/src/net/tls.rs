//! TLS termination for a client: the handshake under the listener's rustls
//! configuration, what it established (version, cipher, the verified client
//! certificate's names), and a TLS stream that can be peeked like a socket, so
//! the request line is read the same way with or without TLS.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;

use super::stream::Stream;
use crate::model::TlsClient;

/// A server-side TLS session over a client socket, with the plaintext read
/// ahead by `peek` kept for the next read.
pub struct TlsConn {
    stream: TlsStream<Stream>,
    ahead: Vec<u8>,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn").finish_non_exhaustive()
    }
}

/// Runs the server handshake on `stream`, its computation on the handshake
/// pool (`handshakes.rs`); the error says why it failed.
pub async fn accept(
    stream: Stream,
    config: Arc<rustls::ServerConfig>,
) -> io::Result<(TlsConn, TlsClient)> {
    // Even the session's setup (rustls's buffers) is left to the pool.
    let handshake = async move { tokio_rustls::TlsAcceptor::from(config).accept(stream).await };
    let stream = super::handshakes::run(handshake).await?;
    let session = stream.get_ref().1;
    let mut client = TlsClient {
        version: match session.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3".into(),
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2".into(),
            other => format!("{other:?}"),
        },
        cipher: session
            .negotiated_cipher_suite()
            .map(|c| format!("{:?}", c.suite()))
            .unwrap_or_default(),
        ..TlsClient::default()
    };
    // rustls has verified the chain; only the leaf's names are read here.
    if let Some(leaf) = session.peer_certificates().and_then(|c| c.first()) {
        (client.names, client.common_name) = certificate_names(leaf.as_ref());
    }
    Ok((
        TlsConn {
            stream,
            ahead: Vec::new(),
        },
        client,
    ))
}

/// A certificate's DNS subject alternative names (or its subject CN when it
/// has none), and its CN.
pub fn certificate_names(der: &[u8]) -> (Vec<String>, Option<String>) {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return (Vec::new(), None);
    };
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned);
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                names.push((*dns).to_owned());
            }
        }
    }
    if names.is_empty() {
        names.extend(common_name.clone());
    }
    (names, common_name)
}

impl TlsConn {
    /// Copies plaintext that has arrived into `buf` without consuming it,
    /// reading one record ahead if none is waiting; 0 means the end.
    pub async fn peek(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.ahead.is_empty() {
            let mut record = vec![0u8; buf.len().max(1)];
            let n = self.stream.read(&mut record).await?;
            self.ahead.extend_from_slice(&record[..n]);
        }
        let n = self.ahead.len().min(buf.len());
        buf[..n].copy_from_slice(&self.ahead[..n]);
        Ok(n)
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.ahead.is_empty() {
            let n = this.ahead.len().min(buf.remaining());
            buf.put_slice(&this.ahead[..n]);
            this.ahead.drain(..n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    /// Sends close_notify, then FIN: the client can tell a complete answer
    /// from a cut one.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
