//! What is known of one member of a pool: its health (which decides whether
//! clients may try it: passive ejection after failed connects, active
//! checks) and its traffic (counts for the metrics, which decide nothing).

use std::time::{Duration, Instant};

use crate::model::Endpoint;

/// Connect failures in a row that take a backend out of the pool, and for how
/// long (passive ejection; active checks, when configured, decide as well).
const EJECT_AFTER: u32 = 3;
const COOL_DOWN: Duration = Duration::from_secs(10);

/// What is known of one member: whether it may be tried, and its traffic.
#[derive(Debug, Default)]
pub(super) struct Known {
    pub(super) health: Health,
    pub(super) traffic: Traffic,
}

/// One backend's health: what decides whether clients may try it.
#[derive(Debug, Default)]
pub(super) struct Health {
    /// Client connects that failed in a row, and the ejection they caused.
    failures: u32,
    pub(super) ejected_until: Option<Instant>,
    /// Down by active checks, and the run of results against that state.
    checked_down: bool,
    streak: u32,
    pub(super) last_check: Option<bool>,
}

/// One backend's counts, for the metrics; they decide nothing.
#[derive(Debug, Default)]
pub(super) struct Traffic {
    pub(super) connections: u64,
    pub(super) connect_failures: u64,
    pub(super) bytes_in: u64,
    pub(super) bytes_out: u64,
}

impl Health {
    /// One more failure in a row; enough of them eject the backend.
    pub(super) fn failed(&mut self, service: &str, endpoint: &Endpoint) {
        let now = Instant::now();
        self.failures += 1;
        let ejected = self.ejected_until.is_some_and(|t| now < t);
        if self.failures >= EJECT_AFTER && !ejected {
            self.ejected_until = Some(now + COOL_DOWN);
            tracing::warn!(service, backend = %endpoint, failures = EJECT_AFTER, cool_down = ?COOL_DOWN, "backend ejected");
        }
    }

    /// A session showed the backend serves: its failure run is over.
    pub(super) fn served(&mut self) {
        self.failures = 0;
        self.ejected_until = None;
    }

    /// An active check passed or failed: `rise` passes in a row bring a down
    /// backend up, `fall` failures take an up one down.
    pub(super) fn checked(
        &mut self,
        service: &str,
        endpoint: &Endpoint,
        passed: bool,
        (rise, fall): (u32, u32),
    ) {
        self.last_check = Some(passed);
        // A result that agrees with the state ends any run against it.
        if passed != self.checked_down {
            self.streak = 0;
            return;
        }
        self.streak += 1;
        let needed = if self.checked_down { rise } else { fall };
        if self.streak >= needed {
            self.checked_down = !self.checked_down;
            self.streak = 0;
            if self.checked_down {
                tracing::warn!(service, backend = %endpoint, checks = fall, "backend down");
            } else {
                self.failures = 0;
                self.ejected_until = None;
                tracing::info!(service, backend = %endpoint, checks = rise, "backend up");
            }
        }
    }
}

/// Whether a backend may be tried now; one never heard of counts as up.
pub(super) fn usable(known: Option<&Known>, now: Instant) -> bool {
    known.map_or(true, |k| {
        !k.health.checked_down && k.health.ejected_until.map_or(true, |t| now >= t)
    })
}
