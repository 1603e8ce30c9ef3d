//! Protocol detection for clients that do not speak TCPMUX: which protocol the
//! first bytes of a connection begin (TLS, SSH, HTTP/1.x, or else a TCPMUX
//! request line), and for TLS and HTTP the name they ask for. Pure code over
//! the bytes received so far; nothing is consumed, so the chosen backend still
//! reads every byte.

pub mod client_hello;
pub mod http;

/// The protocols a detecting listener tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// A TLS ClientHello (first byte 0x16).
    Tls,
    /// An SSH identification string (`SSH-`).
    Ssh,
    /// An HTTP/1.x request line (`METHOD SP`).
    Http,
    /// Anything else: read as a TCPMUX request line.
    Tcpmux,
}

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
    if first.is_empty() {
        return None;
    }
    if first[0] == 0x16 {
        return Some(Protocol::Tls);
    }
    let mut undecided = false;
    for (prefix, protocol) in METHODS
        .iter()
        .map(|m| (*m, Protocol::Http))
        .chain(std::iter::once((&b"SSH-"[..], Protocol::Ssh)))
    {
        if first.starts_with(prefix) {
            return Some(protocol);
        }
        undecided |= prefix.starts_with(first);
    }
    (!undecided).then_some(Protocol::Tcpmux)
}

#[cfg(test)]
mod tests;
