//! The handoff hub: backends register service names over a control Unix socket
//! (`control`) and are sent whole client connections (the socket itself, by
//! SCM_RIGHTS), after which tcpmuxd is out of the data path. This module holds
//! the live registrations the sessions choose from.

mod control;

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tcpmux_proto::handoff::FRAME_LEN;
use tcpmux_proto::ServiceName;
use tokio::sync::{mpsc, oneshot};

pub use control::control_loop;

/// One client connection on its way to a backend.
pub struct Delivery {
    pub socket: OwnedFd,
    pub frame: [u8; FRAME_LEN],
    /// Told whether the socket reached the backend.
    pub done: oneshot::Sender<io::Result<()>>,
}

struct Registered {
    id: u64,
    deliveries: mpsc::Sender<Delivery>,
}

/// The live registrations, shared by the control loop and the sessions.
#[derive(Default)]
pub struct Hub {
    backends: Mutex<HashMap<ServiceName, Vec<Registered>>>,
    next_id: AtomicUsize,
    turn: AtomicUsize,
}

impl Hub {
    /// Whether any backend serves `name` now.
    pub fn is_live(&self, name: &ServiceName) -> bool {
        self.lock().get(name).is_some_and(|list| !list.is_empty())
    }

    /// The backends of `name`, starting with the next in round-robin order.
    pub fn candidates(&self, name: &ServiceName) -> Vec<mpsc::Sender<Delivery>> {
        let backends = self.lock();
        let Some(list) = backends.get(name).filter(|l| !l.is_empty()) else {
            return Vec::new();
        };
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % list.len();
        list.iter()
            .cycle()
            .skip(start)
            .take(list.len())
            .map(|r| r.deliveries.clone())
            .collect()
    }

    /// Registered backends per name, for the metrics.
    pub fn counts(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<_> = self
            .lock()
            .iter()
            .map(|(n, l)| (n.to_string(), l.len()))
            .collect();
        counts.sort();
        counts
    }

    pub(super) fn add(&self, names: &[ServiceName], deliveries: &mpsc::Sender<Delivery>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        let mut backends = self.lock();
        for name in names {
            backends.entry(name.clone()).or_default().push(Registered {
                id,
                deliveries: deliveries.clone(),
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
