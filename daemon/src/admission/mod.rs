//! Admission control at run time: how many connections the daemon, one source
//! address and one service hold now, and how fast one address opens new ones.
//! The caps come from the configuration (`model::Limits`, a service's
//! `max_connections`); the counts live here, apart from it, so a reload keeps them.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tcpmux_proto::ServiceName;

use crate::model::{Limits, Peer, ServiceKind};

use crate::registry::Registry;

mod counter;
mod own;
pub(crate) use counter::{Busy, Counter, Slot};
pub(crate) use own::{Own, OwnConnections};

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    DaemonFull,
    AddressFull,
    AddressTooFast,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::DaemonFull => "server busy: too many connections, try again later",
            Refusal::AddressFull => "too many connections from your address",
            Refusal::AddressTooFast => "too many new connections from your address, slow down",
        })
    }
}

/// What one service name has in use now. Shared by every session of that name,
/// across reloads, for as long as the name stays configured.
#[derive(Debug, Default)]
pub(crate) struct ServiceCounts {
    /// Sessions open, against the service's `max_connections`.
    pub connections: Counter,
    /// Programs running, against an exec service's `max_instances`.
    pub instances: Counter,
    /// A proxy service's balancing state.
    pub pool: Arc<crate::pool::Pool>,
    /// Its UDP backends' (`proxy_udp`): a pool of its own, since a service
    /// may have both and the same address may serve both.
    pub udp_pool: Arc<crate::pool::Pool>,
    /// Turned off on the admin socket: new clients are refused, running
    /// sessions go on. Kept by name across reloads, like the counts.
    pub disabled: std::sync::atomic::AtomicBool,
    /// Who disabled it: this instance's operator or the fleet's.
    pub disabled_by: Mutex<Option<tcpmux_proto::admin::SetBy>>,
}

impl ServiceCounts {
    /// How many clients `service` serves at once now: its cap with only
    /// the backends in service counted.
    pub(crate) fn cap(&self, service: &crate::model::Service) -> Option<usize> {
        match &service.kind {
            ServiceKind::Proxy(proxy) => service.cap_with(self.pool.capacity(proxy)),
            _ => service.connection_cap(),
        }
    }

    /// Takes `service`'s settings from a (re)load: its members' weights and
    /// its cap.
    fn configure(&self, service: &crate::model::Service) {
        if let ServiceKind::Proxy(proxy) = &service.kind {
            for endpoint in self.pool.configure(proxy) {
                tracing::info!(service = %service.name, backend = %endpoint, "reload removed a backend: its run-time state and weight are forgotten");
            }
        }
        match &service.udp {
            Some(udp) => {
                for endpoint in self.udp_pool.configure(udp) {
                    tracing::info!(service = %service.name, backend = %endpoint, "reload removed a UDP backend: its run-time state and weight are forgotten");
                }
            }
            None => drop(self.udp_pool.forget(|_| true)),
        }
        // A raised cap serves the clients already waiting first.
        self.connections.set_cap(self.cap(service));
    }

    /// Whether anything but the usage table holds these counts: a session,
    /// a program, a queued client, a pool's member in use, or a
    /// configuration not yet dropped (whose sessions may take more).
    fn is_held(self: &Arc<Self>) -> bool {
        Arc::strong_count(self) > 1
            || self.connections.is_held()
            || self.instances.is_held()
            || Arc::strong_count(&self.pool) > 1
            || Arc::strong_count(&self.udp_pool) > 1
    }

    /// Forgets what an operator set for `name`, a service a reload removed.
    fn forget(&self, name: &ServiceName) {
        *lock(&self.disabled_by) = None;
        if self.disabled.swap(false, Ordering::AcqRel) {
            tracing::info!(service = %name, "reload removed a disabled service: its run-time state is forgotten");
        }
        for endpoint in self.pool.forget(|_| true) {
            tracing::info!(service = %name, backend = %endpoint, "reload removed a service: its backend's run-time state and weight are forgotten");
        }
        for endpoint in self.udp_pool.forget(|_| true) {
            tracing::info!(service = %name, backend = %endpoint, "reload removed a service: its UDP backend's run-time state and weight are forgotten");
        }
    }
}

