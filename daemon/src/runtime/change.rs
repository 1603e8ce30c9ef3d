//! A run-time change as one value, and why one could not be made.

use crate::model::AdminState;

/// One run-time change, as the admin socket takes it and the fleet
/// shares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// `set backend SERVICE ADDRESS state ...`.
    State {
        service: String,
        backend: String,
        state: AdminState,
    },
    /// `set backend SERVICE ADDRESS weight ...`; `None` is `config`.
    Weight {
        service: String,
        backend: String,
        weight: Option<u32>,
    },
    /// `disable service` (true) and `enable service` (false).
    Disabled { service: String, disabled: bool },
}

impl Change {
    /// The service it is for.
    pub(crate) fn service(&self) -> &str {
        match self {
            Change::State { service, .. }
            | Change::Weight { service, .. }
            | Change::Disabled { service, .. } => service,
        }
    }
}

/// Why a change was not made; the text says what would be right.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum NotApplied {
    #[error("no service {0:?}; show services lists them")]
    NoService(String),
    #[error("service {0} is not a proxy: it has no backends")]
    NotAProxy(String),
    #[error("service {0}'s backends are not known yet (DNS)")]
    MembersNotKnown(String),
    #[error("no backend {backend} in {service}; its backends: {}", known.join(", "))]
    NoBackend {
        service: String,
        backend: String,
        known: Vec<String>,
    },
}
