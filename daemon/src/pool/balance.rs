//! The order in which a new client tries a pool's members: the usable ones,
//! the best SRV priority balanced by `balance` (round robin by weight, least
//! connections, the better of two random, or by the client's hash), the
//! others after them for failover.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::known::usable;
use super::{hashing, lock, Members, Pool};
use crate::model::{AdminState, Balance, Endpoint, Member};

impl Pool {
    /// The order in which a new client tries `members` (indices into its
    /// list), usable ones only: empty when none is (the client is refused at
    /// once). Balanced over the best SRV priority that has a usable member;
    /// the others follow, by priority, for failover.
    pub(crate) fn order(&self, balance: Balance, members: &Members, sticky: &[u8]) -> Vec<usize> {
        let list = &members.list;
        let (mut usable, weights): (Vec<usize>, Vec<u32>) = {
            let now = Instant::now();
            let state = lock(&self.state);
            let entry = |i: usize| state.get(&list[i].endpoint);
            let set = |i: usize| entry(i).and_then(|e| e.set).unwrap_or_default();
            let usable = (0..list.len())
                .filter(|&i| set(i).state == AdminState::Ready)
                .filter(|&i| usable(entry(i).and_then(|e| e.known.as_ref()), now))
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

    /// Each of `candidates`' connections per unit of weight, in
    /// thousandths, read under one lock.
    fn loads(&self, list: &[Member], weights: &[u32], candidates: &[usize]) -> HashMap<usize, u64> {
        let state = lock(&self.state);
        candidates
            .iter()
            .map(|&i| {
                let held = state
                    .get(&list[i].endpoint)
                    .map_or(0, |e| e.held.load(Ordering::Acquire));
                (i, held as u64 * 1000 / u64::from(weights[i].max(1)))
            })
            .collect()
    }
}
