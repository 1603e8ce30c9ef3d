//! What every connection of one event loop shares: the settings in force (which a
//! reload swaps), the handoff hub, the admission counts and the metrics.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::admission::{Gate, OwnConnections, Usage, UsageTable};
use crate::config::Config;
use crate::hub::Hub;
use crate::keys::{AcmeCert, Keys};
use crate::model::{
    ConnectionIds, ControlLimits, DefaultCert, Dns, Limits, ServiceKind, UdpSettings,
};
use crate::ops::history::{History, Totals};
use crate::ops::metrics::{earliest, Gauges, Metrics};
use crate::ops::session_table::SessionTable;
use crate::ops::udp_metrics::UdpCounters;
use crate::registry::Registry;
use crate::runtime::FleetSlot;

/// The part of the configuration a reload replaces. A session takes a snapshot
/// when it starts and keeps it to the end, so a reload never changes a running
/// session.
pub(crate) struct Settings {
    pub registry: Arc<Registry>,
    /// Per-service counts, the same for a name in every settings and worker.
    pub usage: Usage,
    pub negotiation_timeout: Duration,
    pub close_drain_timeout: Duration,
    pub shutdown_grace: Duration,
    pub shutdown_delay: Duration,
    pub limits: Limits,
    pub control_limits: ControlLimits,
    pub dns: Dns,
    /// UDP flows' limits and idle timeout.
    pub udp: UdpSettings,
    /// `admin_uids`: who besides root and the daemon's user may use the admin socket.
    pub admin_uids: Vec<u32>,
    /// `metrics_hosts`: the names a metrics request's Host may give.
    pub metrics_hosts: Vec<String>,
    /// Every certificate the TLS listeners serve from files, by name, with
    /// its notAfter.
    pub certificates: Vec<(String, i64)>,
    /// The ACME slots the TLS listeners serve from, each once.
    pub acme: Vec<Arc<AcmeCert>>,
}

impl Settings {
    /// Settings from `config`, counting its names in `usage`.
    fn new(config: Config, usage: &UsageTable, keys: &Keys) -> Settings {
        // One series per name: the first to expire, where listeners share it.
        let mut certificates: Vec<(String, i64)> = Vec::new();
        let served = || config.listen.iter().filter_map(|l| l.options.tls.as_ref());
        for (name, expiry) in served().flat_map(|tls| tls.expiries.iter().cloned()) {
            earliest(&mut certificates, name, expiry);
        }
        let mut acme: Vec<Arc<AcmeCert>> = Vec::new();
        for tls in served() {
            let held = match &tls.default {
                DefaultCert::Acme(settings) => keys.acme(settings),
                DefaultCert::Files { .. } => None,
            };
            if let Some(slot) = held {
                if !acme.iter().any(|known| Arc::ptr_eq(known, &slot)) {
                    acme.push(slot);
                }
            }
        }
        Settings {
            certificates,
            acme,
            usage: usage.for_registry(&config.registry),
            registry: Arc::new(config.registry),
            negotiation_timeout: config.negotiation_timeout,
            close_drain_timeout: config.close_drain_timeout,
            shutdown_grace: config.shutdown_grace,
            shutdown_delay: config.shutdown_delay,
            limits: config.limits,
            control_limits: config.control_limits,
            dns: config.dns,
            udp: config.udp,
            admin_uids: config.admin.map(|a| a.uids).unwrap_or_default(),
            metrics_hosts: config.metrics_hosts,
        }
    }
}

/// What every worker of one daemon shares: the daemon-wide admission counts,
/// every name's counts, the metrics and the session table, so that limits,
/// `stats` and the admin socket are the daemon's, not one event loop's; and
/// the key material its configurations are parsed with. Made once, before
/// the first configuration is read; cloning shares it.
#[derive(Clone, Default)]
pub struct DaemonState {
    keys: Keys,
    gate: Arc<Gate>,
    usage: Arc<UsageTable>,
    metrics: Arc<Metrics>,
    udp: Arc<UdpCounters>,
    own: Arc<OwnConnections>,
    sessions: Arc<SessionTable>,
    history: Arc<History>,
    quic: Arc<QuicConnections>,
    fleet: FleetSlot,
}

/// The QUIC connection IDs of each UDP listener address, shared by the
/// workers: a client that moves may reach another worker's socket. Flow
/// numbers come from here too, so an ID's owner is unique daemon-wide.
#[derive(Default)]
pub(crate) struct QuicConnections {
    by_listener: Mutex<HashMap<SocketAddr, Arc<Mutex<ConnectionIds>>>>,
    /// Each listener socket's flows are numbered from its own base.
    next_base: AtomicU64,
}

