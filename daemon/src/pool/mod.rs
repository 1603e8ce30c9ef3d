//! A proxy service's pool: its members (the backends, as DNS last answered for
//! those that need it), the order `balance` gives them for each new client,
//! and what is known of each one's health. The state belongs to the service's
//! name and survives reloads, like its other counts; `health.rs` and
//! `discovery.rs` are the tasks that keep it current.

pub(crate) mod discovery;
mod hashing;
pub(crate) mod health;
mod known;
mod overrides;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use known::{usable, Known};

use crate::model::{AdminState, Balance, Endpoint, Member, Proxy, Weighted};
use crate::net::relay::Relayed;
use crate::ops::metrics::BackendLine;

/// One service's pool state.
///
/// Lock order, where several are held: `known`, then `active`, then
/// `overrides`; the `members` watch is read or replaced under `known`
/// (so that what is known never names a member that left).
#[derive(Debug)]
pub(crate) struct Pool {
    turn: AtomicUsize,
    random: AtomicU64,
    members: watch::Sender<Arc<Members>>,
    active: Mutex<HashMap<Endpoint, Arc<AtomicUsize>>>,
    /// What is known of each current member: entries exist only for members
    /// (`replace` drops those that left, `update` never re-creates them).
    known: Mutex<HashMap<Endpoint, Known>>,
    /// Set on the admin socket, by endpoint. Kept across DNS changes and
    /// reloads that keep the member: the operator's word stands until the
    /// operator changes it, or a reload removes the member.
    overrides: Mutex<HashMap<Endpoint, Override>>,
}

/// What an operator set for one backend at run time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Override {
    pub state: AdminState,
    /// Replaces the configured (or SRV) weight.
    pub weight: Option<u32>,
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            turn: AtomicUsize::new(0),
            random: AtomicU64::new(0),
            members: watch::Sender::new(Arc::default()),
            active: Mutex::default(),
            known: Mutex::default(),
            overrides: Mutex::default(),
        }
    }
}

/// The pool's members, and the configuration they were found for.
#[derive(Debug, Default)]
pub(crate) struct Members {
    /// The configuration they were found for: members found for other
    /// backends (before a reload) are not this one's.
    config: Option<Arc<Proxy>>,
    /// In the configured order; an SRV name's records by priority.
    pub list: Vec<Member>,
    /// False until every backend that needs DNS has been looked up once.
    ready: bool,
}

impl Members {
    /// Whether they are `proxy`'s: the same configuration (a pointer
    /// comparison, each client's case) or one with the same backends.
    fn are_for(&self, proxy: &Proxy) -> bool {
        self.config
            .as_deref()
            .is_some_and(|config| std::ptr::eq(config, proxy) || config.backends == proxy.backends)
    }
}

