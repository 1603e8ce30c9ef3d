//! What each admin command does to the daemon and what it answers: a JSON
//! object (the fields besides `ok`), or the sentence of a refusal.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tcpmux_proto::ServiceName;

use super::command::{Command, HELP};
use crate::admission::ServiceCounts;
use crate::model::{AdminState, Proxy, Service, ServiceKind, Weighted};
use crate::ops::metrics::BackendLine;
use crate::ops::session_table::SessionRow;
use crate::state::{Settings, Shared};

/// One listening socket, as `show listeners` reports it.
#[derive(Clone, Debug)]
pub(crate) struct ListenerRow {
    /// `tcpmux`, `metrics`, `handoff control`, `upgrade` or `admin`.
    pub kind: &'static str,
    pub address: String,
    pub name: Option<String>,
    pub detect: bool,
    pub tls: bool,
    pub accept_proxy_from: Vec<String>,
}

/// Runs `command`; `listeners` are the sockets in service now.
pub(super) fn run(
    command: &Command,
    shared: &Shared,
    listeners: &[ListenerRow],
) -> Result<Value, String> {
    let settings = shared.settings();
    match command {
        Command::Help => Ok(json!({ "commands": HELP })),
        Command::ShowServices => Ok(json!({ "services": services(shared, &settings) })),
        Command::ShowBackends(only) => {
            if let Some(name) = only {
                proxy_of(&settings, name)?;
            }
            Ok(json!({ "backends": backends(&settings, only.as_deref()) }))
        }
        Command::ShowListeners => {
            Ok(json!({ "listeners": listeners.iter().map(listener).collect::<Vec<_>>() }))
        }
        Command::ShowHandoff => Ok(json!({ "handoff": handoff(shared) })),
        Command::ShowSessions(only) => {
            let only = match only {
                Some(name) => Some(counts(&settings, name)?.0.name.as_str()),
                None => None,
            };
            Ok(json!({ "sessions": sessions(shared, only) }))
        }
        Command::KillSession(id) => {
            let session = shared.sessions.get(*id).ok_or_else(|| {
                format!("no session {id}; it may have ended (show sessions lists the live ones)")
            })?;
            session.kill();
            Ok(json!({ "killed": 1, "session": session.row() }))
        }
        Command::ShutdownBackend { service, backend } => {
            shutdown_backend(shared, &settings, service, backend)
        }
        Command::SetState {
            service,
            backend,
            state,
        } => shared.changes.apply(|| {
            set_backend(&settings, service, backend, |pool, endpoint| {
                pool.set_state(endpoint, *state);
            })
        })?,
        Command::SetWeight {
            service,
            backend,
            weight,
        } => shared.changes.apply(|| {
            set_backend(&settings, service, backend, |pool, endpoint| {
                pool.set_weight(endpoint, *weight);
            })
        })?,
        Command::Disable(name) => shared.changes.apply(|| switch(&settings, name, true))?,
        Command::Enable(name) => shared.changes.apply(|| switch(&settings, name, false))?,
    }
}

fn kind(service: &Service) -> &'static str {
    match service.kind {
        ServiceKind::Builtin(_) => "builtin",
        ServiceKind::Proxy(_) => "proxy",
        ServiceKind::Exec(_) => "exec",
        ServiceKind::Handoff(_) => "handoff",
    }
}

fn counts<'s>(
    settings: &'s Settings,
    name: &str,
) -> Result<(&'s Service, &'s Arc<ServiceCounts>), String> {
    let unknown = || format!("no service {name:?}; show services lists them");
    let name = ServiceName::parse(name).map_err(|_| unknown())?;
    let service = settings.registry.lookup(&name).ok_or_else(unknown)?;
    let counts = settings.usage.get(&name).ok_or_else(unknown)?;
    Ok((service, counts))
}

pub(super) fn services(shared: &Shared, settings: &Settings) -> Vec<Value> {
    let mut services: Vec<&Service> = settings.registry.services().collect();
    services.sort_by(|a, b| a.name.cmp(&b.name));
    services
        .into_iter()
        .map(|service| {
            let counts = settings.usage.get(&service.name);
            let disabled = counts.is_some_and(|c| c.disabled.load(Ordering::Acquire));
            json!({
                "name": service.name.as_str(),
                "kind": kind(service),
                "state": if disabled { "disabled" } else { "enabled" },
                "set_at_runtime": disabled,
                "active": counts.map_or(0, |c| c.connections.get()),
                "max_connections": service.max_connections,
                "queue": service.queue.as_ref().map(|queue| {
                    let figures = counts.map(|c| c.connections.queue()).unwrap_or_default();
                    json!({
                        "waiting": figures.waiting,
                        "max": queue.max,
                        "timeout_seconds": queue.timeout.as_secs_f64(),
                        "served": figures.served,
                        "waited_seconds": figures.waited_seconds,
                        "timeouts": figures.timeouts,
                    })
                }),
                "totals": shared.metrics.totals(service.name.as_str()),
            })
        })
        .collect()
}

