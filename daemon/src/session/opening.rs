//! What the start of a connection produced, the one answer of the PROXY
//! header, admission, the TLS handshake, detection and the request line
//! alike, for the session to act on.

use std::io;

use tcpmux_proto::{Decision, ServiceName};

use crate::admission::Refusal;
use crate::model::Routed;
use crate::net::proxy_protocol::HeaderError;

/// What reading the start of the connection produced.
pub(super) enum Negotiated {
    /// The request line (and any PROXY header) has been consumed, nothing more.
    Decided(Decision),
    /// A detecting listener chose the service from the client's first bytes,
    /// which are all still unread.
    Routed(ServiceName, Routed),
    /// A detecting listener recognized the protocol but has no service for
    /// it; `reply` says what the client can read of a refusal.
    Unrouted {
        routed: Routed,
        reason: String,
        reply: Reply,
    },
    BadProxyHeader(HeaderError),
    /// EOF in the middle of what is named (the request line, the PROXY
    /// header, a detected opening), and how far routing had got.
    Incomplete(&'static str, Routed),
    Closed,
    /// A daemon-wide or per-address limit refused the connection.
    NotAdmitted(Refusal),
    /// On a TLS listener, the handshake failed; the error says why.
    TlsFailed(io::Error),
}

impl Negotiated {
    pub(super) fn unrouted(routed: Routed, reason: String, reply: Reply) -> Negotiated {
        Negotiated::Unrouted {
            routed,
            reason,
            reply,
        }
    }
}

/// How a detecting listener answers a client it has no service for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reply {
    /// Nothing (a TLS client cannot read a `-` line): close.
    Close,
    /// A `-` line.
    Line,
    /// An HTTP 404 response.
    Http,
}
