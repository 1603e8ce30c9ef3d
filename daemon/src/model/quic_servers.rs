//! QUIC servers that name themselves in the connection IDs they issue
//! (`quic_server_id` on a `proxy_udp` backend; the plaintext layout of
//! QUIC-LB, draft-ietf-quic-load-balancers: the server's ID right after the
//! connection ID's first byte). A client that moves *and* switches to a
//! fresh connection ID, which the daemon never saw (active migration, RFC
//! 9000 §9.5), is still found by its server's ID. Pure data.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Bound;

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

/// Every `quic_server_id` of the configuration by ID, none the beginning of
/// another (`add` refuses that), so at most one matches a datagram: the
/// greatest ID not after the datagram's bytes, found in logarithmic time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuicServers(BTreeMap<Vec<u8>, QuicServer>);

impl QuicServers {
    /// Adds `server`; the one whose ID begins it or begins with it, if
    /// there is one (a connection ID could name either).
    pub fn add(&mut self, server: QuicServer) -> Result<(), &QuicServer> {
        let id = server.id.as_slice();
        let before = self
            .0
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(id)))
            .next_back();
        let after = self
            .0
            .range::<[u8], _>((Bound::Excluded(id), Bound::Unbounded))
            .next();
        // Among prefix-free IDs, one that begins `id` is the greatest not
        // after it, and one that begins with `id` the least after it.
        let clash = before
            .filter(|(other, _)| id.starts_with(other))
            .or(after.filter(|(other, _)| other.starts_with(id)))
            .map(|(other, _)| other.clone());
        if let Some(clash) = clash {
            return Err(&self.0[&clash]);
        }
        self.0.insert(server.id.clone(), server);
        Ok(())
    }

    /// The server a short-header packet (a connection past its handshake)
    /// is addressed to, by the ID in its destination connection ID. Long
    /// headers are left out: a new client's Initial carries an ID it made
    /// up, which must not pick a server past the routing by name.
    pub fn find(&self, datagram: &[u8]) -> Option<&QuicServer> {
        if self.0.is_empty() {
            return None;
        }
        // The longest ID the packet can hold, after the ID's first byte.
        let room = datagram
            .len()
            .saturating_sub(21)
            .min(1 + MAX_QUIC_SERVER_ID);
        let dcid = short_header_dcid(datagram, room)?;
        let after_first = dcid.get(1..)?;
        let mut server = self
            .0
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(after_first)));
        let (_, server) = server.next_back()?;
        after_first.starts_with(&server.id).then_some(server)
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
        let mut servers = QuicServers::default();
        servers.add(server(&[0xa1], 1)).unwrap();
        servers.add(server(&[0xb2, 0x07], 2)).unwrap();
        servers
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

    #[test]
    fn an_id_that_begins_another_is_refused_either_way_round() {
        let mut servers = servers();
        let server = |id: &[u8]| QuicServer {
            id: id.to_vec(),
            service: ServiceName::parse("h3").unwrap(),
            backend: SocketAddr::from(([127, 0, 0, 1], 9)),
        };
        let clash = |servers: &mut QuicServers, id: &[u8]| {
            servers.add(server(id)).err().map(|s| s.backend.port())
        };
        assert_eq!(
            clash(&mut servers, &[0xa1, 0x00]),
            Some(1),
            "begins with a1"
        );
        assert_eq!(clash(&mut servers, &[0xb2]), Some(2), "begins b2 07");
        assert_eq!(clash(&mut servers, &[0xb2, 0x07]), Some(2), "the same");
        assert_eq!(clash(&mut servers, &[0xa2]), None);
        assert_eq!(clash(&mut servers, &[0xb2, 0x06, 0x01]), None);
        // Among many, each still found by its own ID.
        let port = |d: &[u8]| servers.find(d).map(|s| s.backend.port());
        assert_eq!(port(&short(&[0x00, 0xb2, 0x07, 1, 2, 3, 4, 5])), Some(2));
        assert_eq!(port(&short(&[0x00, 0xb2, 0x06, 1, 2, 3, 4, 5])), Some(9));
        assert_eq!(port(&short(&[0x00, 0xb2, 0x06, 2, 2, 3, 4, 5])), None);
    }
}
