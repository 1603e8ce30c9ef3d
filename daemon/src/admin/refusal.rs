//! Every way the admin socket refuses an operator, as one value: its text is
//! the reply's `error` and the log line's. The operator's words (a name, an
//! address) are carried as written; the log clips them.

use tcpmux_proto::admin::RequestError;

use crate::runtime::NotApplied;

/// Why a command, or a connection, was refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    /// Not a command: the protocol says what would be.
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error("command line too long")]
    TooLong,
    #[error("uid not allowed: ask for admin_uids")]
    UidNotAllowed,
    #[error("too many admin connections")]
    Full,
    #[error("too many admin connections from your uid")]
    FullForUid,
    #[error("internal error; see the daemon's log")]
    Internal,
    /// A change while an upgrade carries the run-time state: it would be lost.
    #[error("upgrade in progress: the run-time state is being handed to the new daemon; try again when it serves")]
    UpgradeInProgress,
    #[error("no session {0}; it may have ended (show sessions lists the live ones)")]
    NoSession(u64),
    /// A change that names no service or member of this instance.
    #[error(transparent)]
    NotApplied(#[from] NotApplied),
    #[error("{0}; add --local to change this instance alone")]
    FleetUnreachable(String),
    #[error("this instance is in no cluster: show fleet needs `cluster` in its configuration")]
    NoCluster,
    #[error("no backend {backend} in {service} and no session on it")]
    NothingOnBackend { service: String, backend: String },
}
