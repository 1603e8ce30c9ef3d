//! Every way the daemon refuses a client, as one value: the line the client
//! is told (`-` and this text, for a TCPMUX client), the log's text, and the
//! metric label. What an operator reads in the log and a client on its
//! screen is written here, side by side, once.

use std::fmt;
use std::io;
use std::time::Duration;

use tcpmux_proto::{NameError, ServiceName};

use crate::admission::{self, Busy};
use crate::model::Endpoint;
use crate::net::proxy_protocol::HeaderError;

/// Why a client was refused.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// No request within `negotiation_timeout`.
    NegotiationTimeout,
    /// A request line that is no name.
    BadRequest(NameError),
    /// A PROXY header that does not parse.
    BadProxyHeader(HeaderError),
    /// The TLS handshake failed (the reason from rustls or the socket).
    TlsHandshake(io::Error),
    /// The client half-closed in the middle of what is named.
    Incomplete(&'static str),
    /// A daemon-wide or per-address limit (`max_connections`, ...).
    Limit(admission::Refusal),
    /// A connection from the daemon's own proxy come back to it.
    ProxyLoop,
    /// A name no service has.
    UnknownService(ServiceName),
    /// A stream client that named a service of UDP backends only.
    UdpOnly(ServiceName),
    /// A routed client's service, removed by a reload since it was routed.
    NoLongerConfigured(ServiceName),
    /// A detecting listener found no service for what the client sent.
    Unrouted(String),
    /// The service's `allow`/`deny` rules.
    AccessDenied,
    /// Disabled on the admin socket.
    Disabled,
    /// The service's `max_connections`, or its queue.
    Busy(Busy),
    /// A queued client that reset its connection.
    ClientLeftQueue,
    /// No proxy backend could be reached: the client learns `reason` (no
    /// addresses), the log every backend and its error.
    BackendUnavailable {
        reason: &'static str,
        detail: String,
    },
    /// The TLS handshake with a `backend_tls` backend failed.
    BackendTls { backend: Endpoint, why: String },
    /// An exec service's `max_instances`.
    TooManyInstances,
    /// An exec service's program, no longer runnable.
    CannotRun(io::Error),
    /// An exec service's program, which failed to start.
    CannotStart(io::Error),
    /// A handoff service on a TLS connection, whose socket cannot be passed.
    HandoffOverTls,
    /// Every handoff backend vanished after the `+` was sent.
    HandoffFailedAfterAccept,
    /// No handoff backend is registered for the service.
    NoHandoffBackend(ServiceName),
    /// No handoff backend took the client in time.
    HandoffUndelivered(Duration),
}

/// An exec service's program cannot be used.
const UNAVAILABLE: &str = "service unavailable: its program cannot be started";

impl Refusal {
    /// What the client is told, if anything: a client that left, or whose
    /// `+` was already sent, is told nothing.
    pub(crate) fn told(&self) -> Option<String> {
        Some(match self {
            Refusal::BadRequest(e) => e.to_string(),
            Refusal::BadProxyHeader(e) => format!("invalid PROXY protocol header: {e}"),
            Refusal::Incomplete(what) => {
                format!("incomplete {what}: the connection was closed before its end")
            }
            Refusal::Limit(limit) => limit.to_string(),
            Refusal::UnknownService(name) => {
                format!("unknown service {name}; send HELP for the list")
            }
            Refusal::UdpOnly(name) => format!("service {name} takes UDP datagrams only"),
            Refusal::BackendUnavailable { reason, .. } => format!("service unavailable: {reason}"),
            Refusal::BackendTls { .. } => {
                "service unavailable: backend TLS handshake failed".into()
            }
            Refusal::TooManyInstances => "busy: too many running instances, try again later".into(),
            Refusal::CannotRun(_) | Refusal::CannotStart(_) => UNAVAILABLE.into(),
            Refusal::HandoffOverTls => "service unavailable: not over TLS".into(),
            Refusal::NoHandoffBackend(name) => format!("no backend is serving {name} right now"),
            Refusal::HandoffUndelivered(_) => {
                "service unavailable: every backend is busy, try again later".into()
            }
            // The client expects TLS records: a plaintext line would be noise.
            Refusal::TlsHandshake(_)
            | Refusal::ClientLeftQueue
            | Refusal::NoLongerConfigured(_)
            | Refusal::HandoffFailedAfterAccept => return None,
            Refusal::NegotiationTimeout
            | Refusal::ProxyLoop
            | Refusal::Unrouted(_)
            | Refusal::AccessDenied
            | Refusal::Disabled
            | Refusal::Busy(_) => self.to_string(),
        })
    }

