//! The daemon's live key material: the TLS session-ticket keys, the ACME
//! certificates' slots, and the sealing of what a fleet keeps in etcd. One [`Keys`] per daemon, made before its first
//! configuration is read and handed to every parse and every worker, so that a
//! ticket from one worker resumes on another and after a reload, and each set
//! of ACME settings has one slot, one order flow, whatever reads them.

mod acme_cert;
pub(crate) mod sealed;
mod tickets;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rustls::server::ProducesTickets;
use rustls::sign::CertifiedKey;

pub use acme_cert::AcmeCert;
pub(crate) use tickets::{Tickets, TICKET_KEY_LEN};

use crate::model::AcmeSettings;

/// See the module's documentation. Cloning shares it.
#[derive(Clone, Default)]
pub struct Keys(Arc<Inner>);

#[derive(Default)]
struct Inner {
    tickets: OnceLock<Arc<Tickets>>,
    acme: Mutex<HashMap<AcmeSettings, Arc<AcmeCert>>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys")
    }
}

impl Keys {
    /// The session-ticket keys (`tickets.rs`). Made on first use.
    pub(crate) fn tickets(&self) -> Result<Arc<dyn ProducesTickets>, rustls::Error> {
        Ok(self.ticket_keys()? as Arc<dyn ProducesTickets>)
    }

    /// The same, to put a fleet's keys in force.
    pub(crate) fn ticket_keys(&self) -> Result<Arc<Tickets>, rustls::Error> {
        if let Some(made) = self.0.tickets.get() {
            return Ok(Arc::clone(made));
        }
        let made = Arc::new(Tickets::new()?);
        Ok(Arc::clone(self.0.tickets.get_or_init(|| made)))
    }

    /// The slot of `settings`, made if none is held. It serves the newest
    /// certificate for its files: `stored` (read only when needed), or the
    /// one another slot for the same files holds in memory (not yet stored,
    /// on a full disk), unless its own is newer. So a restart orders
    /// nothing, and a reload back to earlier settings serves no older
    /// certificate.
    pub(crate) fn acme_slot(
        &self,
        settings: AcmeSettings,
        stored: impl FnOnce(&AcmeSettings) -> Option<(CertifiedKey, i64)>,
    ) -> Arc<AcmeCert> {
        let mut slots = self.0.acme.lock().unwrap_or_else(|p| p.into_inner());
        // Slots no configuration holds any more (only this table does).
        slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        let slot = match slots.get(&settings) {
            Some(slot) => Arc::clone(slot),
            None => Arc::new(AcmeCert::new(settings.clone())),
        };
        let same_files = |other: &AcmeSettings| {
            other.storage == settings.storage && other.pair_name() == settings.pair_name()
        };
        let held = slots
            .iter()
            .filter(|(other, _)| same_files(other))
            .filter_map(|(_, other)| Some((other.current()?, other.expiry()?)));
        let found = stored(&settings).map(|(c, e)| (Arc::new(c), e));
        if let Some((certified, expiry)) = held.chain(found).max_by_key(|(_, e)| *e) {
            if slot.expiry().map_or(true, |mine| expiry > mine) {
                slot.install(certified, expiry);
            }
        }
        slots.insert(settings, Arc::clone(&slot));
        slot
    }

    /// Every slot a configuration holds.
    pub(crate) fn acme_slots(&self) -> Vec<Arc<AcmeCert>> {
        let slots = self.0.acme.lock().unwrap_or_else(|p| p.into_inner());
        slots.values().cloned().collect()
    }

    /// The slot held for `settings`, if a configuration made one.
    pub(crate) fn acme(&self, settings: &AcmeSettings) -> Option<Arc<AcmeCert>> {
        let slots = self.0.acme.lock().unwrap_or_else(|p| p.into_inner());
        slots.get(settings).cloned()
    }
}
