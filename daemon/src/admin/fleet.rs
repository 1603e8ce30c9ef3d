//! `show fleet`: the instances sharing this one's `cluster`, as its etcd
//! task last saw their membership keys. Never waits on etcd.

use std::time::SystemTime;

use tcpmux_proto::admin::{FleetRow, Reply};

use super::refusal::Refusal;
use crate::state::Shared;

pub(super) fn show(shared: &Shared) -> Result<Reply, Refusal> {
    let fleet = shared.fleet.get().ok_or(Refusal::NoCluster)?;
    let (etcd, members) = fleet.view();
    Ok(Reply::Fleet {
        etcd,
        nodes: rows(&fleet.node, &members),
    })
}

/// The members as rows, their ages counted from now.
pub(super) fn rows(this: &str, members: &[crate::runtime::Member]) -> Vec<FleetRow> {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    members
        .iter()
        .map(|m| FleetRow {
            node: m.node.clone(),
            address: m.address.clone(),
            version: m.version.clone(),
            uptime: now.saturating_sub(m.started),
            sessions: m.sessions,
            last_seen: now.saturating_sub(m.updated),
            this: m.node == this,
        })
        .collect()
}
