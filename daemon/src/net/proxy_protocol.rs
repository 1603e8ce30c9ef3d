//! The PROXY protocol (HAProxy's spec, v1 text and v2 binary) as the daemon uses
//! it: the header a proxy service sends its backend so it sees the real client,
//! and the header a listener accepts from trusted upstreams (HAProxy, a cloud
//! load balancer) for the same reason. The codec is pure code in
//! `tcpmux_proto::proxy_header`; this module holds the daemon's limit.

use std::net::SocketAddr;

use tcpmux_proto::proxy_header::{self};
pub(crate) use tcpmux_proto::proxy_header::{Announced, HeaderError};

use crate::model::{ProxyVersion, TlsClient};

/// The most header bytes accepted from an upstream. v1 is at most 107 bytes; a
/// v2 header may carry TLVs, and every cloud load balancer's fit in 4 KiB. A v2
/// header declaring more is refused as soon as its first 16 bytes arrive.
pub(crate) const MAX_HEADER: usize = 4096;

/// The header announcing a connection from `source` to `destination` (v1
/// `PROXY UNKNOWN` or v2 LOCAL without both addresses of one family).
pub(crate) fn encode(
    version: ProxyVersion,
    source: Option<SocketAddr>,
    destination: Option<SocketAddr>,
) -> Vec<u8> {
    proxy_header::encode(version, source, destination)
}

/// [`encode`] for a client that came over TLS: a v2 header also carries
/// PP2_TYPE_SSL with the TLS version and the verified certificate's name as
/// PP2_SUBTYPE_SSL_CN, as HAProxy sends them.
pub(crate) fn encode_tls(
    version: ProxyVersion,
    source: Option<SocketAddr>,
    destination: Option<SocketAddr>,
    tls: &TlsClient,
) -> Vec<u8> {
    let ssl = proxy_header::Ssl {
        version: &tls.version,
        client_cert: !tls.names.is_empty(),
        common_name: tls.common_name.as_deref().or(tls.name()),
    };
    proxy_header::encode_with_tlvs(version, source, destination, &proxy_header::ssl_tlv(&ssl))
}

/// The header at the start of `input`: `Ok(None)` means more bytes are needed;
/// `Ok(Some((announced, length)))` that the first `length` bytes were the header
/// and the rest belongs to the TCPMUX request.
pub(crate) fn decode(input: &[u8]) -> Result<Option<(Announced, usize)>, HeaderError> {
    proxy_header::decode(input, MAX_HEADER)
}
