//! Detection for UDP: which protocol the first datagram of a flow belongs to
//! (QUIC, DTLS, WireGuard, OpenVPN, DNS), and for DTLS the name it asks for.
//! A datagram arrives whole, so each probe answers yes or no at once; pure
//! code over the datagram's bytes. QUIC's server name is encrypted with keys
//! derived from its connection ID: [`quic_initial`] reads the header the
//! decryption starts from.

use super::client_hello::{self, ClientHello};

/// The protocols a UDP listener tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Datagram {
    /// A QUIC v1 (RFC 9000) or v2 (RFC 9369) client Initial packet.
    Quic,
    /// A DTLS 1.0/1.2/1.3 ClientHello record.
    Dtls,
    /// A WireGuard handshake initiation (or a transport packet of a tunnel
    /// whose flow expired).
    WireGuard,
    /// An OpenVPN client's hard reset over UDP (P_CONTROL_HARD_RESET_CLIENT
    /// V2 or V3).
    OpenVpn,
    /// A well-formed DNS query.
    Dns,
}

impl Datagram {
    /// Every probe, in the order they are tried: the strictest first, so a
    /// looser one never takes what a stricter one recognizes.
    pub const ALL: [Datagram; 5] = [
        Datagram::Quic,
        Datagram::Dtls,
        Datagram::WireGuard,
        Datagram::Dns,
        Datagram::OpenVpn,
    ];

    /// The protocol's name, as a listener key and a log label.
    pub fn name(self) -> &'static str {
        match self {
            Datagram::Quic => "quic",
            Datagram::Dtls => "dtls",
            Datagram::WireGuard => "wireguard",
            Datagram::OpenVpn => "openvpn",
            Datagram::Dns => "dns",
        }
    }

    fn probe(self) -> fn(&[u8]) -> bool {
        match self {
            Datagram::Quic => |d| quic_initial(d).is_some(),
            Datagram::Dtls => |d| dtls_record(d).is_some(),
            Datagram::WireGuard => wireguard,
            Datagram::OpenVpn => openvpn,
            Datagram::Dns => dns_query,
        }
    }
}

/// Which of `probes` recognizes `datagram`, tried in [`Datagram::ALL`]'s
/// order; `None` when none does.
pub fn classify(datagram: &[u8], probes: &[Datagram]) -> Option<Datagram> {
    Datagram::ALL
        .into_iter()
        .filter(|p| probes.contains(p))
        .find(|p| p.probe()(datagram))
}

/// QUIC v1's version number.
pub const QUIC_V1: u32 = 0x0000_0001;
/// QUIC v2's version number (RFC 9369).
pub const QUIC_V2: u32 = 0x6b33_43cf;

/// The clear part of a QUIC client Initial's long header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuicInitial<'a> {
    /// [`QUIC_V1`] or [`QUIC_V2`].
    pub version: u32,
    /// The destination connection ID: the Initial keys derive from it.
    pub dcid: &'a [u8],
    /// The source connection ID: the client's own.
    pub scid: &'a [u8],
    /// Where the Length field starts (after the token).
    pub length_at: usize,
}

/// A client's Initial packet: a long header (RFC 9000 §17.2) of version 1
/// or 2 with the Initial type, a destination connection ID of 8 to 20 bytes
/// (a client picks at least 8, §7.2), and a datagram of at least 1200 bytes
/// (§14.1: a client pads its Initial datagrams).
pub fn quic_initial(datagram: &[u8]) -> Option<QuicInitial<'_>> {
    let (&first, rest) = datagram.split_first()?;
    if first & 0xc0 != 0xc0 || datagram.len() < 1200 {
        return None;
    }
    let version = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    let kind = (first >> 4) & 0x03;
    match (version, kind) {
        (QUIC_V1, 0) | (QUIC_V2, 1) => {}
        _ => return None,
    }
    let mut at = 5;
    let dcid_len = usize::from(*datagram.get(at)?);
    if !(8..=20).contains(&dcid_len) {
        return None;
    }
    let dcid = datagram.get(at + 1..at + 1 + dcid_len)?;
    at += 1 + dcid_len;
    let scid_len = usize::from(*datagram.get(at)?);
    if scid_len > 20 {
        return None;
    }
    let scid = datagram.get(at + 1..at + 1 + scid_len)?;
    at += 1 + scid_len;
    let (token_len, width) = varint(datagram.get(at..)?)?;
    at = at.checked_add(width)?.checked_add(token_len)?;
    let (length, width) = varint(datagram.get(at..)?)?;
    if at + width + length > datagram.len() || length < 20 {
        return None;
    }
    Some(QuicInitial {
        version,
        dcid,
        scid,
        length_at: at,
    })
}

