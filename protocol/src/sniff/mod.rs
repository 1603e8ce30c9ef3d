//! Protocol detection for clients that do not speak TCPMUX: which protocol the
//! first bytes of a connection begin (TLS, SSH, HTTP/1.x, or else a TCPMUX
//! request line), and for TLS and HTTP the name they ask for. Pure code over
//! the bytes received so far; nothing is consumed, so the chosen backend still
//! reads every byte.

pub mod client_hello;
pub mod datagram;
pub mod http;
pub mod probes;
pub mod quic;

use probes::Guess;

/// The protocols a detecting listener tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// A TLS ClientHello (first byte 0x16).
    Tls,
    /// An SSH identification string (`SSH-`).
    Ssh,
    /// An HTTP/1.x request line (`METHOD SP`).
    Http,
    /// An OpenVPN client's hard reset, TCP mode ([`probes::openvpn`]).
    OpenVpn,
    /// An XMPP client stream header ([`probes::xmpp`]).
    Xmpp,
    /// A SOCKS5 greeting or SOCKS4/4a request ([`probes::socks`]).
    Socks,
    /// A PostgreSQL SSLRequest, GSSENCRequest, CancelRequest or StartupMessage
    /// ([`probes::postgres`]).
    Postgres,
    /// An RDP connection request ([`probes::rdp`]).
    Rdp,
    /// Anything else: read as a TCPMUX request line.
    Tcpmux,
}

impl Protocol {
    /// The optional probes, in the order they are tried.
    pub const OPTIONAL: [Protocol; 5] = [
        Protocol::OpenVpn,
        Protocol::Xmpp,
        Protocol::Socks,
        Protocol::Postgres,
        Protocol::Rdp,
    ];

    /// The protocol's name, as a listener key and a log label.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tls => "tls",
            Protocol::Ssh => "ssh",
            Protocol::Http => "http",
            Protocol::OpenVpn => "openvpn",
            Protocol::Xmpp => "xmpp",
            Protocol::Socks => "socks",
            Protocol::Postgres => "postgres",
            Protocol::Rdp => "rdp",
            Protocol::Tcpmux => "tcpmux",
        }
    }

    fn probe(self) -> fn(&[u8]) -> Guess {
        match self {
            Protocol::OpenVpn => probes::openvpn,
            Protocol::Xmpp => probes::xmpp,
            Protocol::Socks => probes::socks,
            Protocol::Postgres => probes::postgres,
            Protocol::Rdp => probes::rdp,
            Protocol::Tls => |b| guess_prefix(b, b"\x16"),
            Protocol::Ssh => |b| guess_prefix(b, b"SSH-"),
            Protocol::Http => |b| {
                METHODS
                    .iter()
                    .map(|m| guess_prefix(b, m))
                    .fold(Guess::No, strongest)
            },
            Protocol::Tcpmux => |_| Guess::Yes,
        }
    }
}

/// The optional probes a listener runs (TLS, SSH and HTTP always run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Probes(u8);

impl Probes {
    /// No optional probe.
    pub const NONE: Probes = Probes(0);

    /// These probes and `protocol`'s, if it is an optional one.
    pub fn with(self, protocol: Protocol) -> Probes {
        match Protocol::OPTIONAL.iter().position(|&p| p == protocol) {
            Some(i) => Probes(self.0 | 1 << i),
            None => self,
        }
    }

    /// Whether `protocol`'s probe is among these.
    pub fn contains(self, protocol: Protocol) -> bool {
        Protocol::OPTIONAL
            .iter()
            .position(|&p| p == protocol)
            .is_some_and(|i| self.0 & 1 << i != 0)
    }
}

/// Every probe has decided by this many bytes.
pub const DECIDED_WITHIN: usize = probes::XMPP_WINDOW;

/// The HTTP methods recognized at the start of a connection.
const METHODS: [&[u8]; 9] = [
    b"GET ",
    b"HEAD ",
    b"POST ",
    b"PUT ",
    b"DELETE ",
    b"CONNECT ",
    b"OPTIONS ",
    b"TRACE ",
    b"PATCH ",
];

/// Which protocol `first` (the first bytes received) begins, or `None` while
/// too few bytes have arrived to tell. No TCPMUX name is mistaken for HTTP
/// (a name has no space) or TLS (no control bytes); a name starting `SSH-` in
/// upper case is taken for SSH.
pub fn classify(first: &[u8]) -> Option<Protocol> {
    classify_with(first, Probes::NONE)
}

/// [`classify`] with the optional `probes` too. The answer for some bytes
/// is the answer for any bytes they begin: however the opening is split, it
/// is classified the same. No TCPMUX name is taken for an optional protocol
/// (each needs a byte no name holds).
pub fn classify_with(first: &[u8], probes: Probes) -> Option<Protocol> {
    if first.is_empty() {
        return None;
    }
    let always = [Protocol::Tls, Protocol::Ssh, Protocol::Http];
    let optional = Protocol::OPTIONAL
        .into_iter()
        .filter(|&p| probes.contains(p));
    for protocol in always.into_iter().chain(optional) {
        match protocol.probe()(first) {
            Guess::Yes => return Some(protocol),
            Guess::Maybe if first.len() < DECIDED_WITHIN => return None,
            Guess::No | Guess::Maybe => {}
        }
    }
    Some(Protocol::Tcpmux)
}

/// Whether `first` begins with `prefix` (or could, once more arrives).
fn guess_prefix(first: &[u8], prefix: &[u8]) -> Guess {
    if first.starts_with(prefix) {
        Guess::Yes
    } else if prefix.starts_with(first) {
        Guess::Maybe
    } else {
        Guess::No
    }
}

/// Of two answers about prefixes of which at most one can match, the one
/// that decides most.
fn strongest(a: Guess, b: Guess) -> Guess {
    match (a, b) {
        (Guess::Yes, _) | (_, Guess::Yes) => Guess::Yes,
        (Guess::Maybe, _) | (_, Guess::Maybe) => Guess::Maybe,
        _ => Guess::No,
    }
}

#[cfg(test)]
mod tests;
