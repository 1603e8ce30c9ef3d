//! The commands that change the run-time state: `set backend`, `disable`
//! and `enable service`. In a cluster a change is for the fleet unless it
//! says `--local`: etcd takes it first, then this instance makes it (the
//! others when their watch brings it), so a change etcd refused is made
//! nowhere.

use tcpmux_proto::admin::{Reply, Request, Scope, ServiceState, SetBy};

use super::refusal::Refusal;
use crate::runtime::{self, Change};
use crate::state::{Settings, Shared};

/// The change `request` asks for, and whether it said `--local`; `None`
/// for a request that changes nothing.
pub(super) fn of(request: &Request) -> Option<(Change, bool)> {
    let owned = |s: &String| s.clone();
    Some(match request {
        Request::SetState {
            service,
            backend,
            state,
            local,
        } => (
            Change::State {
                service: owned(service),
                backend: owned(backend),
                state: *state,
            },
            *local,
        ),
        Request::SetWeight {
            service,
            backend,
            weight,
            local,
        } => (
            Change::Weight {
                service: owned(service),
                backend: owned(backend),
                weight: *weight,
            },
            *local,
        ),
        Request::Disable { name, local } => (
            Change::Disabled {
                service: owned(name),
                disabled: true,
            },
            *local,
        ),
        Request::Enable { name, local } => (
            Change::Disabled {
                service: owned(name),
                disabled: false,
            },
            *local,
        ),
        _ => return None,
    })
}

/// Makes `change` here, and first in the fleet unless `local`; answers
/// what it now is.
pub(super) fn make(shared: &Shared, change: Change, local: bool) -> Result<Reply, Refusal> {
    let settings = shared.settings();
    runtime::check(&settings.registry, &settings.usage, &change)?;
    let by = match shared.fleet.get() {
        Some(fleet) if !local => {
            fleet
                .publish(change.clone())
                .map_err(Refusal::FleetUnreachable)?;
            Some(SetBy {
                node: fleet.node.clone(),
                scope: Scope::Fleet,
            })
        }
        Some(fleet) => Some(SetBy {
            node: fleet.node.clone(),
            scope: Scope::Local,
        }),
        None => None,
    };
    shared
        .changes
        .apply(|| runtime::apply(&settings.registry, &settings.usage, &change, by))
        .map_err(|_frozen| Refusal::UpgradeInProgress)??;
    Ok(answer(&settings, &change))
}

/// What the changed service or member is now.
fn answer(settings: &Settings, change: &Change) -> Reply {
    match change {
        Change::Disabled { service, disabled } => Reply::Switched {
            service: service.to_ascii_lowercase(),
            state: if *disabled {
                ServiceState::Disabled
            } else {
                ServiceState::Enabled
            },
        },
        Change::State {
            service, backend, ..
        }
        | Change::Weight {
            service, backend, ..
        } => Reply::Backend(
            super::backends::backends(settings, Some(&service.to_ascii_lowercase()))
                .into_iter()
                .find(|row| row.backend == *backend),
        ),
    }
}
