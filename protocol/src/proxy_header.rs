//! The PROXY protocol header (HAProxy's spec, v1 text and v2 binary) as pure
//! code: [`decode`] takes the bytes received so far and answers "need more", a
//! header and its length, or why it can never be one; [`encode`] writes one.
//!
//! Any cutting of a valid header into reads decodes the same, because `decode`
//! only ever looks at the whole prefix it is given and answers "need more" for
//! every strict prefix of a valid header. An error is final: no longer input
//! starting with the same bytes can turn it into a header.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The 12 bytes that open a v2 header.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// A v1 line's longest form, CRLF included (the spec's 107 bytes).
pub const V1_MAX_LEN: usize = 107;
/// The v2 header's fixed part: signature, version and command, family, length.
const V2_FIXED: usize = 16;

/// What a header announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announced {
    /// The real client and the address it connected to.
    Proxied {
        /// The client.
        source: SocketAddr,
        /// The address the client connected to.
        destination: SocketAddr,
    },
    /// A connection of the upstream's own (v2 LOCAL, v1 UNKNOWN) or a family
    /// without IP addresses: keep the socket's addresses.
    Local,
}

/// Why bytes are not a PROXY header.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The input starts with neither `PROXY ` nor the v2 signature.
    #[error("no PROXY protocol signature (neither \"PROXY \" nor the v2 signature)")]
    NoSignature,
    /// A v1 line with no CRLF within its 107 bytes.
    #[error("PROXY v1 line longer than {V1_MAX_LEN} bytes")]
    V1TooLong,
    /// A v1 line that ended but does not read `PROXY TCP4|TCP6 src dst sport dport`.
    #[error("malformed PROXY v1 line: {0}")]
    V1Malformed(&'static str),
    /// A v2 header whose version nibble is not 2.
    #[error("PROXY v2 header with version {0} (only 2 exists)")]
    V2Version(u8),
    /// A v2 header whose command is neither LOCAL (0) nor PROXY (1).
    #[error("PROXY v2 header with unknown command 0x{0:x} (only LOCAL 0 and PROXY 1 exist)")]
    V2Command(u8),
    /// A v2 header with an address family or transport outside the spec.
    #[error("PROXY v2 header with unknown address family or protocol byte 0x{0:02x}")]
    V2Family(u8),
    /// A v2 PROXY header whose address block is too short for its family.
    #[error("PROXY v2 address block of {have} bytes is too short for its family ({need} needed)")]
    V2ShortAddresses {
        /// Bytes the header declares.
        have: usize,
        /// Bytes its family's addresses take.
        need: usize,
    },
    /// A v2 header declaring more bytes than the receiver accepts.
    #[error("PROXY v2 header declares {declared} bytes, more than the {limit} accepted")]
    V2TooLong {
        /// Header length declared (fixed part included).
        declared: usize,
        /// The receiver's limit.
        limit: usize,
    },
}

/// Decodes the header at the start of `input`. `Ok(None)`: every byte so far
/// may belong to a valid header, send more. `Ok(Some((announced, length)))`:
/// the first `length` bytes were the header; the rest belongs to the stream.
/// A v2 header declaring more than `max_len` bytes is refused as soon as its
/// fixed part has arrived, without waiting for the rest.
pub fn decode(input: &[u8], max_len: usize) -> Result<Option<(Announced, usize)>, HeaderError> {
    if starts_like(input, b"PROXY ") {
        decode_v1(input)
    } else if starts_like(input, &V2_SIGNATURE) {
        decode_v2(input, max_len)
    } else {
        Err(HeaderError::NoSignature)
    }
}

/// Whether `input` and `prefix` agree on the bytes both have.
fn starts_like(input: &[u8], prefix: &[u8]) -> bool {
    let n = input.len().min(prefix.len());
    input[..n] == prefix[..n]
}

fn decode_v1(input: &[u8]) -> Result<Option<(Announced, usize)>, HeaderError> {
    let window = &input[..input.len().min(V1_MAX_LEN)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        return if input.len() >= V1_MAX_LEN {
            Err(HeaderError::V1TooLong)
        } else {
            Ok(None)
        };
    };
    let line =
        std::str::from_utf8(&input[..end]).map_err(|_| HeaderError::V1Malformed("not ASCII"))?;
    let fields: Vec<&str> = line.split(' ').collect();
    let announced = match fields[..] {
        ["PROXY", "UNKNOWN", ..] => Announced::Local,
        ["PROXY", family @ ("TCP4" | "TCP6"), source, destination, sport, dport] => {
            let v4 = family == "TCP4";
            Announced::Proxied {
                source: SocketAddr::new(v1_ip(source, v4)?, v1_port(sport)?),
                destination: SocketAddr::new(v1_ip(destination, v4)?, v1_port(dport)?),
            }
        }
        ["PROXY", "TCP4" | "TCP6", ..] => {
            return Err(HeaderError::V1Malformed(
                "expected 'PROXY TCP4|TCP6 source destination sport dport'",
            ))
        }
        _ => {
            return Err(HeaderError::V1Malformed(
                "the protocol must be TCP4, TCP6 or UNKNOWN",
            ))
        }
    };
    Ok(Some((announced, end + 2)))
}

