//! The verdict on a connection, what a session and an answer given at
//! accept share: the checks before a named service runs, how the
//! connection ended (`Answer`), and the one log line and metric that report
//! it.

use std::time::Instant;

use tcpmux_proto::ServiceName;

use crate::admission::{Busy, OwnConnections, ServiceCounts};
use crate::model::{ClientInfo, Peer, Routed, Service};
use crate::ops::access_log;
use crate::outcome::Outcome;
use crate::state::Shared;

/// How a connection ended, and where it was going.
pub(super) struct Answer {
    pub outcome: Outcome,
    /// The service it asked for or was routed to, if any.
    pub service: Option<ServiceName>,
    pub routed: Routed,
}

impl Answer {
    pub(super) fn new(outcome: Outcome) -> Answer {
        Answer {
            outcome,
            service: None,
            routed: Routed::Tcpmux,
        }
    }
}

/// Why a connection from our own proxy back to us is refused.
pub(super) const PROXY_LOOP: &str = "proxy loop: this connection comes from tcpmuxd's own proxy";

/// Whether the connection from `peer` to our `local` address is one of the
/// daemon's own proxy connections come back (the socket's own addresses, not
/// announced ones).
pub(super) fn is_own(
    own: &OwnConnections,
    peer: &Peer,
    local: Option<std::net::SocketAddr>,
) -> bool {
    match (peer.tcp_addr(), local) {
        (Some(peer), Some(local)) => own.contains(peer, local),
        _ => false,
    }
}

/// Whether `service` takes `client` now, by its access rules and the admin
/// socket's `disable`; if not, why.
pub(super) fn may_serve(
    service: &Service,
    client: &ClientInfo,
    counts: &ServiceCounts,
) -> Result<(), &'static str> {
    if !service.access.permits_client(client) {
        return Err("access denied");
    }
    if counts.disabled.load(std::sync::atomic::Ordering::Acquire) {
        return Err("service disabled");
    }
    Ok(())
}

/// The refusal of a name no service has.
pub(super) fn unknown_service(name: &ServiceName) -> String {
    format!("unknown service {name}; send HELP for the list")
}

/// A busy service's refusal.
pub(super) fn busy_reason(busy: Busy) -> &'static str {
    match busy {
        Busy::Full => "service busy: too many connections, try again later",
        Busy::QueueFull => "service busy: the queue is full, try again later",
        Busy::TimedOut => "service busy: waited too long in the queue, try again later",
    }
}

/// The connection's one log line and its metric.
pub(super) fn report(
    shared: &Shared,
    client: &ClientInfo,
    via: &Peer,
    answer: &Answer,
    (bytes_in, bytes_out): (u64, u64),
    started: Instant,
) {
    let (outcome, routed) = (&answer.outcome, answer.routed.label());
    let service_name = answer.service.as_ref().map_or("-", ServiceName::as_str);
    // Fields that are None are left out of the line.
    let via = (client.peer.tcp_addr() != via.tcp_addr()).then(|| via.to_string());
    let backend = outcome.backend();
    let tls = client.tls.as_ref();
    let line = access_log::Fields {
        peer: &client.peer,
        via: via.as_deref(),
        service: service_name,
        routed,
        backend: backend.map(|b| b as &dyn std::fmt::Display),
        tls: tls.map(|t| t.version.as_str()),
        cipher: tls.map(|t| t.cipher.as_str()),
        cert: tls.and_then(|t| t.name()),
        outcome,
        bytes_in,
        bytes_out,
        elapsed: started.elapsed(),
    };
    access_log::write(&line);
    if let Some(tls) = &client.tls {
        shared.metrics.handshake(tls.resumed);
    }
    // Label by registered name only, so clients cannot grow the metric set.
    let label = if outcome.unnamed() { "-" } else { service_name };
    shared
        .metrics
        .record(label, outcome.category(), routed, bytes_in, bytes_out);
}
