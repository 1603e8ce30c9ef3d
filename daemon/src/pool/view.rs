//! What a new client's balancing reads: the usable members, their weights,
//! counts and hashes, made once when something that decides them changes (a
//! DNS answer, a health transition, an ejection or its end, an operator's
//! setting) and shared by every client until then, so that picking a member
//! costs the same for a pool of 1,000 as for one of 10. Made in balance.rs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::members::Members;

/// The pool as balancing sees it, for one list of members.
#[derive(Debug)]
pub(super) struct View {
    /// The members it was made for, and the pool's generation then.
    pub(super) members: Arc<Members>,
    pub(super) generation: u64,
    /// When an ejected member comes back by itself, if one is out.
    pub(super) expires: Option<Instant>,
    /// Usable members of the best priority, in list order.
    pub(super) best: Vec<usize>,
    /// The other usable members, by priority: the failover after `best`.
    pub(super) rest: Vec<usize>,
    /// Weight of each member (the operator's, else the configured or SRV one).
    pub(super) weights: Vec<u32>,
    /// Running sum of `best`'s weights, for a weighted round-robin turn.
    pub(super) cumulative: Vec<u64>,
    /// Connections each member holds now (live counts, read when needed).
    pub(super) held: Vec<Arc<AtomicUsize>>,
    /// Each member's share of a `balance = "source"` score.
    pub(super) hashes: Vec<u64>,
    /// Whether `best`'s weights are all equal.
    pub(super) uniform: bool,
    /// What the members in service hold together when each has a cap
    /// (`None` inside when one has none); `None` when none is in service.
    pub(super) capacity: Option<Option<usize>>,
}

impl View {
    pub(super) fn is_current(&self, members: &Arc<Members>, generation: u64, now: Instant) -> bool {
        Arc::ptr_eq(&self.members, members)
            && self.generation == generation
            && self.expires.map_or(true, |t| now < t)
    }

    /// Member `a`'s held connections per unit of weight against `b`'s,
    /// compared exactly (each count times the other's weight).
    pub(super) fn compare_load(&self, a: usize, b: usize) -> std::cmp::Ordering {
        let (held_a, weight_a) = self.held_and_weight(a);
        let (held_b, weight_b) = self.held_and_weight(b);
        (held_a * weight_b).cmp(&(held_b * weight_a))
    }

    /// The first of `candidates` that holds the fewest connections per unit
    /// of weight. A multiplication per member, not a division: at 1,000
    /// members the divisions were most of a client's pick.
    pub(super) fn least_loaded(&self, candidates: impl Iterator<Item = usize>) -> Option<usize> {
        let mut least: Option<(usize, u128, u128)> = None;
        for i in candidates {
            let (held, weight) = self.held_and_weight(i);
            if least.map_or(true, |(_, h, w)| held * w < h * weight) {
                least = Some((i, held, weight));
            }
        }
        least.map(|(i, _, _)| i)
    }

    fn held_and_weight(&self, i: usize) -> (u128, u128) {
        let held = self.held[i].load(Ordering::Acquire) as u128;
        (held, u128::from(self.weights[i].max(1)))
    }
}
