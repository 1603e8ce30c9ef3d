//! A proxy's members, TCP and UDP, as `show backends` lists them (and the
//! dashboard, and the answer to `set backend`).

use tcpmux_proto::admin::{BackendRow, Check, MemberStatus, Source};

use crate::model::{AdminState, MemberFigures, Proxy, Service, ServiceKind, Weighted};
use crate::state::Settings;

pub(super) fn backends(settings: &Settings, only: Option<&str>) -> Vec<BackendRow> {
    let mut rows = Vec::new();
    let mut services: Vec<&Service> = settings.registry.services().collect();
    services.sort_by(|a, b| a.name.cmp(&b.name));
    for service in services {
        let Some(counts) = settings.usage.get(&service.name) else {
            continue;
        };
        if only.is_some_and(|name| name != service.name.as_str()) {
            continue;
        }
        let name = service.name.as_str();
        if let ServiceKind::Proxy(proxy) = &service.kind {
            for line in counts.pool.figures(name, proxy) {
                rows.push(backend(proxy, &line, false));
            }
        }
        if let Some(udp) = &service.udp {
            for line in counts.udp_pool.figures(name, udp) {
                rows.push(backend(udp, &line, true));
            }
        }
    }
    rows
}

/// One member: `state` is the administrative one, or `down` when health
/// took a ready member out.
fn backend(proxy: &Proxy, line: &MemberFigures, udp: bool) -> BackendRow {
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
        udp,
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
        set_by: line.set_by.clone(),
    }
}
