//! The order in which a new client tries a pool's members: the usable ones,
//! the best SRV priority balanced by `balance` (round robin by weight, least
//! connections, the better of two random, or by the client's hash), the
//! others after them for failover. Only the first is chosen at once, in
//! constant or logarithmic time, or in one cheap pass over the counts or
//! hashes for `least-connections` and `source`; the rest of the order is
//! made only for a client whose first choice failed.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::known::usable;
use super::view::View;
use super::{hashing, lock, MemberState, Members, Pool};
use crate::model::{AdminState, Balance, Endpoint};

/// A client's order over the members (indices into their list).
pub(crate) struct Order {
    view: Arc<View>,
    first: Option<usize>,
    plan: Plan,
    /// The members after the first, made when the first failed.
    after: Option<std::vec::IntoIter<usize>>,
    started: bool,
}

/// How the members after the first are ordered.
#[derive(Clone, Copy)]
enum Plan {
    /// `best` from this position on, round: first and round-robin.
    Rotated(usize),
    /// By load then by position from `start` round: least-connections.
    ByLoad { start: usize },
    /// The chosen one first, the others in list order: random-two.
    Listed,
    /// By the client's rendezvous scores: source.
    Ranked(u64),
}

impl Order {
    /// No member is usable: the client is refused at once.
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    fn after_first(&self) -> Vec<usize> {
        let (view, best) = (&self.view, &self.view.best);
        let mut order: Vec<usize> = match self.plan {
            Plan::Rotated(at) => best[at..].iter().chain(&best[..at]).copied().collect(),
            Plan::ByLoad { start } => {
                let mut order: Vec<usize> = best[start..]
                    .iter()
                    .chain(&best[..start])
                    .copied()
                    .collect();
                order.sort_by(|&a, &b| view.compare_load(a, b));
                order
            }
            Plan::Listed => best.clone(),
            Plan::Ranked(key) => hashing::ranked_hashed(key, &view.hashes, &view.weights, best),
        };
        order.retain(|&i| Some(i) != self.first);
        order.extend(&view.rest);
        order
    }
}

impl Iterator for Order {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if !self.started {
            self.started = true;
            return self.first;
        }
        if self.after.is_none() {
            self.after = Some(self.after_first().into_iter());
        }
        self.after.as_mut().and_then(Iterator::next)
    }
}

impl Pool {
    /// The order in which a new client tries `members` (indices into its
    /// list), usable ones only: empty when none is (the client is refused at
    /// once). Balanced over the best SRV priority that has a usable member;
    /// the others follow, by priority, for failover.
    pub(crate) fn order(&self, balance: Balance, members: &Arc<Members>, sticky: &[u8]) -> Order {
        let view = self.view(members);
        let (first, plan) = self.first(balance, &view, sticky);
        Order {
            view,
            first,
            plan,
            after: None,
            started: false,
        }
    }

    /// The order as a list, for tests.
    #[cfg(test)]
    pub(crate) fn order_list(
        &self,
        balance: Balance,
        members: &Arc<Members>,
        sticky: &[u8],
    ) -> Vec<usize> {
        self.order(balance, members, sticky).collect()
    }

    /// `balance`'s first choice among the view's best members, and how the
    /// others follow it.
    fn first(&self, balance: Balance, view: &View, sticky: &[u8]) -> (Option<usize>, Plan) {
        let best = &view.best;
        let n = best.len();
        if n <= 1 {
            return (best.first().copied(), Plan::Rotated(0));
        }
        match balance {
            Balance::First => (Some(best[0]), Plan::Rotated(0)),
            Balance::RoundRobin => {
                let total = view.cumulative.last().copied().unwrap_or(1).max(1);
                let turn = self.turn.fetch_add(1, Ordering::Relaxed) as u64 % total;
                // The first whose running sum passes the turn.
                let at = view
                    .cumulative
                    .partition_point(|&sum| sum <= turn)
                    .min(n - 1);
                (Some(best[at]), Plan::Rotated(at))
            }
            Balance::LeastConnections => {
                // Ties go round, not always to the first backend.
                let start = self.turn.fetch_add(1, Ordering::Relaxed) % n;
                let round = best[start..].iter().chain(&best[..start]).copied();
                (view.least_loaded(round), Plan::ByLoad { start })
            }
            Balance::RandomTwo => {
                // Two different members: the second is drawn from the rest.
                let a = self.random(n);
                let b = (a + 1 + self.random(n - 1)) % n;
                let (first, second) = (best[a], best[b]);
                let pick = if view.compare_load(second, first).is_lt() {
                    second
                } else {
                    first
                };
                (Some(pick), Plan::Listed)
            }
            Balance::Source => {
                let key = hashing::client_key(sticky);
                let first = hashing::best(key, &view.hashes, &view.weights, best, view.uniform);
                (first, Plan::Ranked(key))
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

impl Pool {
    /// The view for `members`: the shared one while nothing changed, else a
    /// new one (one pass over the members, under the state lock).
    pub(super) fn view(&self, members: &Arc<Members>) -> Arc<View> {
        let now = Instant::now();
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(view) = lock(&self.view).as_ref() {
            if view.is_current(members, generation, now) {
                return Arc::clone(view);
            }
        }
        let view = {
            let mut state = lock(&self.state);
            // Read again under the lock: a change made since is in the state.
            let generation = self.generation.load(Ordering::Acquire);
            Arc::new(build(members, &mut state, generation, now))
        };
        *lock(&self.view) = Some(Arc::clone(&view));
        view
    }

    /// Something that decides the view changed: the next client makes a new one.
    pub(super) fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

fn build(
    members: &Arc<Members>,
    state: &mut HashMap<Endpoint, MemberState>,
    generation: u64,
    now: Instant,
) -> View {
    let list = &members.list;
    let mut usable_now = Vec::new();
    let (mut weights, mut held, mut hashes) = (Vec::new(), Vec::new(), Vec::new());
    let mut expires: Option<Instant> = None;
    for (i, member) in list.iter().enumerate() {
        // Made here if missing, so that the count the view reads is the one
        // `hold` adds to; an entry is removed only where the pool says
        // `changed`, so this one outlives the view.
        let entry = state.entry(member.endpoint.clone()).or_default();
        let set = entry.set.unwrap_or_default();
        let known = entry.known.as_ref();
        if let Some(until) = known.and_then(|k| k.health.ejected_until) {
            if now < until {
                expires = Some(expires.map_or(until, |t| t.min(until)));
            }
        }
        if set.state == AdminState::Ready && usable(known, now) {
            usable_now.push(i);
        }
        weights.push(set.weight.unwrap_or(member.weight));
        held.push(Arc::clone(&entry.held));
        hashes.push(hashing::member_hash(&member.endpoint));
    }
    let capacity =
        (!usable_now.is_empty()).then(|| usable_now.iter().map(|&i| list[i].max_connections).sum());
    let best_priority = usable_now.iter().map(|&i| list[i].priority).min();
    let (best, mut rest): (Vec<usize>, Vec<usize>) = usable_now
        .into_iter()
        .partition(|&i| Some(list[i].priority) == best_priority);
    rest.sort_by_key(|&i| list[i].priority);
    let cumulative = best
        .iter()
        .scan(0u64, |sum, &i| {
            *sum += u64::from(weights[i].max(1));
            Some(*sum)
        })
        .collect();
    let uniform = best.windows(2).all(|w| weights[w[0]] == weights[w[1]]);
    View {
        members: Arc::clone(members),
        generation,
        expires,
        best,
        rest,
        weights,
        cumulative,
        held,
        hashes,
        uniform,
        capacity,
    }
}
