//! The flows of one UDP listener, by client address, within the limits:
//! `max_udp_flows` in all and `max_udp_flows_per_ip` per source address.
//! When it is full, a new flow takes the place of the oldest flow whose
//! client sent one datagram only, which is all a spoofed source ever sends;
//! only when there is none, of an established flow idle since the last pass
//! (the CLOCK algorithm: one used since gets a second chance). So a
//! spoofed-source flood, however fast, evicts its own flows and never grows
//! the table. Pure data: a flow's activity is the caller's to say.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

/// A flow's entry: its value and its id (a client's later flow has
/// another).
struct Entry<V> {
    value: V,
    id: u64,
}

/// Why a new flow has no place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// Its source address holds `max_udp_flows_per_ip` flows already.
    PerIp,
    /// The daemon holds `max_udp_flows`, none of them in this table to
    /// give up.
    Daemon,
}

/// What the table asks of a flow when it needs room.
pub(crate) trait Activity {
    /// Whether its client sent more than the first datagram.
    fn established(&self) -> bool;
    /// Whether its client sent a datagram since this was last asked (and
    /// forgets it).
    fn used_since_asked(&self) -> bool;
}

/// Flows by client address.
pub(crate) struct FlowTable<V> {
    flows: HashMap<SocketAddr, Entry<V>>,
    per_ip: HashMap<IpAddr, usize>,
    /// New flows, oldest first: the first evicted, unless established by
    /// then (they move to `established`). An entry whose flow is gone, or
    /// whose id differs, is stale and skipped, here and there.
    probation: VecDeque<(SocketAddr, u64)>,
    /// Established flows in the order a CLOCK pass looks at them.
    established: VecDeque<(SocketAddr, u64)>,
    max: usize,
    max_per_ip: Option<usize>,
    next_id: u64,
}

impl<V> FlowTable<V> {
    pub(crate) fn new(max: usize, max_per_ip: Option<usize>) -> Self {
        FlowTable {
            flows: HashMap::new(),
            per_ip: HashMap::new(),
            probation: VecDeque::new(),
            established: VecDeque::new(),
            max: max.max(1),
            max_per_ip,
            next_id: 1,
        }
    }

    /// Numbers its flows from `first` on (unique across the tables that
    /// share a connection-ID table).
    pub(crate) fn numbered_from(mut self, first: u64) -> Self {
        self.next_id = first.max(1);
        self
    }

    /// New limits (a reload); flows beyond them stay until they end.
    pub(crate) fn set_limits(&mut self, max: usize, max_per_ip: Option<usize>) {
        self.max = max.max(1);
        self.max_per_ip = max_per_ip;
    }

    pub(crate) fn len(&self) -> usize {
        self.flows.len()
    }

    pub(crate) fn get(&self, client: &SocketAddr) -> Option<&V> {
        self.flows.get(client).map(|e| &e.value)
    }

    /// Room for a flow from `client`: `Ok` with the flows evicted to make
    /// it (see [`FlowTable::victim`]), or why there is none.
    #[cfg(test)]
    pub(crate) fn make_room(&mut self, client: SocketAddr) -> Result<Vec<V>, Full>
    where
        V: Activity,
    {
        self.make_room_among(client, 0)
    }

    /// [`FlowTable::make_room`] when `others` flows are held elsewhere (the
    /// daemon's other listeners and workers) within the same `max`: this
    /// table gives up its own to stay within it.
    pub(crate) fn make_room_among(
        &mut self,
        client: SocketAddr,
        others: usize,
    ) -> Result<Vec<V>, Full>
    where
        V: Activity,
    {
        let held = self.per_ip.get(&client.ip()).copied().unwrap_or(0);
        if self.max_per_ip.is_some_and(|max| held >= max) {
            return Err(Full::PerIp);
        }
        if others >= self.max {
            // The others hold it all: nothing of this table's would do.
            return Err(Full::Daemon);
        }
        let mut evicted = Vec::new();
        while self.flows.len() + others >= self.max {
            let Some(victim) = self.victim() else {
                break;
            };
            if let Some(value) = self.remove(&victim.0, victim.1) {
                evicted.push(value);
            }
        }
        Ok(evicted)
    }

    /// The flow to evict: the oldest on probation that is still a single
    /// datagram, else an established one by CLOCK.
    fn victim(&mut self) -> Option<(SocketAddr, u64)>
    where
        V: Activity,
    {
        while let Some((addr, id)) = self.probation.pop_front() {
            let Some(entry) = self.flows.get(&addr).filter(|e| e.id == id) else {
                continue; // stale: the flow ended
            };
            if !entry.value.established() {
                return Some((addr, id));
            }
            self.established.push_back((addr, id));
        }
        while let Some((addr, id)) = self.established.pop_front() {
            let Some(entry) = self.flows.get(&addr).filter(|e| e.id == id) else {
                continue;
            };
            if !entry.value.used_since_asked() {
                return Some((addr, id));
            }
            // Used since the last pass: a second chance, at the back.
            self.established.push_back((addr, id));
        }
        None
    }

