//! Why a UDP flow ended: the word its access log line and the handover to
//! a successor go by.

use std::fmt;

/// Why a flow ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Ended {
    /// No datagram either way for its idle timeout.
    Idle = 1,
    /// Its place was taken by a new flow, the table being full.
    Evicted = 2,
    /// Its listener stopped serving.
    ListenerClosed = 3,
    /// Its backend socket reported an error (an ICMP port unreachable).
    BackendError = 4,
    /// Ended on the admin socket (`kill session`, `shutdown sessions
    /// backend`).
    Killed = 5,
    /// Handed to a successor (a binary upgrade), which goes on with it.
    HandedOver = 6,
    /// Its backend sent every reply `udp_responses` expects.
    Answered = 7,
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ended::Idle => "udp flow ended: idle timeout",
            Ended::Evicted => "udp flow ended: evicted for a new flow (max_udp_flows)",
            Ended::ListenerClosed => "udp flow ended: listener closed",
            Ended::BackendError => "udp flow ended: backend error",
            Ended::Killed => "udp flow ended: killed",
            Ended::HandedOver => "udp flow handed over to the successor",
            Ended::Answered => "udp flow ended: answered (udp_responses)",
        })
    }
}
