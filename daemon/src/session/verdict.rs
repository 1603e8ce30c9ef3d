//! The verdict on a connection, what a session and an answer given at
//! accept share: the decision on the name it asked for (`decide`), how the
//! connection ended (`Answer`), and the one log line and metric that report
//! it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tcpmux_proto::ServiceName;

use crate::admission::{OwnConnections, ServiceCounts};
use crate::model::{ClientInfo, Peer, Routed, Service, ServiceKind};
use crate::ops::access_log;
use crate::outcome::{Outcome, Refusal};
use crate::state::{Settings, Shared};

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

/// How the client came to a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Asked {
    /// A TCPMUX request line.
    Named,
    /// Routed by a detecting or TLS listener; the name was checked at load,
    /// so a missing one was removed by a reload since.
    Routed,
}

/// A service that takes the client, and its counts.
pub(super) struct Chosen<'s> {
    pub service: &'s Service,
    pub counts: Arc<ServiceCounts>,
}

/// The decision on a client that asked for `name`, the same for a session
/// and an answer at accept: the service `found` under it in `settings`, if
/// any, takes the client by its access rules and the admin socket's
/// `disable`. What comes before (the limits, the proxy loop) and after (a
/// slot of the service's cap, perhaps after a queue) is each caller's own
/// step, in this order.
pub(super) fn decide<'s>(
    settings: &'s Settings,
    client: &ClientInfo,
    (name, found): (&ServiceName, Option<&'s Service>),
    asked: Asked,
) -> Result<Chosen<'s>, Refusal> {
    let Some(service) = found else {
        return Err(match asked {
            Asked::Named => Refusal::UnknownService(name.clone()),
            Asked::Routed => Refusal::NoLongerConfigured(name.clone()),
        });
    };
    if service.kind == ServiceKind::UdpOnly {
        return Err(Refusal::UdpOnly(name.clone()));
    }
    let counts = settings
        .usage
        .get(&service.name)
        .cloned()
        .unwrap_or_default();
    if !service.access.permits_client(client) {
        return Err(Refusal::AccessDenied);
    }
    if counts.disabled.load(Ordering::Acquire) {
        return Err(Refusal::Disabled);
    }
    Ok(Chosen { service, counts })
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
    let refused = match outcome {
        Outcome::Refused(refusal) => Some(refusal.reason()),
        _ => None,
    };
    let ended = (outcome.category(), refused);
    shared
        .metrics
        .record(label, ended, routed, (bytes_in, bytes_out));
}
