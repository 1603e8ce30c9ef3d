//! The daemon's plain data: what a service is, what kind it is, who may use it
//! and where the daemon listens. Values only, built by `config` and read by
//! everything above; this module imports nothing else of the daemon.

mod access;
mod acme;
mod admin;
mod cidr;
pub mod clock;
mod cluster;
mod connection_ids;
mod exec;
mod figures;
mod listen;
mod pattern;
mod peer;
mod proxy;
mod quic_servers;
mod routes;
mod tls;
mod udp;

use std::fmt;
use std::sync::Arc;

use tcpmux_proto::ServiceName;

pub use access::Access;
pub use acme::{AcmeSettings, ACME_TLS_ALPN};
pub use admin::{AdminSettings, AdminState};
pub use cidr::{Cidr, CidrError};
pub use cluster::{Cluster, EtcdTls, Secret};
pub use connection_ids::{ConnectionIds, Owner};
pub use exec::{Exec, ExecReply, OnShutdown};
pub use figures::{MemberFigures, QueueFigures};
pub use listen::{ListenAddr, ListenAddrError, ListenOptions, ListenSpec};
pub use pattern::{Pattern, PatternError, MATCH_WINDOW};
pub use peer::{ClientInfo, Peer};
pub use proxy::{
    Backend, BackendError, BackendTls, Balance, Dns, Endpoint, HashKey, HealthCheck, Member, Proxy,
    ProxyVersion, RelayMode, Weighted, DEFAULT_CONNECT_TIMEOUT,
};
pub use quic_servers::{QuicServer, QuicServers, MAX_QUIC_SERVER_ID};
pub use routes::{
    Detect, HostMap, HostPattern, HostPatternError, MatchRule, Routed, DEFAULT_DETECT_TIMEOUT,
};
pub use tls::{
    certificate_expiry, certificate_names, CertPair, ClientAuth, DefaultCert, ServerConfigs, Tls,
    TlsClient,
};
pub use udp::{
    HandedFlow, ServiceFlows, UdpRoutes, UdpSettings, DEFAULT_MAX_UDP_FLOWS,
    DEFAULT_QUIC_IDLE_TIMEOUT, DEFAULT_UDP_IDLE_TIMEOUT,
};

/// One registered service: a name, what it does, and who may use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    pub name: ServiceName,
    pub kind: ServiceKind,
    /// Text sent after the `+` (may be empty).
    pub message: String,
    /// Which clients may use it.
    pub access: Access,
    /// Cap on its simultaneous connections (counted in the daemon's runtime
    /// state, which a reload keeps).
    pub max_connections: Option<usize>,
    /// Where clients wait when `max_connections` is reached, instead of
    /// being refused (`queue_timeout`, `queue_max`).
    pub queue: Option<Queue>,
    /// TLS server names it answers to on detecting listeners (`sni`).
    pub sni: Vec<HostPattern>,
    /// TLS server names it answers to after a TLS listener has terminated
    /// the connection (`sni_terminate`): it gets the decrypted stream.
    pub sni_terminate: Vec<HostPattern>,
    /// HTTP hosts it answers to on detecting listeners (`http_host`).
    pub http_host: Vec<String>,
    /// TLS application protocols it answers to (`alpn`): by the ClientHello on
    /// detecting listeners, by the negotiated protocol on TLS listeners.
    pub alpn: Vec<String>,
    /// Its UDP backends (`proxy_udp`), for flows a UDP listener routes here:
    /// a pool as a TCP proxy's (DNS names and `srv:` followed, checked by
    /// `udp_health_check`, listed and set on the admin socket). A flow's
    /// backend is hashed on its client's address (`balance = "source"`);
    /// of the relay settings only `transparent` means anything here.
    pub udp: Option<Arc<Proxy>>,
    /// How its flows end (`udp_idle_timeout`, `udp_responses`).
    pub udp_flows: ServiceFlows,
}

impl Service {
    /// A service with no message, access rules or cap.
    pub fn new(name: ServiceName, kind: ServiceKind) -> Self {
        Service {
            name,
            kind,
            message: String::new(),
            access: Access::default(),
            max_connections: None,
            queue: None,
            sni: Vec::new(),
            sni_terminate: Vec::new(),
            http_host: Vec::new(),
            alpn: Vec::new(),
            udp: None,
            udp_flows: ServiceFlows::default(),
        }
    }

    /// How many clients it serves at once: its own `max_connections`, or
    /// less when its backends' own caps add up to less.
    pub fn connection_cap(&self) -> Option<usize> {
        let backends = match &self.kind {
            ServiceKind::Proxy(proxy) => proxy.capacity(),
            _ => None,
        };
        self.cap_with(backends)
    }

    /// [`Service::connection_cap`] when its backends hold `backends`
    /// together (those in service now: see `Pool::capacity`).
    pub fn cap_with(&self, backends: Option<usize>) -> Option<usize> {
        match (self.max_connections, backends) {
            (Some(own), Some(backends)) => Some(own.min(backends)),
            (own, backends) => own.or(backends),
        }
    }
}

/// A service's queue: at most `max` clients wait, each at most `timeout`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queue {
    pub max: usize,
    pub timeout: std::time::Duration,
}

/// The queue length when `queue_timeout` is set without `queue_max`.
pub const DEFAULT_QUEUE_MAX: usize = 1024;

/// What a registered name does: one variant per kind, each served by its own
/// file in `services/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceKind {
    Builtin(Builtin),
    Proxy(Arc<Proxy>),
    Exec(Arc<Exec>),
    Handoff(Arc<HandoffRule>),
    /// UDP backends only (`proxy_udp` alone): a stream client that names it
    /// is refused.
    UdpOnly,
}

/// Services built into the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    Echo,
    Discard,
    Chargen,
    Daytime,
    Time,
    Sometext,
    Isotime,
    Stats,
}

impl Builtin {
    pub const ALL: [Builtin; 8] = [
        Builtin::Echo,
        Builtin::Discard,
        Builtin::Chargen,
        Builtin::Daytime,
        Builtin::Time,
        Builtin::Sometext,
        Builtin::Isotime,
        Builtin::Stats,
    ];

    /// The name it is configured by, and served under by default.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Echo => "echo",
            Builtin::Discard => "discard",
            Builtin::Chargen => "chargen",
            Builtin::Daytime => "daytime",
            Builtin::Time => "time",
            Builtin::Sometext => "sometext",
            Builtin::Isotime => "isotime",
            Builtin::Stats => "stats",
        }
    }

    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Who may register a handoff name: a peer whose uid or gid is listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandoffRule {
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
}

impl HandoffRule {
    pub fn allows(&self, uid: u32, gid: u32) -> bool {
        self.uids.contains(&uid) || self.gids.contains(&gid)
    }
}

/// Limits on the handoff control socket, which every local user may connect
/// to: connections held at once (all users, and one uid), and how long one may
/// take to send its `REGISTER` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlLimits {
    pub max_connections: usize,
    pub max_connections_per_uid: usize,
    pub register_timeout: std::time::Duration,
}

impl Default for ControlLimits {
    fn default() -> Self {
        ControlLimits {
            max_connections: 128,
            max_connections_per_uid: 16,
            register_timeout: std::time::Duration::from_secs(2),
        }
    }
}

/// Daemon-wide connection limits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    pub max_connections: Option<usize>,
    pub max_connections_per_ip: Option<usize>,
    /// New connections per second per source address (burst: one second's worth).
    pub connection_rate_per_ip: Option<f64>,
}
