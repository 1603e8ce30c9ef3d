//! Idle and killed flows ended by one timer per listener instead of a
//! timer and a task per flow: a sweep over the listener's table every tenth
//! of the shortest idle timeout (between 50 ms and 1 s), so a flow ends at
//! most that much after its timeout or an operator's `kill session`.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::flow::{Ended, Flows};
use crate::state::Shared;

/// The sweep's task, stopped when this is dropped (the listener stops).
pub(super) struct Sweep(JoinHandle<()>);

impl Drop for Sweep {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts sweeping `flows`.
pub(super) fn start(flows: Arc<Flows>, shared: Arc<Shared>) -> Sweep {
    Sweep(tokio::spawn(async move {
        loop {
            tokio::time::sleep(period(&shared)).await;
            let now = flows.now();
            let ending: Vec<_> = flows
                .table()
                .values()
                .filter_map(|flow| match (flow.session.is_killed(), flow.idle_at(now)) {
                    (true, _) => Some((Arc::clone(flow), Ended::Killed)),
                    (false, true) => Some((Arc::clone(flow), Ended::Idle)),
                    (false, false) => None,
                })
                .collect();
            for (flow, why) in ending {
                flow.end(why);
            }
        }
    }))
}

/// A tenth of the shortest idle timeout in force, within 50 ms and 1 s.
fn period(shared: &Shared) -> Duration {
    let shortest = shared.settings().udp.shortest_idle();
    (shortest / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
}
