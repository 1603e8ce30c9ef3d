//! The QUIC connection IDs a UDP listener has seen, and where the
//! connection each names went: a datagram from an address with no flow
//! whose destination ID is known goes to that connection's backend, in a
//! flow of its own (udp/mod.rs). The backend sees its client's address
//! change and validates the new path itself (RFC 9000 §9), so a client that
//! migrates or is rebound by a NAT keeps its server, and a forged datagram
//! with an ID it saw gets no more than any new flow does. Pure data,
//! bounded by the flows it belongs to.

use std::collections::HashMap;
use std::net::SocketAddr;

use tcpmux_proto::sniff::datagram::{long_header, short_header_dcid};
use tcpmux_proto::ServiceName;

/// IDs kept per flow: the client's first destination ID and the server's
/// own from its long headers; a few more than a handshake shows.
const PER_FLOW: usize = 4;

/// Where a connection's datagrams go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub service: ServiceName,
    pub backend: SocketAddr,
    /// The flow that saw the ID last (the newest path's): a number unique
    /// in the daemon, as workers share the table.
    pub flow: u64,
}

/// Connection IDs by their bytes, and each flow's IDs, to forget them when
/// it ends.
#[derive(Default)]
pub struct ConnectionIds {
    owners: HashMap<Box<[u8]>, Owner>,
    by_flow: HashMap<u64, Vec<Box<[u8]>>>,
    /// The lengths of the IDs known: a short header's ID is tried at each.
    lengths: Vec<usize>,
}

impl ConnectionIds {
    /// Notes that `id` names the connection `owner` carries. The newest
    /// flow to see an ID owns it; a flow keeps at most four (`PER_FLOW`).
    pub fn learn(&mut self, id: &[u8], owner: Owner) {
        if id.is_empty() || id.len() > 20 {
            return;
        }
        let ids = self.by_flow.entry(owner.flow).or_default();
        if ids.iter().any(|known| **known == *id) || ids.len() >= PER_FLOW {
            return;
        }
        ids.push(id.into());
        if !self.lengths.contains(&id.len()) {
            self.lengths.push(id.len());
        }
        self.owners.insert(id.into(), owner);
    }

    /// The IDs `flow` has seen, for a flow handed to a successor.
    pub fn of_flow(&self, flow: u64) -> Vec<Vec<u8>> {
        let ids = self
            .by_flow
            .get(&flow)
            .map(Vec::as_slice)
            .unwrap_or_default();
        ids.iter().map(|id| id.to_vec()).collect()
    }

    /// Forgets the IDs `flow` owns still (a later flow may have taken one).
    pub fn forget(&mut self, flow: u64) {
        for id in self.by_flow.remove(&flow).unwrap_or_default() {
            if self.owners.get(&id).is_some_and(|o| o.flow == flow) {
                self.owners.remove(&id);
            }
        }
        if self.owners.is_empty() {
            self.lengths.clear();
        }
    }

    /// The ID `datagram` is addressed to (its long header's destination
    /// ID, or its short header's) and the owner of that connection.
    pub fn find<'d>(&self, datagram: &'d [u8]) -> Option<(&'d [u8], &Owner)> {
        if let Some(header) = long_header(datagram) {
            return Some((header.dcid, self.owners.get(header.dcid)?));
        }
        self.lengths
            .iter()
            .filter_map(|&len| short_header_dcid(datagram, len))
            .find_map(|id| Some((id, self.owners.get(id)?)))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.owners.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(flow: u64) -> Owner {
        Owner {
            service: ServiceName::parse("h3").unwrap(),
            backend: "127.0.0.1:4433".parse().unwrap(),
            flow,
        }
    }

    fn short(id: &[u8]) -> Vec<u8> {
        let mut packet = vec![0x40];
        packet.extend_from_slice(id);
        packet.extend_from_slice(&[0x77; 30]);
        packet
    }

    #[test]
    fn a_short_header_to_a_known_id_finds_its_connection() {
        let mut ids = ConnectionIds::default();
        ids.learn(&[5; 8], owner(1));
        ids.learn(&[6; 16], owner(2));
        assert_eq!(ids.find(&short(&[5; 8])).map(|(_, o)| o.flow), Some(1));
        assert_eq!(ids.find(&short(&[6; 16])).map(|(_, o)| o.flow), Some(2));
        assert_eq!(ids.find(&short(&[7; 8])), None);
        // A long header (a Handshake packet) by its destination ID.
        let mut handshake = vec![0xe0, 0, 0, 0, 1, 8];
        handshake.extend_from_slice(&[5; 8]);
        handshake.extend_from_slice(&[0, 0x40, 0x20]);
        assert_eq!(ids.find(&handshake).map(|(_, o)| o.flow), Some(1));
    }

    #[test]
    fn the_newest_flow_owns_an_id_and_an_ended_one_forgets_only_its_own() {
        let mut ids = ConnectionIds::default();
        ids.learn(&[5; 8], owner(1));
        ids.learn(&[5; 8], owner(2)); // the client, from its new address
        ids.learn(&[9; 8], owner(1));
        ids.forget(1);
        assert_eq!(ids.find(&short(&[5; 8])).map(|(_, o)| o.flow), Some(2));
        assert_eq!(ids.find(&short(&[9; 8])), None);
        ids.forget(2);
        assert_eq!(ids.len(), 0);
        assert!(ids.lengths.is_empty());
    }

    #[test]
    fn a_flow_keeps_a_few_ids_however_many_its_backend_sends() {
        let mut ids = ConnectionIds::default();
        for n in 0..100u8 {
            ids.learn(&[n; 8], owner(1));
        }
        ids.learn(&[], owner(1));
        ids.learn(&[1; 21], owner(1));
        assert_eq!(ids.len(), PER_FLOW);
        assert!(ids.by_flow.contains_key(&1) && !ids.by_flow.contains_key(&2));
    }
}
