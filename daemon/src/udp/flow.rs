//! One UDP flow: its backend socket, its activity, and the task that sends
//! the backend's replies to the client until the flow ends (idle, a
//! backend error, evicted, or its listener closed), then logs it.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

pub(super) use super::ended::Ended;
use super::gather::Gathering;
use super::route::Dropped;
use super::table::{Activity, FlowTable, Full};
use crate::model::{ConnectionIds, Endpoint, HandedFlow, Owner, UdpSettings};
use crate::net::datagram::{recv_batch, send_all, send_from, Destination};
use crate::ops::access_log;
use crate::ops::session_table::{LiveSession, Registered};
use crate::ops::udp_metrics::{Direction, UdpCounters};
use crate::pool::{Held, Pool};
use crate::state::Shared;
use tcpmux_proto::sniff::datagram::long_header;
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
    /// Where a backend's replies are read before they are sent on, a batch
    /// of `REPLY_BATCH` slots: one for the listener's flows (their relays
    /// run one at a time, each without awaiting while it holds it), none per
    /// flow. Its pages are touched only as deep as batches go.
    replies: Mutex<Replies>,
    /// QUIC clients whose ClientHello is still arriving.
    pub(super) gathering: Mutex<Gathering>,
    /// The QUIC connections the flows carry, by connection ID: the
    /// listener address's, which every worker serving it shares.
    cids: Arc<Mutex<ConnectionIds>>,
    /// The listener socket's address.
    pub(super) local: SocketAddr,
    /// Where flows told to hand themselves over go (an upgrade).
    pub(super) handing: Mutex<Option<mpsc::UnboundedSender<HandedFlow>>>,
}