impl QuicConnections {
    /// The table of the listener bound at `addr`.
    pub(crate) fn of(&self, addr: SocketAddr) -> Arc<Mutex<ConnectionIds>> {
        let mut all = self.by_listener.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(all.entry(addr).or_default())
    }

    /// The first flow number of a listener socket starting to serve: 2^40
    /// apart, so no two sockets' flows share one.
    pub(crate) fn flow_base(&self) -> u64 {
        (self.next_base.fetch_add(1, Ordering::Relaxed) + 1) << 40
    }
}

/// What every connection of one event loop shares.
pub(crate) struct Shared {
    settings: RwLock<Arc<Settings>>,
    /// Live handoff registrations.
    pub hub: Arc<Hub>,
    /// Connections admitted and not yet closed, daemon-wide and per address.
    pub gate: Arc<Gate>,
    pub metrics: Arc<Metrics>,
    /// The UDP flows' counters.
    pub udp: Arc<UdpCounters>,
    usage: Arc<UsageTable>,
    /// The daemon's own outgoing proxy connections, to tell one come back.
    pub own: Arc<OwnConnections>,
    /// Every live session of the daemon, for the admin socket.
    pub sessions: Arc<SessionTable>,
    /// Each service's recent traffic, for the dashboard.
    pub history: Arc<History>,
    /// The UDP listeners' QUIC connection IDs.
    pub quic: Arc<QuicConnections>,
    /// Whether an operator may change the run-time state now.
    pub changes: Changes,
    /// The link to the fleet's etcd task, once started (`cluster`).
    pub fleet: FleetSlot,
    /// What a reload parses the file with.
    pub keys: Keys,
    /// Starting, serving or stopping, for `/readyz`.
    pub phase: Phase,
}

/// Where an event loop is in its life: `/readyz` says ready only while it
/// serves, and 503 from the moment it is told to stop.
#[derive(Debug, Default)]
pub(crate) struct Phase(std::sync::atomic::AtomicU8);

impl Phase {
    const SERVING: u8 = 1;
    const STOPPING: u8 = 2;

    /// Every socket is served.
    pub(crate) fn serving(&self) {
        self.0
            .store(Self::SERVING, std::sync::atomic::Ordering::Release);
    }

    /// Told to stop: no more traffic should come.
    pub(crate) fn stopping(&self) {
        self.0
            .store(Self::STOPPING, std::sync::atomic::Ordering::Release);
    }