/// One connection held by a backend; dropping it gives the count back.
pub(crate) struct Held(Arc<AtomicUsize>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pool {
    /// Makes the pool `proxy`'s: unchanged if it already is (a reload that
    /// kept the backends keeps what DNS found); otherwise its members are the
    /// backends that need no DNS, ready at once unless some do. Returns the
    /// members whose run-time settings it forgot: configured ones the new
    /// backends lack (and, without DNS, any not among them).
    pub(crate) fn configure(&self, proxy: &Arc<Proxy>) -> Vec<Endpoint> {
        let current = Arc::clone(&self.members.borrow());
        if current.are_for(proxy) {
            // Kept, now under the new configuration's pointer.
            self.members.send_replace(Arc::new(Members {
                config: Some(Arc::clone(proxy)),
                list: current.list.clone(),
                ready: current.ready,
            }));
            return Vec::new();
        }
        let list: Vec<Member> = proxy
            .backends
            .iter()
            .filter_map(Weighted::fixed_member)
            .collect();
        let was_configured = |e: &Endpoint| {
            current.config.as_deref().is_some_and(|old| {
                old.backends
                    .iter()
                    .filter_map(Weighted::fixed_member)
                    .any(|m| &m.endpoint == e)
            })
        };
        let forgotten = self.forget(|e| {
            !list.iter().any(|m| &m.endpoint == e) && (was_configured(e) || !proxy.follows_dns())
        });
        self.replace(Members {
            config: Some(Arc::clone(proxy)),
            list,
            ready: !proxy.follows_dns(),
        });
        forgotten
    }

    /// DNS found `list` for `proxy`; false when the pool is no longer
    /// `proxy`'s (a reload replaced it) and the lookups should stop.
    pub(crate) fn publish(&self, proxy: &Proxy, list: Vec<Member>) -> bool {
        let current = Arc::clone(&self.members.borrow());
        if !current.are_for(proxy) {
            return false;
        }
        if !current.ready || current.list != list {
            self.replace(Members {
                config: current.config.clone(),
                list,
                ready: true,
            });
        }
        true
    }

    fn replace(&self, members: Members) {
        // State of endpoints that left goes with them; counts still held by
        // their sessions live on in the `Held` values. Under the `known`
        // lock, so that `update` sees either the old members and their
        // entries or the new ones, never an entry for one that left.
        let mut known = lock(&self.known);
        let keep = |e: &Endpoint| members.list.iter().any(|m| &m.endpoint == e);
        known.retain(|e, _| keep(e));
        lock(&self.active).retain(|e, c| keep(e) || c.load(Ordering::Acquire) > 0);
        self.members.send_replace(Arc::new(members));
    }

    /// Applies `change` to what is known of `endpoint`, if it is still a
    /// member: a session or a check that ends after DNS dropped its backend
    /// changes nothing.
    fn update(&self, endpoint: &Endpoint, change: impl FnOnce(&mut Known)) {
        let mut known = lock(&self.known);
        let member = self
            .members
            .borrow()
            .list
            .iter()
            .any(|m| &m.endpoint == endpoint);
        if member {
            change(known.entry(endpoint.clone()).or_default());
        }
    }

    /// The members now, if they are `proxy`'s and found.
    pub(crate) fn current(&self, proxy: &Proxy) -> Option<Arc<Members>> {
        let members = self.members.borrow();
        (members.ready && members.are_for(proxy)).then(|| Arc::clone(&members))
    }

    /// The members for a new client of `proxy`, waiting up to `wait` for the
    /// first DNS answers after a start or reload.
    pub(crate) async fn members(&self, proxy: &Proxy, wait: Duration) -> Option<Arc<Members>> {
        if let Some(members) = self.current(proxy) {
            return Some(members);
        }
        let mut changes = self.members.subscribe();
        let found = async {
            let members = changes.wait_for(|m| m.ready && m.are_for(proxy)).await;
            members.ok().map(|m| Arc::clone(&m))
        };
        tokio::time::timeout(wait, found).await.ok().flatten()
    }

    /// Counts a connection against `endpoint`.
    pub(crate) fn hold(&self, endpoint: &Endpoint) -> Held {
        let count = Arc::clone(lock(&self.active).entry(endpoint.clone()).or_default());
        count.fetch_add(1, Ordering::AcqRel);
        Held(count)
    }

    /// Counts a connection against `endpoint` unless it holds `max` already.
    pub(crate) fn try_hold(&self, endpoint: &Endpoint, max: Option<usize>) -> Option<Held> {
        let held = self.hold(endpoint);
        // Dropping `held` undoes the count.
        let within = max.map_or(true, |max| held.0.load(Ordering::Acquire) <= max);
        within.then_some(held)
    }

    /// Each of `candidates`' connections per unit of weight, in
    /// thousandths, read under one lock.
    fn loads(&self, list: &[Member], weights: &[u32], candidates: &[usize]) -> HashMap<usize, u64> {
        let active = lock(&self.active);
        candidates
            .iter()
            .map(|&i| {
                let held = active
                    .get(&list[i].endpoint)
                    .map_or(0, |c| c.load(Ordering::Acquire));
                (i, held as u64 * 1000 / u64::from(weights[i].max(1)))
            })
            .collect()
    }

    /// What `proxy`'s members in service hold together when each has a cap
    /// of its own (drained, in maintenance, down or ejected ones aside), so
    /// that its queue admits no more clients than they can take. The
    /// configured sum while the members are not known, when none is in
    /// service (the client is then refused at once, not queued), or when DNS
    /// finds them.
    pub(crate) fn capacity(&self, proxy: &Proxy) -> Option<usize> {
        let configured = proxy.capacity();
        if configured.is_none() || proxy.follows_dns() {
            return configured;
        }
        let Some(members) = self.current(proxy) else {
            return configured;
        };
        let now = Instant::now();
        let known = lock(&self.known);
        let overrides = lock(&self.overrides);
        let in_service: Vec<Option<usize>> = members
            .list
            .iter()
            .filter(|m| {
                overrides
                    .get(&m.endpoint)
                    .map_or(AdminState::Ready, |o| o.state)
                    == AdminState::Ready
            })
            .filter(|m| usable(known.get(&m.endpoint), now))
            .map(|m| m.max_connections)
            .collect();
        if in_service.is_empty() {
            return configured;
        }
        in_service.into_iter().sum()
    }

    /// The order in which a new client tries `members` (indices into its
    /// list), usable ones only: empty when none is (the client is refused at
    /// once). Balanced over the best SRV priority that has a usable member;
    /// the others follow, by priority, for failover.
    pub(crate) fn order(&self, balance: Balance, members: &Members, sticky: &[u8]) -> Vec<usize> {
        let list = &members.list;
        let (mut usable, weights): (Vec<usize>, Vec<u32>) = {
            let now = Instant::now();
            let known = lock(&self.known);
            let overrides = lock(&self.overrides);
            let set = |i: usize| {
                overrides
                    .get(&list[i].endpoint)
                    .copied()
                    .unwrap_or_default()
            };
            let usable = (0..list.len())
                .filter(|&i| set(i).state == AdminState::Ready)
                .filter(|&i| usable(known.get(&list[i].endpoint), now))
                .collect();
            let weights = (0..list.len())
                .map(|i| set(i).weight.unwrap_or(list[i].weight))
                .collect();
            (usable, weights)
        };
        let Some(best) = usable.iter().map(|&i| list[i].priority).min() else {
            return usable;
        };
        let rest: Vec<usize> = {
            let mut rest: Vec<usize> = usable
                .iter()
                .copied()
                .filter(|&i| list[i].priority != best)
                .collect();
            rest.sort_by_key(|&i| list[i].priority);
            rest
        };
        usable.retain(|&i| list[i].priority == best);
        let mut order = match balance {
            Balance::Source => {
                let endpoints: Vec<&Endpoint> = list.iter().map(|m| &m.endpoint).collect();
                hashing::ranked(sticky, &endpoints, &weights, &usable)
            }
            _ => self.balanced(balance, list, &weights, usable),
        };
        order.extend(rest);
        order
    }

    /// A client's connect to `endpoint` failed; enough in a row eject it.
    /// Once ejected, the first client after the cool-down is the probe: if it
    /// fails too, the backend is out again at once.
    pub(crate) fn connect_failed(&self, service: &str, endpoint: &Endpoint) {
        self.update(endpoint, |known| {
            known.traffic.connect_failures += 1;
            known.health.failed(service, endpoint);
        });
    }

    /// A client connected to `endpoint`. Its failure run ends only once the
    /// session shows the backend serves ([`Pool::relayed`]): a backend that
    /// accepts and then closes fails its clients as surely as one that refuses.
    pub(crate) fn connected(&self, endpoint: &Endpoint) {
        self.update(endpoint, |known| known.traffic.connections += 1);
    }

    /// A finished relay through `endpoint`: its bytes, and whether the backend
    /// `failed` the client (quit before its first byte: a failure, like a
    /// refused connect) or served (its failure run is over).
    pub(crate) fn relayed(
        &self,
        service: &str,
        endpoint: &Endpoint,
        relayed: &Relayed,
        failed: bool,
    ) {
        self.update(endpoint, |known| {
            known.traffic.bytes_in += relayed.client_to_backend;
            known.traffic.bytes_out += relayed.backend_to_client;
            if failed {
                known.health.failed(service, endpoint);
            } else {
                known.health.served();
            }
        });
    }

    /// Each member's figures, for the metrics.
    pub(crate) fn lines(&self, service: &str, proxy: &Proxy) -> Vec<BackendLine> {
        let Some(members) = self.current(proxy) else {
            return Vec::new();
        };
        let now = Instant::now();
        let known = lock(&self.known);
        let active = lock(&self.active);
        let overrides = lock(&self.overrides);
        members
            .list
            .iter()
            .map(|member| {
                let state = known.get(&member.endpoint);
                let traffic = state.map(|s| &s.traffic);
                let set = overrides.get(&member.endpoint);
                BackendLine {
                    weight: set.and_then(|o| o.weight).unwrap_or(member.weight),
                    admin: set.map(|o| o.state).unwrap_or_default(),
                    set_at_runtime: set.is_some(),
                    service: service.to_owned(),
                    up: usable(state, now),
                    active: active
                        .get(&member.endpoint)
                        .map_or(0, |c| c.load(Ordering::Acquire) as u64),
                    connections: traffic.map_or(0, |t| t.connections),
                    failures: traffic.map_or(0, |t| t.connect_failures),
                    bytes_in: traffic.map_or(0, |t| t.bytes_in),
                    bytes_out: traffic.map_or(0, |t| t.bytes_out),
                    last_check: state.and_then(|s| s.health.last_check),
                    backend: member.endpoint.to_string(),
                }
            })
            .collect()
    }

    /// An active check of `endpoint` passed or failed; `rise` passes bring a
    /// down backend up, `fall` failures take an up one down.
    pub(crate) fn checked(
        &self,
        service: &str,
        endpoint: &Endpoint,
        passed: bool,
        rise: u32,
        fall: u32,
    ) {
        self.update(endpoint, |known| {
            known
                .health
                .checked(service, endpoint, passed, (rise, fall));
        });
    }

    /// `balance`'s order over `candidates` (indices into `list`), reordered
    /// in place: a lone candidate, the usual single backend, costs nothing.
    fn balanced(
        &self,
        balance: Balance,
        list: &[Member],
        weights: &[u32],
        mut candidates: Vec<usize>,
    ) -> Vec<usize> {
        let n = candidates.len();
        match balance {
            _ if n <= 1 => {}
            // Source is ranked by `hashing` before this is reached.
            Balance::First | Balance::Source => {}
            Balance::RoundRobin => {
                let weight = |i: usize| weights[i].max(1) as usize;
                let total: usize = candidates.iter().map(|&i| weight(i)).sum();
                let mut turn = self.turn.fetch_add(1, Ordering::Relaxed) % total.max(1);
                let first = candidates
                    .iter()
                    .position(|&i| {
                        let here = turn < weight(i);
                        turn = turn.saturating_sub(weight(i));
                        here
                    })
                    .unwrap_or(0);
                candidates.rotate_left(first);
            }
            Balance::LeastConnections => {
                // Ties go round, not always to the first backend.
                let start = self.turn.fetch_add(1, Ordering::Relaxed) % n;
                let loads = self.loads(list, weights, &candidates);
                candidates.rotate_left(start);
                candidates.sort_by_key(|i| loads[i]);
            }
            Balance::RandomTwo => {
                // Two different members: the second is drawn from the rest.
                let first = self.random(n);
                let second = (first + 1 + self.random(n - 1)) % n;
                let (a, b) = (candidates[first], candidates[second]);
                let loads = self.loads(list, weights, &[a, b]);
                let best = if loads[&b] < loads[&a] { second } else { first };
                // The better of the two first, the others in their order.
                candidates[..=best].rotate_right(1);
            }
        }
        candidates
    }

    /// A pseudo-random index below `n` (xorshift; balancing needs no more).
    fn random(&self, n: usize) -> usize {
        let mut x = self.random.load(Ordering::Relaxed);
        if x == 0 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
            x = nanos | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random.store(x, Ordering::Relaxed);
        (x % n.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests;
