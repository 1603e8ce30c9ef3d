//! One client connection, start to end: (from a trusted upstream, the PROXY
//! header), the request line or, on a detecting listener, the protocol the first
//! bytes begin (`negotiate.rs`, `detect.rs`), the answer, the service, a graceful
//! close, and the one log line that tells what happened.

mod at_accept;
mod detect;
mod negotiate;
mod opening;
mod verdict;

use std::sync::Arc;
use std::time::Instant;

use tcpmux_proto::{Decision, ServiceName};

pub(crate) use self::at_accept::{answer_at_accept, AtAccept};
use self::negotiate::negotiate;
use self::opening::{Negotiated, Reply};
use self::verdict::{busy_reason, is_own, may_serve, report, unknown_service, Answer, PROXY_LOOP};
use crate::admission::{Busy, ServiceCounts, Slot};
use crate::model::{ClientInfo, ListenOptions, Peer, Service};
use crate::net::close::close_gracefully;
use crate::net::conn::Conn;
use crate::net::listener::Accepted;
use crate::net::stream::Metered;
use crate::ops::session_table::LiveSession;
use crate::outcome::Outcome;
use crate::services::{self, help, refuse, send_last};
use crate::state::{Settings, Shared};

/// Serves one accepted connection to its end, then logs and counts it.
pub(crate) async fn handle(shared: Arc<Shared>, accepted: Accepted, listen: Arc<ListenOptions>) {
    let started = Instant::now();
    let settings = shared.settings();
    // Counted from accept to close, so limits and the shutdown grace see it all.
    let mut admission = shared.gate.admit(&settings.limits);
    let Accepted {
        stream,
        peer,
        local,
        early,
    } = accepted;
    let mut client = ClientInfo {
        local,
        peer,
        tls: None,
        sni: None,
    };
    let via = client.peer.clone();
    let mut conn = Metered::new(Conn::Plain(stream));
    // Read by the accept loop, which left the client to a session after all.
    conn.get_mut().unread(early);
    let live = shared.sessions.open(via.clone(), local);

    let expect_header = client
        .peer
        .tcp_addr()
        .is_some_and(|addr| listen.trusts_proxy(addr.ip()));
    let work = async {
        let negotiated = match &mut admission {
            Err(refusal) => Ok(Ok(Negotiated::NotAdmitted(*refusal))),
            Ok(admission) => {
                // Per-address limits count the client, which behind a trusted
                // upstream is the address its header announces.
                let admit =
                    |peer: &Peer| admission.admit_address(&shared.gate, peer, &settings.limits);
                let routes = (listen.detect.as_ref(), &*settings.registry);
                let tls = listen.tls.as_ref().map(|t| t.server.clone());
                let negotiation =
                    negotiate(&mut conn, expect_header, &mut client, admit, tls, routes);
                // Boxed, so its buffers and the TLS handshake are gone from the
                // session once it is over instead of sized into every session.
                Box::pin(tokio::time::timeout(
                    settings.negotiation_timeout,
                    negotiation,
                ))
                .await
            }
        };
        if client.tls.is_some() || client.peer.tcp_addr() != via.tcp_addr() {
            live.update(|d| {
                d.client = client.peer.clone();
                d.tls = client.tls.as_ref().map(|t| t.version.clone());
                d.cert = client
                    .tls
                    .as_ref()
                    .and_then(|t| t.name())
                    .map(str::to_owned);
            });
        }
        match negotiated {
            Err(_elapsed) => timed_out(&mut conn, &listen, &client).await,
            Ok(Err(e)) => Answer::new(Outcome::ReadError(e)),
            // Checked once a request has arrived: by then the proxy that made this
            // connection has registered it (it does so before relaying a byte).
            Ok(Ok(Negotiated::Decided(_) | Negotiated::Routed(..)))
                if is_own(&shared.own, &via, local) =>
            {
                refuse(&mut conn, PROXY_LOOP).await;
                Answer::new(Outcome::Refused(PROXY_LOOP.into()))
            }
            // Boxed: a service's state is allocated when it starts, not
            // sized into every session still negotiating.
            Ok(Ok(negotiated)) => {
                let serving = respond(negotiated, &mut conn, &client, (&shared, &settings), &live);
                Box::pin(serving).await
            }
        }
    };
    let answer = tokio::select! {
        answer = work => answer,
        () = live.killed() => {
            let detail = live.detail();
            Answer {
                outcome: Outcome::Killed { backend: detail.backend },
                service: detail.service,
                routed: detail.routed,
            }
        }
    };
    // A handed-off socket belongs to its backend now: closing our descriptor is
    // all we may do, and dropping `conn` does that.
    // After a relay that ran to its end the close is done already.
    if !matches!(answer.outcome, Outcome::HandedOff { relayed: false }) && !conn.finished {
        close_gracefully(&mut conn, settings.close_drain_timeout).await;
    }
    let bytes = (conn.bytes_in, conn.bytes_out);
    report(&shared, &client, &via, &answer, bytes, started);
    drop(admission);
}

/// Answers a client whose negotiation took too long. One of a TLS-only
/// listener still in its handshake expects TLS records: a plaintext line
/// would be noise to it.
async fn timed_out(
    conn: &mut Metered<Conn>,
    listen: &ListenOptions,
    client: &ClientInfo,
) -> Answer {
    let handshaking = listen.tls.is_some() && listen.detect.is_none() && client.tls.is_none();
    if !handshaking {
        refuse(conn, "negotiation timeout").await;
    }
    Answer::new(Outcome::NegotiationTimeout)
}