    fn now(&self) -> u8 {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// The run-time state an operator sets (disabled services, members' states
/// and weights) is frozen while an upgrade carries it to a successor: a
/// change acknowledged after it was carried would be lost there.
#[derive(Debug, Default)]
pub(crate) struct Changes(std::sync::Mutex<bool>);

/// A change refused because the run-time state is frozen for an upgrade.
#[derive(Debug)]
pub(crate) struct Frozen;

impl Changes {
    /// Runs `change` unless the state is frozen. Under the lock, so that a
    /// [`Changes::freeze`] returns only after every change begun before it.
    pub(crate) fn apply<T>(&self, change: impl FnOnce() -> T) -> Result<T, Frozen> {
        let frozen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if *frozen {
            return Err(Frozen);
        }
        Ok(change())
    }

    /// From now on every change is refused, until [`Changes::thaw`].
    pub(crate) fn freeze(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    pub(crate) fn thaw(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = false;
    }
}

impl DaemonState {
    /// The key material to parse this daemon's configurations with.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }
}

impl Shared {
    pub(crate) fn new(config: Config, counters: DaemonState) -> Shared {
        let settings = Settings::new(config, &counters.usage, &counters.keys);
        Shared {
            settings: RwLock::new(Arc::new(settings)),
            keys: counters.keys,
            phase: Phase::default(),
            hub: Arc::new(Hub::default()),
            gate: counters.gate,
            metrics: counters.metrics,
            udp: counters.udp,
            usage: counters.usage,
            own: counters.own,
            sessions: counters.sessions,
            history: counters.history,
            quic: counters.quic,
            fleet: counters.fleet,
            changes: Changes::default(),
        }
    }

    /// The settings in force now.
    pub(crate) fn settings(&self) -> Arc<Settings> {
        Arc::clone(&self.settings.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Settings from `config`, its names counted (what an operator set for
    /// a name or member it no longer has is forgotten); its registry is taken
    /// into them. A tenth of a second for 100,000 names: reloads make them
    /// off the event loop, once the new sockets are bound.
    pub(crate) fn settings_for(&self, config: &mut Config) -> Arc<Settings> {
        let registry = std::mem::replace(&mut config.registry, Registry::new(Default::default()));
        let mut copy = config.clone();
        copy.registry = registry;
        Arc::new(Settings::new(copy, &self.usage, &self.keys))
    }

    /// Puts `settings` in force for new connections; running sessions keep
    /// theirs, and still count against the new caps of their service's name.
    /// Returns the settings replaced.
    pub(crate) fn install(&self, settings: Arc<Settings>) -> Arc<Settings> {
        std::mem::replace(
            &mut *self.settings.write().unwrap_or_else(|p| p.into_inner()),
            settings,
        )
    }

    /// Each service's connections finished and bytes moved so far, live
    /// relays included, for [`History`].
    pub(crate) fn traffic_totals(&self) -> Totals {
        let mut totals = self.metrics.finished();
        for (service, bytes) in self.sessions.relayed_by_service() {
            totals.entry(service).or_default().1 += bytes;
        }
        totals
    }

    /// `/healthz`: every event loop runs its 100 ms timer; one that has not
    /// for `STUCK` serves no one.
    pub(crate) fn health(&self) -> Result<(), String> {
        const STUCK: Duration = Duration::from_secs(5);
        match self.metrics.lag.stalled(STUCK).first() {
            None => Ok(()),
            Some((stuck, since)) => Err(format!(
                "unhealthy: event loop {stuck} has not run for {:.1} s",
                since.as_secs_f64()
            )),
        }
    }

    /// `/readyz`: serving on every socket, with a certificate for every
    /// ACME listener, and not told to stop.
    pub(crate) fn readiness(&self) -> Result<(), String> {
        match self.phase.now() {
            Phase::SERVING => {}
            Phase::STOPPING => return Err("not ready: shutting down".into()),
            _ => return Err("not ready: starting".into()),
        }
        let settings = self.settings();
        let waiting = settings.acme.iter().find(|slot| slot.current().is_none());
        match waiting.and_then(|slot| slot.settings.names.first()) {
            Some(name) => Err(format!("not ready: no certificate for {name} yet (ACME)")),
            None => Ok(()),
        }
    }

    /// The counters in the Prometheus text format.
    pub(crate) fn render_metrics(&self) -> String {
        let mut text = self.metrics.render(&self.gauges());
        self.udp.render(&mut text);
        text
    }

    /// What the live state is now, for the metrics' gauges.
    fn gauges(&self) -> Gauges {
        let settings = self.settings();
        let mut gauges = Gauges {
            active: self.gate.active.get(),
            handoff: self.hub.counts(),
            certificates: settings.certificates.clone(),
            ..Gauges::default()
        };
        for service in settings.registry.services() {
            let Some(counts) = settings.usage.get(&service.name) else {
                continue;
            };
            if service.queue.is_some() {
                let queue = counts.connections.queue();
                gauges.queues.push((service.name.to_string(), queue));
            }
            if let ServiceKind::Proxy(proxy) = &service.kind {
                let members = counts.pool.figures(service.name.as_str(), proxy);
                gauges.backends.extend(members);
            }
            if let Some(udp) = &service.udp {
                let members = counts.udp_pool.figures(service.name.as_str(), udp);
                gauges.udp_backends.extend(members);
            }
        }
        for slot in &settings.acme {
            let Some(name) = slot.settings.names.first() else {
                continue;
            };
            if let Some(expiry) = slot.expiry() {
                gauges.certificate(name.clone(), expiry);
            }
            gauges
                .acme_failures
                .push((name.clone(), slot.order_failures()));
        }
        gauges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_while_serving_with_every_acme_certificate_in_hand() {
        let storage = std::env::temp_dir().join(format!("tcpmuxd-ready-{}", std::process::id()));
        let text = format!(
            "listen = [{{ address = \"127.0.0.1:0\", tls = {{ acme = {{ directory = \"https://127.0.0.1:1/dir\", names = [\"example.com\"], storage = \"{}\" }} }} }}]\n",
            storage.display()
        );
        let daemon = DaemonState::default();
        let config = Config::parse(&text, "test.toml", daemon.keys()).expect("parses");
        let shared = Shared::new(config, daemon);
        assert_eq!(shared.readiness(), Err("not ready: starting".into()));
        shared.phase.serving();
        assert_eq!(
            shared.readiness(),
            Err("not ready: no certificate for example.com yet (ACME)".into())
        );
        shared.phase.stopping();
        assert_eq!(shared.readiness(), Err("not ready: shutting down".into()));
        assert_eq!(shared.health(), Ok(()));
    }
}
