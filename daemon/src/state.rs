//! What every connection of one event loop shares: the settings in force (which a
//! reload swaps), the handoff hub, the admission counts and the metrics.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::admission::{Gate, OwnConnections, Usage, UsageTable};
use crate::config::Config;
use crate::hub::Hub;
use crate::model::{AcmeCert, ControlLimits, DefaultCert, Dns, Limits, ServiceKind};
use crate::ops::history::{History, Totals};
use crate::ops::metrics::Metrics;
use crate::ops::session_table::SessionTable;
use crate::registry::Registry;

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
    pub limits: Limits,
    pub control_limits: ControlLimits,
    pub dns: Dns,
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
    fn new(config: Config, usage: &UsageTable) -> Settings {
        // One series per name: the first to expire, where listeners share it.
        let mut certificates: Vec<(String, i64)> = Vec::new();
        let served = || config.listen.iter().filter_map(|l| l.options.tls.as_ref());
        for (name, expiry) in served().flat_map(|tls| tls.expiries.iter().cloned()) {
            earliest(&mut certificates, name, expiry);
        }
        let mut acme: Vec<Arc<AcmeCert>> = Vec::new();
        for tls in served() {
            if let DefaultCert::Acme(slot) = &tls.default {
                if !acme.iter().any(|known| Arc::ptr_eq(known, slot)) {
                    acme.push(Arc::clone(slot));
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
            limits: config.limits,
            control_limits: config.control_limits,
            dns: config.dns,
            admin_uids: config.admin.map(|a| a.uids).unwrap_or_default(),
            metrics_hosts: config.metrics_hosts,
        }
    }
}

/// Adds `name`'s `expiry` to `certificates`, keeping the earliest per name.
fn earliest(certificates: &mut Vec<(String, i64)>, name: String, expiry: i64) {
    match certificates.iter_mut().find(|(n, _)| *n == name) {
        Some(known) => known.1 = known.1.min(expiry),
        None => certificates.push((name, expiry)),
    }
}

/// What every worker of one daemon shares: the daemon-wide admission counts,
/// every name's counts, the metrics and the session table, so that limits,
/// `stats` and the admin socket are the daemon's, not one event loop's.
#[derive(Clone, Default)]
pub struct Counters {
    gate: Arc<Gate>,
    usage: Arc<UsageTable>,
    metrics: Arc<Metrics>,
    own: Arc<OwnConnections>,
    sessions: Arc<SessionTable>,
    history: Arc<History>,
}

/// What every connection of one event loop shares.
pub(crate) struct Shared {
    settings: RwLock<Arc<Settings>>,
    /// Live handoff registrations.
    pub hub: Arc<Hub>,
    /// Connections admitted and not yet closed, daemon-wide and per address.
    pub gate: Arc<Gate>,
    pub metrics: Arc<Metrics>,
    usage: Arc<UsageTable>,
    /// The daemon's own outgoing proxy connections, to tell one come back.
    pub own: Arc<OwnConnections>,
    /// Every live session of the daemon, for the admin socket.
    pub sessions: Arc<SessionTable>,
    /// Each service's recent traffic, for the dashboard.
    pub history: Arc<History>,
    /// Whether an operator may change the run-time state now.
    pub changes: Changes,
}

/// The run-time state an operator sets (disabled services, members' states
/// and weights) is frozen while an upgrade carries it to a successor: a
/// change acknowledged after it was carried would be lost there.
#[derive(Debug, Default)]
pub(crate) struct Changes(std::sync::Mutex<bool>);

impl Changes {
    /// Runs `change` unless the state is frozen. Under the lock, so that a
    /// [`Changes::freeze`] returns only after every change begun before it.
    pub(crate) fn apply<T>(&self, change: impl FnOnce() -> T) -> Result<T, &'static str> {
        let frozen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if *frozen {
            return Err("upgrade in progress: the run-time state is being handed to the new daemon; try again when it serves");
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

impl Shared {
    pub(crate) fn new(config: Config, counters: Counters) -> Shared {
        Shared {
            settings: RwLock::new(Arc::new(Settings::new(config, &counters.usage))),
            hub: Arc::new(Hub::default()),
            gate: counters.gate,
            metrics: counters.metrics,
            usage: counters.usage,
            own: counters.own,
            sessions: counters.sessions,
            history: counters.history,
            changes: Changes::default(),
        }
    }

    /// The settings in force now.
    pub(crate) fn settings(&self) -> Arc<Settings> {
        Arc::clone(&self.settings.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Puts `config` in force for new connections; running sessions keep theirs,
    /// and still count against the new caps of their service's name.
    pub(crate) fn replace_settings(&self, config: Config) {
        let settings = Arc::new(Settings::new(config, &self.usage));
        *self.settings.write().unwrap_or_else(|p| p.into_inner()) = settings;
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

    /// The counters in the Prometheus text format.
    pub(crate) fn render_metrics(&self) -> String {
        let settings = self.settings();
        let mut backends = Vec::new();
        let mut queues = Vec::new();
        for service in settings.registry.services() {
            if let (Some(_), Some(counts)) = (&service.queue, settings.usage.get(&service.name)) {
                queues.push((service.name.to_string(), counts.connections.queue()));
            }
            if let (ServiceKind::Proxy(proxy), Some(counts)) =
                (&service.kind, settings.usage.get(&service.name))
            {
                backends.extend(counts.pool.lines(service.name.as_str(), proxy));
            }
        }
        let mut out = self.metrics.render(
            self.gate.active.get(),
            &self.hub.counts(),
            &backends,
            &queues,
        );
        let mut certificates = settings.certificates.clone();
        for slot in &settings.acme {
            if let (Some(name), Some(expiry)) = (slot.settings.names.first(), slot.expiry()) {
                earliest(&mut certificates, name.clone(), expiry);
            }
        }
        crate::ops::metrics::render_certificates(&mut out, &certificates);
        out
    }
}
