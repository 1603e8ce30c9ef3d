//! TLS termination for a client: the handshake under the listener's rustls
//! configuration, what it established (version, cipher, the verified client
//! certificate's names), and a TLS stream that can be peeked like a socket, so
//! the request line is read the same way with or without TLS.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tcpmux_proto::sniff::client_hello::{self, ClientHello};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;

use super::ahead::Ahead;
use super::peek::{peek_parsed, Parsed, HELLO_PEEK, MAX_HELLO};
use super::stream::{Peeked, Stream};
use crate::model::{certificate_names, ServerConfigs, TlsClient, ACME_TLS_ALPN};

/// A server-side TLS session over a client socket, with the plaintext read
/// ahead by `peek` kept for the next read.
pub(crate) struct TlsConn {
    stream: TlsStream<Stream>,
    /// Plaintext read ahead by a peek and not yet consumed.
    ahead: Ahead,
    /// The client ended the stream (close_notify, FIN or RST) behind `ahead`.
    ended: bool,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn").finish_non_exhaustive()
    }
}

/// A TLS version as OpenSSL, nginx (`$ssl_protocol`) and HAProxy's PROXY
/// headers write it: `TLSv1.3`, `TLSv1.2`.
fn version_name(version: rustls::ProtocolVersion) -> String {
    match version {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3".into(),
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2".into(),
        other => format!("0x{:04x}", u16::from(other)),
    }
}

/// A cipher suite by its IANA name (`TLS_AES_128_GCM_SHA256`,
/// `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256`): rustls names the TLS 1.3
/// ones `TLS13_...`; an unnamed one by its number.
fn cipher_name(suite: rustls::CipherSuite) -> String {
    match suite.as_str() {
        Some(name) => match name.strip_prefix("TLS13_") {
            Some(rest) => format!("TLS_{rest}"),
            None => name.to_owned(),
        },
        None => format!("0x{:04x}", u16::from(suite)),
    }
}

/// Runs the server handshake on `stream`, whose ClientHello has arrived
/// whole ([`wait_for_hello`], or detection's peek) and is `hello` as parsed:
/// the configuration for the name it asks for and whether it offers ACME's
/// protocol, the handshake itself on the TLS threads (`tls_threads.rs`),
/// which hands back an established session. The error says why it failed.
pub(crate) async fn accept(
    stream: Stream,
    configs: ServerConfigs,
    hello: Option<&ClientHello>,
) -> io::Result<(TlsConn, TlsClient)> {
    let name = hello.and_then(|h| h.server_name.as_deref());
    let acme = hello.is_some_and(|h| h.alpn.iter().any(|p| p.as_bytes() == ACME_TLS_ALPN));
    let config = Arc::clone(configs.for_hello(name, acme));
    let accept = tokio_rustls::TlsAcceptor::from(config).accept(stream);
    let stream = super::tls_threads::run(accept).await?;
    let session = stream.get_ref().1;
    let mut client = TlsClient {
        version: session
            .protocol_version()
            .map(version_name)
            .unwrap_or_default(),
        cipher: session
            .negotiated_cipher_suite()
            .map(|c| cipher_name(c.suite()))
            .unwrap_or_default(),
        server_name: session.server_name().map(str::to_ascii_lowercase),
        alpn: session
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned()),
        resumed: session.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        ..TlsClient::default()
    };
    // rustls has verified the chain; only the leaf's names are read here.
    if let Some(leaf) = session.peer_certificates().and_then(|c| c.first()) {
        (client.names, client.common_name) = certificate_names(leaf.as_ref());
    }
    Ok((
        TlsConn {
            stream,
            ahead: Ahead::default(),
            ended: false,
        },
        client,
    ))
}

/// Waits, peeking, until the client's whole ClientHello has arrived, for
/// the name and protocols that choose the configuration; `None` when the
/// client ended or sent something else first (the handshake will say what).
pub(super) async fn wait_for_hello(stream: &Stream) -> io::Result<Option<ClientHello>> {
    let mut buf = Vec::new();
    let parse = |bytes: &[u8]| client_hello::parse(bytes, MAX_HELLO);
    Ok(
        match peek_parsed(stream, &mut buf, HELLO_PEEK, parse).await? {
            Parsed::Done(hello) => Some(hello),
            Parsed::Failed(_) | Parsed::Full | Parsed::Ended => None,
        },
    )
}

