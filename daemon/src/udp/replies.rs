//! The backends' replies to the clients: a flow's backend socket, when its
//! listener's epoll set says it has some (backends.rs), is read up to 16
//! datagrams per `recvmmsg`, and the turn's replies of every ready flow go
//! to their clients 16 per `sendmmsg` (outbox.rs), from the listener's
//! socket. The daemon sends a client only what its backend sent; with
//! `udp_responses`, only the replies its datagrams asked for, and the flow
//! ends with the last of them.

use std::io;
use std::sync::Arc;

use tokio::net::UdpSocket;

use super::backends::Turn;
use super::flow::{Ended, Flow, Flows, MAX_DATAGRAM};
use super::outbox::Outbox;
use super::route::Dropped;
use crate::model::Owner;
use crate::net::datagram::{read_into, recv_batch, Batch, RECV_BATCH};
use crate::state::Shared;
use tcpmux_proto::sniff::datagram::long_header;

/// Replies relayed per ready socket per turn (a few batches), so one busy
/// backend does not hold up the others.
const REPLIES_PER_TURN: usize = 4 * RECV_BATCH;

/// Waits for backends with replies and relays them, one turn; `buf`, `got`
/// and `outbox` (empty) are the listener's, free between its own reads.
pub(super) async fn relay_ready(
    flows: &Flows,
    socket: &UdpSocket,
    (buf, got, outbox): (&mut [u8], &mut Batch, &mut Outbox),
    shared: &Shared,
) {
    let relay = |flow: &Arc<Flow>, error| {
        relay(
            flow,
            error,
            (socket, &mut *buf, &mut *got, &mut *outbox),
            shared,
        )
    };
    flows.backends.turn(relay).await;
    // After the wait nothing here yields (so a turn is never dropped with
    // replies in the outbox): what the turn read goes out now.
    outbox.flush(socket, buf, shared);
}

/// Reads the datagrams waiting on `flow`'s backend socket into the free
/// slots of the listener's buffer, a batch per `recvmmsg`, for the client
/// (the outbox sends them with other flows' replies); a socket that reports
/// an error (an ICMP port unreachable) ends the flow. A reply the client's
/// socket cannot take at once is dropped, as on a wire.
fn relay(
    flow: &Arc<Flow>,
    error: bool,
    (socket, buf, got, outbox): (&UdpSocket, &mut [u8], &mut Batch, &mut Outbox),
    shared: &Shared,
) -> Turn {
    for _ in 0..REPLIES_PER_TURN / RECV_BATCH {
        if outbox.is_full() {
            outbox.flush(socket, buf, shared);
        }
        let (room, free) = outbox.room(buf);
        match recv_batch(&flow.backend, room, MAX_DATAGRAM, got) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !error => return Turn::Drained,
            Err(e) => {
                let e = flow.backend.take_error().ok().flatten().unwrap_or(e);
                tracing::debug!(peer = %flow.client, backend = %flow.backend_addr, error = %e, "UDP backend error");
                flow.end(Ended::BackendError);
                return Turn::Drained;
            }
        }
        let replies = read_into(room, MAX_DATAGRAM, got);
        let replies = &replies[..got.len()];
        if flow.quic {
            for reply in replies {
                learn_server_id(flow, reply);
            }
        }
        flow.touch();
        let (relayed, answered) = flow.take_answers(replies.len());
        for reply in &replies[..relayed] {
            outbox.push(reply.len(), flow);
        }
        for _ in relayed..replies.len() {
            shared.udp.dropped(Dropped::Unasked.reason());
        }
        if answered {
            // The client has every reply it asked for: they go now (the
            // flow's log line counts them), and the flow ends.
            outbox.flush(socket, buf, shared);
            flow.end(Ended::Answered);
            return Turn::Drained;
        }
        if got.len() < free {
            // A short batch found the socket empty: no second call to be
            // told so (the set reports what comes later).
            return Turn::Drained;
        }
    }
    Turn::More
}

/// The connection ID a QUIC server's long header names itself by: its
/// client's later packets are addressed to it, from wherever the client
/// is by then.
fn learn_server_id(flow: &Flow, reply: &[u8]) {
    let Some(header) = long_header(reply) else {
        return;
    };
    flow.flows.cids().learn(
        header.scid,
        Owner {
            service: flow.service.clone(),
            backend: flow.backend_addr,
            flow: flow.id,
        },
    );
}
