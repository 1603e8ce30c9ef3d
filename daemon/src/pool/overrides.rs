//! What an operator set for a pool's members on the admin socket: a state
//! (`drain`, `maint`) and a weight, by endpoint, kept until changed or until
//! a reload removes the member.

use tcpmux_proto::admin::{Scope, SetBy};

use super::{lock, Override, Pool};
use crate::model::{AdminState, Endpoint};

impl Pool {
    /// What the operator set for `endpoint` (the defaults if nothing).
    pub(crate) fn override_of(&self, endpoint: &Endpoint) -> Override {
        lock(&self.state)
            .get(endpoint)
            .and_then(|entry| entry.set)
            .unwrap_or_default()
    }

    /// Whether this instance's operator (not the fleet) set something for
    /// `endpoint`, back to the defaults too; a setting carried by an
    /// upgrade, whose setter is not known, counts as this instance's.
    pub(crate) fn set_here(&self, endpoint: &Endpoint) -> bool {
        lock(&self.state)
            .get(endpoint)
            .is_some_and(|entry| match &entry.set_by {
                Some(by) => by.scope == Scope::Local,
                None => entry.set.is_some(),
            })
    }

    /// Every member an operator set something for, for a binary upgrade to
    /// carry.
    pub(crate) fn overrides(&self) -> Vec<(Endpoint, Override)> {
        let state = lock(&self.state);
        state
            .iter()
            .filter_map(|(e, entry)| Some((e.clone(), entry.set?)))
            .collect()
    }

    /// Sets `endpoint`'s administrative state (`drain`, `maint`, `ready`);
    /// `by` is who did, when known.
    pub(crate) fn set_state(&self, endpoint: &Endpoint, state: AdminState, by: Option<SetBy>) {
        self.set(endpoint, by, |o| o.state = state);
    }

    /// Sets `endpoint`'s weight; `None` returns to the configured one.
    pub(crate) fn set_weight(&self, endpoint: &Endpoint, weight: Option<u32>, by: Option<SetBy>) {
        self.set(endpoint, by, |o| o.weight = weight);
    }

    fn set(&self, endpoint: &Endpoint, by: Option<SetBy>, change: impl FnOnce(&mut Override)) {
        let mut state = lock(&self.state);
        let entry = state.entry(endpoint.clone()).or_default();
        let mut set = entry.set.unwrap_or_default();
        change(&mut set);
        // Back to the defaults: nothing to remember, but that this
        // instance's operator did so (the fleet's state leaves it).
        entry.set = (set != Override::default()).then_some(set);
        entry.set_by = match entry.set {
            Some(_) => by,
            None => by.filter(|by| by.scope == Scope::Local),
        };
        if entry.is_empty() {
            state.remove(endpoint);
        }
        self.changed();
    }

    /// Drops the run-time settings of every endpoint `gone` says left;
    /// returns those endpoints.
    pub(crate) fn forget(&self, gone: impl Fn(&Endpoint) -> bool) -> Vec<Endpoint> {
        let mut forgotten = Vec::new();
        let mut state = lock(&self.state);
        for (endpoint, entry) in state.iter_mut() {
            if (entry.set.is_some() || entry.set_by.is_some()) && gone(endpoint) {
                if entry.set.take().is_some() {
                    forgotten.push(endpoint.clone());
                }
                entry.set_by = None;
            }
        }
        state.retain(|_, entry| !entry.is_empty());
        self.changed();
        forgotten
    }
}
