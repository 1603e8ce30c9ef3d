//! UDP listeners: the first datagram from a new client address decides its
//! flow's service (route.rs), later ones go to the same backend through a
//! socket of the flow's own, and the backend's replies go back to the
//! client from the listener's socket. A flow ends after its idle timeout,
//! when its backend socket fails, or when a new flow needs its place
//! (table.rs). The daemon sends a client only what its backend sent.

mod adopt;
mod backends;
mod ended;
mod flow;
mod gather;
mod handover;
mod launch;
mod outbox;
mod quic;
mod replies;
mod route;
mod sweep;
mod table;

use std::io::ErrorKind::WouldBlock;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use tokio::io::Interest;
use tokio::net::UdpSocket;

use crate::model::{Owner, UdpRoutes};
use crate::net::datagram::{
    read_into, recv_batch, send_all, Batch, Destination, Received, RECV_BATCH,
};
use crate::ops::udp_metrics::Direction;
use crate::state::Shared;
use flow::{Flow, Flows, MAX_DATAGRAM};
use gather::Gathered;
use launch::{launch, Start};
use outbox::Outbox;
use tcpmux_proto::sniff::datagram::{quic_initial, Datagram};

/// A UDP listener's routes, which a reload replaces.
pub(crate) type SharedRoutes = Arc<RwLock<Arc<UdpRoutes>>>;

/// Ends every flow when the listener stops serving (a reload removed it,
/// or the daemon stops).
struct EndAll(Arc<Flows>);

impl Drop for EndAll {
    fn drop(&mut self) {
        self.0.end_all();
    }
}

pub(crate) use handover::Handover;

/// Serves `socket` until the task is aborted; its flows are `handover`'s to
/// give a successor, and it starts with those a predecessor gave.
pub(crate) async fn serve(
    socket: UdpSocket,
    routes: SharedRoutes,
    shared: Arc<Shared>,
    handover: Arc<Handover>,
) {
    let Ok(local) = socket.local_addr() else {
        return;
    };
    let flows = Flows::new(
        (shared.quic.flow_base(), local),
        shared.quic.of(local),
        Arc::clone(&shared.udp),
    );
    let flows = match flows {
        Ok(flows) => Arc::new(flows),
        Err(e) => {
            tracing::error!(address = %local, error = %e, "UDP listener cannot serve: no epoll set for its flows");
            return;
        }
    };
    let _end_all = EndAll(Arc::clone(&flows));
    handover.serving(&flows);
    adopt::flows(handover.adopted_for(local), &flows, &shared);
    let _sweep = sweep::start(Arc::clone(&flows), Arc::clone(&shared));
    // One buffer for the datagrams the listener reads and the replies its
    // flows' backends send: each turn uses it whole, and only one runs at
    // a time. Its pages are touched only as deep as batches go.
    let mut buf = vec![0u8; RECV_BATCH * MAX_DATAGRAM];
    let mut batch = Vec::with_capacity(RECV_BATCH);
    let mut outbox = Outbox::default();
    loop {
        tokio::select! {
            ready = socket.readable() => {
                if ready.is_ok() {
                    let from = (&socket, local);
                    receive(from, (&mut buf, &mut batch), (&flows, &routes), &shared);
                }
            }
            () = replies::relay_ready(&flows, &socket, (&mut buf, &mut batch, &mut outbox), &shared) => {}
        }
        // A flood of datagrams must not starve the rest of the event loop.
        tokio::task::consume_budget().await;
    }
}

