//! What an operator set for a pool's members on the admin socket: a state
//! (`drain`, `maint`) and a weight, by endpoint, kept until changed or until
//! a reload removes the member.

use super::{lock, Override, Pool};
use crate::model::{AdminState, Endpoint};

impl Pool {
    /// What the operator set for `endpoint` (the defaults if nothing).
    pub(crate) fn override_of(&self, endpoint: &Endpoint) -> Override {
        lock(&self.overrides)
            .get(endpoint)
            .copied()
            .unwrap_or_default()
    }

    /// Every member an operator set something for, for a binary upgrade to
    /// carry.
    pub(crate) fn overrides(&self) -> Vec<(Endpoint, Override)> {
        let overrides = lock(&self.overrides);
        overrides.iter().map(|(e, o)| (e.clone(), *o)).collect()
    }

    /// Sets `endpoint`'s administrative state (`drain`, `maint`, `ready`).
    pub(crate) fn set_state(&self, endpoint: &Endpoint, state: AdminState) {
        self.set(endpoint, |o| o.state = state);
    }

    /// Sets `endpoint`'s weight; `None` returns to the configured one.
    pub(crate) fn set_weight(&self, endpoint: &Endpoint, weight: Option<u32>) {
        self.set(endpoint, |o| o.weight = weight);
    }

    fn set(&self, endpoint: &Endpoint, change: impl FnOnce(&mut Override)) {
        let mut overrides = lock(&self.overrides);
        let entry = overrides.entry(endpoint.clone()).or_default();
        change(entry);
        // Back to the defaults: nothing to remember.
        if *entry == Override::default() {
            overrides.remove(endpoint);
        }
    }

    /// Drops the run-time settings of every endpoint `gone` says left;
    /// returns those endpoints.
    pub(crate) fn forget(&self, gone: impl Fn(&Endpoint) -> bool) -> Vec<Endpoint> {
        let mut forgotten = Vec::new();
        lock(&self.overrides).retain(|e, _| {
            let keep = !gone(e);
            if !keep {
                forgotten.push(e.clone());
            }
            keep
        });
        forgotten
    }
}