/// The counts of every service in a registry, by name.
pub(crate) type Usage = HashMap<ServiceName, Arc<ServiceCounts>>;

/// Every name's counts, kept across reloads and shared by every worker: a
/// name a reload removed keeps its counts for as long as anything holds them,
/// so the sessions started before a reload (or on another worker) count
/// against the caps after it, should the name come back. Once nothing does,
/// a later reload drops the name: renaming services at every reload does not
/// grow the table.
#[derive(Default)]
pub(crate) struct UsageTable(Mutex<Usage>);

impl UsageTable {
    /// The counts of `registry`'s names, created for names never seen before.
    /// What an operator set at run time for a service or member the registry
    /// no longer has is forgotten, and logged: were the name to come back,
    /// it starts from its configuration.
    pub(crate) fn for_registry(&self, registry: &Registry) -> Usage {
        let mut table = lock(&self.0);
        // Each name taken out of the old table as the registry goes by (a
        // hash each, not an ordered lookup per old name): what is left
        // after is what a reload removed, forgotten, and kept while held
        // (its sessions still count, should the name come back). Unheld,
        // its counts are all zero: a fresh entry is the same.
        let mut before = std::mem::take(&mut *table);
        let usage: Usage = registry
            .services()
            .map(|service| {
                let counts = before.remove(&service.name).unwrap_or_default();
                counts.configure(service);
                (service.name.clone(), counts)
            })
            .collect();
        before.retain(|name, counts| {
            counts.forget(name);
            counts.is_held()
        });
        *table = usage.clone();
        table.extend(before);
        usage
    }
}

/// Entries kept per address before idle ones are first pruned.
const PRUNE_AT: usize = 4096;

struct Bucket {
    tokens: f64,
    refilled: Instant,
}

/// The rate limiter's token buckets, one per source address.
#[derive(Default)]
struct Buckets {
    map: HashMap<IpAddr, Bucket>,
    /// The size at which idle buckets are pruned next: twice what the last
    /// prune kept, so each full scan is paid for by as many new entries
    /// (amortized O(1) per connection, whatever the number of sources).
    prune_at: usize,
}

impl Buckets {
    /// Takes one token for `ip`, or says it has none.
    fn take(&mut self, ip: IpAddr, rate: f64, now: Instant) -> bool {
        if self.map.len() >= self.prune_at.max(PRUNE_AT) {
            // A bucket that has refilled completely holds nothing worth keeping.
            self.map.retain(|_, b| {
                b.tokens + now.duration_since(b.refilled).as_secs_f64() * rate < rate
            });
            self.prune_at = 2 * self.map.len();
        }
        let bucket = self.map.entry(ip).or_insert(Bucket {
            tokens: rate,
            refilled: now,
        });
        bucket.tokens =
            (bucket.tokens + now.duration_since(bucket.refilled).as_secs_f64() * rate).min(rate);
        bucket.refilled = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }
}

/// The daemon-wide admission state.
#[derive(Default)]
pub(crate) struct Gate {
    pub active: Counter,
    /// The most connections open at once since [`Gate::take_peak`] last looked.
    peak: AtomicUsize,
    per_address: Mutex<HashMap<IpAddr, usize>>,
    buckets: Mutex<Buckets>,
}