    /// The id [`FlowTable::insert`] gives the next flow.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Adds the flow of `client` (after [`FlowTable::make_room`]); its id,
    /// for [`FlowTable::remove`].
    pub(crate) fn insert(&mut self, client: SocketAddr, value: V) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        if self.flows.insert(client, Entry { value, id }).is_none() {
            *self.per_ip.entry(client.ip()).or_insert(0) += 1;
        }
        self.probation.push_back((client, id));
        // Ended flows leave stale queue entries: drop them once they
        // outnumber the live ones, so the queues stay within twice the table.
        if self.probation.len() + self.established.len() > 2 * self.flows.len() + 16 {
            let flows = &self.flows;
            let live =
                |(addr, id): &(SocketAddr, u64)| flows.get(addr).is_some_and(|e| e.id == *id);
            self.probation.retain(live);
            self.established.retain(live);
        }
        id
    }

    /// Removes `client`'s flow if it is still flow `id`.
    pub(crate) fn remove(&mut self, client: &SocketAddr, id: u64) -> Option<V> {
        if !matches!(self.flows.get(client), Some(e) if e.id == id) {
            return None;
        }
        let entry = self.flows.remove(client)?;
        if let Some(count) = self.per_ip.get_mut(&client.ip()) {
            *count -= 1;
            if *count == 0 {
                self.per_ip.remove(&client.ip());
            }
        }
        Some(entry.value)
    }

    /// Every flow.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.flows.values().map(|e| &e.value)
    }

    /// Every flow, for shutdown.
    pub(crate) fn drain(&mut self) -> Vec<V> {
        self.per_ip.clear();
        self.probation.clear();
        self.established.clear();
        self.flows.drain().map(|(_, e)| e.value).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn addr(ip: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, ip], port))
    }

    /// A flow as the tests drive it: `talk` is its client's later datagram.
    #[derive(Default)]
    struct Flow {
        used: Cell<bool>,
        established: Cell<bool>,
    }

    impl Flow {
        fn talk(&self) {
            self.used.set(true);
            self.established.set(true);
        }
    }

    impl Activity for Flow {
        fn established(&self) -> bool {
            self.established.get()
        }
        fn used_since_asked(&self) -> bool {
            self.used.replace(false)
        }
    }

    #[test]
    fn a_full_table_evicts_a_single_datagram_flow_first_then_by_clock() {
        let mut table: FlowTable<Flow> = FlowTable::new(3, None);
        for port in [1, 2, 3] {
            assert!(table.make_room(addr(1, port)).unwrap().is_empty());
            table.insert(addr(1, port), Flow::default());
        }
        // The first flow's client talks again: the second is evicted.
        table.get(&addr(1, 1)).unwrap().talk();
        assert_eq!(table.make_room(addr(2, 9)).unwrap().len(), 1);
        table.insert(addr(2, 9), Flow::default());
        assert_eq!(table.len(), 3);
        assert!(table.get(&addr(1, 2)).is_none() && table.get(&addr(1, 1)).is_some());
        // When every flow is established and was used, one is still
        // evicted: each gets one second chance, no more.
        for flow in [addr(1, 1), addr(1, 3), addr(2, 9)] {
            table.get(&flow).unwrap().talk();
        }
        assert_eq!(table.make_room(addr(3, 9)).unwrap().len(), 1);
    }

    #[test]
    fn a_fast_flood_of_sources_never_evicts_an_established_flow_or_grows() {
        let mut table: FlowTable<Flow> = FlowTable::new(100, None);
        let keeper = addr(9, 9);
        table.insert(keeper, Flow::default());
        table.get(&keeper).unwrap().talk();
        // Ten thousand one-datagram flows, the keeper silent throughout:
        // only the flood's own flows make room.
        for n in 0..10_000u32 {
            let client = SocketAddr::from(([192, 0, (n >> 8) as u8, n as u8], 4000));
            table.make_room(client).unwrap();
            table.insert(client, Flow::default());
            assert!(table.len() <= 100);
            assert!(table.probation.len() + table.established.len() <= 2 * 100 + 16);
        }
        assert!(table.get(&keeper).is_some(), "the established flow stays");
    }

    #[test]
    fn one_address_holds_at_most_its_share() {
        let mut table: FlowTable<Flow> = FlowTable::new(100, Some(2));
        let mut ids = Vec::new();
        for port in [1, 2] {
            table.make_room(addr(1, port)).unwrap();
            ids.push(table.insert(addr(1, port), Flow::default()));
        }
        assert_eq!(table.make_room(addr(1, 3)).err(), Some(Full::PerIp));
        assert!(table.make_room(addr(2, 3)).is_ok());
        assert!(table.remove(&addr(1, 1), ids[0]).is_some());
        assert!(table.make_room(addr(1, 3)).is_ok());
        // A stale id removes nothing.
        assert!(table.remove(&addr(1, 2), ids[0]).is_none());
    }

    #[test]
    fn flows_held_elsewhere_count_against_the_same_limit() {
        let mut table: FlowTable<Flow> = FlowTable::new(4, None);
        for port in [1, 2] {
            table.make_room_among(addr(1, port), 2).unwrap();
            table.insert(addr(1, port), Flow::default());
        }
        // Two here and two elsewhere: this table gives up one of its own.
        assert_eq!(table.make_room_among(addr(1, 3), 2).unwrap().len(), 1);
        // All four elsewhere: nothing here to give up.
        let mut empty = FlowTable::<Flow>::new(4, None);
        assert_eq!(
            empty.make_room_among(addr(1, 4), 4).err(),
            Some(Full::Daemon)
        );
    }
}
