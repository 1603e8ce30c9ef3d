//! The backends' replies to the clients: a flow's backend socket, when its
//! listener's epoll set says it has some (backends.rs), is read up to 16
//! datagrams per `recvmmsg` and they go to the client in one `sendmmsg`,
//! from the listener's socket. The daemon sends a client only what its
//! backend sent.

use std::io;
use std::sync::atomic::Ordering;

use tokio::net::UdpSocket;

use super::backends::Turn;
use super::flow::{Ended, Flow, Flows, MAX_DATAGRAM};
use super::route::Dropped;
use crate::model::Owner;
use crate::net::datagram::{read_into, recv_batch, send_all, send_from, Batch, RECV_BATCH};
use crate::ops::udp_metrics::Direction;
use crate::state::Shared;
use tcpmux_proto::sniff::datagram::long_header;

/// Replies relayed per ready socket per turn (a few batches), so one busy
/// backend does not hold up the others.
const REPLIES_PER_TURN: usize = 4 * RECV_BATCH;

/// Waits for backends with replies and relays them, one turn; `buf` and
/// `got` are the listener's, free between its own reads.
pub(super) async fn relay_ready(
    flows: &Flows,
    socket: &UdpSocket,
    (buf, got): (&mut [u8], &mut Batch),
    shared: &Shared,
) {
    let relay = |flow: &Flow, error| relay(flow, error, (socket, &mut *buf, &mut *got), shared);
    flows.backends.turn(relay).await;
}

/// Sends the client the datagrams waiting on `flow`'s backend socket, a
/// batch of up to `RECV_BATCH` read in one `recvmmsg` and sent in one
/// `sendmmsg`; a socket that reports an error (an ICMP port unreachable)
/// ends the flow. A reply the client's socket cannot take at once is dropped,
/// as on a wire.
fn relay(
    flow: &Flow,
    error: bool,
    (socket, buf, got): (&UdpSocket, &mut [u8], &mut Batch),
    shared: &Shared,
) -> Turn {
    for _ in 0..REPLIES_PER_TURN / RECV_BATCH {
        match recv_batch(&flow.backend, buf, MAX_DATAGRAM, got) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !error => return Turn::Drained,
            Err(e) => {
                let e = flow.backend.take_error().ok().flatten().unwrap_or(e);
                tracing::debug!(peer = %flow.client, backend = %flow.backend_addr, error = %e, "UDP backend error");
                flow.end(Ended::BackendError);
                return Turn::Drained;
            }
        }
        let replies = read_into(buf, MAX_DATAGRAM, got);
        let replies = &replies[..got.len()];
        if flow.quic {
            for reply in replies {
                learn_server_id(flow, reply);
            }
        }
        flow.touch();
        send_replies(flow, socket, replies, shared);
        if got.len() < RECV_BATCH {
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

/// Sends `replies` to the client, counting those sent and dropping the
/// rest. Straight to the socket, as `udp::forward`: no readiness to wait
/// for.
fn send_replies(flow: &Flow, socket: &UdpSocket, replies: &[&[u8]], shared: &Shared) {
    let client = flow.client;
    // Which were sent, by position.
    let mut sent = [false; RECV_BATCH];
    match flow.reply_from {
        // Each needs its source address in a control message of its own.
        Some(from) => {
            for (sent, reply) in sent.iter_mut().zip(replies) {
                *sent = send_from(socket, reply, client, from).is_ok();
            }
        }
        None => {
            let taken = send_all(socket, replies, Some(client)).unwrap_or(0);
            sent[..taken].fill(true);
        }
    }
    for (reply, sent) in replies.iter().zip(sent) {
        let len = reply.len();
        if !sent {
            shared.udp.dropped(Dropped::ClientUnreachable.reason());
            continue;
        }
        let down = &flow.session.traffic.down;
        down.fetch_add(len as u64, Ordering::Relaxed);
        shared.udp.datagram(Direction::Out, len);
    }
}