/// Answers what the negotiation produced.
async fn respond(
    negotiated: Negotiated,
    conn: &mut Metered<Conn>,
    client: &ClientInfo,
    (shared, settings): (&Shared, &Settings),
    live: &LiveSession,
) -> Answer {
    let outcome = match negotiated {
        Negotiated::Closed => Outcome::ClosedBeforeRequest,
        Negotiated::Incomplete(what, routed) => {
            let reason = format!("incomplete {what}: the connection was closed before its end");
            refuse(conn, &reason).await;
            return Answer {
                routed,
                ..Answer::new(Outcome::Incomplete(what))
            };
        }
        Negotiated::NotAdmitted(refusal) => {
            refuse(conn, &refusal.to_string()).await;
            Outcome::Refused(refusal.to_string())
        }
        // The client expects TLS records: a plaintext line would be noise to it.
        Negotiated::TlsFailed(e) => Outcome::TlsHandshake(e),
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
            let outcome = match send_last(conn, &text).await {
                Ok(()) => Outcome::Help,
                Err(e) => Outcome::ServiceError(e),
            };
            return Answer {
                service: ServiceName::parse("help").ok(),
                ..Answer::new(outcome)
            };
        }
        Negotiated::Decided(Decision::Service(name)) => {
            live.update(|d| d.service = Some(name.clone()));
            let outcome = match settings.registry.lookup(&name) {
                Some(service) => {
                    serve_named(service, conn, client, (shared, settings), live, true).await
                }
                None => {
                    let reason = unknown_service(&name);
                    refuse(conn, &reason).await;
                    Outcome::UnknownService
                }
            };
            return Answer {
                service: Some(name),
                ..Answer::new(outcome)
            };
        }
        Negotiated::Routed(name, routed) => {
            live.update(|d| {
                d.service = Some(name.clone());
                d.routed = routed;
            });
            // Checked at load, but a reload may have removed it since.
            let outcome = match settings.registry.lookup(&name) {
                Some(service) => {
                    serve_named(service, conn, client, (shared, settings), live, false).await
                }
                None => Outcome::Refused(format!("service {name} is no longer configured")),
            };
            return Answer {
                outcome,
                service: Some(name),
                routed,
            };
        }
        Negotiated::Unrouted {
            routed,
            reason,
            reply,
        } => {
            refuse_unrouted(conn, &reason, reply).await;
            return Answer {
                routed,
                ..Answer::new(Outcome::Refused(reason))
            };
        }
    };
    Answer::new(outcome)
}

/// Tells a detected client with no service why, in a form it can read.
async fn refuse_unrouted(conn: &mut Metered<Conn>, reason: &str, reply: Reply) {
    match reply {
        Reply::Close => {}
        Reply::Line => refuse(conn, reason).await,
        Reply::Http => {
            let body = format!("{reason}\n");
            let response = format!(
                "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = send_last(conn, response.as_bytes()).await;
        }
    }
}

/// Runs a service the client named (`tcpmux`: it reads status lines) or was
/// routed to, once its access rules and connection cap allow. A routed client
/// gets no status line, and a refusal closes its connection silently (the log
/// has the reason).
async fn serve_named(
    service: &Service,
    conn: &mut Metered<Conn>,
    client: &ClientInfo,
    (shared, settings): (&Shared, &Settings),
    live: &LiveSession,
    tcpmux: bool,
) -> Outcome {
    let counts = settings
        .usage
        .get(&service.name)
        .cloned()
        .unwrap_or_default();
    if let Err(reason) = may_serve(service, client, &counts) {
        if tcpmux {
            refuse(conn, reason).await;
        }
        return Outcome::Refused(reason.into());
    }
    let _slot = match queued(conn, &counts, service).await {
        Ok(slot) => slot,
        Err(reason) => {
            if tcpmux && reason != CLIENT_LEFT {
                refuse(conn, reason).await;
            }
            return Outcome::Refused(reason.into());
        }
    };
    let stats = || shared.render_metrics();
    let context = services::Context {
        hub: &shared.hub,
        stats: &stats,
        counts: &counts,
        own: &shared.own,
        live,
    };
    // Boxed: the service futures would otherwise size every session future,
    // including the idle ones still negotiating.
    match Box::pin(services::serve(service, conn, client, &context, tcpmux)).await {
        Ok(outcome) => outcome,
        Err(e) => Outcome::ServiceError(e),
    }
}

/// Why a queued client was not served because it went away.
const CLIENT_LEFT: &str = "client left the queue";

/// A unit of `service`'s connection cap, waiting for one in its queue if it
/// has one. The client's socket is watched meanwhile: one that resets leaves
/// the queue at once rather than holding a place for nobody. One that only
/// half-closed stays: it may still be waiting for its answer (a request sent
/// with its FIN), as HAProxy keeps it without `abortonclose`.
async fn queued(
    conn: &mut Metered<Conn>,
    counts: &ServiceCounts,
    service: &Service,
) -> Result<Slot, &'static str> {
    let cap = counts.cap(service);
    let busy = match service.queue.as_ref() {
        None => counts.connections.acquire(cap).ok_or(Busy::Full),
        Some(queue) => {
            let wait = counts.connections.acquire_queued(cap, Some(queue));
            tokio::pin!(wait);
            let mut peeked = [0u8; 512];
            let (mut seen, mut watch) = (0, true);
            loop {
                tokio::select! {
                    biased;
                    got = &mut wait => break got,
                    peek = conn.get_mut().peek_beyond(&mut peeked, seen), if watch => match peek {
                        // Once the buffer is full or the client half-closed,
                        // the socket has no more to say: only wait.
                        Ok(p) => (seen, watch) = (p.len, !p.ended && p.len < peeked.len()),
                        Err(_) => return Err(CLIENT_LEFT),
                    },
                }
            }
        }
    };
    busy.map_err(busy_reason)
}
