//! Who may hold an admin connection, and how often a refused uid is told
//! so: no other user's connections (idle, never reading, or refused in a
//! loop) can lock root out.

use super::refusal::Refusal;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Connections at once of every uid but root; more are turned away.
const MAX_CONNECTIONS: usize = 16;
/// Root's connections beyond those of the others (counted with them, so
/// root always has at least this many): root always gets in.
const ROOT_RESERVE: usize = 4;
/// One uid's share of `MAX_CONNECTIONS`, so one operator cannot take them all.
const PER_UID: usize = 8;
/// Refusals answered and logged per uid in a `WINDOW`; more are closed unanswered.
const REFUSALS: u32 = 5;
const WINDOW: Duration = Duration::from_secs(1);

/// The admin connections held now, by uid.
#[derive(Debug, Default)]
pub(super) struct Slots {
    by_uid: HashMap<u32, usize>,
    total: usize,
}

impl Slots {
    /// Takes a slot for `uid`, or says why there is none.
    pub(super) fn take(&mut self, uid: u32) -> Result<(), Refusal> {
        let held = self.by_uid.get(&uid).copied().unwrap_or(0);
        if uid == 0 {
            if self.total >= MAX_CONNECTIONS + ROOT_RESERVE {
                return Err(Refusal::Full);
            }
        } else if self.total - self.by_uid.get(&0).copied().unwrap_or(0) >= MAX_CONNECTIONS {
            return Err(Refusal::Full);
        } else if held >= PER_UID {
            return Err(Refusal::FullForUid);
        }
        *self.by_uid.entry(uid).or_default() += 1;
        self.total += 1;
        Ok(())
    }

    /// Gives back a slot `uid` held.
    pub(super) fn give_back(&mut self, uid: u32) {
        if let Some(held) = self.by_uid.get_mut(&uid) {
            *held -= 1;
            self.total -= 1;
            if *held == 0 {
                self.by_uid.remove(&uid);
            }
        }
    }
}

/// Refused connections per uid in the current window.
#[derive(Debug)]
pub(super) struct Refusals {
    since: Instant,
    by_uid: HashMap<u32, u32>,
    /// Closed unanswered in this window, for one line when it ends.
    silenced: u64,
}

impl Default for Refusals {
    fn default() -> Self {
        Refusals {
            since: Instant::now(),
            by_uid: HashMap::new(),
            silenced: 0,
        }
    }
}

impl Refusals {
    /// Whether to answer (and log) this refusal of `uid`: the first
    /// `REFUSALS` of a window are; the rest are closed without a word.
    pub(super) fn answer(&mut self, uid: u32) -> bool {
        self.answer_at(uid, Instant::now())
    }

    fn answer_at(&mut self, uid: u32, now: Instant) -> bool {
        if now.duration_since(self.since) >= WINDOW {
            if self.silenced > 0 {
                tracing::warn!(
                    refused = self.silenced,
                    "admin connections refused without an answer: a uid not allowed kept trying"
                );
            }
            *self = Refusals {
                since: now,
                ..Refusals::default()
            };
        }
        let count = self.by_uid.entry(uid).or_default();
        *count += 1;
        if *count > REFUSALS {
            self.silenced += 1;
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_gets_in_when_the_others_hold_every_slot() {
        let mut slots = Slots::default();
        for uid in 1000..1002 {
            for _ in 0..PER_UID {
                slots.take(uid).expect("within the share");
            }
        }
        assert!(slots.take(1002).is_err(), "every shared slot is held");
        assert!(slots.take(1000).is_err());
        for _ in 0..ROOT_RESERVE {
            slots.take(0).expect("root's reserve");
        }
        assert!(slots.take(0).is_err(), "the reserve is bounded too");
        // A slot given back is another uid's to take, root's aside.
        slots.give_back(1000);
        slots.take(1002).expect("a freed slot");
        assert!(slots.take(1002).is_err());
    }

    #[test]
    fn one_uid_cannot_take_every_slot() {
        let mut slots = Slots::default();
        for _ in 0..PER_UID {
            slots.take(1000).expect("within the share");
        }
        assert_eq!(
            slots.take(1000).map_err(|e| e.to_string()),
            Err("too many admin connections from your uid".to_owned())
        );
        slots.take(1001).expect("another uid");
    }

    #[test]
    fn root_holding_many_leaves_the_others_their_slots() {
        let mut slots = Slots::default();
        for _ in 0..ROOT_RESERVE {
            slots.take(0).expect("root");
        }
        for _ in 0..PER_UID {
            slots
                .take(1000)
                .expect("others are not squeezed by root's reserve");
        }
    }

    #[test]
    fn refusals_are_answered_a_few_times_a_window_per_uid() {
        let mut refusals = Refusals::default();
        let start = refusals.since;
        let answered = (0..50).filter(|_| refusals.answer_at(65534, start)).count();
        assert_eq!(answered, REFUSALS as usize);
        assert!(
            refusals.answer_at(65533, start),
            "another uid has its own count"
        );
        assert!(refusals.answer_at(65534, start + WINDOW), "a new window");
    }
}
