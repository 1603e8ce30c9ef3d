//! The rows of the `show` replies and the words in them: plain data, as
//! serde writes and reads it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One service, as `show services` lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceRow {
    /// Its name.
    pub name: String,
    /// `builtin`, `proxy`, `exec`, `handoff`, or `udp` (`proxy_udp` alone).
    pub kind: String,
    /// Enabled, or disabled on the admin socket.
    pub state: ServiceState,
    /// Whether an operator set its state at run time.
    pub set_at_runtime: bool,
    /// Who set it, when an operator did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_by: Option<SetBy>,
    /// Its live connections.
    pub active: u64,
    /// Its `max_connections`, if any.
    pub max_connections: Option<u64>,
    /// Its queue, with `queue_timeout`.
    pub queue: Option<QueueRow>,
    /// Connections closed so far, by outcome (`served`, `refused`, ...).
    pub totals: BTreeMap<String, u64>,
}

/// Whether a service takes clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceState {
    /// It does.
    Enabled,
    /// It was disabled on the admin socket.
    Disabled,
}

/// A service's queue of clients waiting for a connection slot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueRow {
    /// Clients waiting now.
    pub waiting: u64,
    /// `queue_max`.
    pub max: u64,
    /// `queue_timeout`.
    pub timeout_seconds: f64,
    /// Clients served after waiting.
    pub served: u64,
    /// Their time in line, added up.
    pub waited_seconds: f64,
    /// Clients that gave up or timed out in line.
    pub timeouts: u64,
}

/// One proxy member, as `show backends` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendRow {
    /// The proxy service.
    pub service: String,
    /// The member's address.
    pub backend: String,
    /// A member of the service's UDP backends (`proxy_udp`), not of its
    /// `proxy`: its counts are flows, not connections.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub udp: bool,
    /// Its administrative state, or `down` when health took it out.
    pub state: MemberStatus,
    /// The weight in force.
    pub weight: u32,
    /// Sessions relayed to it now.
    pub active: u64,
    /// Sessions relayed to it so far.
    pub connections: u64,
    /// Connections to it that failed.
    pub failures: u64,
    /// The last active health check, if checks run.
    pub last_check: Option<Check>,
    /// Where the member comes from.
    pub source: Source,
    /// Whether an operator set its state or weight at run time.
    pub set_at_runtime: bool,
    /// Who set them, when an operator did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_by: Option<SetBy>,
}

/// Where a run-time setting came from: the instance whose admin socket
/// took the command, and whether it was for the fleet or that instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetBy {
    /// The `node` of the instance that took the command.
    pub node: String,
    /// For every instance of the `cluster`, or this one (`--local`).
    pub scope: Scope,
}

/// Whom a run-time change is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// This instance only.
    Local,
    /// Every instance of the cluster.
    Fleet,
}

/// One instance of the cluster, as `show fleet` lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FleetRow {
    /// Its `node` name.
    pub node: String,
    /// Its first listening address.
    pub address: String,
    /// Its tcpmuxd version.
    pub version: String,
    /// Seconds since it started.
    pub uptime: u64,
    /// Its live sessions when it last reported.
    pub sessions: u64,
    /// Seconds since it last reported.
    pub last_seen: u64,
    /// Whether it is the instance that answered.
    pub this: bool,
}

/// A member's state as `show backends` tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberStatus {
    /// Takes new clients.
    Ready,
    /// Set to drain: no new clients.
    Drain,
    /// Set to maint: no new clients, no checks.
    Maint,
    /// Ready, but its health checks fail.
    Down,
}

/// A health check's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Check {
    /// Passed.
    Pass,
    /// Failed.
    Fail,
}

/// Where a member comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Written in the configuration.
    Config,
    /// Found by DNS (a name or SRV record).
    Dns,
}

/// One listening socket, as `show listeners` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerRow {
    /// `tcpmux`, `udp`, `metrics`, `handoff control`, `upgrade` or `admin`.
    pub kind: String,
    /// The address, or a Unix socket's path.
    pub address: String,
    /// The listener's `name`.
    pub name: Option<String>,
    /// Whether it detects protocols.
    pub detect: bool,
    /// Whether it terminates TLS.
    pub tls: bool,
    /// Who may send a PROXY header.
    pub accept_proxy_from: Vec<String>,
}

/// One registered handoff backend, as `show handoff` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffRow {
    /// Its process.
    pub pid: i32,
    /// Its user.
    pub uid: u32,
    /// The names it registered.
    pub names: Vec<String>,
    /// Whether it acknowledges each client.
    pub acks: bool,
    /// Clients handed and not yet acknowledged.
    pub in_flight: u64,
}

/// One live session, as `show sessions` lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionRow {
    /// Its id, for `kill session`.
    pub id: u64,
    /// The client (the announced one behind a PROXY header).
    pub client: String,
    /// The local address it connected to, or `unix`.
    pub listener: String,
    /// Its service, once known.
    pub service: Option<String>,
    /// How it was routed (`tcpmux`, `sni`, ...).
    pub routed: String,
    /// Seconds since accept.
    pub age: f64,
    /// Unix time of the accept, in seconds.
    pub started: u64,
    /// Bytes relayed from the client so far, by a proxy service.
    pub bytes_in: u64,
    /// Bytes relayed to the client so far.
    pub bytes_out: u64,
    /// The proxy member it is relayed to.
    pub backend: Option<String>,
    /// The TLS version, when the daemon terminates TLS.
    pub tls: Option<String>,
    /// The client certificate's name.
    pub cert: Option<String>,
    /// A UDP flow (`udp = true`), not a connection; left out when false,
    /// so a reply of version 1 without flows reads as before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub udp: bool,
}

/// The word for each value of these enums, as the replies write it.
macro_rules! words {
    ($($kind:ident { $($variant:ident => $word:literal),* })*) => {$(
        impl $kind {
            /// The word the replies write for it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($kind::$variant => $word),*
                }
            }
        }

        impl std::fmt::Display for $kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

words! {
    ServiceState { Enabled => "enabled", Disabled => "disabled" }
    MemberStatus { Ready => "ready", Drain => "drain", Maint => "maint", Down => "down" }
    Check { Pass => "pass", Fail => "fail" }
    Source { Config => "config", Dns => "dns" }
    Scope { Local => "local", Fleet => "fleet" }
}
