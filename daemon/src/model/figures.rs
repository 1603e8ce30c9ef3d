//! What the run-time state reports of itself, as plain values: a service
//! queue's and a proxy member's figures, taken under their locks and then
//! rendered by ops/ (metrics) and admin/ (`show`, the dashboard).

use super::AdminState;

/// A service queue's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueueFigures {
    pub waiting: usize,
    pub served: u64,
    pub waited_seconds: f64,
    pub timeouts: u64,
}

/// One proxy member's figures.
#[derive(Clone, Debug, Default)]
pub struct MemberFigures {
    pub service: String,
    pub backend: String,
    pub up: bool,
    pub active: u64,
    pub connections: u64,
    pub failures: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The last active check's result, if checks run.
    pub last_check: Option<bool>,
    /// The weight in force (an operator's, else the configured or SRV one).
    pub weight: u32,
    /// The administrative state set on the admin socket.
    pub admin: AdminState,
    /// Whether the operator set its state or weight at run time.
    pub set_at_runtime: bool,
    /// Who set them: this instance's operator or the fleet's.
    pub set_by: Option<tcpmux_proto::admin::SetBy>,
}
