//! `show fleet`: the instances sharing this one's `cluster`, as its etcd
//! task last saw their membership keys. Never waits on etcd.

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
    let now = crate::model::clock::unix_seconds();
    let since = |then: i64| u64::try_from(now - then).unwrap_or(0);
    members
        .iter()
        .map(|m| FleetRow {
            node: m.node.clone(),
            address: m.address.clone(),
            version: m.version.clone(),
            uptime: since(m.started),
            sessions: m.sessions,
            last_seen: since(m.updated),
            this: m.node == this,
        })
        .collect()
}
