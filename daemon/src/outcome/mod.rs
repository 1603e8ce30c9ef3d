//! How a session ended: one enum, filled in by the negotiation or by the service
//! that ran, and read once for the connection's log line and its metric; a
//! refusal, whatever refused, is one [`Refusal`] (`refusal.rs`).

mod refusal;

use std::fmt;
use std::io;

use crate::model::Endpoint;

pub(crate) use refusal::Refusal;

/// How a connection ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The service ran; `backend` names the proxy backend that served it.
    Served {
        backend: Option<Endpoint>,
    },
    /// The client went to a handoff backend: its socket itself (tcpmuxd
    /// must not touch it again), or, `relayed`, a socketpair's end because
    /// the negotiation had read bytes past the request line.
    HandedOff {
        relayed: bool,
    },
    /// The program exec'd on the socket ended.
    Exited {
        pid: u32,
        status: String,
    },
    Help,
    ServiceError(io::Error),
    /// Refused, and why.
    Refused(Refusal),
    ClosedBeforeRequest,
    ReadError(io::Error),
    /// Ended from the admin socket (`kill session`, `shutdown sessions`);
    /// `backend` is the proxy member it was relayed to, if any.
    Killed {
        backend: Option<Endpoint>,
    },
}

impl Outcome {
    /// The metric label: a few fixed words.
    pub(crate) fn category(&self) -> &'static str {
        match self {
            Outcome::Served { .. } | Outcome::HandedOff { .. } | Outcome::Exited { .. } => "served",
            Outcome::Help => "help",
            Outcome::ServiceError(_) | Outcome::ReadError(_) => "error",
            Outcome::Refused(refusal) => refusal.label(),
            Outcome::ClosedBeforeRequest => "closed",
            Outcome::Killed { .. } => "killed",
        }
    }

    /// Whether the connection never named a registered service, so its metric
    /// goes under `-` (clients cannot grow the label set).
    pub(crate) fn unnamed(&self) -> bool {
        match self {
            Outcome::Refused(refusal) => refusal.unnamed(),
            Outcome::ClosedBeforeRequest | Outcome::ReadError(_) => true,
            _ => false,
        }
    }

    /// The proxy backend that served the client, if any.
    pub(crate) fn backend(&self) -> Option<&Endpoint> {
        match self {
            Outcome::Served { backend } | Outcome::Killed { backend } => backend.as_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Served { .. } => f.write_str("served"),
            Outcome::HandedOff { relayed: false } => f.write_str("handed off"),
            Outcome::HandedOff { relayed: true } => f.write_str("handed off, relayed"),
            Outcome::Exited { pid, status } => write!(f, "served: pid {pid} {status}"),
            Outcome::Help => f.write_str("help"),
            Outcome::ServiceError(e) => write!(f, "service error: {e}"),
            Outcome::Refused(why) => write!(f, "refused: {why}"),
            Outcome::ClosedBeforeRequest => f.write_str("closed before request"),
            Outcome::ReadError(e) => write!(f, "read error: {e}"),
            Outcome::Killed { .. } => f.write_str("killed from the admin socket"),
        }
    }
}
