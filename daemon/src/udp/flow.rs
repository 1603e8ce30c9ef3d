//! One UDP flow: its backend socket, its activity, and its end (idle, a
//! backend error, evicted, killed, or its listener closed), which logs it.
//! A flow has no task: its replies wake the listener's (replies.rs).

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::backends::Backends;
pub(super) use super::ended::Ended;
use super::gather::Gathering;
use super::route::Dropped;
use super::table::{Activity, FlowTable, Full};
use crate::model::{ConnectionIds, Endpoint, HandedFlow, UdpSettings};
use crate::net::datagram::Destination;
use crate::ops::access_log;
use crate::ops::session_table::Registered;
use crate::ops::udp_metrics::UdpCounters;
use crate::pool::{Held, Pool};
use tcpmux_proto::ServiceName;

/// The largest datagram: what one UDP datagram can carry.
pub(super) const MAX_DATAGRAM: usize = 65_535;

/// One listener's flows, and the clock their activity is kept in. A flow
/// counts in the daemon's `tcpmuxd_udp_flows` exactly while it is in the
/// table: every way in and out of it is here.
pub(crate) struct Flows {
    table: Mutex<FlowTable<Arc<Flow>>>,
    counters: Arc<UdpCounters>,
    started: Instant,
    /// The flows' backend sockets, which the listener's task waits on.
    pub(super) backends: Backends<Flow>,
    /// QUIC clients whose ClientHello is still arriving.
    pub(super) gathering: Mutex<Gathering>,
    /// The QUIC connections the flows carry, by connection ID: the
    /// listener address's, which every worker serving it shares.
    cids: Arc<Mutex<ConnectionIds>>,
    /// The listener socket's address.
    pub(super) local: SocketAddr,
}

impl Flows {
    /// `first_id` numbers its flows; `cids` is its address's table;
    /// `counters` the daemon's.
    pub(super) fn new(
        (first_id, local): (u64, SocketAddr),
        cids: Arc<Mutex<ConnectionIds>>,
        counters: Arc<UdpCounters>,
    ) -> std::io::Result<Flows> {
        Ok(Flows {
            table: Mutex::new(FlowTable::new(1, None).numbered_from(first_id)),
            counters,
            started: Instant::now(),
            backends: Backends::new()?,
            gathering: Mutex::new(Gathering::default()),
            cids,
            local,
        })
    }

    /// Milliseconds since the listener started: the flows' clock.
    pub(super) fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub(super) fn cids(&self) -> std::sync::MutexGuard<'_, ConnectionIds> {
        self.cids.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn table(&self) -> std::sync::MutexGuard<'_, FlowTable<Arc<Flow>>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Room for `client`'s new flow within `settings`' limits, the flows
    /// it takes the place of told to end; why not, when there is none.
    pub(super) fn make_room(
        &self,
        client: SocketAddr,
        settings: &UdpSettings,
    ) -> Result<(), Dropped> {
        let evicted = {
            let mut table = self.table();
            table.set_limits(settings.max_flows, settings.max_flows_per_ip);
            // `max_udp_flows` is the daemon's: other listeners' and
            // workers' flows count too.
            let others = (self.counters.active() as usize).saturating_sub(table.len());
            table.make_room_among(client, others)
        };
        match evicted {
            Ok(evicted) => {
                for flow in evicted {
                    self.counters.flow_ended();
                    flow.end(Ended::Evicted);
                }
                Ok(())
            }
            Err(Full::PerIp) => Err(Dropped::PerIpLimit),
            Err(Full::Daemon) => Err(Dropped::FlowLimit),
        }
    }