impl TlsConn {
    /// Ends the connection the way its source ended: the TCP stream is
    /// shut, with no close_notify before it, so the client sees the cut
    /// (a truncated answer), not a clean end. Records already queued go
    /// first.
    pub(crate) async fn cut(&mut self) -> io::Result<()> {
        tokio::io::AsyncWriteExt::flush(&mut self.stream).await?;
        self.stream.get_ref().0.shutdown_write()
    }

    /// [`Stream::peek_beyond`] for plaintext: copies what has arrived into
    /// `buf` without consuming it, once more than `seen` bytes are waiting,
    /// or `buf` is full, or the client has ended (then `ended`). Records are
    /// read ahead into `ahead` as needed, so a caller that peeks again
    /// without consuming gets more, or the end, never the same bytes at once.
    pub(crate) async fn peek_beyond(&mut self, buf: &mut [u8], seen: usize) -> io::Result<Peeked> {
        let held = |ahead: &Ahead| ahead.pending().len();
        while held(&self.ahead) <= seen && held(&self.ahead) < buf.len() && !self.ended {
            let mut record = vec![0u8; buf.len() - held(&self.ahead)];
            let n = self.stream.read(&mut record).await?;
            self.ended = n == 0;
            self.ahead.extend(&record[..n]);
        }
        let pending = self.ahead.pending();
        let len = pending.len().min(buf.len());
        buf[..len].copy_from_slice(&pending[..len]);
        Ok(Peeked {
            len,
            ended: self.ended,
        })
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
            this.ahead.read_into(buf);
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
    /// from a cut one. The alert (and any record still queued) is sent held
    /// back with MSG_MORE, so the FIN joins it: one segment, and one wake-up
    /// of the client, instead of two.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let (socket, session) = this.stream.get_mut();
        // Idempotent: tokio-rustls's own shutdown below finds it sent.
        session.send_close_notify();
        while session.wants_write() {
            match session.write_tls(&mut BeforeFin { socket, cx }) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}

/// The client socket as rustls writes its last records to it: each write
/// held back (MSG_MORE) for the FIN sent next. A full socket is
/// `WouldBlock`, with the task set to wake when it can take more.
struct BeforeFin<'a, 'b> {
    socket: &'a Stream,
    cx: &'a mut Context<'b>,
}

impl io::Write for BeforeFin<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self.socket.poll_send_vectored(self.cx, bufs, true) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// TLS to a proxy's backend over `stream`, its certificate verified as
/// `tls` says (`backend_tls`).
pub(crate) async fn connect_backend(
    stream: Stream,
    tls: &crate::model::BackendTls,
) -> io::Result<tokio_rustls::client::TlsStream<Stream>> {
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.client));
    connector.connect(tls.server_name.clone(), stream).await
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// A rustls server and client that trust each other, for `localhost`.
    fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let der = made.cert.der().clone();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key)
            .expect("server config");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).expect("root");
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        (Arc::new(server), Arc::new(client))
    }

    /// A TLS session between a client and [`accept`] over loopback: the
    /// server's side and the client's, both past the handshake.
    async fn established() -> (
        TlsConn,
        tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    ) {
        let (server, client) = configs();
        handshake(server, client).await
    }

    /// [`established`] with these configurations.
    async fn handshake(
        server: Arc<rustls::ServerConfig>,
        client: Arc<rustls::ClientConfig>,
    ) -> (
        TlsConn,
        tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let connect = async {
            let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
            let connector = tokio_rustls::TlsConnector::from(client);
            connector.connect(name, tcp).await.expect("handshake")
        };
        let serve = async {
            let (tcp, _) = listener.accept().await.expect("accept");
            // As the daemon's listeners do: no Nagle to merge segments.
            tcp.set_nodelay(true).expect("TCP_NODELAY");
            let configs = ServerConfigs::new((*server).clone());
            accept(Stream::Tcp(tcp), configs, None)
                .await
                .expect("server handshake")
                .0
        };
        let (client, server) = tokio::join!(connect, serve);
        (server, client)
    }

    /// The server's first flight (ServerHello, ChangeCipherSpec, the
    /// encrypted rest) reaches the client as one segment: the client's
    /// socket receives the SYN-ACK, at most an ACK of its ClientHello, and
    /// the flight (five segments when each record left on its own).
    #[tokio::test]
    async fn the_servers_first_flight_is_one_segment() {
        let (mut server, client) = configs();
        // No tickets: they would follow the handshake as segments of their own.
        Arc::make_mut(&mut server).send_tls13_tickets = 0;
        let (_server, client) = handshake(server, client).await;
        let segments = crate::net::segments::segments(client.get_ref().0).received;
        assert!(segments <= 3, "{segments} segments reached the client");
    }

    /// close_notify and the FIN reach the client as one segment.
    #[tokio::test]
    async fn close_notify_and_the_fin_are_one_segment() {
        let (mut server, mut client) = established().await;
        let before = crate::net::segments::segments(client.get_ref().0).received;
        server.shutdown().await.expect("close_notify and FIN");
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.expect("a clean end");
        assert!(rest.is_empty());
        // rustls ends at close_notify: wait for the FIN on the socket itself.
        let fin = client.get_mut().0.read(&mut [0u8; 1]).await;
        assert_eq!(fin.expect("FIN"), 0);
        let segments = crate::net::segments::segments(client.get_ref().0).received - before;
        assert_eq!(segments, 1, "close_notify and FIN as {segments} segments");
    }

    /// A caller that peeks again without consuming waits for the next
    /// record, then for the end: never the same bytes at once (a loop on
    /// that would spin), whatever it did with them.
    #[tokio::test]
    async fn a_peek_without_consuming_waits_for_more_then_for_the_end() {
        let (mut conn, mut tls) = established().await;
        let peer = tokio::spawn(async move {
            let mut go = [0u8; 1];
            for part in [&b"ab"[..], b"cd"] {
                tls.write_all(part).await.expect("write");
                tls.flush().await.expect("flush");
                tls.read_exact(&mut go).await.expect("go-ahead");
            }
            tls.shutdown().await.expect("close_notify");
        });
        let mut buf = [0u8; 16];
        let first = conn.peek_beyond(&mut buf, 0).await.expect("peek");
        assert_eq!((first.len, first.ended), (2, false));
        conn.write_all(b"1").await.expect("go");
        let more = conn.peek_beyond(&mut buf, 2).await.expect("peek");
        assert_eq!((more.len, more.ended, &buf[..4]), (4, false, &b"abcd"[..]));
        conn.write_all(b"2").await.expect("go");
        let end = conn.peek_beyond(&mut buf, 4).await.expect("peek");
        assert_eq!((end.len, end.ended), (4, true));
        // What was peeked is still there to read, then the end.
        let mut read = Vec::new();
        conn.read_to_end(&mut read).await.expect("read");
        assert_eq!(read, b"abcd");
        peer.await.expect("peer");
    }

    /// An established TLS session waiting for input (an idle echo session)
    /// holds no lent buffer; its bytes still come whole once they arrive.
    #[tokio::test]
    async fn a_tls_session_waits_for_input_holding_no_buffer() {
        use std::future::Future;
        use std::task::Poll;

        use crate::net::buffers::lent_out;
        use crate::net::conn::Conn;
        use crate::net::stream::Metered;

        let (conn, mut tls) = established().await;
        let mut conn = Metered::new(Conn::Tls(Box::new(conn)));
        let before = lent_out();
        let read = conn.read_lent(16 * 1024);
        tokio::pin!(read);
        let first = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
        assert!(first.is_pending(), "nothing was sent yet");
        assert_eq!(lent_out(), before, "a waiting read holds no buffer");
        tls.write_all(b"hello").await.expect("write");
        tls.flush().await.expect("flush");
        let (buf, n) = read.await.expect("read");
        assert_eq!(&buf[..n], b"hello");
        drop(buf);
        assert_eq!(lent_out(), before);
    }

    #[test]
    fn versions_and_ciphers_have_their_usual_names() {
        use rustls::{CipherSuite, ProtocolVersion};
        assert_eq!(version_name(ProtocolVersion::TLSv1_3), "TLSv1.3");
        assert_eq!(version_name(ProtocolVersion::TLSv1_2), "TLSv1.2");
        assert_eq!(version_name(ProtocolVersion::Unknown(0x7f1c)), "0x7f1c");
        assert_eq!(
            cipher_name(CipherSuite::TLS13_AES_128_GCM_SHA256),
            "TLS_AES_128_GCM_SHA256"
        );
        assert_eq!(
            cipher_name(CipherSuite::TLS13_CHACHA20_POLY1305_SHA256),
            "TLS_CHACHA20_POLY1305_SHA256"
        );
        assert_eq!(
            cipher_name(CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
        );
        assert_eq!(cipher_name(CipherSuite::Unknown(0xfefe)), "0xfefe");
    }
}
