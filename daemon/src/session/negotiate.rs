//! The start of a connection: a PROXY header from a trusted upstream, the
//! client's address admitted, then on a detecting listener the protocol the
//! first bytes begin (`detect.rs`), else the TCPMUX request line. Everything is
//! peeked first and only what belongs to the negotiation is consumed.

use std::io;
use std::sync::Arc;

use tcpmux_proto::{Progress, RequestParser, MAX_NAME_LEN};
use tokio::io::AsyncReadExt;

use super::detect;
use super::opening::Negotiated;
use crate::admission::Refusal;
use crate::model::{ClientInfo, Detect, Peer, Routed};
use crate::net::conn::Conn;
use crate::net::proxy_protocol::{self, Announced};
use crate::net::stream::Metered;
use crate::registry::Registry;

/// Peek size during negotiation: a whole name and its CRLF fit. Only what the
/// parser claims is consumed, so bytes behind the request line stay in the socket
/// for the service, whatever it is: a built-in, a relay, or a program exec'd on it.
const PEEK: usize = MAX_NAME_LEN + 2;

/// Consumes the PROXY header if one is expected, admits the client's address,
/// detects the protocol on a detecting listener, then consumes the request
/// line, and not a byte more: every read is a peek first, then a read of
/// exactly what the parser claimed.
pub(super) async fn negotiate(
    conn: &mut Metered<Conn>,
    expect_header: bool,
    client: &mut ClientInfo,
    admit: impl FnOnce(&Peer) -> Result<(), Refusal>,
    tls: Option<Arc<rustls::ServerConfig>>,
    (detecting, registry): (Option<&Detect>, &Registry),
) -> io::Result<Negotiated> {
    if expect_header {
        if let Some(stop) = read_proxy_header(conn, client).await? {
            return Ok(stop);
        }
    }
    if let Err(refusal) = admit(&client.peer) {
        return Ok(Negotiated::NotAdmitted(refusal));
    }
    // After the PROXY header (an upstream sends it in clear) and admission (a
    // refused address costs no handshake); under the same timeout.
    if let Some(config) = tls {
        let established = match conn.get_mut().start_tls(config).await {
            Ok(established) => client.tls.insert(established),
            Err(e) => return Ok(Negotiated::TlsFailed(e)),
        };
        // A protocol other than TCPMUX was agreed: it names the service.
        if let Some(protocol) = established.alpn.as_deref() {
            if let Some(service) =
                registry.by_negotiated(established.server_name.as_deref(), protocol)
            {
                return Ok(Negotiated::Routed(service.name.clone(), Routed::Alpn));
            }
        }
    }
    // Detection peeks at the socket; config keeps it off TLS listeners.
    if let Some((options, socket)) = detecting.zip(conn.get_ref().plain()) {
        if let Some(decided) = detect::detect(socket, options, registry, &mut client.sni).await? {
            return Ok(decided);
        }
    }
    read_request_line(conn).await
}

/// Consumes a PROXY header and puts what it announces in `client`; returns
/// how the negotiation stops if it must.
async fn read_proxy_header(
    conn: &mut Metered<Conn>,
    client: &mut ClientInfo,
) -> io::Result<Option<Negotiated>> {
    let mut scratch = [0u8; PEEK];
    // Until the header is complete, every byte seen belongs to it.
    let mut header = Vec::new();
    loop {
        // Everything peeked before was consumed: wait for anything new.
        let n = conn.get_mut().peek_beyond(&mut scratch, 0).await?.len;
        if n == 0 && !header.is_empty() {
            return Ok(Some(Negotiated::Incomplete(
                "PROXY protocol header",
                Routed::Tcpmux,
            )));
        }
        if n == 0 {
            return Ok(Some(Negotiated::Closed));
        }
        let seen = header.len();
        header.extend_from_slice(&scratch[..n]);
        match proxy_protocol::decode(&header) {
            Ok(None) => conn.read_exact(&mut scratch[..n]).await.map(drop)?,
            Ok(Some((announced, length))) => {
                conn.read_exact(&mut scratch[..length - seen]).await?;
                if let Announced::Proxied {
                    source,
                    destination,
                } = announced
                {
                    client.peer = Peer::Tcp(source);
                    client.local = Some(destination);
                }
                return Ok(None);
            }
            Err(e) => return Ok(Some(Negotiated::BadProxyHeader(e))),
        }
    }
}

async fn read_request_line(conn: &mut Metered<Conn>) -> io::Result<Negotiated> {
    let mut scratch = [0u8; PEEK];
    let mut parser = RequestParser::new();
    let mut fed = false;
    loop {
        // Everything peeked before was consumed: wait for anything new.
        let n = conn.get_mut().peek_beyond(&mut scratch, 0).await?.len;
        if n == 0 {
            // Half-closed mid-name: the client can still read why nothing follows.
            return Ok(match fed {
                true => Negotiated::Incomplete("request line", Routed::Tcpmux),
                false => Negotiated::Closed,
            });
        }
        fed = true;
        match parser.feed(&scratch[..n]) {
            Progress::NeedMore => conn.read_exact(&mut scratch[..n]).await.map(drop)?,
            Progress::Decided { decision, consumed } => {
                conn.read_exact(&mut scratch[..consumed]).await?;
                return Ok(Negotiated::Decided(decision));
            }
        }
    }
}
