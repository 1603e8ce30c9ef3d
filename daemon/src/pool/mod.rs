//! A proxy service's pool: its members (the backends, as DNS last answered for
//! those that need it), the order `balance` gives them for each new client,
//! and what is known of each one's health. The state belongs to the service's
//! name and survives reloads, like its other counts; `health.rs` and
//! `discovery.rs` are the tasks that keep it current.

mod balance;
pub(crate) mod discovery;
pub(crate) mod hashing;
pub(crate) mod health;
mod known;
mod members;
mod overrides;
mod view;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use known::{usable, Known};
pub(crate) use members::Members;

use crate::model::{AdminState, Endpoint, Member, MemberFigures, Proxy, Weighted};
use crate::net::relay::Relayed;

/// One service's pool state: its members, and each endpoint's state in one
/// map under one lock (`state`); the `members` watch is read or replaced
/// under that lock too, so that what is known never names a member that
/// left.
#[derive(Debug)]
pub(crate) struct Pool {
    turn: AtomicUsize,
    random: AtomicU64,
    members: watch::Sender<Arc<Members>>,
    state: Mutex<HashMap<Endpoint, MemberState>>,
    /// Counts the changes that decide which members a client may try (see
    /// `view.rs`), and the view made at the last one.
    generation: AtomicU64,
    view: Mutex<Option<Arc<view::View>>>,
}

/// One endpoint's state. An entry lives while any part of it does: the
/// endpoint is a member, sessions still hold it, or an operator set
/// something for it.
#[derive(Debug, Default)]
struct MemberState {
    /// Its health and traffic: only while it is a member (`replace` drops
    /// it for those that left, `update` never makes it for them).
    known: Option<Known>,
    /// Connections held on it now (by `Held` values, which outlive a member
    /// that left).
    held: Arc<AtomicUsize>,
    /// Set on the admin socket. Kept across DNS changes and reloads that
    /// keep the member: the operator's word stands until the operator
    /// changes it, or a reload removes the member.
    set: Option<Override>,
    /// Who set it: this instance's operator or the fleet's. This
    /// instance's also when it set the defaults back (`set` is then none).
    set_by: Option<tcpmux_proto::admin::SetBy>,
}

impl MemberState {
    fn is_empty(&self) -> bool {
        self.known.is_none()
            && self.set.is_none()
            && self.set_by.is_none()
            && self.held.load(Ordering::Acquire) == 0
    }
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
            state: Mutex::default(),
            generation: AtomicU64::new(0),
            view: Mutex::default(),
        }
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
            self.members.send_replace(Arc::new(Members::new(
                Some(Arc::clone(proxy)),
                current.list.clone(),
                current.ready,
            )));
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
        self.replace(Members::new(
            Some(Arc::clone(proxy)),
            list,
            !proxy.follows_dns(),
        ));
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
            self.replace(Members::new(current.config.clone(), list, true));
        }
        true
    }

    fn replace(&self, members: Members) {
        // What is known of endpoints that left goes with them; counts still
        // held by their sessions live on in the `Held` values, what an
        // operator set until a reload forgets it. Under the lock, so that
        // `update` sees either the old members and their entries or the new
        // ones, never an entry for one that left.
        let mut state = lock(&self.state);
        for (endpoint, entry) in state.iter_mut() {
            if !members.endpoints.contains(endpoint) {
                entry.known = None;
            }
        }
        state.retain(|_, entry| !entry.is_empty());
        self.members.send_replace(Arc::new(members));
        self.changed();
    }

    /// Applies `change` to what is known of `endpoint`, if it is still a
    /// member: a session or a check that ends after DNS dropped its backend
    /// changes nothing.
    fn update(&self, endpoint: &Endpoint, change: impl FnOnce(&mut Known)) {
        let mut state = lock(&self.state);
        if !self.members.borrow().endpoints.contains(endpoint) {
            return;
        }
        let entry = state.entry(endpoint.clone()).or_default();
        let known = entry.known.get_or_insert_with(Known::default);
        let now = Instant::now();
        let before = (usable(Some(known), now), known.health.ejected_until);
        change(known);
        // Most changes are counts; only one to its health changes the view.
        if before != (usable(Some(known), now), known.health.ejected_until) {
            self.changed();
        }
    }

    /// Whether anything is known of `endpoint` (a member's health or traffic).
    #[cfg(test)]
    fn knows(&self, endpoint: &Endpoint) -> bool {
        lock(&self.state)
            .get(endpoint)
            .is_some_and(|entry| entry.known.is_some())
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
        let count = Arc::clone(&lock(&self.state).entry(endpoint.clone()).or_default().held);
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
        self.view(&members).capacity.unwrap_or(configured)
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

    /// A finished UDP flow through `endpoint`: its bytes each way. An error
    /// on its socket (an ICMP port unreachable) fails the backend as a
    /// refused connect does; a reply shows it serves; silence says nothing.
    pub(crate) fn flow_ended(
        &self,
        service: &str,
        endpoint: &Endpoint,
        (bytes_in, bytes_out): (u64, u64),
        failed: bool,
    ) {
        self.update(endpoint, |known| {
            known.traffic.bytes_in += bytes_in;
            known.traffic.bytes_out += bytes_out;
            if failed {
                known.traffic.connect_failures += 1;
                known.health.failed(service, endpoint);
            } else if bytes_out > 0 {
                known.health.served();
            }
        });
    }

    /// Each member's figures, for the metrics and the admin socket.
    pub(crate) fn figures(&self, service: &str, proxy: &Proxy) -> Vec<MemberFigures> {
        let Some(members) = self.current(proxy) else {
            return Vec::new();
        };
        let now = Instant::now();
        let state = lock(&self.state);
        members
            .list
            .iter()
            .map(|member| {
                let entry = state.get(&member.endpoint);
                let known = entry.and_then(|e| e.known.as_ref());
                let traffic = known.map(|k| &k.traffic);
                let set = entry.and_then(|e| e.set);
                MemberFigures {
                    weight: set.and_then(|o| o.weight).unwrap_or(member.weight),
                    admin: set.map(|o| o.state).unwrap_or_default(),
                    set_at_runtime: set.is_some(),
                    set_by: entry.and_then(|e| e.set_by.clone()),
                    service: service.to_owned(),
                    up: usable(known, now),
                    active: entry.map_or(0, |e| e.held.load(Ordering::Acquire) as u64),
                    connections: traffic.map_or(0, |t| t.connections),
                    failures: traffic.map_or(0, |t| t.connect_failures),
                    bytes_in: traffic.map_or(0, |t| t.bytes_in),
                    bytes_out: traffic.map_or(0, |t| t.bytes_out),
                    last_check: known.and_then(|k| k.health.last_check),
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
}

#[cfg(test)]
mod tests;
