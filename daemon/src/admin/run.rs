//! What each admin command does to the daemon and what it answers: a JSON
//! object (the fields besides `ok`), or the sentence of a refusal.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tcpmux_proto::admin::{
    HandoffRow, ListenerRow, QueueRow, Reply, Request, ServiceRow, ServiceState, SessionRow, HELP,
    VERSION,
};

use super::backends::backends;
use super::refusal::Refusal;
use crate::admission::ServiceCounts;
use crate::model::{Proxy, Service, ServiceKind};
use crate::runtime::NotApplied;
use crate::state::{Settings, Shared};

/// Runs `request`; `listeners` are the sockets in service now.
pub(super) fn run(
    request: &Request,
    shared: &Shared,
    listeners: &[ListenerRow],
) -> Result<Reply, Refusal> {
    let settings = shared.settings();
    match request {
        Request::Help => Ok(Reply::Help {
            version: VERSION,
            commands: HELP.iter().map(|c| (*c).to_owned()).collect(),
        }),
        Request::ShowServices => Ok(Reply::Services(services(shared, &settings))),
        Request::ShowBackends(only) => {
            if let Some(name) = only {
                proxy_of(&settings, name)?;
            }
            Ok(Reply::Backends(backends(&settings, only.as_deref())))
        }
        Request::ShowListeners => Ok(Reply::Listeners(listeners.to_vec())),
        Request::ShowHandoff => Ok(Reply::Handoff(handoff(shared))),
        Request::ShowSessions(only) => {
            let only = match only {
                Some(name) => Some(counts(&settings, name)?.0.name.as_str()),
                None => None,
            };
            Ok(Reply::Sessions(sessions(shared, only)))
        }
        Request::KillSession(id) => {
            let session = shared.sessions.get(*id).ok_or(Refusal::NoSession(*id))?;
            session.kill();
            Ok(Reply::Killed(session.row()))
        }
        Request::ShutdownBackend { service, backend } => {
            shutdown_backend(shared, &settings, service, backend)
        }
        Request::ShowFleet => super::fleet::show(shared),
        change => {
            let (change, local) = super::change::of(change).ok_or(Refusal::Internal)?;
            super::change::make(shared, change, local)
        }
    }
}

fn kind(service: &Service) -> &'static str {
    match service.kind {
        ServiceKind::Builtin(_) => "builtin",
        ServiceKind::Proxy(_) => "proxy",
        ServiceKind::Exec(_) => "exec",
        ServiceKind::Handoff(_) => "handoff",
        ServiceKind::UdpOnly => "udp",
    }
}

fn counts<'s>(
    settings: &'s Settings,
    name: &str,
) -> Result<(&'s Service, &'s Arc<ServiceCounts>), Refusal> {
    Ok(crate::runtime::counts(
        &settings.registry,
        &settings.usage,
        name,
    )?)
}

pub(super) fn services(shared: &Shared, settings: &Settings) -> Vec<ServiceRow> {
    let mut services: Vec<&Service> = settings.registry.services().collect();
    services.sort_by(|a, b| a.name.cmp(&b.name));
    services
        .into_iter()
        .map(|service| {
            let counts = settings.usage.get(&service.name);
            let disabled = counts.is_some_and(|c| c.disabled.load(Ordering::Acquire));
            ServiceRow {
                name: service.name.as_str().to_owned(),
                kind: kind(service).to_owned(),
                state: if disabled {
                    ServiceState::Disabled
                } else {
                    ServiceState::Enabled
                },
                set_at_runtime: disabled,
                set_by: counts.and_then(|c| {
                    c.disabled_by
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .clone()
                }),
                active: counts.map_or(0, |c| c.connections.get() as u64),
                max_connections: service.max_connections.map(|max| max as u64),
                queue: service.queue.as_ref().map(|queue| {
                    let figures = counts.map(|c| c.connections.queue()).unwrap_or_default();
                    QueueRow {
                        waiting: figures.waiting as u64,
                        max: queue.max as u64,
                        timeout_seconds: queue.timeout.as_secs_f64(),
                        served: figures.served,
                        waited_seconds: figures.waited_seconds,
                        timeouts: figures.timeouts,
                    }
                }),
                totals: shared
                    .metrics
                    .totals(service.name.as_str())
                    .into_iter()
                    .map(|(outcome, count)| (outcome.to_owned(), count))
                    .collect(),
            }
        })
        .collect()
}

/// The service `name` and its pools (its `proxy`'s, its `proxy_udp`'s),
/// refused when it has neither.
fn proxy_of<'s>(settings: &'s Settings, name: &str) -> Result<Proxied<'s>, Refusal> {
    let (service, counts) = counts(settings, name)?;
    let pools = crate::runtime::pools(service, counts);
    if pools.is_empty() {
        return Err(NotApplied::NotAProxy(name.to_owned()).into());
    }
    Ok((service, pools))
}

type Proxied<'s> = (
    &'s Service,
    Vec<(&'s Arc<crate::pool::Pool>, &'s Arc<Proxy>)>,
);

pub(super) fn handoff(shared: &Shared) -> Vec<HandoffRow> {
    shared
        .hub
        .registrations()
        .iter()
        .map(|r| HandoffRow {
            pid: r.pid,
            uid: r.uid,
            names: r.names.iter().map(|n| n.as_str().to_owned()).collect(),
            acks: r.acks.is_some(),
            in_flight: r.acks.as_ref().map_or(0, |a| a.in_flight() as u64),
        })
        .collect()
}

pub(super) fn sessions(shared: &Shared, only: Option<&str>) -> Vec<SessionRow> {
    shared
        .sessions
        .sessions()
        .iter()
        .map(|s| s.row())
        .filter(|row| only.is_none() || row.service.as_deref() == only)
        .collect()
}

/// Ends every session of `service` relayed to `backend`. A member DNS has
/// dropped may still have sessions; with none, the address must be a member.
fn shutdown_backend(
    shared: &Shared,
    settings: &Settings,
    service: &str,
    backend: &str,
) -> Result<Reply, Refusal> {
    let (named, pools) = proxy_of(settings, service)?;
    let service = named.name.as_str();
    let killed = shared.sessions.kill_backend(service, backend);
    let member = pools.iter().any(|(pool, proxy)| {
        let figures = pool.figures(service, proxy);
        figures.iter().any(|l| l.backend == backend)
    });
    if killed == 0 && !member {
        return Err(Refusal::NothingOnBackend {
            service: service.to_owned(),
            backend: backend.to_owned(),
        });
    }
    Ok(Reply::ShutDown {
        service: service.to_owned(),
        backend: backend.to_owned(),
        killed: killed as u64,
    })
}
