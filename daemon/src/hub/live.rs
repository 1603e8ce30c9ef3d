//! The live registrations: which backends serve which names now, each with
//! its control connection, chosen from in turn by the sessions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tcpmux_proto::ServiceName;
use tokio::net::UnixStream;

use super::acks::Acks;

struct Registered {
    id: u64,
    registration: Arc<Registration>,
}

/// One backend's registration: what it serves, who it is, and its control
/// connection (a successor daemon takes it over on an upgrade).
pub(crate) struct Registration {
    pub names: Vec<ServiceName>,
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
    pub control: Arc<UnixStream>,
    /// For a backend that acknowledges each client (`REGISTER-ACK`).
    pub acks: Option<Acks>,
}

/// The live registrations, shared by the control loop and the sessions.
#[derive(Default)]
pub(crate) struct Hub {
    backends: Mutex<HashMap<ServiceName, Vec<Registered>>>,
    next_id: AtomicUsize,
    turn: AtomicUsize,
}

impl Hub {
    /// Whether any backend serves `name` now.
    pub(crate) fn is_live(&self, name: &ServiceName) -> bool {
        self.lock().get(name).is_some_and(|list| !list.is_empty())
    }

    /// `name`'s backends, starting with the next in round-robin order.
    pub(crate) fn candidates(&self, name: &ServiceName) -> Vec<Arc<Registration>> {
        let backends = self.lock();
        let Some(list) = backends.get(name).filter(|l| !l.is_empty()) else {
            return Vec::new();
        };
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % list.len();
        list.iter()
            .cycle()
            .skip(start)
            .take(list.len())
            .map(|r| Arc::clone(&r.registration))
            .collect()
    }

    /// Every registration, once each.
    pub(crate) fn registrations(&self) -> Vec<Arc<Registration>> {
        let mut seen = std::collections::BTreeMap::new();
        for registered in self.lock().values().flatten() {
            seen.entry(registered.id)
                .or_insert_with(|| Arc::clone(&registered.registration));
        }
        seen.into_values().collect()
    }

    /// Registered backends per name, for the metrics.
    pub(crate) fn counts(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<_> = self
            .lock()
            .iter()
            .map(|(n, l)| (n.to_string(), l.len()))
            .collect();
        counts.sort();
        counts
    }

    pub(super) fn add(&self, registration: &Arc<Registration>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        let mut backends = self.lock();
        for name in &registration.names {
            backends.entry(name.clone()).or_default().push(Registered {
                id,
                registration: Arc::clone(registration),
            });
        }
        id
    }

    pub(super) fn remove(&self, id: u64) {
        let mut backends = self.lock();
        for list in backends.values_mut() {
            list.retain(|r| r.id != id);
        }
        backends.retain(|_, list| !list.is_empty());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ServiceName, Vec<Registered>>> {
        // A panic while holding the lock cannot leave the map half-edited in a way
        // that matters (each edit is one call), so a poisoned lock is still usable.
        self.backends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
