//! A flow's start, whether its first datagram was routed here or a
//! predecessor handed it over: its backend's counts, its row in the
//! live-session table, its place in the listener's table, and its task.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tcpmux_proto::ServiceName;
use tokio::net::UdpSocket;

use super::flow::{self, Flow, Flows};
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
    pub(super) backend: (SocketAddr, UdpSocket),
    pub(super) pool: &'a Arc<Pool>,
    pub(super) idle: Duration,
    pub(super) quic: bool,
    /// Handed over by a predecessor, which counted it as started.
    pub(super) adopted: bool,
}

/// Registers `start`'s flow (its backend's counts, a row in the
/// live-session table, its place in the listener's table) and starts its
/// task: the flow and its number.
pub(super) fn launch(
    start: Start<'_>,
    socket: &Arc<UdpSocket>,
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
    let registered = shared
        .sessions
        .open(Peer::Tcp(start.client), Some(start.local));
    registered.update(|detail| {
        detail.service = Some(start.service.clone());
        detail.routed = Routed::Udp(start.routed);
        detail.backend = Some(endpoint);
    });
    let flow = Arc::new(Flow::new(
        backend,
        registered.handle(),
        Arc::clone(flows),
        start.idle,
    ));
    let started = (start.service.as_str(), start.routed);
    let id = flows.insert(start.client, &flow, started, start.adopted);
    let about = flow::About {
        client: start.client,
        id,
        registered,
        service: start.service.clone(),
        routed: start.routed,
        backend: backend_addr,
        pool: (Arc::clone(start.pool), held),
        quic: start.quic,
        reply_from: start.reply_from,
    };
    tokio::spawn(flow::run(
        Arc::clone(&flow),
        Arc::clone(socket),
        about,
        Arc::clone(shared),
    ));
    (flow, id)
}