impl Flows {
    /// `first_id` numbers its flows; `cids` is its address's table;
    /// `counters` the daemon's.
    pub(super) fn new(
        (first_id, local): (u64, SocketAddr),
        cids: Arc<Mutex<ConnectionIds>>,
        counters: Arc<UdpCounters>,
    ) -> Flows {
        Flows {
            table: Mutex::new(FlowTable::new(1, None).numbered_from(first_id)),
            counters,
            started: Instant::now(),
            replies: Mutex::new(Replies {
                buf: vec![0; REPLY_BATCH * MAX_DATAGRAM],
                got: Vec::with_capacity(REPLY_BATCH),
            }),
            gathering: Mutex::new(Gathering::default()),
            cids,
            local,
            handing: Mutex::new(None),
        }
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

    /// Adds `client`'s flow, of `service` routed by `routed` (counted as
    /// started, unless a predecessor started it); its id.
    pub(super) fn insert(
        &self,
        client: SocketAddr,
        flow: &Arc<Flow>,
        (service, routed): (&str, &'static str),
        adopted: bool,
    ) -> u64 {
        let id = self.table().insert(client, Arc::clone(flow));
        match adopted {
            true => self.counters.flow_adopted(),
            false => self.counters.flow_started(service, routed),
        }
        id
    }

    /// Takes `client`'s flow `id` out, if it is still in (an evicted or
    /// drained one is not).
    fn remove(&self, client: &SocketAddr, id: u64) {
        if self.table().remove(client, id).is_some() {
            self.counters.flow_ended();
        }
    }

    /// Tells every flow to end by handing itself to `to` (an upgrade);
    /// how many were told.
    pub(super) fn hand_over(&self, to: &mpsc::UnboundedSender<HandedFlow>) -> usize {
        *self.handing.lock().unwrap_or_else(|p| p.into_inner()) = Some(to.clone());
        let flows = self.table().drain();
        for flow in &flows {
            self.counters.flow_ended();
            flow.end(Ended::HandedOver);
        }
        flows.len()
    }

    /// Tells every flow to end: the listener stops serving.
    pub(super) fn end_all(&self) {
        for flow in self.table().drain() {
            self.counters.flow_ended();
            flow.end(Ended::ListenerClosed);
        }
    }
}

/// A batch of replies: `REPLY_BATCH` slots and each one's length and
/// sender as read.
struct Replies {
    buf: Vec<u8>,
    got: Vec<(usize, SocketAddr)>,
}

/// What the listener and the flow's task share.
pub(crate) struct Flow {
    pub(super) backend: UdpSocket,
    /// When a datagram last went either way, on the listener's clock.
    last: AtomicU64,
    /// Whether the client sent a datagram since the table last asked.
    used: AtomicBool,
    /// Whether the client sent more than its first datagram.
    established: AtomicBool,
    /// Its row in the live-session table: the bytes each way, and the kill
    /// an operator may send.
    pub(super) session: Arc<LiveSession>,
    /// Why it was told to end (0 until it is, and after an operator's
    /// kill, which its session row carries).
    ended: AtomicU8,
    /// Its idle timeout in milliseconds, which the listener's sweep
    /// checks (sweep.rs).
    idle_ms: u64,
    pub(super) flows: Arc<Flows>,
}

impl Flow {
    pub(super) fn new(
        backend: UdpSocket,
        session: Arc<LiveSession>,
        flows: Arc<Flows>,
        idle: Duration,
    ) -> Flow {
        Flow {
            backend,
            last: AtomicU64::new(flows.now()),
            used: AtomicBool::new(false),
            established: AtomicBool::new(false),
            session,
            ended: AtomicU8::new(0),
            idle_ms: u64::try_from(idle.as_millis()).unwrap_or(u64::MAX),
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

    pub(super) fn count_in(&self, bytes: usize) {
        let up = &self.session.traffic.up;
        up.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Tells the flow's task to end, for `why` (the first reason given
    /// stands).
    pub(crate) fn end(&self, why: Ended) {
        let _ = self
            .ended
            .compare_exchange(0, why as u8, Ordering::AcqRel, Ordering::Acquire);
        // The one wake-up its task waits for besides its socket: the same
        // as an operator's kill, told apart by `ended`.
        self.session.kill();
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

/// What the flow's log line and its table entry need.
pub(super) struct About {
    pub(super) client: SocketAddr,
    pub(super) id: u64,
    /// Its place in the live-session table, given up when the flow ends.
    pub(super) registered: Registered,
    pub(super) service: ServiceName,
    pub(super) routed: &'static str,
    pub(super) backend: SocketAddr,
    /// The service's UDP pool, told how the flow ended, and the flow's
    /// place in its backend's count.
    pub(super) pool: (Arc<Pool>, Held),
    /// A QUIC flow: its server's connection IDs are learned from its
    /// replies.
    pub(super) quic: bool,
    /// The local address the client sent to, on a wildcard-bound socket:
    /// the replies leave from it.
    pub(super) reply_from: Option<Destination>,
}

/// Relays the backend's datagrams to the client until the flow ends.
pub(super) async fn run(
    flow: Arc<Flow>,
    socket: Arc<UdpSocket>,
    about: About,
    shared: Arc<Shared>,
) {
    let started = Instant::now();
    // Made once and polled by reference: a reply wakes this loop without
    // a waiter taken down and put back each time. Idleness is the
    // listener's sweep's to notice (sweep.rs): no timer per flow.
    let told = about.registered.killed();
    tokio::pin!(told);
    let why = loop {
        tokio::select! {
            // ERROR too: an ICMP port unreachable is an error, not data.
            ready = flow.backend.ready(Interest::READABLE | Interest::ERROR) => {
                // An error is not readable data: left standing, it would
                // wake this loop forever.
                let failed = ready.map_or(true, |ready| ready.is_error());
                if failed || !relay_replies(&flow, &socket, &about, &shared) {
                    if let Ok(Some(e)) = flow.backend.take_error() {
                        tracing::debug!(peer = %about.client, backend = %about.backend, error = %e, "UDP backend error");
                    }
                    break Ended::BackendError;
                }
            }
            () = &mut told => break Ended::from_u8(flow.ended.load(Ordering::Acquire)),
        }
    };
    if why == Ended::HandedOver {
        hand(&flow, &about);
        flow.flows.cids().forget(about.id);
        return;
    }
    flow.flows.remove(&about.client, about.id);
    flow.flows.cids().forget(about.id);
    let traffic = &flow.session.traffic;
    let bytes = (
        traffic.up.load(Ordering::Relaxed),
        traffic.down.load(Ordering::Relaxed),
    );
    // An ICMP port unreachable fails the backend as a refused connect
    // would: enough in a row eject it (pool/known.rs).
    let failed = why == Ended::BackendError;
    let endpoint = Endpoint::Tcp(about.backend);
    about
        .pool
        .0
        .flow_ended(about.service.as_str(), &endpoint, bytes, failed);
    access_log::write(&access_log::Fields {
        peer: &about.client,
        via: Some("udp"),
        service: about.service.as_str(),
        routed: about.routed,
        backend: Some(&about.backend),
        tls: None,
        cipher: None,
        cert: None,
        outcome: &why,
        bytes_in: bytes.0,
        bytes_out: bytes.1,
        elapsed: started.elapsed(),
    });
}

/// The connection ID a QUIC server's long header names itself by: its
/// client's later packets are addressed to it, from wherever the client
/// is by then.
fn learn_server_id(flow: &Flow, about: &About, reply: &[u8]) {
    let Some(header) = long_header(reply) else {
        return;
    };
    flow.flows.cids().learn(
        header.scid,
        Owner {
            service: about.service.clone(),
            backend: about.backend,
            flow: about.id,
        },
    );
}

/// Replies read from a backend socket before they go on to the client
/// together, in one `sendmmsg`, at most.
pub(super) const REPLY_BATCH: usize = crate::net::datagram::RECV_BATCH;

/// Sends the client the datagrams waiting on the backend socket (at most
/// 64 at a time, so the flow still sees its stop), a batch of up to
/// `REPLY_BATCH` read in one `recvmmsg` and sent in one `sendmmsg`;
/// `false` when the socket reports an error. A reply the client's socket
/// cannot take at once is dropped, as on a wire.
fn relay_replies(flow: &Flow, socket: &UdpSocket, about: &About, shared: &Shared) -> bool {
    let mut replies = flow.flows.replies.lock().unwrap_or_else(|p| p.into_inner());
    let Replies { buf, got } = &mut *replies;
    for _ in 0..64 / REPLY_BATCH {
        // `try_io` clears the socket's readiness when nothing more waits.
        let read = flow.backend.try_io(Interest::READABLE, || {
            recv_batch(&flow.backend, buf, MAX_DATAGRAM, got)
        });
        match read {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) => {
                tracing::debug!(peer = %about.client, error = %e, "UDP backend socket error");
                return false;
            }
        }
        let mut lens = [0usize; REPLY_BATCH];
        for ((len, &(got, _)), slot) in lens
            .iter_mut()
            .zip(got.iter())
            .zip(buf.chunks(MAX_DATAGRAM))
        {
            *len = got;
            if about.quic {
                learn_server_id(flow, about, &slot[..got]);
            }
        }
        if !got.is_empty() {
            flow.touch();
            send_replies(flow, (socket, buf, &lens[..got.len()]), about, shared);
        }
    }
    true
}

/// Sends the replies read into `buf` (one per slot, `lens` long each) to
/// the client, counting those sent and dropping the rest. Straight to the
/// socket, as `udp::forward`: no readiness to wait for, and nothing awaited
/// while `buf` is held.
fn send_replies(
    flow: &Flow,
    (socket, buf, lens): (&UdpSocket, &[u8], &[usize]),
    about: &About,
    shared: &Shared,
) {
    let client = about.client;
    let mut replies: [&[u8]; REPLY_BATCH] = [&[]; REPLY_BATCH];
    for ((reply, &len), slot) in replies.iter_mut().zip(lens).zip(buf.chunks(MAX_DATAGRAM)) {
        *reply = &slot[..len];
    }
    let replies = &replies[..lens.len()];
    // Which were sent, by position.
    let mut sent = [false; REPLY_BATCH];
    match (about.reply_from, replies) {
        // Each needs its source address in a control message of its own.
        (Some(from), _) => {
            for (sent, reply) in sent.iter_mut().zip(replies) {
                *sent = send_from(socket, reply, client, from).is_ok();
            }
        }
        (None, [reply]) => {
            let to = socket2::SockAddr::from(client);
            sent[0] = socket2::SockRef::from(socket).send_to(reply, &to).is_ok();
        }
        (None, _) => {
            let taken = send_all(socket, replies, Some(client)).unwrap_or(0);
            sent[..taken].fill(true);
        }
    }
    for (&len, sent) in lens.iter().zip(sent) {
        if !sent {
            shared.udp.dropped(Dropped::ClientUnreachable.reason());
            continue;
        }
        let down = &flow.session.traffic.down;
        down.fetch_add(len as u64, Ordering::Relaxed);
        shared.udp.datagram(Direction::Out, len);
    }
}

/// What `flow`'s task gives a successor: what it knew and a second
/// descriptor of its backend socket. A socket that cannot be duplicated
/// (the descriptor limit) is not handed; its client's next datagram starts
/// a new flow in the successor.
pub(super) fn hand(flow: &Flow, about: &About) {
    let socket = match flow.backend.as_fd().try_clone_to_owned() {
        Ok(socket) => socket,
        Err(e) => {
            tracing::warn!(peer = %about.client, error = %e, "upgrade: a UDP flow's socket cannot be handed over; its client starts anew");
            return;
        }
    };
    let handed = HandedFlow {
        listener: flow.flows.local,
        client: about.client,
        service: about.service.clone(),
        backend: about.backend,
        routed: about.routed.to_owned(),
        idle: flow.idle(),
        quic: about.quic,
        reply_from: about.reply_from.map(|d| (d.ip, d.interface())),
        cids: flow.flows.cids().of_flow(about.id),
        socket,
    };
    let handing = flow.flows.handing.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(to) = handing.as_ref() {
        let _ = to.send(handed);
    }
}
