//! The tasks an event loop runs beside its clients: its own chores, and on
//! the daemon's first loop what the daemon needs once (the pools' checks
//! and lookups, the ACME keepers, the fleet's etcd task).

use std::sync::Arc;

use tokio::task::JoinSet;

use crate::pool::{discovery, health};
use crate::state::Shared;

/// The tasks an event loop runs beside its clients, ended with the returned
/// set: its lag watch, giving memory back after waves of clients, and on
/// worker 0 the daemon's traffic history.
pub(super) fn chores(shared: &Arc<Shared>, worker: usize) -> JoinSet<()> {
    let mut chores = JoinSet::new();
    chores.spawn(crate::ops::lag::watch(
        Arc::clone(&shared.metrics.lag),
        crate::ops::lag::Loop::Worker(worker),
    ));
    let counted = Arc::clone(shared);
    chores.spawn(crate::ops::trim::after_waves(move || {
        counted.gate.take_peak()
    }));
    if worker == 0 {
        let source = Arc::clone(shared);
        chores.spawn(crate::ops::history::keep(
            Arc::clone(&shared.history),
            move || source.traffic_totals(),
        ));
    }
    chores
}

/// What the daemon needs once, run by its first event loop: the pools are
/// the daemon's, shared by every worker, so one set of tasks checks and
/// resolves them; so are the ACME certificates (one order flow each) and
/// the fleet's membership and state (one etcd task).
pub(super) fn once_per_daemon(
    first: bool,
    shared: &Arc<Shared>,
    fleet: Option<crate::fleet::Instance>,
) -> (JoinSet<()>, crate::acme::Keepers) {
    if !first {
        return (JoinSet::new(), crate::acme::Keepers::default());
    }
    let fleet = fleet.and_then(|instance| crate::fleet::start(instance, shared));
    let mut acme = crate::acme::Keepers::in_fleet(fleet);
    acme.follow(&shared.settings().acme);
    (pool_tasks(shared), acme)
}

/// The tasks that keep proxy pools current for the settings in force: one
/// following DNS for each pool with backends that need it, one checking
/// health for each with `health_check` (TCP) or `udp_health_check` (UDP).
/// Dropping the set stops them.
pub(super) fn pool_tasks(shared: &Shared) -> JoinSet<()> {
    let settings = shared.settings();
    let mut tasks = JoinSet::new();
    let mut resolver = None;
    for service in settings.registry.services() {
        let Some(counts) = settings.usage.get(&service.name) else {
            continue;
        };
        let name = service.name.to_string();
        let tcp = match &service.kind {
            crate::model::ServiceKind::Proxy(proxy) => {
                Some((proxy, &counts.pool, health::Speaks::Stream))
            }
            _ => None,
        };
        let udp =
            (service.udp.as_ref()).map(|udp| (udp, &counts.udp_pool, health::Speaks::Datagram));
        for (proxy, pool, speaks) in tcp.into_iter().chain(udp) {
            if proxy.follows_dns() {
                let resolver =
                    resolver.get_or_insert_with(|| Arc::new(discovery::resolver(&settings.dns)));
                // Members DNS found take what the fleet set for them.
                let fleet = shared.fleet.get().cloned();
                tasks.spawn(discovery::follow(
                    name.clone(),
                    (Arc::clone(proxy), Arc::clone(pool)),
                    Arc::clone(resolver),
                    settings.dns.clone(),
                    move || fleet.iter().for_each(|fleet| fleet.targets_added()),
                ));
            }
            if proxy.health_check.is_some() {
                // Room a TCP member back up makes goes to the clients in
                // line first (a datagram waits in no line).
                let queued = (speaks == health::Speaks::Stream)
                    .then(|| (Arc::clone(counts), service.clone()));
                let after_round = move || {
                    if let Some((counted, checked)) = &queued {
                        counted.connections.set_cap(counted.cap(checked));
                    }
                };
                tasks.spawn(health::check_loop(
                    name.clone(),
                    (Arc::clone(proxy), speaks),
                    Arc::clone(pool),
                    after_round,
                ));
            }
        }
    }
    tasks
}
