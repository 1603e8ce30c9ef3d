//! Which backend a proxy client tries first: the order `balance` gives the
//! pool, from each backend's weight and the connections it holds now. The
//! state (turns, active counts) belongs to the service's name and survives
//! reloads, like its other counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::model::{Backend, Balance, Proxy};
use crate::ops::metrics::BackendLine;

/// Connect failures in a row that take a backend out of the pool, and for how
/// long (passive ejection; active checks, when configured, decide as well).
const EJECT_AFTER: u32 = 3;
const COOL_DOWN: Duration = Duration::from_secs(10);

/// One service's pool state.
#[derive(Debug, Default)]
pub struct Pool {
    turn: AtomicUsize,
    random: AtomicU64,
    active: Mutex<HashMap<Backend, Arc<AtomicUsize>>>,
    health: Mutex<HashMap<Backend, Health>>,
}

/// What is known of one backend's health.
#[derive(Debug, Default)]
struct Health {
    /// Client connects that failed in a row, and the ejection they caused.
    failures: u32,
    ejected_until: Option<Instant>,
    /// Down by active checks, and the run of results against that state.
    checked_down: bool,
    streak: u32,
    last_check: Option<bool>,
    /// Counts for the metrics.
    connections: u64,
    connect_failures: u64,
    bytes_in: u64,
    bytes_out: u64,
}