    /// Adds `client`'s flow, made by `make` from its id, of `service`
    /// routed by `routed` (counted as started, unless a predecessor started
    /// it).
    pub(super) fn insert(
        &self,
        client: SocketAddr,
        make: impl FnOnce(u64) -> Arc<Flow>,
        (service, routed): (&str, &'static str),
        adopted: bool,
    ) -> Arc<Flow> {
        let flow = {
            let mut table = self.table();
            let flow = make(table.next_id());
            table.insert(client, Arc::clone(&flow));
            flow
        };
        match adopted {
            true => self.counters.flow_adopted(),
            false => self.counters.flow_started(service, routed),
        }
        flow
    }

    /// Takes `client`'s flow `id` out, if it is still in (an evicted or
    /// drained one is not).
    fn remove(&self, client: &SocketAddr, id: u64) {
        if self.table().remove(client, id).is_some() {
            self.counters.flow_ended();
        }
    }

    /// Ends every flow by handing it over (an upgrade): what each gives a
    /// successor.
    pub(super) fn hand_over(&self) -> Vec<HandedFlow> {
        let flows = self.table().drain();
        flows
            .iter()
            .filter_map(|flow| {
                self.counters.flow_ended();
                flow.hand_over()
            })
            .collect()
    }

    /// Ends every flow: the listener stops serving.
    pub(super) fn end_all(&self) {
        let flows = self.table().drain();
        for flow in flows {
            self.counters.flow_ended();
            flow.end(Ended::ListenerClosed);
        }
    }
}

/// A flow: what the listener, its sweep and the admin socket share.
pub(crate) struct Flow {
    /// Connected to its backend; non-blocking, on the listener's epoll set.
    pub(super) backend: std::net::UdpSocket,
    /// Its slot on that set.
    pub(super) slot: AtomicUsize,
    pub(super) client: SocketAddr,
    pub(super) id: u64,
    /// When a datagram last went either way, on the listener's clock.
    last: AtomicU64,
    /// Whether the client sent a datagram since the table last asked.
    used: AtomicBool,
    /// Whether the client sent more than its first datagram.
    established: AtomicBool,
    /// Why it ended (0 until it does): it ends once.
    ended: AtomicU8,
    /// A QUIC flow: its server's connection IDs are learned from replies.
    pub(super) quic: bool,
    /// Its idle timeout in milliseconds, which the listener's sweep
    /// checks (sweep.rs).
    idle_ms: u64,
    /// Replies each client datagram expects (`udp_responses`); 0: not
    /// counted. And the replies still owed: at none, the flow has ended.
    answers: u32,
    owed: AtomicU32,
    started: Instant,
    /// Its row in the live-session table (the bytes each way, and the kill
    /// an operator may send), given up when the flow is dropped.
    pub(super) session: Registered,
    pub(super) service: ServiceName,
    pub(super) routed: &'static str,
    pub(super) backend_addr: SocketAddr,
    /// The service's UDP pool, told how the flow ended, and the flow's
    /// place in its backend's count.
    pool: (Arc<Pool>, Held),
    /// The local address the client sent to, on a wildcard-bound socket:
    /// the replies leave from it.
    pub(super) reply_from: Option<Destination>,
    pub(super) flows: Arc<Flows>,
}

/// What a new flow is made of, besides its id.
pub(super) struct Parts {
    pub(super) backend: (SocketAddr, std::net::UdpSocket),
    pub(super) client: SocketAddr,
    pub(super) session: Registered,
    pub(super) service: ServiceName,
    pub(super) routed: &'static str,
    pub(super) pool: (Arc<Pool>, Held),
    pub(super) idle: Duration,
    pub(super) answers: u32,
    pub(super) quic: bool,
    pub(super) reply_from: Option<Destination>,
}

impl Flow {
    pub(super) fn new(parts: Parts, id: u64, flows: Arc<Flows>) -> Flow {
        let (backend_addr, backend) = parts.backend;
        Flow {
            backend,
            slot: AtomicUsize::new(usize::MAX),
            client: parts.client,
            id,
            last: AtomicU64::new(flows.now()),
            used: AtomicBool::new(false),
            established: AtomicBool::new(false),
            ended: AtomicU8::new(0),
            quic: parts.quic,
            idle_ms: u64::try_from(parts.idle.as_millis()).unwrap_or(u64::MAX),
            answers: parts.answers,
            owed: AtomicU32::new(0),
            started: Instant::now(),
            session: parts.session,
            service: parts.service,
            routed: parts.routed,
            backend_addr,
            pool: parts.pool,
            reply_from: parts.reply_from,
            flows,
        }
    }

    /// Its idle timeout.
    pub(super) fn idle(&self) -> Duration {
        Duration::from_millis(self.idle_ms)
    }

    /// Whether no datagram went either way for its idle timeout, by `now`
    /// on the listener's clock.
    pub(super) fn idle_at(&self, now: u64) -> bool {
        now.saturating_sub(self.last_active()) >= self.idle_ms
    }

    pub(super) fn last_active(&self) -> u64 {
        self.last.load(Ordering::Relaxed)
    }

    /// A datagram went one way or the other: the idle timeout restarts.
    pub(super) fn touch(&self) {
        self.last.store(self.flows.now(), Ordering::Relaxed);
    }

    /// The client sent a datagram after its first: only that protects a
    /// flow from eviction, since a backend answers a spoofed source as
    /// readily as a real one.
    pub(super) fn used_by_client(&self) {
        self.used.store(true, Ordering::Relaxed);
        if !self.established.load(Ordering::Relaxed) {
            self.established.store(true, Ordering::Relaxed);
        }
    }