/// A connection's admission; dropping it releases its share of every limit.
pub(crate) struct Admission {
    _active: Slot,
    address: Option<(IpAddr, Arc<Gate>)>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some((ip, gate)) = self.address.take() {
            let mut counts = lock(&gate.per_address);
            if let Some(count) = counts.get_mut(&ip) {
                *count -= 1;
                if *count == 0 {
                    counts.remove(&ip);
                }
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each critical section is one map edit, so a poisoned lock holds no torn state.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Gate {
    /// The most connections open at once since the last call, and the number
    /// open now, from which the next call's high starts.
    pub(crate) fn take_peak(&self) -> (usize, usize) {
        let now = self.active.get();
        (self.peak.swap(now, Ordering::Relaxed).max(now), now)
    }

    /// Admits a new connection under the daemon-wide cap, at accept. The
    /// per-address limits come once the client's address is known
    /// ([`Admission::admit_address`]): after a trusted PROXY header, the
    /// announced one.
    pub(crate) fn admit(&self, limits: &Limits) -> Result<Admission, Refusal> {
        let active = self
            .active
            .acquire(limits.max_connections)
            .ok_or(Refusal::DaemonFull)?;
        let open = self.active.get();
        // A load, not a read-modify-write, except when a new high is set.
        if open > self.peak.load(Ordering::Relaxed) {
            self.peak.fetch_max(open, Ordering::Relaxed);
        }
        Ok(Admission {
            _active: active,
            address: None,
        })
    }

    /// Admits a connection from `peer` at once, daemon-wide and per address.
    #[cfg(test)]
    fn admit_from(self: &Arc<Self>, peer: &Peer, limits: &Limits) -> Result<Admission, Refusal> {
        let mut admission = self.admit(limits)?;
        admission.admit_address(self, peer, limits)?;
        Ok(admission)
    }
}

impl Admission {
    /// Counts the connection against `peer`'s address: its rate and its cap. A
    /// Unix-socket peer has no address to count. Called once per connection.
    pub(crate) fn admit_address(
        &mut self,
        gate: &Arc<Gate>,
        peer: &Peer,
        limits: &Limits,
    ) -> Result<(), Refusal> {
        let Some(ip) = peer.tcp_addr().map(|a| a.ip()) else {
            return Ok(());
        };
        if let Some(rate) = limits.connection_rate_per_ip {
            if !lock(&gate.buckets).take(ip, rate, Instant::now()) {
                return Err(Refusal::AddressTooFast);
            }
        }
        let mut counts = lock(&gate.per_address);
        let count = counts.entry(ip).or_insert(0);
        if limits
            .max_connections_per_ip
            .is_some_and(|max| *count >= max)
        {
            if *count == 0 {
                counts.remove(&ip);
            }
            return Err(Refusal::AddressFull);
        }
        *count += 1;
        self.address = Some((ip, Arc::clone(gate)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(ip: &str) -> Peer {
        Peer::Tcp(format!("{ip}:1000").parse().unwrap())
    }

    #[test]
    fn per_address_and_global_caps_release_on_drop() {
        let gate = Arc::new(Gate::default());
        let limits = Limits {
            max_connections: Some(3),
            max_connections_per_ip: Some(2),
            connection_rate_per_ip: None,
        };
        let a1 = gate.admit_from(&tcp("10.0.0.1"), &limits).unwrap();
        let _a2 = gate.admit_from(&tcp("10.0.0.1"), &limits).unwrap();
        assert_eq!(
            gate.admit_from(&tcp("10.0.0.1"), &limits).err(),
            Some(Refusal::AddressFull)
        );
        let _b1 = gate.admit_from(&tcp("10.0.0.2"), &limits).unwrap();
        assert_eq!(
            gate.admit_from(&tcp("10.0.0.3"), &limits).err(),
            Some(Refusal::DaemonFull)
        );
        drop(a1);
        assert!(gate.admit_from(&tcp("10.0.0.1"), &limits).is_ok());
    }

    #[test]
    fn rate_limit_allows_a_burst_then_refuses() {
        let gate = Arc::new(Gate::default());
        let limits = Limits {
            connection_rate_per_ip: Some(5.0),
            ..Limits::default()
        };
        for _ in 0..5 {
            drop(gate.admit_from(&tcp("192.0.2.1"), &limits).unwrap());
        }
        assert_eq!(
            gate.admit_from(&tcp("192.0.2.1"), &limits).err(),
            Some(Refusal::AddressTooFast)
        );
        assert!(gate.admit_from(&tcp("192.0.2.2"), &limits).is_ok());
    }

    #[test]
    fn counts_survive_a_reload_for_names_that_stay() {
        let table = UsageTable::default();
        let usage = table.for_registry(&Registry::builtins());
        let echo = ServiceName::parse("echo").unwrap();
        let held = usage[&echo].connections.acquire(None).unwrap();

        let mut services = crate::registry::default_services();
        services.remove(&ServiceName::parse("chargen").unwrap());
        let after = table.for_registry(&Registry::new(services));
        assert_eq!(after[&echo].connections.get(), 1);
        assert!(!after.contains_key(&ServiceName::parse("chargen").unwrap()));
        drop(held);
        assert_eq!(after[&echo].connections.get(), 0);
    }

    #[test]
    fn a_name_removed_and_brought_back_still_counts_its_running_sessions() {
        let table = UsageTable::default();
        let chargen = ServiceName::parse("chargen").unwrap();
        let usage = table.for_registry(&Registry::builtins());
        let held = usage[&chargen].connections.acquire(None).unwrap();
        let mut services = crate::registry::default_services();
        services.remove(&chargen);
        assert!(!table
            .for_registry(&Registry::new(services))
            .contains_key(&chargen));
        let back = table.for_registry(&Registry::builtins());
        assert_eq!(back[&chargen].connections.get(), 1);
        drop(held);
        assert_eq!(back[&chargen].connections.get(), 0);
    }

    #[test]
    fn names_removed_and_no_longer_held_leave_the_table() {
        let table = UsageTable::default();
        let kept = |table: &UsageTable| lock(&table.0).contains_key(&chargen());
        fn chargen() -> ServiceName {
            ServiceName::parse("chargen").unwrap()
        }
        let without_chargen = || {
            let mut services = crate::registry::default_services();
            services.remove(&chargen());
            Registry::new(services)
        };
        // Held by a session: kept across reloads until it ends.
        let first = table.for_registry(&Registry::builtins());
        let session = first[&chargen()].connections.acquire(None).unwrap();
        let second = table.for_registry(&without_chargen());
        drop(first);
        let third = table.for_registry(&without_chargen());
        assert!(kept(&table));
        drop(session);
        let fourth = table.for_registry(&without_chargen());
        assert!(!kept(&table));
        assert_eq!(lock(&table.0).len(), fourth.len());
        // Held by a configuration still in use (its sessions may take more).
        let back = table.for_registry(&Registry::builtins());
        assert_eq!(back[&chargen()].connections.get(), 0);
        drop((second, third, fourth));
        let fifth = table.for_registry(&without_chargen());
        assert!(kept(&table));
        drop(back);
        let sixth = table.for_registry(&without_chargen());
        assert!(!kept(&table));
        drop((fifth, sixth));
    }

    #[test]
    fn many_sources_prune_in_amortized_constant_time() {
        let mut buckets = Buckets::default();
        let start = Instant::now();
        // Sources that each connect once and go quiet: with rate 1e9 a bucket
        // refills at once, so every prune keeps almost nothing.
        for i in 0..50_000u32 {
            let ip = IpAddr::from(i.to_be_bytes());
            assert!(buckets.take(
                ip,
                1e9,
                start + std::time::Duration::from_micros(u64::from(i))
            ));
        }
        assert!(buckets.map.len() <= 2 * PRUNE_AT, "{}", buckets.map.len());
        // With a slow rate nothing can be pruned, and the threshold grows with
        // the map instead of scanning it on every connection.
        let mut slow = Buckets::default();
        for i in 0..20_000u32 {
            slow.take(IpAddr::from(i.to_be_bytes()), 1.0, start);
        }
        assert_eq!(slow.map.len(), 20_000);
        assert!(slow.prune_at >= slow.map.len() / 2 && slow.prune_at > PRUNE_AT);
    }

    #[test]
    fn the_peak_is_the_most_open_at_once_since_the_last_look() {
        let gate = Gate::default();
        let limits = Limits::default();
        let mut open: Vec<_> = (0..3).map(|_| gate.admit(&limits).unwrap()).collect();
        open.truncate(1);
        assert_eq!(gate.take_peak(), (3, 1));
        assert_eq!(gate.take_peak(), (1, 1));
        drop(open);
        assert_eq!(gate.take_peak(), (1, 0));
    }
}
