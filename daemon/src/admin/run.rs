//! What each admin command does to the daemon and what it answers: a JSON
//! object (the fields besides `ok`), or the sentence of a refusal.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tcpmux_proto::admin::{
    BackendRow, Check, HandoffRow, ListenerRow, MemberStatus, QueueRow, Reply, Request, ServiceRow,
    ServiceState, SessionRow, Source, HELP, VERSION,
};
use tcpmux_proto::ServiceName;

use super::refusal::Refusal;
use crate::admission::ServiceCounts;
use crate::model::{AdminState, MemberFigures, Proxy, Service, ServiceKind, Weighted};
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
        Request::SetState {
            service,
            backend,
            state,
        } => changing(shared, || {
            set_backend(&settings, service, backend, |pool, endpoint| {
                pool.set_state(endpoint, *state);
            })
        }),
        Request::SetWeight {
            service,
            backend,
            weight,
        } => changing(shared, || {
            set_backend(&settings, service, backend, |pool, endpoint| {
                pool.set_weight(endpoint, *weight);
            })
        }),
        Request::Disable(name) => changing(shared, || switch(&settings, name, true)),
        Request::Enable(name) => changing(shared, || switch(&settings, name, false)),
    }
}

/// Runs `change` unless an upgrade is carrying the run-time state.
fn changing(
    shared: &Shared,
    change: impl FnOnce() -> Result<Reply, Refusal>,
) -> Result<Reply, Refusal> {
    shared
        .changes
        .apply(change)
        .map_err(|_frozen| Refusal::UpgradeInProgress)?
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
    let unknown = || Refusal::NoService(name.to_owned());
    let name = ServiceName::parse(name).map_err(|_| unknown())?;
    let service = settings.registry.lookup(&name).ok_or_else(unknown)?;
    let counts = settings.usage.get(&name).ok_or_else(unknown)?;
    Ok((service, counts))
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

/// The proxy service `name`: the service, its proxy settings, its counts.
fn proxy_of<'s>(settings: &'s Settings, name: &str) -> Result<Proxied<'s>, Refusal> {
    let (service, counts) = counts(settings, name)?;
    match &service.kind {
        ServiceKind::Proxy(proxy) => Ok((service, proxy, counts)),
        _ => Err(Refusal::NotAProxy(name.to_owned())),
    }
}

type Proxied<'s> = (&'s Service, &'s Arc<Proxy>, &'s Arc<ServiceCounts>);

pub(super) fn backends(settings: &Settings, only: Option<&str>) -> Vec<BackendRow> {
    let mut rows = Vec::new();
    let mut services: Vec<&Service> = settings.registry.services().collect();
    services.sort_by(|a, b| a.name.cmp(&b.name));
    for service in services {
        let (ServiceKind::Proxy(proxy), Some(counts)) =
            (&service.kind, settings.usage.get(&service.name))
        else {
            continue;
        };
        if only.is_some_and(|name| name != service.name.as_str()) {
            continue;
        }
        for line in counts.pool.figures(service.name.as_str(), proxy) {
            rows.push(backend(proxy, &line));
        }
    }
    rows
}

/// One member: `state` is the administrative one, or `down` when health
/// took a ready member out.
fn backend(proxy: &Proxy, line: &MemberFigures) -> BackendRow {
    let state = match line.admin {
        AdminState::Ready if !line.up => MemberStatus::Down,
        AdminState::Ready => MemberStatus::Ready,
        AdminState::Drain => MemberStatus::Drain,
        AdminState::Maint => MemberStatus::Maint,
    };
    let configured = proxy
        .backends
        .iter()
        .filter_map(Weighted::fixed_member)
        .any(|m| m.endpoint.to_string() == line.backend);
    BackendRow {
        service: line.service.clone(),
        backend: line.backend.clone(),
        state,
        weight: line.weight,
        active: line.active,
        connections: line.connections,
        failures: line.failures,
        last_check: line
            .last_check
            .map(|passed| if passed { Check::Pass } else { Check::Fail }),
        source: if configured {
            Source::Config
        } else {
            Source::Dns
        },
        set_at_runtime: line.set_at_runtime,
    }
}

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

/// Applies `change` to the member of `service` written `backend`.
fn set_backend(
    settings: &Settings,
    service: &str,
    backend: &str,
    change: impl FnOnce(&crate::pool::Pool, &crate::model::Endpoint),
) -> Result<Reply, Refusal> {
    let (named, proxy, counts) = proxy_of(settings, service)?;
    let pool = &counts.pool;
    let members = pool
        .current(proxy)
        .ok_or_else(|| Refusal::MembersNotKnown(service.to_owned()))?;
    let Some(member) = members
        .list
        .iter()
        .find(|m| m.endpoint.to_string() == backend)
    else {
        let known: Vec<String> = members
            .list
            .iter()
            .map(|m| m.endpoint.to_string())
            .collect();
        return Err(Refusal::NoBackend {
            service: service.to_owned(),
            backend: backend.to_owned(),
            known,
        });
    };
    change(pool, &member.endpoint);
    // A member back in service makes room: the clients in line get it first.
    counts.connections.set_cap(counts.cap(named));
    let row = pool
        .figures(service, proxy)
        .iter()
        .find(|l| l.backend == backend)
        .map(|line| self::backend(proxy, line));
    Ok(Reply::Backend(row))
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
    let (named, proxy, counts) = proxy_of(settings, service)?;
    let service = named.name.as_str();
    let killed = shared.sessions.kill_backend(service, backend);
    let member = counts
        .pool
        .figures(service, proxy)
        .iter()
        .any(|l| l.backend == backend);
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

fn switch(settings: &Settings, name: &str, disable: bool) -> Result<Reply, Refusal> {
    let (service, counts) = counts(settings, name)?;
    counts.disabled.store(disable, Ordering::Release);
    Ok(Reply::Switched {
        service: service.name.as_str().to_owned(),
        state: if disable {
            ServiceState::Disabled
        } else {
            ServiceState::Enabled
        },
    })
}