/// One connection held by a backend; dropping it gives the count back.
pub struct Held(Arc<AtomicUsize>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Pool {
    /// Counts a connection against `backend` (its address as written).
    pub fn hold(&self, backend: &Backend) -> Held {
        let count = {
            let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(active.entry(backend.clone()).or_default())
        };
        count.fetch_add(1, Ordering::AcqRel);
        Held(count)
    }

    fn load(&self, proxy: &Proxy, index: usize) -> u64 {
        let active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let held = active
            .get(&proxy.backends[index])
            .map_or(0, |c| c.load(Ordering::Acquire));
        // Connections per unit of weight, in thousandths.
        held as u64 * 1000 / u64::from(proxy.weights[index].max(1))
    }

    /// The order in which a new client tries `proxy`'s backends, healthy ones
    /// only: empty when none is (the client is refused at once).
    pub fn order(&self, proxy: &Proxy) -> Vec<usize> {
        let mut order = self.balanced(proxy);
        let now = Instant::now();
        let health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        order.retain(|&i| usable(health.get(&proxy.backends[i]), now));
        order
    }

    /// A client's connect to `backend` failed; enough in a row eject it.
    pub fn connect_failed(&self, service: &str, backend: &Backend) {
        let mut health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let state = health.entry(backend.clone()).or_default();
        state.failures += 1;
        state.connect_failures += 1;
        if state.failures == EJECT_AFTER {
            state.ejected_until = Some(Instant::now() + COOL_DOWN);
            tracing::warn!(service, %backend, failures = EJECT_AFTER, cool_down = ?COOL_DOWN, "backend ejected");
        }
    }

    /// A client connected to `backend`: its failure run is over.
    pub fn connected(&self, backend: &Backend) {
        let mut health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let state = health.entry(backend.clone()).or_default();
        state.failures = 0;
        state.ejected_until = None;
        state.connections += 1;
    }

    /// Bytes a finished relay moved through `backend`.
    pub fn relayed(&self, backend: &Backend, bytes_in: u64, bytes_out: u64) {
        let mut health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let state = health.entry(backend.clone()).or_default();
        state.bytes_in += bytes_in;
        state.bytes_out += bytes_out;
    }

    /// Each backend's figures, for the metrics.
    pub fn lines(&self, service: &str, proxy: &Proxy) -> Vec<BackendLine> {
        let now = Instant::now();
        let health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        proxy
            .backends
            .iter()
            .map(|backend| {
                let state = health.get(backend);
                BackendLine {
                    service: service.to_owned(),
                    up: usable(state, now),
                    active: active
                        .get(backend)
                        .map_or(0, |c| c.load(Ordering::Acquire) as u64),
                    connections: state.map_or(0, |s| s.connections),
                    failures: state.map_or(0, |s| s.connect_failures),
                    bytes_in: state.map_or(0, |s| s.bytes_in),
                    bytes_out: state.map_or(0, |s| s.bytes_out),
                    last_check: state.and_then(|s| s.last_check),
                    backend: backend.to_string(),
                }
            })
            .collect()
    }

    /// An active check of `backend` passed or failed; `rise` passes bring a
    /// down backend up, `fall` failures take an up one down.
    pub fn checked(&self, service: &str, backend: &Backend, passed: bool, rise: u32, fall: u32) {
        let mut health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let state = health.entry(backend.clone()).or_default();
        state.last_check = Some(passed);
        // A result that agrees with the state ends any run against it.
        if passed != state.checked_down {
            state.streak = 0;
            return;
        }
        state.streak += 1;
        let needed = if state.checked_down { rise } else { fall };
        if state.streak >= needed {
            state.checked_down = !state.checked_down;
            state.streak = 0;
            if state.checked_down {
                tracing::warn!(service, %backend, checks = fall, "backend down");
            } else {
                state.failures = 0;
                state.ejected_until = None;
                tracing::info!(service, %backend, checks = rise, "backend up");
            }
        }
    }

    /// `balance`'s order over the whole pool.
    fn balanced(&self, proxy: &Proxy) -> Vec<usize> {
        let n = proxy.backends.len();
        let rotated = |start: usize| (0..n).map(move |i| (start + i) % n);
        match proxy.balance {
            Balance::First => (0..n).collect(),
            Balance::RoundRobin => {
                let total: usize = proxy.weights.iter().map(|&w| w as usize).sum();
                let mut turn = self.turn.fetch_add(1, Ordering::Relaxed) % total.max(1);
                let first = proxy
                    .weights
                    .iter()
                    .position(|&w| {
                        let here = turn < w as usize;
                        turn = turn.saturating_sub(w as usize);
                        here
                    })
                    .unwrap_or(0);
                rotated(first).collect()
            }
            Balance::LeastConnections => {
                // Ties go round, not always to the first backend.
                let start = self.turn.fetch_add(1, Ordering::Relaxed) % n.max(1);
                let mut order: Vec<usize> = rotated(start).collect();
                order.sort_by_key(|&i| self.load(proxy, i));
                order
            }
            Balance::RandomTwo => {
                let (a, b) = (self.random(n), self.random(n));
                let best = if self.load(proxy, b) < self.load(proxy, a) {
                    b
                } else {
                    a
                };
                std::iter::once(best)
                    .chain((0..n).filter(|&i| i != best))
                    .collect()
            }
        }
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

/// Whether a backend may be tried now; one never heard of counts as up.
fn usable(health: Option<&Health>, now: Instant) -> bool {
    health.map_or(true, |h| {
        !h.checked_down && h.ejected_until.map_or(true, |t| now >= t)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Backend, RelayMode};
    use std::time::Duration;

    fn proxy(balance: Balance, weights: &[u32]) -> Proxy {
        Proxy {
            backends: (0..weights.len())
                .map(|i| {
                    format!("127.0.0.1:{}", 1000 + i)
                        .parse::<Backend>()
                        .unwrap()
                })
                .collect(),
            weights: weights.to_vec(),
            balance,
            health_check: None,
            connect_timeout: Duration::from_secs(1),
            idle_timeout: None,
            send_proxy: None,
            relay: RelayMode::Splice,
        }
    }

    #[test]
    fn round_robin_honours_weights_exactly_over_a_cycle() {
        let pool = Pool::default();
        let proxy = proxy(Balance::RoundRobin, &[1, 2, 3]);
        let mut firsts = [0; 3];
        for _ in 0..600 {
            firsts[pool.order(&proxy)[0]] += 1;
        }
        assert_eq!(firsts, [100, 200, 300]);
    }

    #[test]
    fn least_connections_and_random_two_avoid_the_busy_backend() {
        for balance in [Balance::LeastConnections, Balance::RandomTwo] {
            let pool = Pool::default();
            let proxy = proxy(balance, &[1, 1]);
            let _busy: Vec<Held> = (0..5).map(|_| pool.hold(&proxy.backends[0])).collect();
            for _ in 0..50 {
                let order = pool.order(&proxy);
                // random-two may draw the busy one twice; then it is all it has.
                if balance == Balance::LeastConnections {
                    assert_eq!(order[0], 1);
                }
                assert_eq!(order.len(), 2);
            }
        }
    }

    #[test]
    fn checks_take_a_backend_down_after_fall_and_up_after_rise() {
        let pool = Pool::default();
        let proxy = proxy(Balance::First, &[1, 1]);
        let a = &proxy.backends[0];
        pool.checked("s", a, false, 2, 2);
        assert_eq!(pool.order(&proxy), [0, 1], "one failure is not enough");
        pool.checked("s", a, true, 2, 2);
        pool.checked("s", a, false, 2, 2);
        assert_eq!(pool.order(&proxy), [0, 1], "a pass between resets the run");
        pool.checked("s", a, false, 2, 2);
        assert_eq!(pool.order(&proxy), [1], "down after two in a row");
        pool.checked("s", a, true, 2, 2);
        assert_eq!(pool.order(&proxy), [1]);
        pool.checked("s", a, true, 2, 2);
        assert_eq!(pool.order(&proxy), [0, 1], "up after two passes");
        // Passive: three failed client connects eject it.
        for _ in 0..3 {
            pool.connect_failed("s", a);
        }
        assert_eq!(pool.order(&proxy), [1]);
        pool.connected(a);
        assert_eq!(pool.order(&proxy), [0, 1]);
    }
}