/// Reads what waits on the listener's socket, a batch at a time, and sends
/// each datagram on: to its flow's backend, or to start a flow.
fn receive(
    (socket, local): (&UdpSocket, SocketAddr),
    (buf, batch): (&mut [u8], &mut Batch),
    (flows, routes): (&Arc<Flows>, &SharedRoutes),
    shared: &Arc<Shared>,
) {
    let read = socket.try_io(Interest::READABLE, || {
        match recv_batch(socket, buf, MAX_DATAGRAM, batch) {
            // A short batch found the socket empty: said as WouldBlock, its
            // readiness is cleared without a second call to be told so.
            Ok(()) if batch.len() < RECV_BATCH => Err(WouldBlock.into()),
            read => read,
        }
    });
    match read {
        Ok(()) => {}
        Err(e) if e.kind() == WouldBlock => {
            if batch.is_empty() {
                return;
            }
        }
        Err(e) => {
            // An ICMP error queued on the socket, or memory pressure:
            // nothing to do for this datagram; the next one is served.
            tracing::debug!(address = %local, error = %e, "UDP receive failed");
            return;
        }
    }
    let datagrams = read_into(buf, MAX_DATAGRAM, batch);
    let mut next = 0;
    while let Some(&Received { from: client, .. }) = batch.get(next) {
        // A client's datagrams next to each other in the batch go to its
        // backend together (a bulk sender's usually are).
        let run = batch[next..]
            .iter()
            .take_while(|r| r.from == client)
            .count();
        let mut rest = &datagrams[next..next + run];
        let mut sent_to = batch[next..next + run].iter().map(|r| r.to);
        next += run;
        let Some(client) = client else {
            continue; // no address to answer: not an inet sender
        };
        while let Some((first, later)) = rest.split_first() {
            // Where this datagram was sent: on a wildcard address, where its
            // flow's replies are to leave from.
            let destination = sent_to.next().flatten();
            let existing = flows.table().get(&client).cloned();
            match existing {
                Some(flow) => {
                    // A client's later datagram makes its flow established,
                    // which a full table evicts last; its first does not, so
                    // a spoofed source, which sends one, is the first to go.
                    flow.used_by_client();
                    forward(&flow, rest, shared);
                    break;
                }
                None => start_flow((local, destination), client, first, (flows, routes), shared),
            }
            rest = later;
        }
    }
}

/// Datagrams of a running flow, to its backend, in one `sendmmsg`.
fn forward(flow: &Flow, datagrams: &[&[u8]], shared: &Shared) {
    flow.touch();
    let taken = send_all(&flow.backend, datagrams, None).unwrap_or(0);
    flow.expect_answers(taken);
    for (i, datagram) in datagrams.iter().enumerate() {
        match i < taken {
            true => {
                flow.count_in(datagram.len());
                shared.udp.datagram(Direction::In, datagram.len());
            }
            // The backend's socket buffer is full: UDP's answer is a drop.
            false => shared.udp.dropped(route::Dropped::BackendBusy.reason()),
        }
    }
}

/// A datagram from a client with no flow: routed, given a flow if the
/// limits allow, and sent on.
fn start_flow(
    (local, destination): (SocketAddr, Option<Destination>),
    client: SocketAddr,
    datagram: &[u8],
    (flows, routes): (&Arc<Flows>, &SharedRoutes),
    shared: &Arc<Shared>,
) {
    let settings = shared.settings();
    let info = route::client_info(client, local);
    let Some(Decided {
        route,
        backend: backend_addr,
        earlier,
        connection,
    }) = decide(client, &info, datagram, (flows, routes), &settings, shared)
    else {
        return;
    };
    if let Err(dropped) = flows.make_room(client, &settings.udp) {
        return shared.udp.dropped(dropped.reason());
    }
    let source = route.proxy.transparent.then_some(client);
    let backend = match crate::net::datagram::connect_udp(backend_addr, source) {
        Ok(backend) => backend,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && source.is_some() => {
            tracing::warn!(peer = %client, service = %route.service.name, "transparent = true: cannot send from the client's address (needs CAP_NET_ADMIN)");
            return shared
                .udp
                .dropped(route::Dropped::BackendUnavailable.reason());
        }
        Err(e) => {
            tracing::warn!(peer = %client, service = %route.service.name, backend = %backend_addr, error = %e, "cannot open a UDP socket to the backend");
            return shared
                .udp
                .dropped(route::Dropped::BackendUnavailable.reason());
        }
    };
    let quic = route.protocol == Some(Datagram::Quic);
    let start = Start {
        client,
        local,
        reply_from: destination,
        service: &route.service.name,
        routed: route.routed,
        backend: (backend_addr, backend),
        pool: route.pool,
        idle: (settings.udp).idle_timeout_for(&route.service.udp_flows, route.protocol),
        answers: route.service.udp_flows.responses.unwrap_or(0),
        quic,
        adopted: false,
    };
    let (flow, id) = launch(start, flows, shared);
    if let Some(connection) = connection.filter(|_| quic) {
        // The client's own ID for its connection (its Initials'), or the
        // one a migrated client's datagram carries: this flow's now.
        flows.cids().learn(
            &connection,
            Owner {
                service: route.service.name.clone(),
                backend: backend_addr,
                flow: id,
            },
        );
    }
    for held in &earlier {
        forward(&flow, &[held], shared);
    }
    forward(&flow, &[datagram], shared);
}