/// The connection IDs of a QUIC long-header packet of any version but
/// version negotiation's (RFC 8999 §5.1: these fields are the same in
/// every version), as a server's Initial and Handshake packets carry them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LongHeader<'a> {
    /// The QUIC version (not 0: version negotiation is not read).
    pub version: u32,
    /// To whom: the receiver's connection ID.
    pub dcid: &'a [u8],
    /// The sender's own connection ID: from a server, the one its
    /// client's later packets are addressed to.
    pub scid: &'a [u8],
}

/// The long header at the start of `datagram`, if it holds one whose
/// connection IDs are at most 20 bytes (RFC 9000 §17.2).
pub fn long_header(datagram: &[u8]) -> Option<LongHeader<'_>> {
    let (&first, rest) = datagram.split_first()?;
    let version = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    if first & 0x80 == 0 || version == 0 {
        return None;
    }
    let dcid_len = usize::from(*datagram.get(5)?);
    let dcid = datagram.get(6..6 + dcid_len).filter(|_| dcid_len <= 20)?;
    let at = 6 + dcid_len;
    let scid_len = usize::from(*datagram.get(at)?);
    let scid = datagram
        .get(at + 1..at + 1 + scid_len)
        .filter(|_| scid_len <= 20)?;
    Some(LongHeader {
        version,
        dcid,
        scid,
    })
}

/// The destination connection ID of the short-header packet at the start
/// of `datagram`, taken as `len` bytes long: a short header does not say
/// (the endpoint that chose the ID knows). `None` when it is no short
/// header, or too short to hold a packet: after the ID come a packet
/// number and at least the 16-byte sample of header protection (RFC 9001
/// §5.4.2), 20 bytes in all.
pub fn short_header_dcid(datagram: &[u8], len: usize) -> Option<&[u8]> {
    let first = *datagram.first()?;
    if first & 0x80 != 0 || !(1..=20).contains(&len) || datagram.len() < 1 + len + 20 {
        return None;
    }
    datagram.get(1..1 + len)
}

/// A QUIC variable-length integer (RFC 9000 §16): its value and width.
pub fn varint(bytes: &[u8]) -> Option<(usize, usize)> {
    let first = *bytes.first()?;
    let width = 1 << (first >> 6);
    let raw = bytes.get(..width)?;
    let mut value = u64::from(first & 0x3f);
    for &b in &raw[1..] {
        value = value << 8 | u64::from(b);
    }
    Some((usize::try_from(value).ok()?, width))
}

/// A DTLS record holding a whole ClientHello: the server name and ALPN it
/// asks for. A ClientHello fragmented over several records (a large
/// post-quantum one) is recognized as DTLS, without its name.
pub fn dtls_record(datagram: &[u8]) -> Option<ClientHello> {
    const HANDSHAKE: u8 = 22;
    let header = datagram.get(..13)?;
    // DTLS 1.0 is 0xfeff, 1.2 (and 1.3's records) 0xfefd; epoch 0.
    if header[0] != HANDSHAKE || header[1] != 0xfe || !matches!(header[2], 0xfd | 0xff) {
        return None;
    }
    if header[3..5] != [0, 0] {
        return None;
    }
    let record = usize::from(u16::from_be_bytes([header[11], header[12]]));
    let body = datagram.get(13..13 + record)?;
    // The handshake header: type, length (3), message_seq (2),
    // fragment_offset (3), fragment_length (3).
    let handshake = body.get(..12)?;
    if handshake[0] != 1 {
        return None;
    }
    let total = be24(&handshake[1..4]);
    let (offset, fragment) = (be24(&handshake[6..9]), be24(&handshake[9..12]));
    if offset != 0 || fragment > total || 12 + fragment > body.len() {
        return None;
    }
    if fragment < total {
        return Some(ClientHello::default());
    }
    // The body as a TLS ClientHello's, without DTLS's cookie.
    let hello = &body[12..12 + total];
    let session = usize::from(*hello.get(34)?);
    let cookie_at = 35 + session;
    let cookie = usize::from(*hello.get(cookie_at)?);
    let after = hello.get(cookie_at + 1 + cookie..)?;
    let mut message = vec![1, 0, 0, 0];
    message.extend_from_slice(&hello[..cookie_at]);
    message.extend_from_slice(after);
    let length = message.len() - 4;
    message[1..4].copy_from_slice(&(length as u32).to_be_bytes()[1..]);
    client_hello::parse_message(&message).ok().flatten()
}

