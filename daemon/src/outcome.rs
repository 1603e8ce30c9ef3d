//! How a session ended: one enum, filled in by the negotiation or by the service
//! that ran, and read once for the connection's log line and its metric.

use std::fmt;
use std::io;

use tcpmux_proto::NameError;

use crate::model::Endpoint;
use crate::net::proxy_protocol::HeaderError;

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
    UnknownService,
    /// A `-` line for the reason given: access, a limit, a backend that is down.
    Refused(String),
    BadRequest(NameError),
    BadProxyHeader(HeaderError),
    NegotiationTimeout,
    /// The TLS handshake failed (the reason from rustls or the socket).
    TlsHandshake(io::Error),
    /// The client half-closed in the middle of what is named.
    Incomplete(&'static str),
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
            Outcome::UnknownService => "unknown",
            Outcome::Refused(_) | Outcome::BadRequest(_) | Outcome::BadProxyHeader(_) => "refused",
            Outcome::NegotiationTimeout => "timeout",
            Outcome::TlsHandshake(_) => "refused",
            Outcome::Incomplete(_) => "refused",
            Outcome::ClosedBeforeRequest => "closed",
            Outcome::Killed { .. } => "killed",
        }
    }

    /// Whether the connection never named a registered service, so its metric
    /// goes under `-` (clients cannot grow the label set).
    pub(crate) fn unnamed(&self) -> bool {
        matches!(
            self,
            Outcome::UnknownService
                | Outcome::BadRequest(_)
                | Outcome::BadProxyHeader(_)
                | Outcome::NegotiationTimeout
                | Outcome::TlsHandshake(_)
                | Outcome::Incomplete(_)
                | Outcome::ClosedBeforeRequest
                | Outcome::ReadError(_)
        )
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
            Outcome::UnknownService => f.write_str("refused: unknown service"),
            Outcome::Refused(why) => write!(f, "refused: {why}"),
            Outcome::BadRequest(e) => write!(f, "refused: {e}"),
            Outcome::BadProxyHeader(e) => write!(f, "refused: invalid PROXY protocol header: {e}"),
            Outcome::NegotiationTimeout => f.write_str("refused: negotiation timeout"),
            Outcome::TlsHandshake(e) => write!(f, "refused: TLS handshake failed: {e}"),
            Outcome::Incomplete(what) => write!(f, "refused: incomplete {what}"),
            Outcome::ClosedBeforeRequest => f.write_str("closed before request"),
            Outcome::ReadError(e) => write!(f, "read error: {e}"),
            Outcome::Killed { .. } => f.write_str("killed from the admin socket"),
        }
    }
}
