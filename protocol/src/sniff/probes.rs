//! The optional probes a detecting listener turns on by routing them: OpenVPN,
//! XMPP, SOCKS, PostgreSQL and RDP. Each looks at a few leading bytes and
//! answers yes, no, or "need more"; an answer, once given, stays the same
//! however many more bytes arrive, so detection does not depend on how the
//! opening was split into packets.

use crate::name::is_name_byte;

/// One probe's answer on the bytes received so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guess {
    /// This protocol, whatever follows.
    Yes,
    /// Not this protocol, whatever follows.
    No,
    /// Too few bytes to tell.
    Maybe,
}

impl Guess {
    fn from_bool(yes: bool) -> Guess {
        if yes {
            Guess::Yes
        } else {
            Guess::No
        }
    }
}

/// How far XMPP's probe looks for `jabber`; every probe has decided by then.
pub const XMPP_WINDOW: usize = 512;

/// OpenVPN over TCP: a 2-byte packet length (14 to 2048: the smallest hard
/// reset, up to one with a tls-crypt-v2 key), then the opcode byte of a
/// client's hard reset (P_CONTROL_HARD_RESET_CLIENT_V1, _V2 or _V3, key id 0).
/// Decided on 3 bytes. Can be confused with a DNS-over-TCP query whose ID
/// starts with 0x08, 0x38 or 0x50.
pub fn openvpn(first: &[u8]) -> Guess {
    const HARD_RESET_CLIENT: [u8; 3] = [1 << 3, 7 << 3, 10 << 3];
    if let [high, ..] = first {
        if *high > 0x07 {
            return Guess::No;
        }
    }
    let [high, low, opcode, ..] = first else {
        return Guess::Maybe;
    };
    let length = u16::from_be_bytes([*high, *low]);
    Guess::from_bool((14..=2048).contains(&length) && HARD_RESET_CLIENT.contains(opcode))
}

/// SOCKS: a SOCKS5 greeting (version 5, 1 to 16 methods, each assigned by
/// IANA (0-9) or private (0x80-0xfe)) or a SOCKS4/4a request (version 4,
/// command CONNECT or BIND, then a port and an address). Decided on the
/// greeting's methods, or on the 8 bytes of a SOCKS4 request's fixed part.
pub fn socks(first: &[u8]) -> Guess {
    match first {
        [] => Guess::Maybe,
        [5, rest @ ..] => {
            let [count, methods @ ..] = rest else {
                return Guess::Maybe;
            };
            let count = usize::from(*count);
            if !(1..=16).contains(&count) {
                return Guess::No;
            }
            let known = |m: &u8| *m <= 9 || (0x80..=0xfe).contains(m);
            let seen = &methods[..methods.len().min(count)];
            if !seen.iter().all(known) {
                Guess::No
            } else if seen.len() < count {
                Guess::Maybe
            } else {
                Guess::Yes
            }
        }
        [4, rest @ ..] => match rest.first() {
            None => Guess::Maybe,
            Some(1 | 2) if first.len() < 8 => Guess::Maybe,
            Some(1 | 2) => Guess::Yes,
            Some(_) => Guess::No,
        },
        _ => Guess::No,
    }
}

/// PostgreSQL: a 4-byte length, then an SSLRequest (length 8, code
/// 80877103), a GSSENCRequest (8, 80877104), a CancelRequest (16, 80877102)
/// or a StartupMessage (protocol 3.x, 8 to 10,000 bytes, the server's limit).
/// Decided on 8 bytes. With SSLRequest the backend answers `S` or `N`; a
/// routed client's bytes go to it untouched, so that answer is the backend's.
pub fn postgres(first: &[u8]) -> Guess {
    if first.iter().take(2).any(|&b| b != 0) {
        return Guess::No;
    }
    let Some(head) = first.get(..8) else {
        return Guess::Maybe;
    };
    let length = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let code = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    Guess::from_bool(match code {
        80_877_103 | 80_877_104 => length == 8,
        80_877_102 => length == 16,
        _ => code >> 16 == 3 && (8..=10_000).contains(&length),
    })
}

/// RDP: a TPKT header (version 3, reserved 0, a length of 11 to 512 bytes)
/// then an X.224 Connection Request (a length indicator of the TPKT length
/// minus 5, and the CR code 0xE). Decided on 6 bytes.
pub fn rdp(first: &[u8]) -> Guess {
    if first.first().is_some_and(|&b| b != 3) || first.get(1).is_some_and(|&b| b != 0) {
        return Guess::No;
    }
    let [_, _, high, low, indicator, code, ..] = first else {
        return Guess::Maybe;
    };
    let length = u16::from_be_bytes([*high, *low]);
    Guess::from_bool(
        (11..=512).contains(&length) && u16::from(*indicator) + 5 == length && code >> 4 == 0xe,
    )
}

/// XMPP: an opening that starts with `<`, has a byte no TCPMUX request line
/// holds (the space of `<stream:stream to=...`) before its first line end,
/// and says `jabber` (the client namespace) within its first 512 bytes.
/// A `<`-name on a line of its own (`<x>` + CRLF) is a TCPMUX name.
pub fn xmpp(first: &[u8]) -> Guess {
    match first.first() {
        None => return Guess::Maybe,
        Some(b'<') => {}
        Some(_) => return Guess::No,
    }
    let window = &first[..first.len().min(XMPP_WINDOW)];
    let line = window.split(|&b| b == b'\n').next().unwrap_or(window);
    let line_ended = line.len() < window.len();
    let name_only = line
        .iter()
        .enumerate()
        .all(|(i, &b)| is_name_byte(b) || (b == b'\r' && i + 1 == line.len()));
    if name_only && line_ended {
        return Guess::No;
    }
    let jabber = window.windows(6).any(|w| w == b"jabber");
    if !name_only && jabber {
        Guess::Yes
    } else if first.len() >= XMPP_WINDOW {
        Guess::No
    } else {
        Guess::Maybe
    }
}