fn be24(b: &[u8]) -> usize {
    usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2])
}

/// WireGuard: a handshake initiation (type 1, three zero bytes, 148 bytes
/// in all), or a transport data packet (type 4, a 16-byte header and a
/// payload padded to 16 bytes), which a peer sends first when its flow here
/// expired while its tunnel stayed up.
pub fn wireguard(datagram: &[u8]) -> bool {
    match datagram {
        [1, 0, 0, 0, ..] => datagram.len() == 148,
        [4, 0, 0, 0, ..] => datagram.len() >= 32 && datagram.len() % 16 == 0,
        _ => false,
    }
}

/// OpenVPN over UDP: a client's hard reset (P_CONTROL_HARD_RESET_CLIENT_V2
/// or _V3, key id 0), its 8-byte session ID and at least an empty ACK array
/// and a packet ID (14 bytes), at most one datagram of a 1500-byte link.
/// Without `tls-auth` the ACK array is empty and the packet ID zero.
pub fn openvpn(datagram: &[u8]) -> bool {
    const V2: u8 = 7 << 3;
    const V3: u8 = 10 << 3;
    let len_ok = (14..=1500).contains(&datagram.len());
    match datagram.first() {
        Some(&V2) if datagram.len() == 14 => datagram[9..] == [0, 0, 0, 0, 0],
        Some(&V2 | &V3) => len_ok,
        _ => false,
    }
}

/// A DNS query (RFC 1035 §4.1): QR clear, opcode QUERY, the Z bit and
/// the response code zero (AD and CD may be set, RFC 6840), one question,
/// no answers or authority, at most two additional records (EDNS's OPT, a
/// TSIG), and nothing after them.
pub fn dns_query(datagram: &[u8]) -> bool {
    let Some(header) = datagram.get(..12) else {
        return false;
    };
    let count = |i: usize| u16::from_be_bytes([header[i], header[i + 1]]);
    let (flags, opcode) = (header[2], (header[2] >> 3) & 0x0f);
    if flags & 0x80 != 0 || opcode != 0 || header[3] & 0x4f != 0 {
        return false;
    }
    if count(4) != 1 || count(6) != 0 || count(8) != 0 || count(10) > 2 {
        return false;
    }
    let Some(mut at) = dns_name(datagram, 12) else {
        return false;
    };
    at += 4; // QTYPE, QCLASS
    for _ in 0..count(10) {
        let Some(end) = dns_name(datagram, at) else {
            return false;
        };
        // TYPE, CLASS, TTL, RDLENGTH, then RDATA.
        let Some(fixed) = datagram.get(end..end + 10) else {
            return false;
        };
        at = end + 10 + usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
    }
    at == datagram.len()
}

/// Where the uncompressed name starting at `at` ends: labels of at most 63
/// bytes, 255 in all, ending with the root's empty label.
fn dns_name(datagram: &[u8], mut at: usize) -> Option<usize> {
    let start = at;
    loop {
        let len = usize::from(*datagram.get(at)?);
        if len > 63 {
            return None;
        }
        at += 1 + len;
        if at - start > 255 {
            return None;
        }
        if len == 0 {
            return Some(at);
        }
    }
}

#[cfg(test)]
#[path = "datagram_tests.rs"]
mod tests;

/// A DNS query for `name` (type A, class IN) with query ID `id`, and an
/// EDNS OPT record if `edns`: for tests and probes.
pub fn build_dns_query(id: u16, name: &str, edns: bool) -> Vec<u8> {
    let mut query = id.to_be_bytes().to_vec();
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    if edns {
        // The root name, OPT, a 1232-byte UDP size, no flags, no options.
        query.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    }
    query
}

/// A DTLS 1.2 record holding one ClientHello for `server_name` and `alpn`,
/// with an empty cookie: for tests.
pub fn build_dtls_hello(server_name: Option<&str>, alpn: &[&str]) -> Vec<u8> {
    // A TLS ClientHello's message, from its one record.
    let tls = client_hello::build(server_name, alpn, 0, 16384);
    let message = &tls[5..];
    let body = &message[4..];
    let session = usize::from(body[34]);
    let mut hello = body[..35 + session].to_vec();
    hello.push(0); // the empty cookie
    hello.extend_from_slice(&body[35 + session..]);
    let length = (hello.len() as u32).to_be_bytes();
    let mut handshake = vec![1, length[1], length[2], length[3], 0, 0, 0, 0, 0];
    handshake.extend_from_slice(&length[1..]);
    handshake.extend_from_slice(&hello);
    let mut record = vec![22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}
