//! One client connection, start to end: (from a trusted upstream, the PROXY
//! header), the request line, the answer, the service, a graceful close, and the
//! one log line that tells what happened.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use tcpmux_proto::{Decision, Progress, RequestParser, MAX_NAME_LEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::admission::{own_connections, Refusal};
use crate::model::{ClientInfo, ListenOptions, Peer, Service};
use crate::net::close::close_gracefully;
use crate::net::proxy_protocol::{self, Announced, HeaderError};
use crate::net::stream::{Metered, Stream};
use crate::outcome::Outcome;
use crate::services::{self, help, refuse};
use crate::state::{Settings, Shared};

/// Peek size during negotiation: a whole name and its CRLF fit. Only what the
/// parser claims is consumed, so bytes behind the request line stay in the socket
/// for the service, whatever it is: a built-in, a relay, or a program exec'd on it.
const PEEK: usize = MAX_NAME_LEN + 2;

/// What reading the start of the connection produced.
enum Negotiated {
    /// The request line (and any PROXY header) has been consumed, nothing more.
    Decided(Decision),
    BadProxyHeader(HeaderError),
    /// EOF in the middle of what is named (the request line, the PROXY header).
    Incomplete(&'static str),
    Closed,
    /// A daemon-wide or per-address limit refused the connection.
    NotAdmitted(Refusal),
}

/// Serves one accepted connection to its end, then logs and counts it.
pub async fn handle(shared: Arc<Shared>, stream: Stream, peer: Peer, listen: Arc<ListenOptions>) {
    let started = Instant::now();
    let settings = shared.settings();
    // Counted from accept to close, so limits and the shutdown grace see it all.
    let mut admission = shared.gate.admit(&settings.limits);
    let local = stream.local_addr();
    let mut client = ClientInfo { local, peer };
    let via = client.peer.clone();
    let mut conn = Metered::new(stream);

    let expect_header = client
        .peer
        .tcp_addr()
        .is_some_and(|addr| listen.trusts_proxy(addr.ip()));
    let negotiated = match &mut admission {
        Err(refusal) => Ok(Ok(Negotiated::NotAdmitted(*refusal))),
        Ok(admission) => {
            // Per-address limits count the client, which behind a trusted
            // upstream is the address its header announces.
            let admit = |peer: &Peer| admission.admit_address(&shared.gate, peer, &settings.limits);
            let negotiation = negotiate(&mut conn, expect_header, &mut client, admit);
            tokio::time::timeout(settings.negotiation_timeout, negotiation).await
        }
    };
    let (outcome, service_name) = match negotiated {
        Err(_elapsed) => {
            refuse(&mut conn, "negotiation timeout").await;
            (Outcome::NegotiationTimeout, None)
        }
        Ok(Err(e)) => (Outcome::ReadError(e), None),
        // Checked once a request has arrived: by then the proxy that made this
        // connection has registered it (it does so before relaying a byte).
        Ok(Ok(Negotiated::Decided(_))) if is_own(&via, local) => {
            let reason = "proxy loop: this connection comes from tcpmuxd's own proxy";
            refuse(&mut conn, reason).await;
            (Outcome::Refused(reason.into()), None)
        }
        Ok(Ok(negotiated)) => respond(negotiated, &mut conn, &client, &shared, &settings).await,
    };
    // A handed-off socket belongs to its backend now: closing our descriptor is
    // all we may do, and dropping `conn` does that.
    if !matches!(outcome, Outcome::HandedOff) {
        close_gracefully(&mut conn, settings.close_drain_timeout).await;
    }
    let service_name = service_name.as_deref().unwrap_or("-");
    report(
        &shared,
        &client,
        &via,
        service_name,
        &outcome,
        &conn,
        started,
    );
    drop(admission);
}

/// Whether the connection from `peer` to our `local` address is one of the
/// daemon's own proxy connections come back (the socket's own addresses, not
/// announced ones).
fn is_own(peer: &Peer, local: Option<std::net::SocketAddr>) -> bool {
    match (peer.tcp_addr(), local) {
        (Some(peer), Some(local)) => own_connections().contains(peer, local),
        _ => false,
    }
}

/// Answers what the negotiation produced; returns how it ended and the name
/// the client asked for, if it asked for one.
async fn respond(
    negotiated: Negotiated,
    conn: &mut Metered<Stream>,
    client: &ClientInfo,
    shared: &Shared,
    settings: &Settings,
) -> (Outcome, Option<String>) {
    let outcome = match negotiated {
        Negotiated::Closed => Outcome::ClosedBeforeRequest,
        Negotiated::Incomplete(what) => {
            let reason = format!("incomplete {what}: the connection was closed before its end");
            refuse(conn, &reason).await;
            Outcome::Incomplete(what)
        }
        Negotiated::NotAdmitted(refusal) => {
            refuse(conn, &refusal.to_string()).await;
            Outcome::Refused(refusal.to_string())
        }
        Negotiated::BadProxyHeader(e) => {
            refuse(conn, &format!("invalid PROXY protocol header: {e}")).await;
            Outcome::BadProxyHeader(e)
        }
        Negotiated::Decided(Decision::Reject(e)) => {
            refuse(conn, &e.to_string()).await;
            Outcome::BadRequest(e)
        }
        Negotiated::Decided(Decision::Help) => {
            let text = help::answer(&settings.registry, &shared.hub);
            let outcome = match conn.write_all(&text).await {
                Ok(()) => Outcome::Help,
                Err(e) => Outcome::ServiceError(e),
            };
            return (outcome, Some("help".into()));
        }
        Negotiated::Decided(Decision::Service(name)) => {
            let outcome = match settings.registry.lookup(&name) {
                Some(service) => serve_named(service, conn, client, shared, settings).await,
                None => {
                    let reason = format!("unknown service {name}; send HELP for the list");
                    refuse(conn, &reason).await;
                    Outcome::UnknownService
                }
            };
            return (outcome, Some(name.to_string()));
        }
    };
    (outcome, None)
}

/// The connection's one log line and its metric.
fn report(
    shared: &Shared,
    client: &ClientInfo,
    via: &Peer,
    service_name: &str,
    outcome: &Outcome,
    conn: &Metered<Stream>,
    started: Instant,
) {
    // Fields that are None are left out of the line.
    let via = (client.peer.tcp_addr() != via.tcp_addr()).then(|| via.to_string());
    tracing::info!(
        target: "tcpmuxd::connection",
        peer = %client.peer,
        via = via.as_deref().map(tracing::field::display),
        service = %service_name,
        backend = outcome.backend().map(tracing::field::display),
        outcome = %outcome,
        bytes_in = conn.bytes_in,
        bytes_out = conn.bytes_out,
        ms = format_args!("{:.3}", started.elapsed().as_secs_f64() * 1e3),
        "connection"
    );
    // Label by registered name only, so clients cannot grow the metric set.
    let label = if outcome.unnamed() { "-" } else { service_name };
    shared
        .metrics
        .record(label, outcome.category(), conn.bytes_in, conn.bytes_out);
}

/// Runs a service the client named, once its access rules and connection cap
/// allow.
async fn serve_named(
    service: &Service,
    conn: &mut Metered<Stream>,
    client: &ClientInfo,
    shared: &Shared,
    settings: &Settings,
) -> Outcome {
    if !service.access.permits(&client.peer) {
        refuse(conn, "access denied").await;
        return Outcome::Refused("access denied".into());
    }
    let counts = settings
        .usage
        .get(&service.name)
        .cloned()
        .unwrap_or_default();
    let Some(_slot) = counts.connections.acquire(service.max_connections) else {
        let reason = "service busy: too many connections, try again later";
        refuse(conn, reason).await;
        return Outcome::Refused(reason.into());
    };
    let context = services::Context {
        hub: &shared.hub,
        metrics: &shared.metrics,
        gate: &shared.gate,
        counts: &counts,
    };
    // Boxed: the largest service future (the relay, exec) would otherwise size
    // every session future, including the idle ones still negotiating.
    match Box::pin(services::serve(service, conn, client, &context)).await {
        Ok(outcome) => outcome,
        Err(e) => Outcome::ServiceError(e),
    }
}

/// Consumes the PROXY header if one is expected, admits the client's address,
/// then consumes the request line, and not a byte more: every read is a peek first, then a read of exactly what the parser
/// claimed.
async fn negotiate(
    conn: &mut Metered<Stream>,
    expect_header: bool,
    client: &mut ClientInfo,
    admit: impl FnOnce(&Peer) -> Result<(), Refusal>,
) -> io::Result<Negotiated> {
    let mut scratch = [0u8; PEEK];
    if expect_header {
        // Until the header is complete, every byte seen belongs to it.
        let mut header = Vec::new();
        loop {
            let n = conn.get_ref().peek(&mut scratch).await?;
            if n == 0 && !header.is_empty() {
                return Ok(Negotiated::Incomplete("PROXY protocol header"));
            }
            if n == 0 {
                return Ok(Negotiated::Closed);
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
                    break;
                }
                Err(e) => return Ok(Negotiated::BadProxyHeader(e)),
            }
        }
    }
    if let Err(refusal) = admit(&client.peer) {
        return Ok(Negotiated::NotAdmitted(refusal));
    }
    let mut parser = RequestParser::new();
    let mut fed = false;
    loop {
        let n = conn.get_ref().peek(&mut scratch).await?;
        if n == 0 {
            // Half-closed mid-name: the client can still read why nothing follows.
            return Ok(match fed {
                true => Negotiated::Incomplete("request line"),
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
