//! UDP flows across a binary upgrade: the old daemon ends each flow by
//! handing it over (a second descriptor of its backend socket and what it
//! knew, as a `HandedFlow`), the upgrade sends them as `FLOW` frames, and the
//! successor's listener starts a flow for each on the same backend socket,
//! so a WireGuard, OpenVPN or QUIC backend keeps seeing one source port.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};

use super::flow::Flows;
use crate::model::HandedFlow;

/// One event loop's UDP listeners' flows, for an upgrade to hand over, and
/// the flows a predecessor handed over until their listener serves.
#[derive(Default)]
pub(crate) struct Handover {
    serving: Mutex<Vec<Weak<Flows>>>,
    adopted: Mutex<Vec<HandedFlow>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Handover {
    /// A listener's flows, while it serves.
    pub(super) fn serving(&self, flows: &Arc<Flows>) {
        let mut serving = lock(&self.serving);
        serving.retain(|flows| flows.strong_count() > 0);
        serving.push(Arc::downgrade(flows));
    }

    /// Ends every flow by handing it over: what each knew and a second
    /// descriptor of its socket.
    pub(crate) fn hand_over_all(&self) -> Vec<HandedFlow> {
        let sets: Vec<Arc<Flows>> = lock(&self.serving)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        sets.iter().flat_map(|flows| flows.hand_over()).collect()
    }

    /// The flows a predecessor handed over, for their listeners to take.
    pub(crate) fn adopt(&self, flows: Vec<HandedFlow>) {
        lock(&self.adopted).extend(flows);
    }

    /// The adopted flows of the listener bound at `listener`.
    pub(super) fn adopted_for(&self, listener: SocketAddr) -> Vec<HandedFlow> {
        let mut adopted = lock(&self.adopted);
        let (mine, others) = std::mem::take(&mut *adopted)
            .into_iter()
            .partition(|flow| flow.listener == listener);
        *adopted = others;
        mine
    }
}
