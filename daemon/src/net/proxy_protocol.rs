//! The PROXY protocol (HAProxy's spec, v1 text and v2 binary): the header a proxy
//! service sends its backend so it sees the real client, and the header a listener
//! accepts from trusted upstreams (HAProxy, a cloud load balancer) for the same
//! reason. Parsing is the `ppp` crate's; this module only adapts it.

use std::net::SocketAddr;

use ppp::v2::{Addresses, Builder, Command, Protocol, Version};
use ppp::{HeaderResult, PartialResult};

use crate::model::ProxyVersion;

/// The most header bytes we buffer from an upstream. v1 is at most 107 bytes; v2
/// may carry TLVs, and real load balancers send well under this.
pub const MAX_HEADER: usize = 4096;

/// The header announcing a connection from `source` to `destination`. Without both
/// addresses of one family (a Unix-socket client) it says so: `PROXY UNKNOWN` for
/// v1, the LOCAL command for v2, and the backend uses the socket's own addresses.
pub fn encode(
    version: ProxyVersion,
    source: Option<SocketAddr>,
    destination: Option<SocketAddr>,
) -> Vec<u8> {
    let pair = match (source, destination) {
        (Some(s), Some(d)) if s.is_ipv4() == d.is_ipv4() => Some((s, d)),
        _ => None,
    };
    match (version, pair) {
        (ProxyVersion::V1, Some((s, d))) => format!(
            "PROXY {} {} {} {} {}\r\n",
            if s.is_ipv4() { "TCP4" } else { "TCP6" },
            s.ip(),
            d.ip(),
            s.port(),
            d.port()
        )
        .into_bytes(),
        (ProxyVersion::V1, None) => b"PROXY UNKNOWN\r\n".to_vec(),
        (ProxyVersion::V2, pair) => {
            let builder = match pair {
                Some(addresses) => Builder::with_addresses(
                    Version::Two | Command::Proxy,
                    Protocol::Stream,
                    addresses,
                ),
                None => Builder::with_addresses(
                    Version::Two | Command::Local,
                    Protocol::Unspecified,
                    Addresses::Unspecified,
                ),
            };
            // Building only fails for payloads past 64 KiB; ours has none.
            builder.build().unwrap_or_default()
        }
    }
}

/// What a received header said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announced {
    /// The real client and the address it connected to.
    Proxied {
        source: SocketAddr,
        destination: SocketAddr,
    },
    /// A health check or other connection of the upstream's own (v2 LOCAL, v1
    /// UNKNOWN, or a non-IP family): keep the socket's addresses.
    Local,
}

/// Why a header was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("invalid PROXY protocol header: {0}")]
    Invalid(String),
    #[error("PROXY protocol header longer than {MAX_HEADER} bytes")]
    TooLong,
}

