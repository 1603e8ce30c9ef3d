//! The start of a connection: a PROXY header from a trusted upstream, the
//! client's address admitted, then on a detecting listener the protocol the
//! first bytes begin (`detect.rs`), on a TLS listener the handshake and the
//! routes it decides, else the TCPMUX request line. A PROXY header and
//! detection peek, consuming only what is theirs; the request line is read,
//! and what a read took past it is put back for the service.

use std::io;

use tcpmux_proto::{Decision, Progress, RequestParser, MAX_NAME_LEN};
use tokio::io::AsyncReadExt;

use super::detect::{self, Detected};
use super::opening::{Negotiated, Reply};
use crate::admission::Refusal;
use crate::model::{ClientInfo, Detect, Peer, Routed, ServerConfigs, TlsClient, ACME_TLS_ALPN};
use crate::net::conn::Conn;
use crate::net::proxy_protocol::{self, Announced};
use crate::net::stream::Metered;
use crate::registry::Registry;

/// Read size during negotiation: a whole name and its CRLF fit. What the
/// parser does not claim goes back to the service, whatever it is: a
/// built-in, a relay, or a program exec'd on it (`Conn::Early`).
const PEEK: usize = MAX_NAME_LEN + 2;

/// Consumes the PROXY header if one is expected, admits the client's address,
/// detects the protocol on a detecting listener, then reads the request
/// line; whatever a read took past it stays the service's.
pub(super) async fn negotiate(
    conn: &mut Metered<Conn>,
    expect_header: bool,
    client: &mut ClientInfo,
    admit: impl FnOnce(&Peer) -> Result<(), Refusal>,
    tls: Option<ServerConfigs>,
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
    // Detection peeks in clear, before any handshake: on a listener with
    // `tls` too, it passes through the names services' `sni` take, and
    // leaves every other TLS client to the handshake below, with its
    // ClientHello parsed.
    let mut hello = None;
    if let Some((options, socket)) = detecting.zip(conn.get_ref().plain()) {
        let terminating = (tls.is_some(), &mut client.sni);
        match detect::detect(socket, options, registry, terminating).await? {
            Detected::Done(decided) => return Ok(decided),
            Detected::Terminate(parsed) => hello = Some(parsed),
            Detected::Tcpmux if tls.is_some() => {
                return Ok(in_clear(read_request_line(conn).await?))
            }
            Detected::Tcpmux => return read_request_line(conn).await,
        }
    }
    // After the PROXY header (an upstream sends it in clear) and admission (a
    // refused address costs no handshake); under the same timeout.
    if let Some(config) = tls {
        // Boxed: the handshake's state would otherwise be sized into every
        // session's negotiation, TLS or not, for as long as it waits.
        let established = match Box::pin(conn.get_mut().start_tls(config, hello)).await {
            Ok(established) => client.tls.insert(established),
            Err(e) => return Ok(Negotiated::TlsFailed(e)),
        };
        if let Some(routed) = routed_by_tls(established, registry) {
            return Ok(routed);
        }
    }
    read_request_line(conn).await
}

/// The service a terminated client goes to without a TCPMUX line: the one
/// whose `sni_terminate` takes the name it asked for, else the one for the
/// protocol other than TCPMUX its handshake agreed on.
fn routed_by_tls(established: &TlsClient, registry: &Registry) -> Option<Negotiated> {
    // An ACME server validating TLS-ALPN-01: the handshake was the answer.
    if established.alpn.as_deref().map(str::as_bytes) == Some(ACME_TLS_ALPN) {
        return Some(Negotiated::Closed);
    }
    let name = established.server_name.as_deref();
    if let Some(service) = name.and_then(|name| registry.by_terminated_sni(name)) {
        return Some(Negotiated::Routed(
            service.name.clone(),
            Routed::SniTerminate,
        ));
    }
    let service = registry.by_negotiated(name, established.alpn.as_deref()?)?;
    Some(Negotiated::Routed(service.name.clone(), Routed::Alpn))
}

/// A plaintext request line on a listener with `detect` and `tls`: TCPMUX
/// there runs inside TLS, where `client_auth` and the listener's
/// certificate apply, so a name in clear is refused, saying how to connect.
fn in_clear(negotiated: Negotiated) -> Negotiated {
    match negotiated {
        Negotiated::Decided(Decision::Service(_) | Decision::Help) => Negotiated::unrouted(
            Routed::Tcpmux,
            "TCPMUX on this port runs inside TLS: connect with TLS (tcpmux --tls)".into(),
            Reply::Line,
        ),
        other => other,
    }
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

/// Reads the request line. One read usually brings it whole and nothing
/// more, since clients wait for the `+`; bytes read past it (a client that did
/// not wait) are put back in front of the connection for the service
/// (`Conn::unread`).
async fn read_request_line(conn: &mut Metered<Conn>) -> io::Result<Negotiated> {
    let mut scratch = [0u8; PEEK];
    let mut parser = RequestParser::new();
    let mut fed = false;
    loop {
        let n = conn.get_mut().read(&mut scratch).await?;
        if n == 0 {
            // Half-closed mid-name: the client can still read why nothing follows.
            return Ok(match fed {
                true => Negotiated::Incomplete("request line", Routed::Tcpmux),
                false => Negotiated::Closed,
            });
        }
        fed = true;
        match parser.feed(&scratch[..n]) {
            Progress::NeedMore => conn.bytes_in += n as u64,
            Progress::Decided { decision, consumed } => {
                conn.bytes_in += consumed as u64;
                conn.get_mut().unread(&scratch[consumed..n]);
                return Ok(Negotiated::Decided(decision));
            }
        }
    }
}
