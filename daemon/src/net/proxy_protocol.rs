//! The PROXY protocol (HAProxy's spec, v1 text and v2 binary) as the daemon uses
//! it: the header a proxy service sends its backend so it sees the real client,
//! and the header a listener accepts from trusted upstreams (HAProxy, a cloud
//! load balancer) for the same reason. The codec is pure code in
//! `tcpmux_proto::proxy_header`; this module holds the daemon's limit.

use std::net::SocketAddr;

use tcpmux_proto::proxy_header::{self};
pub use tcpmux_proto::proxy_header::{Announced, HeaderError};

use crate::model::ProxyVersion;

/// The most header bytes accepted from an upstream. v1 is at most 107 bytes; a
/// v2 header may carry TLVs, and every cloud load balancer's fit in 4 KiB. A v2
/// header declaring more is refused as soon as its first 16 bytes arrive.
pub const MAX_HEADER: usize = 4096;

/// The header announcing a connection from `source` to `destination` (v1
/// `PROXY UNKNOWN` or v2 LOCAL without both addresses of one family).
pub fn encode(
    version: ProxyVersion,
    source: Option<SocketAddr>,
    destination: Option<SocketAddr>,
) -> Vec<u8> {
    proxy_header::encode(version, source, destination)
}

/// The header at the start of `input`: `Ok(None)` means more bytes are needed;
/// `Ok(Some((announced, length)))` that the first `length` bytes were the header
/// and the rest belongs to the TCPMUX request.
pub fn decode(input: &[u8]) -> Result<Option<(Announced, usize)>, HeaderError> {
    proxy_header::decode(input, MAX_HEADER)
}
