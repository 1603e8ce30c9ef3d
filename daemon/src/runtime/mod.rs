//! Run-time settings: what an operator changes without editing the file (a
//! member's state or weight, a service turned off), taken on this
//! instance's admin socket or from its fleet, each kept with who set it.
//! `link.rs` is how the admin socket and the fleet's etcd task meet.

mod change;
mod link;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tcpmux_proto::admin::{Scope, SetBy};
use tcpmux_proto::ServiceName;

use crate::admission::{ServiceCounts, Usage};
use crate::model::{Endpoint, Proxy, Service, ServiceKind};
use crate::pool::Pool;
use crate::registry::Registry;

pub(crate) use change::{Change, NotApplied};
pub(crate) use link::{FleetLink, FleetSlot, Member, Publish};

/// Whether `change` names a service (and member) this instance has,
/// changing nothing.
pub(crate) fn check(registry: &Registry, usage: &Usage, change: &Change) -> Result<(), NotApplied> {
    let (service, counts) = counts(registry, usage, change.service())?;
    match change {
        Change::Disabled { .. } => Ok(()),
        Change::State { backend, .. } | Change::Weight { backend, .. } => {
            member(service, counts, backend).map(drop)
        }
    }
}

/// Makes `change`, remembering `by` as who made it (when known).
pub(crate) fn apply(
    registry: &Registry,
    usage: &Usage,
    change: &Change,
    by: Option<SetBy>,
) -> Result<(), NotApplied> {
    let (service, counts) = counts(registry, usage, change.service())?;
    match change {
        Change::Disabled { disabled, .. } => {
            counts.disabled.store(*disabled, Ordering::Release);
            // A local enable is kept as this instance's word (the fleet's
            // state put in force again leaves it); a fleet's one is the
            // default, which needs no setter.
            *counts.disabled_by.lock().unwrap_or_else(|p| p.into_inner()) =
                by.filter(|by| *disabled || by.scope == Scope::Local);
        }
        Change::State { backend, state, .. } => {
            let (endpoint, pools) = member(service, counts, backend)?;
            for pool in pools {
                pool.set_state(&endpoint, *state, by.clone());
            }
        }
        Change::Weight {
            backend, weight, ..
        } => {
            let (endpoint, pools) = member(service, counts, backend)?;
            for pool in pools {
                pool.set_weight(&endpoint, *weight, by.clone());
            }
        }
    }
    // A member back in service makes room: the clients in line get it first.
    counts.connections.set_cap(counts.cap(service));
    Ok(())
}

/// Whether this instance's operator has set what `change` sets: the
/// service turned off or on here, or the member's state or weight set here,
/// back to the defaults too (or carried by an upgrade, setter unknown). The
/// fleet's state, put in force again for what a reload or DNS added,
/// leaves those as they are.
pub(crate) fn set_here(registry: &Registry, usage: &Usage, change: &Change) -> bool {
    let Ok((service, counts)) = counts(registry, usage, change.service()) else {
        return false;
    };
    match change {
        Change::Disabled { .. } => {
            match &*counts.disabled_by.lock().unwrap_or_else(|p| p.into_inner()) {
                Some(by) => by.scope == Scope::Local,
                None => counts.disabled.load(Ordering::Acquire),
            }
        }
        Change::State { backend, .. } | Change::Weight { backend, .. } => {
            member(service, counts, backend)
                .is_ok_and(|(endpoint, pools)| pools.iter().any(|pool| pool.set_here(&endpoint)))
        }
    }
}

/// The service `name` and its counts.
pub(crate) fn counts<'s>(
    registry: &'s Registry,
    usage: &'s Usage,
    name: &str,
) -> Result<(&'s crate::model::Service, &'s std::sync::Arc<ServiceCounts>), NotApplied> {
    let unknown = || NotApplied::NoService(name.to_owned());
    let parsed = ServiceName::parse(name).map_err(|_| unknown())?;
    let service = registry.lookup(&parsed).ok_or_else(unknown)?;
    let counts = usage.get(&parsed).ok_or_else(unknown)?;
    Ok((service, counts))
}

/// `service`'s pools, those it has: its `proxy`'s and its `proxy_udp`'s.
pub(crate) fn pools<'s>(
    service: &'s Service,
    counts: &'s ServiceCounts,
) -> Vec<(&'s Arc<Pool>, &'s Arc<Proxy>)> {
    let tcp = match &service.kind {
        ServiceKind::Proxy(proxy) => Some((&counts.pool, proxy)),
        _ => None,
    };
    let udp = service.udp.as_ref().map(|udp| (&counts.udp_pool, udp));
    tcp.into_iter().chain(udp).collect()
}

/// The member of `service`'s pools written `backend`, and the pools that
/// have it: its `proxy`'s, its `proxy_udp`'s, or both (one address may
/// serve a service over TCP and UDP; an operator's word is for both).
fn member<'c>(
    service: &'c Service,
    counts: &'c ServiceCounts,
    backend: &str,
) -> Result<(Endpoint, Vec<&'c Pool>), NotApplied> {
    let name = service.name.as_str();
    let pools = pools(service, counts);
    if pools.is_empty() {
        return Err(NotApplied::NotAProxy(name.to_owned()));
    }
    let known: Vec<(&Pool, Arc<crate::pool::Members>)> = pools
        .iter()
        .filter_map(|(pool, proxy)| Some((&***pool, pool.current(proxy)?)))
        .collect();
    if known.is_empty() {
        return Err(NotApplied::MembersNotKnown(name.to_owned()));
    }
    let mut found = None;
    let mut holding = Vec::new();
    for (pool, members) in &known {
        if let Some(member) = members
            .list
            .iter()
            .find(|m| m.endpoint.to_string() == backend)
        {
            found = Some(member.endpoint.clone());
            holding.push(*pool);
        }
    }
    match found {
        Some(endpoint) => Ok((endpoint, holding)),
        None => Err(NotApplied::NoBackend {
            service: name.to_owned(),
            backend: backend.to_owned(),
            known: {
                let all = known.iter().flat_map(|(_, members)| &members.list);
                let mut names: Vec<String> = Vec::new();
                for name in all.map(|m| m.endpoint.to_string()) {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
                names
            },
        }),
    }
}
