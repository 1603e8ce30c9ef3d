//! Finished connections by service, outcome and route, and the bytes they
//! moved: sharded by thread, so that each event loop records into a map of
//! its own and no lock on a connection's path is shared by every core;
//! readers add the shards up, each locked only while it is copied.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Shards: more than the event loops and TLS threads of any machine this is
/// likely to run on, so each has its own.
const SHARDS: usize = 64;

/// One service's connections by (outcome, how they were routed), and the
/// bytes its finished connections moved.
#[derive(Clone, Default)]
pub(crate) struct Counts {
    pub(crate) outcomes: BTreeMap<(&'static str, &'static str), u64>,
    /// Refusals by reason (`Refusal::reason`'s words).
    pub(crate) refusals: BTreeMap<&'static str, u64>,
    pub(crate) bytes: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        for (key, n) in &other.outcomes {
            *self.outcomes.entry(*key).or_insert(0) += n;
        }
        for (reason, n) in &other.refusals {
            *self.refusals.entry(reason).or_insert(0) += n;
        }
        self.bytes += other.bytes;
    }
}

/// service → outcome → count, per shard; nested so that recording looks the
/// service up without allocating (a new key is allocated once per name).
pub(crate) struct ConnectionCounts {
    shards: Box<[Mutex<BTreeMap<String, Counts>>]>,
}

impl Default for ConnectionCounts {
    fn default() -> Self {
        ConnectionCounts {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

/// This thread's shard, given out in turn as threads first record.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

impl ConnectionCounts {
    /// Counts one finished connection of `service` in this thread's shard.
    pub(crate) fn record(
        &self,
        service: &str,
        (outcome, refused): (&'static str, Option<&'static str>),
        routed: &'static str,
        bytes: u64,
    ) {
        let mut map = self.shards[shard()]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let counts = match map.get_mut(service) {
            Some(counts) => counts,
            None => map.entry(service.to_owned()).or_default(),
        };
        *counts.outcomes.entry((outcome, routed)).or_insert(0) += 1;
        if let Some(reason) = refused {
            *counts.refusals.entry(reason).or_insert(0) += 1;
        }
        counts.bytes += bytes;
    }

    /// Every shard added up.
    pub(crate) fn merged(&self) -> BTreeMap<String, Counts> {
        let mut all: BTreeMap<String, Counts> = BTreeMap::new();
        for shard in self.shards.iter() {
            let map = shard.lock().unwrap_or_else(|p| p.into_inner());
            for (service, counts) in map.iter() {
                match all.get_mut(service) {
                    Some(sum) => sum.add(counts),
                    None => {
                        all.insert(service.clone(), counts.clone());
                    }
                }
            }
        }
        all
    }

    /// `service`'s finished connections by outcome, however they were routed.
    pub(crate) fn totals(&self, service: &str) -> BTreeMap<&'static str, u64> {
        let mut totals = BTreeMap::new();
        for shard in self.shards.iter() {
            let map = shard.lock().unwrap_or_else(|p| p.into_inner());
            let outcomes = map.get(service).map(|c| &c.outcomes);
            for ((outcome, _routed), count) in outcomes.into_iter().flatten() {
                *totals.entry(*outcome).or_insert(0) += count;
            }
        }
        totals
    }
}
