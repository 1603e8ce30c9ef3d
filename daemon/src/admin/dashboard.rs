//! The dashboard's data, `/status.json` on `metrics_listen`: what the admin
//! socket's `show` commands answer, in one object, with each service's recent
//! rates, the busiest sessions and every event loop's lag. Read-only: control
//! stays on the admin socket.

use std::sync::Mutex;

use serde_json::{json, Value};

use super::backends::backends;
use super::run::{handoff, services};
use crate::ops::history::INTERVAL;
use crate::state::Shared;
use tcpmux_proto::admin::ListenerRow;

/// Sessions listed as the busiest, by bytes relayed.
const BUSIEST: usize = 10;

/// The whole status object; docs/operations.md lists its fields, which only
/// ever gain new ones.
pub(crate) fn status(shared: &Shared, listening: &Mutex<Vec<ListenerRow>>) -> Value {
    let settings = shared.settings();
    let history = shared.history.series();
    let services: Vec<Value> = services(shared, &settings)
        .into_iter()
        .map(|row| {
            let history = json!(history.get(&row.name));
            let mut service = json!(row);
            service["history"] = history;
            service
        })
        .collect();
    let (total, sessions) = shared.sessions.busiest(BUSIEST);
    let listeners = listening.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let now = crate::model::clock::unix_seconds();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "time": now,
        "uptime_seconds": shared.history.started.elapsed().as_secs(),
        "active": shared.gate.active.get(),
        "history_interval_seconds": INTERVAL.as_secs(),
        "listeners": listeners,
        "services": services,
        "backends": backends(&settings, None),
        "handoff": handoff(shared),
        "sessions": { "total": total, "busiest": sessions },
        "event_loops": shared.metrics.lag.summary(),
        "fleet": shared.fleet.get().map(|fleet| {
            let (etcd, members) = fleet.view();
            json!({ "etcd": etcd, "nodes": super::fleet::rows(&fleet.node, &members) })
        }),
    })
}