/// The proxy service `name`: the service, its proxy settings, its counts.
fn proxy_of<'s>(settings: &'s Settings, name: &str) -> Result<Proxied<'s>, String> {
    let (service, counts) = counts(settings, name)?;
    match &service.kind {
        ServiceKind::Proxy(proxy) => Ok((service, proxy, counts)),
        _ => Err(format!("service {name} is not a proxy: it has no backends")),
    }
}

type Proxied<'s> = (&'s Service, &'s Arc<Proxy>, &'s Arc<ServiceCounts>);

pub(super) fn backends(settings: &Settings, only: Option<&str>) -> Vec<Value> {
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
        for line in counts.pool.lines(service.name.as_str(), proxy) {
            rows.push(backend(proxy, &line));
        }
    }
    rows
}

/// One member: `state` is the administrative one, or `down` when health
/// took a ready member out.
fn backend(proxy: &Proxy, line: &BackendLine) -> Value {
    let state = match line.admin {
        AdminState::Ready if !line.up => "down",
        other => other.as_str(),
    };
    let configured = proxy
        .backends
        .iter()
        .filter_map(Weighted::fixed_member)
        .any(|m| m.endpoint.to_string() == line.backend);
    json!({
        "service": line.service,
        "backend": line.backend,
        "state": state,
        "weight": line.weight,
        "active": line.active,
        "connections": line.connections,
        "failures": line.failures,
        "last_check": line.last_check.map(|passed| if passed { "pass" } else { "fail" }),
        "source": if configured { "config" } else { "dns" },
        "set_at_runtime": line.set_at_runtime,
    })
}

pub(super) fn listener(row: &ListenerRow) -> Value {
    json!({
        "kind": row.kind,
        "address": row.address,
        "name": row.name,
        "detect": row.detect,
        "tls": row.tls,
        "accept_proxy_from": row.accept_proxy_from,
    })
}

pub(super) fn handoff(shared: &Shared) -> Vec<Value> {
    shared
        .hub
        .registrations()
        .iter()
        .map(|r| {
            json!({
                "pid": r.pid,
                "uid": r.uid,
                "names": r.names.iter().map(ServiceName::as_str).collect::<Vec<_>>(),
                "acks": r.acks.is_some(),
                "in_flight": r.acks.as_ref().map_or(0, |a| a.in_flight()),
            })
        })
        .collect()
}

/// Applies `change` to the member of `service` written `backend`.
fn set_backend(
    settings: &Settings,
    service: &str,
    backend: &str,
    change: impl FnOnce(&crate::pool::Pool, &crate::model::Endpoint),
) -> Result<Value, String> {
    let (named, proxy, counts) = proxy_of(settings, service)?;
    let pool = &counts.pool;
    let members = pool
        .current(proxy)
        .ok_or_else(|| format!("service {service}'s backends are not known yet (DNS)"))?;
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
        return Err(format!(
            "no backend {backend} in {service}; its backends: {}",
            known.join(", ")
        ));
    };
    change(pool, &member.endpoint);
    // A member back in service makes room: the clients in line get it first.
    counts.connections.set_cap(counts.cap(named));
    let row = pool
        .lines(service, proxy)
        .iter()
        .find(|l| l.backend == backend)
        .map(|line| self::backend(proxy, line));
    Ok(json!({ "backend": row }))
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
) -> Result<Value, String> {
    let (named, proxy, counts) = proxy_of(settings, service)?;
    let service = named.name.as_str();
    let killed = shared.sessions.kill_backend(service, backend);
    let member = counts
        .pool
        .lines(service, proxy)
        .iter()
        .any(|l| l.backend == backend);
    if killed == 0 && !member {
        return Err(format!(
            "no backend {backend} in {service} and no session on it"
        ));
    }
    Ok(json!({ "service": service, "backend": backend, "killed": killed }))
}

fn switch(settings: &Settings, name: &str, disable: bool) -> Result<Value, String> {
    let (service, counts) = counts(settings, name)?;
    counts.disabled.store(disable, Ordering::Release);
    let mut reply = Map::new();
    reply.insert("service".into(), json!(service.name.as_str()));
    reply.insert(
        "state".into(),
        json!(if disable { "disabled" } else { "enabled" }),
    );
    Ok(Value::Object(reply))
}
