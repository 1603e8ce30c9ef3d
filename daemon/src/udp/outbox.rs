//! The replies of one turn, from any number of flows, waiting in the
//! listener's buffer to go to their clients together: one `sendmmsg` for up
//! to 16, each to its own address (and on a wildcard-bound listener from
//! the address its client sent to), where a `sendmmsg` per flow sent one or
//! two (a request/response client has one reply in flight).

use std::io;
use std::sync::Arc;

use tokio::net::UdpSocket;

use super::flow::{Flow, MAX_DATAGRAM};
use super::route::Dropped;
use crate::net::datagram::{send_each, Addressed, RECV_BATCH};
use crate::ops::udp_metrics::Direction;
use crate::state::Shared;

/// Replies read into the first `len()` slots of the listener's buffer (of
/// `MAX_DATAGRAM` bytes each), each with its flow.
pub(super) struct Outbox {
    waiting: Vec<(usize, Arc<Flow>)>,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            waiting: Vec::with_capacity(RECV_BATCH),
        }
    }
}

impl Outbox {
    pub(super) fn is_full(&self) -> bool {
        self.waiting.len() >= RECV_BATCH
    }

    /// The slots of `buf` after those taken, for the next replies to be
    /// read into, and how many there are.
    pub(super) fn room<'b>(&self, buf: &'b mut [u8]) -> (&'b mut [u8], usize) {
        let taken = self.waiting.len();
        (&mut buf[taken * MAX_DATAGRAM..], RECV_BATCH - taken)
    }

    /// One more reply, `len` bytes in the next slot, for `flow`'s client.
    pub(super) fn push(&mut self, len: usize, flow: &Arc<Flow>) {
        self.waiting.push((len, Arc::clone(flow)));
    }

    /// Sends what waits in `buf`'s slots, counting those sent and dropping
    /// the rest, and empties the box. A client whose address the socket
    /// refuses loses its reply alone; a full socket buffer drops all that
    /// are left, as on a wire.
    pub(super) fn flush(&mut self, socket: &UdpSocket, buf: &[u8], shared: &Shared) {
        let n = self.waiting.len();
        if n == 0 {
            return;
        }
        let mut datagrams: [&[u8]; RECV_BATCH] = [&[]; RECV_BATCH];
        let mut to = [Addressed::default(); RECV_BATCH];
        for (i, ((len, flow), slot)) in self
            .waiting
            .iter()
            .zip(buf.chunks(MAX_DATAGRAM))
            .enumerate()
        {
            datagrams[i] = &slot[..*len];
            to[i] = Addressed {
                to: Some(flow.client),
                from: flow.reply_from,
            };
        }
        let mut sent = [false; RECV_BATCH];
        let mut at = 0;
        while at < n {
            match send_each(socket, &datagrams[at..n], &to[at..n]) {
                Ok(taken) if taken > 0 => {
                    sent[at..at + taken].fill(true);
                    at += taken;
                }
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // This one's address was refused: the next go on.
                Err(_) => at += 1,
            }
        }
        for ((len, flow), sent) in self.waiting.drain(..).zip(sent) {
            count_reply(&flow, len, sent, shared);
        }
    }
}

/// Counts a reply of `len` bytes sent to `flow`'s client, or dropped.
fn count_reply(flow: &Flow, len: usize, sent: bool, shared: &Shared) {
    if !sent {
        shared.udp.dropped(Dropped::ClientUnreachable.reason());
        return;
    }
    flow.count_out(len);
    shared.udp.datagram(Direction::Out, len);
}