/// Tries to read a header at the start of `input`: `Ok(None)` means more bytes are
/// needed; `Ok(Some((announced, length)))` means the first `length` bytes were the
/// header and the rest belongs to the TCPMUX request.
pub fn decode(input: &[u8]) -> Result<Option<(Announced, usize)>, HeaderError> {
    const V1_PREFIX: &[u8] = b"PROXY ";
    const V1_MAX: usize = 107;
    let starts_like = |prefix: &[u8]| {
        let n = input.len().min(prefix.len());
        input[..n] == prefix[..n]
    };
    let v1 = starts_like(V1_PREFIX);
    if !v1 && !starts_like(ppp::v2::PROTOCOL_PREFIX) {
        return Err(HeaderError::Invalid("no PROXY protocol signature".into()));
    }
    let result = HeaderResult::parse(input);
    if result.is_incomplete() {
        // ppp calls some malformed v1 lines incomplete; a v1 line that has ended
        // (or could not fit the spec's 107 bytes) will never become valid.
        let v1_line_ended = input.windows(2).any(|w| w == b"\r\n") || input.len() > V1_MAX;
        return if v1 && v1_line_ended {
            Err(HeaderError::Invalid("malformed v1 line".into()))
        } else if input.len() >= MAX_HEADER {
            Err(HeaderError::TooLong)
        } else {
            Ok(None)
        };
    }
    match result {
        HeaderResult::V1(Ok(header)) => {
            let announced = match header.addresses {
                ppp::v1::Addresses::Tcp4(a) => Announced::Proxied {
                    source: SocketAddr::from((a.source_address, a.source_port)),
                    destination: SocketAddr::from((a.destination_address, a.destination_port)),
                },
                ppp::v1::Addresses::Tcp6(a) => Announced::Proxied {
                    source: SocketAddr::from((a.source_address, a.source_port)),
                    destination: SocketAddr::from((a.destination_address, a.destination_port)),
                },
                ppp::v1::Addresses::Unknown => Announced::Local,
            };
            Ok(Some((announced, header.header.len())))
        }
        HeaderResult::V2(Ok(header)) => {
            let announced = match (header.command, header.addresses) {
                (Command::Proxy, Addresses::IPv4(a)) => Announced::Proxied {
                    source: SocketAddr::from((a.source_address, a.source_port)),
                    destination: SocketAddr::from((a.destination_address, a.destination_port)),
                },
                (Command::Proxy, Addresses::IPv6(a)) => Announced::Proxied {
                    source: SocketAddr::from((a.source_address, a.source_port)),
                    destination: SocketAddr::from((a.destination_address, a.destination_port)),
                },
                _ => Announced::Local,
            };
            Ok(Some((announced, header.len())))
        }
        HeaderResult::V1(Err(e)) => Err(HeaderError::Invalid(e.to_string())),
        HeaderResult::V2(Err(e)) => Err(HeaderError::Invalid(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v1_round_trip_with_trailing_request() {
        let mut bytes = encode(
            ProxyVersion::V1,
            Some(addr("192.0.2.7:50000")),
            Some(addr("127.0.0.1:1")),
        );
        assert_eq!(bytes, b"PROXY TCP4 192.0.2.7 127.0.0.1 50000 1\r\n");
        let header_len = bytes.len();
        bytes.extend_from_slice(b"echo\r\n");
        assert_eq!(
            decode(&bytes),
            Ok(Some((
                Announced::Proxied {
                    source: addr("192.0.2.7:50000"),
                    destination: addr("127.0.0.1:1")
                },
                header_len
            )))
        );
    }

    #[test]
    fn v2_round_trip_ipv6_and_every_prefix_is_incomplete() {
        let bytes = encode(
            ProxyVersion::V2,
            Some(addr("[2001:db8::1]:4000")),
            Some(addr("[::1]:1")),
        );
        assert_eq!(bytes.len(), 16 + 36);
        for end in 0..bytes.len() {
            assert_eq!(decode(&bytes[..end]), Ok(None), "prefix {end}");
        }
        let mut with_request = bytes.clone();
        with_request.extend_from_slice(b"help\r\n");
        assert_eq!(
            decode(&with_request),
            Ok(Some((
                Announced::Proxied {
                    source: addr("[2001:db8::1]:4000"),
                    destination: addr("[::1]:1")
                },
                bytes.len()
            )))
        );
    }

    #[test]
    fn unix_clients_are_announced_as_local() {
        assert_eq!(encode(ProxyVersion::V1, None, None), b"PROXY UNKNOWN\r\n");
        let v2 = encode(ProxyVersion::V2, None, None);
        assert_eq!(decode(&v2), Ok(Some((Announced::Local, 16))));
        assert_eq!(
            decode(b"PROXY UNKNOWN\r\n"),
            Ok(Some((Announced::Local, 15)))
        );
    }

    #[test]
    fn garbage_is_refused_not_waited_for() {
        assert!(matches!(decode(b"echo\r\n"), Err(HeaderError::Invalid(_))));
        assert!(matches!(
            decode(b"PROXY TCP4 nonsense\r\n"),
            Err(HeaderError::Invalid(_))
        ));
    }
}
