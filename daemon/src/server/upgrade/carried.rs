//! What travels with an upgrade besides the listening sockets: what an
//! operator set at run time (`DISABLED`, `MEMBER`) and the UDP flows
//! (`FLOW`, each with its backend socket), written by the old daemon and
//! put back in force by the successor.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tcpmux_proto::upgrade::{self, Frame, FrameError, FRAME};

use crate::model::{AdminState, Endpoint, HandedFlow};
use crate::state::Shared;

/// One run-time setting that travels with an upgrade.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Carried {
    Disabled(String),
    Member {
        service: String,
        backend: Endpoint,
        state: AdminState,
        weight: Option<u32>,
    },
}

/// A `FLOW` frame and the backend socket beside it.
pub(super) fn handed_flow(
    flow: upgrade::Flow<'_>,
    socket: OwnedFd,
) -> Result<HandedFlow, FrameError> {
    let service =
        tcpmux_proto::ServiceName::parse(flow.service).map_err(|_| FrameError::BadFlow)?;
    Ok(HandedFlow {
        listener: flow.listener,
        client: flow.client,
        service,
        backend: flow.backend,
        routed: flow.routed.to_owned(),
        idle: Duration::from_millis(flow.idle_ms),
        quic: flow.quic,
        reply_from: flow.reply_from,
        cids: flow.cids,
        socket,
    })
}

/// The run-time setting a frame carries, if it is one.
pub(super) fn carried(frame: &Frame<'_>) -> Result<Option<Carried>, FrameError> {
    let bad = || FrameError::BadState;
    Ok(match frame {
        Frame::Disabled(name) => Some(Carried::Disabled((*name).to_owned())),
        Frame::Member(m) => Some(Carried::Member {
            service: m.service.to_owned(),
            backend: m.backend.parse().map_err(|_| bad())?,
            state: m.state.parse().map_err(|_| bad())?,
            weight: m.weight,
        }),
        _ => None,
    })
}

/// The frames for what an operator set at run time: disabled services and
/// the members with a state or weight of their own.
pub(super) fn carried_frames(shared: &Shared) -> Vec<[u8; FRAME]> {
    let settings = shared.settings();
    let mut frames = Vec::new();
    for service in settings.registry.services() {
        let Some(counts) = settings.usage.get(&service.name) else {
            continue;
        };
        let name = service.name.as_str();
        if counts.disabled.load(Ordering::Acquire) {
            frames.push(upgrade::encode(&Frame::Disabled(name)));
        }
        // An operator's word for an address holds for both of a service's
        // pools (runtime::member): one frame each, restored to both.
        let mut set = counts.pool.overrides();
        set.extend(counts.udp_pool.overrides());
        set.sort_by(|a, b| a.0.cmp(&b.0));
        set.dedup_by(|a, b| a.0 == b.0);
        for (endpoint, set) in set {
            let backend = endpoint.to_string();
            frames.push(upgrade::encode(&Frame::Member(upgrade::Member {
                service: name,
                state: set.state.as_str(),
                weight: set.weight,
                backend: &backend,
            })));
        }
    }
    frames
        .into_iter()
        .filter_map(|frame| {
            frame
                .inspect_err(|e| tracing::warn!(error = %e, "upgrade: a run-time setting that cannot travel; the successor starts without it"))
                .ok()
        })
        .collect()
}

/// Puts the settings carried from the old daemon back in force; one the new
/// configuration has no place for is logged and left.
pub(crate) fn restore(shared: &Shared, carried: Vec<Carried>) {
    if carried.is_empty() {
        return;
    }
    let settings = shared.settings();
    let count = carried.len();
    for setting in carried {
        let name = match &setting {
            Carried::Disabled(name) | Carried::Member { service: name, .. } => name,
        };
        let counts = tcpmux_proto::ServiceName::parse(name)
            .ok()
            .and_then(|n| settings.usage.get(&n));
        let Some(counts) = counts else {
            tracing::warn!(service = %name, "upgrade: a run-time setting for a service this configuration does not have; left out");
            continue;
        };
        match setting {
            Carried::Disabled(_) => counts.disabled.store(true, Ordering::Release),
            Carried::Member {
                backend,
                state,
                weight,
                ..
            } => {
                // Who set it does not travel: the successor shows it as set.
                for pool in [&counts.pool, &counts.udp_pool] {
                    pool.set_state(&backend, state, None);
                    pool.set_weight(&backend, weight, None);
                }
            }
        }
    }
    tracing::info!(settings = count, "upgrade: run-time settings carried over");
}

/// A UDP flow's frame; `None`, logged, for one a frame cannot carry.
pub(super) fn flow_frame(flow: &HandedFlow) -> Option<[u8; FRAME]> {
    let frame = upgrade::Flow {
        listener: flow.listener,
        client: flow.client,
        service: flow.service.as_str(),
        backend: flow.backend,
        routed: &flow.routed,
        idle_ms: u64::try_from(flow.idle.as_millis()).unwrap_or(u64::MAX),
        quic: flow.quic,
        reply_from: flow.reply_from,
        cids: flow.cids.clone(),
    };
    upgrade::encode(&Frame::Flow(frame))
        .inspect_err(|e| tracing::warn!(peer = %flow.client, error = %e, "upgrade: a UDP flow that cannot travel; its client starts anew"))
        .ok()
}