fn v1_ip(text: &str, v4: bool) -> Result<IpAddr, HeaderError> {
    let ip = if v4 {
        text.parse::<Ipv4Addr>().map(IpAddr::V4).ok()
    } else {
        text.parse::<Ipv6Addr>().map(IpAddr::V6).ok()
    };
    ip.ok_or(HeaderError::V1Malformed(
        "an address is not an IP of the line's family",
    ))
}

fn v1_port(text: &str) -> Result<u16, HeaderError> {
    let digits = !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit());
    let port = text.parse::<u16>().ok().filter(|_| digits);
    port.ok_or(HeaderError::V1Malformed(
        "a port is not a number from 0 to 65535",
    ))
}

fn decode_v2(input: &[u8], max_len: usize) -> Result<Option<(Announced, usize)>, HeaderError> {
    if input.len() < V2_FIXED {
        // Check what has arrived, so a wrong version is refused at once.
        if let Some(&version_command) = input.get(12) {
            check_version_command(version_command)?;
        }
        return Ok(None);
    }
    let command = check_version_command(input[12])?;
    let family = input[13];
    let (family_bits, transport) = (family >> 4, family & 0x0f);
    if family_bits > 3 || transport > 2 {
        return Err(HeaderError::V2Family(family));
    }
    let have = usize::from(u16::from_be_bytes([input[14], input[15]]));
    let declared = V2_FIXED + have;
    if declared > max_len {
        return Err(HeaderError::V2TooLong {
            declared,
            limit: max_len,
        });
    }
    let need = match family_bits {
        1 => 12,
        2 => 36,
        3 => 216,
        _ => 0,
    };
    // LOCAL may carry anything (or nothing): its addresses are not used.
    if command == 1 && have < need {
        return Err(HeaderError::V2ShortAddresses { have, need });
    }
    if input.len() < declared {
        return Ok(None);
    }
    let block = &input[V2_FIXED..declared];
    let announced = match (command, family_bits) {
        (1, 1) => Announced::Proxied {
            source: v2_address(&block[0..4], &block[8..10]),
            destination: v2_address(&block[4..8], &block[10..12]),
        },
        (1, 2) => Announced::Proxied {
            source: v2_address(&block[0..16], &block[32..34]),
            destination: v2_address(&block[16..32], &block[34..36]),
        },
        _ => Announced::Local,
    };
    Ok(Some((announced, declared)))
}

/// The command (0 LOCAL, 1 PROXY) if the version and command byte is valid.
fn check_version_command(byte: u8) -> Result<u8, HeaderError> {
    let (version, command) = (byte >> 4, byte & 0x0f);
    if version != 2 {
        return Err(HeaderError::V2Version(version));
    }
    if command > 1 {
        return Err(HeaderError::V2Command(command));
    }
    Ok(command)
}

fn v2_address(ip: &[u8], port: &[u8]) -> SocketAddr {
    let port = u16::from_be_bytes([port[0], port[1]]);
    let ip = match <[u8; 4]>::try_from(ip) {
        Ok(v4) => IpAddr::from(v4),
        Err(_) => {
            let mut v6 = [0u8; 16];
            v6.copy_from_slice(ip);
            IpAddr::from(v6)
        }
    };
    SocketAddr::new(ip, port)
}

/// Which header [`encode`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The text line.
    V1,
    /// The binary header.
    V2,
}

/// The header announcing a connection from `source` to `destination`. Without
/// both addresses of one family (a Unix-socket client) it says so: `PROXY
/// UNKNOWN` for v1, the LOCAL command for v2, and the receiver keeps the
/// socket's own addresses. An IPv4 address mapped into IPv6 is written as IPv4.
pub fn encode(
    version: Version,
    source: Option<SocketAddr>,
    destination: Option<SocketAddr>,
) -> Vec<u8> {
    encode_with_tlvs(version, source, destination, &[])
}