    /// `sent` client datagrams went to the backend: each owed its replies.
    pub(super) fn expect_answers(&self, sent: usize) {
        if self.answers == 0 || sent == 0 {
            return;
        }
        let more = u32::try_from(sent)
            .unwrap_or(u32::MAX)
            .saturating_mul(self.answers);
        let _ = self
            .owed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |owed| {
                Some(owed.saturating_add(more))
            });
    }

    /// How many of `replies` to relay: all, unless `udp_responses` counts
    /// them, then those still owed (the rest would be more than the client
    /// asked for); and whether that answered all, which ends the flow.
    pub(super) fn take_answers(&self, replies: usize) -> (usize, bool) {
        if self.answers == 0 {
            return (replies, false);
        }
        let replies = u32::try_from(replies).unwrap_or(u32::MAX);
        let owed = self
            .owed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |owed| {
                Some(owed.saturating_sub(replies))
            });
        let owed = owed.unwrap_or(0);
        let taken = owed.min(replies);
        (taken as usize, taken == owed)
    }

    pub(super) fn count_in(&self, bytes: usize) {
        let up = &self.session.traffic.up;
        up.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(super) fn count_out(&self, bytes: usize) {
        let down = &self.session.traffic.down;
        down.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Whether it ended.
    pub(super) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire) != 0
    }

    /// Takes its socket out of the listener's epoll set.
    pub(super) fn unwatch(&self) {
        let slot = self.slot.load(Ordering::Relaxed);
        self.flows.backends.unwatch(slot, &self.backend, self);
    }

    /// Marks the flow ended for `why` and takes its socket out of the
    /// listener's set: `false` when it had ended already (it ends once).
    fn finish(&self, why: Ended) -> bool {
        let first = self
            .ended
            .compare_exchange(0, why as u8, Ordering::AcqRel, Ordering::Acquire);
        if first.is_ok() {
            self.unwatch();
        }
        first.is_ok()
    }

    /// Ends the flow, for `why`, once: its socket leaves the listener's
    /// set, its connection IDs are forgotten, and it is taken out of the
    /// table, told to its pool and logged. Its socket closes when the last
    /// holder lets it go.
    pub(crate) fn end(&self, why: Ended) {
        if !self.finish(why) {
            return;
        }
        self.flows.cids().forget(self.id);
        self.flows.remove(&self.client, self.id);
        let traffic = &self.session.traffic;
        let bytes = (
            traffic.up.load(Ordering::Relaxed),
            traffic.down.load(Ordering::Relaxed),
        );
        // An ICMP port unreachable fails the backend as a refused connect
        // would: enough in a row eject it (pool/known.rs).
        let failed = why == Ended::BackendError;
        let endpoint = Endpoint::Tcp(self.backend_addr);
        let service = self.service.as_str();
        self.pool.0.flow_ended(service, &endpoint, bytes, failed);
        access_log::write(&access_log::Fields {
            peer: &self.client,
            via: Some("udp"),
            service,
            routed: self.routed,
            backend: Some(&self.backend_addr),
            tls: None,
            cipher: None,
            cert: None,
            outcome: &why,
            bytes_in: bytes.0,
            bytes_out: bytes.1,
            elapsed: self.started.elapsed(),
        });
    }

    /// Ends the flow by handing it over: what it knew and a second
    /// descriptor of its backend socket, for a successor. `None` when it had
    /// ended, or its socket cannot be duplicated (the descriptor limit): its
    /// client's next datagram starts a new flow in the successor.
    fn hand_over(&self) -> Option<HandedFlow> {
        if !self.finish(Ended::HandedOver) {
            return None;
        }
        let cids = {
            let mut table = self.flows.cids();
            let cids = table.of_flow(self.id);
            table.forget(self.id);
            cids
        };
        let socket = match self.backend.as_fd().try_clone_to_owned() {
            Ok(socket) => socket,
            Err(e) => {
                tracing::warn!(peer = %self.client, error = %e, "upgrade: a UDP flow's socket cannot be handed over; its client starts anew");
                return None;
            }
        };
        Some(HandedFlow {
            listener: self.flows.local,
            client: self.client,
            service: self.service.clone(),
            backend: self.backend_addr,
            routed: self.routed.to_owned(),
            idle: self.idle(),
            quic: self.quic,
            reply_from: self.reply_from.map(|d| (d.ip, d.interface())),
            cids,
            socket,
        })
    }
}

impl Activity for Arc<Flow> {
    fn established(&self) -> bool {
        self.established.load(Ordering::Relaxed)
    }

    fn used_since_asked(&self) -> bool {
        self.used.swap(false, Ordering::Relaxed)
    }
}
