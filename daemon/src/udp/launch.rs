//! A flow's start, whether its first datagram was routed here or a
//! predecessor handed it over: its backend's counts, its row in the
//! live-session table, its place in the listener's table, and its backend
//! socket watched for replies.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tcpmux_proto::ServiceName;

use super::flow::{Ended, Flow, Flows, Parts};
use crate::model::{Endpoint, Peer, Routed};
use crate::net::datagram::Destination;
use crate::pool::Pool;
use crate::state::Shared;

/// A flow about to start: routed here, or handed over by a predecessor.
pub(super) struct Start<'a> {
    pub(super) client: SocketAddr,
    pub(super) local: SocketAddr,
    /// Where its replies leave from, on a wildcard-bound listener.
    pub(super) reply_from: Option<Destination>,
    pub(super) service: &'a ServiceName,
    pub(super) routed: &'static str,
    /// The backend and the socket connected to it.
    pub(super) backend: (SocketAddr, std::net::UdpSocket),
    pub(super) pool: &'a Arc<Pool>,
    pub(super) idle: Duration,
    /// Replies a client datagram expects (`udp_responses`); 0: not counted.
    pub(super) answers: u32,
    pub(super) quic: bool,
    /// Handed over by a predecessor, which counted it as started.
    pub(super) adopted: bool,
}

/// Registers `start`'s flow (its backend's counts, a row in the
/// live-session table, its place in the listener's table) and watches its
/// backend socket for replies: the flow and its number.
pub(super) fn launch(
    start: Start<'_>,
    flows: &Arc<Flows>,
    shared: &Arc<Shared>,
) -> (Arc<Flow>, u64) {
    let (backend_addr, backend) = start.backend;
    // The backend's count of flows now and in all, as a TCP member's.
    let endpoint = Endpoint::Tcp(backend_addr);
    let held = start.pool.hold(&endpoint);
    if !start.adopted {
        start.pool.connected(&endpoint);
    }
    // A row in the live-session table: `show sessions` lists the flow and
    // `kill session` ends it.
    let session = shared
        .sessions
        .open(Peer::Tcp(start.client), Some(start.local));
    session.update(|detail| {
        detail.service = Some(start.service.clone());
        detail.routed = Routed::Udp(start.routed);
        detail.backend = Some(endpoint);
    });
    let parts = Parts {
        backend: (backend_addr, backend),
        client: start.client,
        session,
        service: start.service.clone(),
        routed: start.routed,
        pool: (Arc::clone(start.pool), held),
        idle: start.idle,
        answers: start.answers,
        quic: start.quic,
        reply_from: start.reply_from,
    };
    let started = (start.service.as_str(), start.routed);
    let make = |id| Arc::new(Flow::new(parts, id, Arc::clone(flows)));
    let flow = flows.insert(start.client, make, started, start.adopted);
    let keep = |slot| flow.slot.store(slot, std::sync::atomic::Ordering::Relaxed);
    match flows.backends.watch(&flow.backend, &flow, keep) {
        // Ended before it was watched (swept, on another thread): its end
        // found nothing to unwatch.
        Ok(()) if flow.has_ended() => flow.unwatch(),
        Ok(()) => {}
        Err(e) => {
            // No way to hear its replies (the kernel's epoll_watches limit).
            tracing::warn!(peer = %start.client, error = %e, "cannot watch a UDP backend socket; the flow ends");
            flow.end(Ended::BackendError);
        }
    }
    let id = flow.id;
    (flow, id)
}