/// PP2_TYPE_SSL: the client connected over TLS (HAProxy's spec, section 2.2.5).
pub const PP2_TYPE_SSL: u8 = 0x20;
/// Inside PP2_TYPE_SSL: the TLS version, as text (`TLSv1.3`).
pub const PP2_SUBTYPE_SSL_VERSION: u8 = 0x21;
/// Inside PP2_TYPE_SSL: the client certificate's subject common name.
pub const PP2_SUBTYPE_SSL_CN: u8 = 0x22;
/// PP2_TYPE_SSL's `client` bits: over TLS; a certificate on this connection.
pub const PP2_CLIENT_SSL: u8 = 0x01;
/// The client presented a certificate on this connection.
pub const PP2_CLIENT_CERT_CONN: u8 = 0x02;

/// A client's TLS session, as a v2 header tells a backend about it.
#[derive(Clone, Copy, Debug)]
pub struct Ssl<'a> {
    /// `TLSv1.3`, `TLSv1.2`.
    pub version: &'a str,
    /// Whether the client presented a certificate, which was verified (a
    /// certificate that fails verification ends the handshake).
    pub client_cert: bool,
    /// The verified certificate's name, sent as PP2_SUBTYPE_SSL_CN.
    pub common_name: Option<&'a str>,
}

/// The PP2_TYPE_SSL TLV for `ssl`, ready to append to a v2 header; `verify`
/// is 0 (verified, or no certificate).
pub fn ssl_tlv(ssl: &Ssl<'_>) -> Vec<u8> {
    let mut value = Vec::new();
    let client = PP2_CLIENT_SSL
        | if ssl.client_cert {
            PP2_CLIENT_CERT_CONN
        } else {
            0
        };
    value.push(client);
    value.extend_from_slice(&0u32.to_be_bytes());
    let mut sub = |kind: u8, text: &str| {
        // Longer values cannot be meaningful names; cut to what fits.
        let bytes = &text.as_bytes()[..text.len().min(1024)];
        value.push(kind);
        value.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        value.extend_from_slice(bytes);
    };
    sub(PP2_SUBTYPE_SSL_VERSION, ssl.version);
    if let Some(cn) = ssl.common_name {
        sub(PP2_SUBTYPE_SSL_CN, cn);
    }
    let mut tlv = vec![PP2_TYPE_SSL];
    tlv.extend_from_slice(&(value.len() as u16).to_be_bytes());
    tlv.extend_from_slice(&value);
    tlv
}

/// [`encode`], with `tlvs` (whole TLVs, such as [`ssl_tlv`]'s) after the
/// addresses of a v2 header; v1 has no place for them and drops them.
pub fn encode_with_tlvs(
    version: Version,
    source: Option<SocketAddr>,
    destination: Option<SocketAddr>,
    tlvs: &[u8],
) -> Vec<u8> {
    let unmap = |a: SocketAddr| match a.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(a, |v4| SocketAddr::new(IpAddr::V4(v4), a.port())),
        IpAddr::V4(_) => a,
    };
    let pair = match (source.map(unmap), destination.map(unmap)) {
        (Some(s), Some(d)) if s.is_ipv4() == d.is_ipv4() => Some((s, d)),
        _ => None,
    };
    match (version, pair) {
        (Version::V1, Some((s, d))) => format!(
            "PROXY {} {} {} {} {}\r\n",
            if s.is_ipv4() { "TCP4" } else { "TCP6" },
            s.ip(),
            d.ip(),
            s.port(),
            d.port()
        )
        .into_bytes(),
        (Version::V1, None) => b"PROXY UNKNOWN\r\n".to_vec(),
        (Version::V2, pair) => {
            let mut out = V2_SIGNATURE.to_vec();
            let mut block = Vec::new();
            let (command, family) = match pair {
                Some((s, d)) => {
                    for ip in [s.ip(), d.ip()] {
                        match ip {
                            IpAddr::V4(v4) => block.extend_from_slice(&v4.octets()),
                            IpAddr::V6(v6) => block.extend_from_slice(&v6.octets()),
                        }
                    }
                    block.extend_from_slice(&s.port().to_be_bytes());
                    block.extend_from_slice(&d.port().to_be_bytes());
                    (0x21, if s.is_ipv4() { 0x11 } else { 0x21 })
                }
                None => (0x20, 0x00),
            };
            out.push(command);
            out.push(family);
            // Addresses (at most 36 bytes) and TLVs that fit in the length.
            let room = usize::from(u16::MAX) - block.len();
            if tlvs.len() <= room {
                block.extend_from_slice(tlvs);
            }
            out.extend_from_slice(&(block.len() as u16).to_be_bytes());
            out.extend_from_slice(&block);
            out
        }
    }
}

#[cfg(test)]
mod tests;
