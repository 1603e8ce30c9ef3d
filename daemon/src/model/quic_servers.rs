//! QUIC servers that name themselves in the connection IDs they issue
//! (`quic_server_id` on a `proxy_udp` backend; the plaintext layout of
//! QUIC-LB, draft-ietf-quic-load-balancers: the server's ID right after the
//! connection ID's first byte). A client that moves *and* switches to a
//! fresh connection ID, which the daemon never saw (active migration, RFC
//! 9000 §9.5), is still found by its server's ID. Pure data.

use std::net::SocketAddr;

use tcpmux_proto::sniff::datagram::short_header_dcid;
use tcpmux_proto::ServiceName;

/// The longest server ID: QUIC-LB's limit (the connection ID, at most 20
/// bytes, keeps its first byte and room for a nonce).
pub const MAX_QUIC_SERVER_ID: usize = 15;

/// One backend's server ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuicServer {
    pub id: Vec<u8>,
    pub service: ServiceName,
    pub backend: SocketAddr,
}

/// Every `quic_server_id` of the configuration, none the beginning of
/// another (the config refuses that), so at most one matches a datagram.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuicServers(pub Vec<QuicServer>);

impl QuicServers {
    /// The server a short-header packet (a connection past its handshake)
    /// is addressed to, by the ID in its destination connection ID. Long
    /// headers are left out: a new client's Initial carries an ID it made
    /// up, which must not pick a server past the routing by name.
    pub fn find(&self, datagram: &[u8]) -> Option<&QuicServer> {
        self.0.iter().find(|server| {
            short_header_dcid(datagram, 1 + server.id.len()).is_some_and(|id| id[1..] == server.id)
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers() -> QuicServers {
        let server = |id: &[u8], port| QuicServer {
            id: id.to_vec(),
            service: ServiceName::parse("h3").unwrap(),
            backend: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        QuicServers(vec![server(&[0xa1], 1), server(&[0xb2, 0x07], 2)])
    }

    fn short(dcid: &[u8]) -> Vec<u8> {
        let mut packet = vec![0x41];
        packet.extend_from_slice(dcid);
        packet.resize(64, 0x5a);
        packet
    }

    #[test]
    fn a_short_header_finds_its_server_by_the_id_after_the_first_byte() {
        let servers = servers();
        let port = |d: &[u8]| servers.find(d).map(|s| s.backend.port());
        assert_eq!(port(&short(&[0x3f, 0xa1, 9, 9, 9, 9, 9, 9])), Some(1));
        assert_eq!(port(&short(&[0x00, 0xb2, 0x07, 1, 2, 3, 4, 5])), Some(2));
        assert_eq!(port(&short(&[0x00, 0xb2, 0x08, 1, 2, 3, 4, 5])), None);
        assert_eq!(port(&short(&[0xa1, 0x00, 0, 0, 0, 0, 0, 0])), None);
        // A long header (an Initial's made-up ID) never matches.
        let mut initial = short(&[0x3f, 0xa1, 9, 9, 9, 9, 9, 9]);
        initial[0] = 0xc3;
        assert_eq!(port(&initial), None);
        assert_eq!(port(&[0x41, 0x3f]), None, "too short for a packet");
    }
}