/// Where a new flow goes, and what it carries first.
struct Decided<'s> {
    route: route::Route<'s>,
    backend: SocketAddr,
    /// A QUIC client's Initials held while its ClientHello arrived.
    earlier: Vec<Vec<u8>>,
    /// The QUIC connection ID the datagram is addressed to.
    connection: Option<Vec<u8>>,
}

/// The route of a client's first datagram: to the backend of the QUIC
/// connection it is addressed to, if a flow carries that one already (the
/// client moved), or else by what it holds, a QUIC client's Initials being
/// gathered first. `None` when it is held or dropped (and counted).
fn decide<'s>(
    client: SocketAddr,
    info: &crate::model::ClientInfo,
    datagram: &[u8],
    (flows, routes): (&Arc<Flows>, &SharedRoutes),
    settings: &'s crate::state::Settings,
    shared: &Shared,
) -> Option<Decided<'s>> {
    // A client that moved: to an ID a flow carries, or to a fresh one that
    // names its server (`quic_server_id`).
    let moved = {
        let cids = flows.cids();
        cids.find(datagram).map(|(id, owner)| {
            (
                (owner.service.clone(), owner.backend, "connection_id"),
                Some(id.to_vec()),
            )
        })
    };
    let known = moved.or_else(|| {
        let server = settings.udp.quic_servers.find(datagram)?;
        Some(((server.service.clone(), server.backend, "server_id"), None))
    });
    if let Some(((service, backend, routed), connection)) = known {
        match route::by_connection((&service, backend, routed), info, settings) {
            Some(Ok((route, backend))) => {
                return Some(Decided {
                    route,
                    backend,
                    earlier: Vec::new(),
                    connection,
                })
            }
            Some(Err(dropped)) => return drop_first(client, dropped, shared),
            None => {}
        }
    }
    // A QUIC client's Initials are held until its ClientHello is whole.
    let payload = quic::initial_payload(datagram);
    let gathered = flows
        .gathering
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .add(client, datagram, payload, flows.now());
    let (hello, earlier) = match gathered {
        Gathered::Held => return None,
        Gathered::NotQuic => (None, Vec::new()),
        Gathered::Done { hello, earlier } => (hello, earlier),
    };
    let routes = Arc::clone(&routes.read().unwrap_or_else(|p| p.into_inner()));
    let route = match route::route((datagram, hello), info, &routes, settings) {
        Ok(route) => route,
        Err(dropped) => return drop_first(client, dropped, shared),
    };
    let Some(backend) = route::backend_for(route.proxy, route.pool, client.ip()) else {
        return drop_first(client, route::Dropped::BackendUnavailable, shared);
    };
    let connection = quic_initial(datagram).map(|initial| initial.dcid.to_vec());
    Some(Decided {
        route,
        backend,
        earlier,
        connection,
    })
}

/// Counts a first datagram that starts no flow.
fn drop_first<T>(client: SocketAddr, dropped: route::Dropped, shared: &Shared) -> Option<T> {
    tracing::debug!(peer = %client, reason = dropped.reason(), "UDP datagram dropped");
    shared.udp.dropped(dropped.reason());
    None
}