    /// The reason as one fixed word, for `tcpmuxd_refusals_total`: a
    /// handful of values, so clients cannot grow the label set.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Refusal::NegotiationTimeout => "negotiation_timeout",
            Refusal::BadRequest(_) => "bad_request",
            Refusal::BadProxyHeader(_) => "bad_proxy_header",
            Refusal::TlsHandshake(_) => "tls_handshake",
            Refusal::Incomplete(_) => "incomplete",
            Refusal::Limit(_) => "limit",
            Refusal::ProxyLoop => "proxy_loop",
            Refusal::UnknownService(_) => "unknown_service",
            Refusal::UdpOnly(_) => "udp_only",
            Refusal::NoLongerConfigured(_) => "no_longer_configured",
            Refusal::Unrouted(_) => "unrouted",
            Refusal::AccessDenied => "access_denied",
            Refusal::Disabled => "disabled",
            Refusal::Busy(_) => "busy",
            Refusal::ClientLeftQueue => "left_queue",
            Refusal::BackendUnavailable { .. } | Refusal::BackendTls { .. } => {
                "backend_unavailable"
            }
            Refusal::TooManyInstances => "max_instances",
            Refusal::CannotRun(_) | Refusal::CannotStart(_) => "program_unavailable",
            Refusal::HandoffOverTls
            | Refusal::HandoffFailedAfterAccept
            | Refusal::NoHandoffBackend(_)
            | Refusal::HandoffUndelivered(_) => "handoff_unavailable",
        }
    }

    /// The metric's outcome label.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Refusal::UnknownService(_) => "unknown",
            Refusal::NegotiationTimeout => "timeout",
            _ => "refused",
        }
    }

    /// Whether the client named no registered service, so its metric goes
    /// under `-` (clients cannot grow the label set).
    pub(crate) fn unnamed(&self) -> bool {
        matches!(
            self,
            Refusal::UnknownService(_)
                | Refusal::BadRequest(_)
                | Refusal::BadProxyHeader(_)
                | Refusal::NegotiationTimeout
                | Refusal::TlsHandshake(_)
                | Refusal::Incomplete(_)
        )
    }
}

/// The log's text, after `refused: `.
impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NegotiationTimeout => f.write_str("negotiation timeout"),
            Refusal::BadRequest(e) => write!(f, "{e}"),
            Refusal::BadProxyHeader(e) => write!(f, "invalid PROXY protocol header: {e}"),
            Refusal::TlsHandshake(e) => write!(f, "TLS handshake failed: {e}"),
            Refusal::Incomplete(what) => write!(f, "incomplete {what}"),
            Refusal::Limit(limit) => write!(f, "{limit}"),
            Refusal::ProxyLoop => {
                f.write_str("proxy loop: this connection comes from tcpmuxd's own proxy")
            }
            Refusal::UnknownService(_) => f.write_str("unknown service"),
            Refusal::UdpOnly(_) => f.write_str("a UDP-only service named over TCP"),
            Refusal::NoLongerConfigured(name) => {
                write!(f, "service {name} is no longer configured")
            }
            Refusal::Unrouted(reason) => f.write_str(reason),
            Refusal::AccessDenied => f.write_str("access denied"),
            Refusal::Disabled => f.write_str("service disabled"),
            Refusal::Busy(Busy::Full) => {
                f.write_str("service busy: too many connections, try again later")
            }
            Refusal::Busy(Busy::QueueFull) => {
                f.write_str("service busy: the queue is full, try again later")
            }
            Refusal::Busy(Busy::TimedOut) => {
                f.write_str("service busy: waited too long in the queue, try again later")
            }
            Refusal::ClientLeftQueue => f.write_str("client left the queue"),
            Refusal::BackendUnavailable { detail, .. } => {
                write!(f, "backend unavailable: {detail}")
            }
            Refusal::BackendTls { backend, why } => {
                write!(
                    f,
                    "backend unavailable: {backend}: TLS handshake failed: {why}"
                )
            }
            Refusal::TooManyInstances => f.write_str("busy: max_instances reached"),
            Refusal::CannotRun(e) => write!(f, "cannot run the program: {e}"),
            Refusal::CannotStart(e) => write!(f, "cannot start the program: {e}"),
            Refusal::HandoffOverTls => f.write_str("handoff over TLS"),
            Refusal::HandoffFailedAfterAccept => {
                f.write_str("the handoff backend failed after '+'")
            }
            Refusal::NoHandoffBackend(_) => f.write_str("no live handoff backend"),
            Refusal::HandoffUndelivered(within) => {
                write!(f, "no handoff backend took the client within {within:?}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_and_the_log_each_get_their_own_words() {
        let name = ServiceName::parse("web").expect("a name");
        let unknown = Refusal::UnknownService(name.clone());
        assert_eq!(
            unknown.told().as_deref(),
            Some("unknown service web; send HELP for the list")
        );
        assert_eq!(unknown.to_string(), "unknown service");
        assert_eq!((unknown.label(), unknown.unnamed()), ("unknown", true));
        let backend = Refusal::BackendUnavailable {
            reason: "no backend answered",
            detail: "10.0.0.1:80: connection refused".into(),
        };
        // The client never sees a backend's address.
        assert!(!backend.told().unwrap_or_default().contains("10.0.0.1"));
        assert!(backend.to_string().contains("10.0.0.1:80"));
        assert_eq!(Refusal::ClientLeftQueue.told(), None);
        assert_eq!(Refusal::NoLongerConfigured(name).told(), None);
        assert_eq!(Refusal::Busy(Busy::Full).label(), "refused");
        assert_eq!(Refusal::NegotiationTimeout.label(), "timeout");
        // The metric's reason: one fixed word, whatever the client sent.
        assert_eq!(unknown.reason(), "unknown_service");
        assert_eq!(backend.reason(), "backend_unavailable");
        assert_eq!(Refusal::Unrouted("any text".into()).reason(), "unrouted");
        assert_eq!(
            Refusal::Incomplete("PROXY header").told().as_deref(),
            Some("incomplete PROXY header: the connection was closed before its end")
        );
        assert_eq!(
            Refusal::AccessDenied.told().as_deref(),
            Some("access denied")
        );
    }
}
