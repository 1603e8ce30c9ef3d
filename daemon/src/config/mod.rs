//! The TOML configuration: what the daemon listens on, its timeouts and its
//! services. Parsing runs in small named steps, one module per part of the file;
//! every error names the file and, where the file has a place for it, the line
//! and column.

pub mod acme;
mod backend_tls;
mod certs;
mod checks;
mod claims;
mod cluster;
mod detect;
mod dns;
mod durations;
mod error;
mod etc_services;
mod exec;
mod include;
mod limits;
mod listen;
mod metrics;
mod pem;
mod proxy;
mod raw;
mod services;
mod tls;
mod udp;
mod users;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::keys::Keys;
use crate::model::{
    AdminSettings, Cluster, ControlLimits, Dns, Limits, ListenAddr, ListenSpec, UdpSettings,
};
use crate::registry::Registry;

pub use durations::ConfigDuration;
pub use error::ConfigError;
pub use limits::DEFAULT_MAX_CONNECTIONS;

use checks::positive_duration;
use error::Source;
use raw::RawConfig;
use toml::Spanned;

/// RFC 1078's port. Binding it needs root or CAP_NET_BIND_SERVICE.
pub const DEFAULT_PORT: u16 = 1;
pub const DEFAULT_NEGOTIATION_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_CLOSE_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A validated configuration, ready to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: Vec<ListenSpec>,
    /// How long a client may take to send its request line.
    pub negotiation_timeout: Duration,
    /// How long a graceful close waits for the client's FIN after ours.
    pub close_drain_timeout: Duration,
    pub registry: Registry,
    /// Where handoff backends register (`handoff_socket`).
    pub handoff_socket: Option<PathBuf>,
    /// Where a new binary asks this one for its sockets (`upgrade_socket`).
    pub upgrade_socket: Option<PathBuf>,
    /// The admin socket (`admin_socket`, `admin_uids`).
    pub admin: Option<AdminSettings>,
    /// On SIGTERM/SIGINT, how long running sessions may take to finish.
    pub shutdown_grace: Duration,
    /// On SIGTERM/SIGINT, how long the listeners go on accepting while
    /// `/readyz` says 503, so that what stands in front stops sending first.
    pub shutdown_delay: Duration,
    pub limits: Limits,
    /// The handoff control socket's limits.
    pub control_limits: ControlLimits,
    /// After binding, switch to this uid and gid (top-level `user`/`group`).
    pub run_as: Option<(u32, u32)>,
    /// Where to serve Prometheus metrics over HTTP, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// The host names its requests may name (`metrics_hosts`).
    pub metrics_hosts: Vec<String>,
    /// How proxy backends found through DNS are followed.
    pub dns: Dns,
    /// UDP flows: their limits and idle timeout.
    pub udp: UdpSettings,
    /// The fleet this instance is one of (`cluster`), if any.
    pub cluster: Option<std::sync::Arc<Cluster>>,
    /// What is valid but probably not meant (no services at all), for the log
    /// and `--check-config`.
    pub warnings: Vec<String>,
}

impl Default for Config {
    /// No file: every built-in under its own name, on the RFC's port.
    fn default() -> Self {
        Self {
            listen: default_listen(),
            negotiation_timeout: DEFAULT_NEGOTIATION_TIMEOUT,
            close_drain_timeout: DEFAULT_CLOSE_DRAIN_TIMEOUT,
            registry: Registry::builtins(),
            handoff_socket: None,
            upgrade_socket: None,
            admin: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            shutdown_delay: Duration::ZERO,
            limits: Limits {
                max_connections: Some(DEFAULT_MAX_CONNECTIONS),
                ..Limits::default()
            },
            control_limits: ControlLimits::default(),
            run_as: None,
            metrics_listen: None,
            metrics_hosts: metrics::DEFAULT_HOSTS.map(str::to_owned).to_vec(),
            dns: Dns::default(),
            udp: UdpSettings::default(),
            cluster: None,
            warnings: Vec::new(),
        }
    }
}

impl Config {
    /// Reads and parses the file at `path`; see [`Config::parse`].
    pub fn load(path: &Path, keys: &Keys) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text, &path.display().to_string(), keys)
    }

    /// Leaves out the sockets a daemon has one of (the metrics endpoint, the
    /// admin and upgrade sockets): with `--workers`, worker 0 serves them for
    /// the whole daemon, and every other worker's configuration, at start and
    /// at each reload, goes through here.
    pub fn leave_daemon_sockets(&mut self) {
        self.metrics_listen = None;
        self.admin = None;
        self.upgrade_socket = None;
    }

    /// The daemon's own socket files (`admin_socket`, `upgrade_socket`,
    /// `handoff_socket`) whose directory does not exist now, with a
    /// sentence each: under systemd `RuntimeDirectory=` makes it before
    /// the start; anywhere else the start fails there. For `--check-config`.
    pub fn missing_socket_directories(&self) -> Vec<String> {
        let sockets = [
            ("admin_socket", self.admin.as_ref().map(|a| &a.socket)),
            ("upgrade_socket", self.upgrade_socket.as_ref()),
            ("handoff_socket", self.handoff_socket.as_ref()),
        ];
        sockets
            .into_iter()
            .filter_map(|(key, path)| {
                let directory = path?.parent().filter(|d| !d.as_os_str().is_empty())?;
                (!directory.is_dir()).then(|| {
                    format!(
                        "{key} {}: directory {} does not exist; the start fails unless something makes it first (systemd's RuntimeDirectory=, as contrib/systemd's unit does)",
                        path.map(|p| p.display().to_string()).unwrap_or_default(),
                        directory.display()
                    )
                })
            })
            .collect()
    }

    /// Parses and validates `text`; `origin` names it in errors. A TLS
    /// listener's session-ticket keys and ACME slot are the daemon's, taken
    /// from `keys` (a slot made there if these settings have none): nothing
    /// else outside the returned value changes.
    pub fn parse(text: &str, origin: &str, keys: &Keys) -> Result<Config, ConfigError> {
        let src = Source { text, origin };
        let (raw, tables): (RawConfig, _) = raw::read(src)?;
        // One entry alone stands where the key is.
        let listed = raw.listen.as_ref().map(|list| {
            let entries = list
                .get_ref()
                .0
                .iter()
                .map(|entry| match entry.span().is_empty() {
                    true => Spanned::new(list.span(), entry.get_ref().clone()),
                    false => entry.clone(),
                });
            Spanned::new(list.span(), entries.collect::<Vec<_>>())
        });
        let mut listen = listen::listen(src, listed.as_ref(), keys)?.unwrap_or_else(default_listen);
        let drop_ins = include::read(src, raw.include.as_ref())?;
        let (services, quic_servers) = services::services(src, &raw, tables, &listen, &drop_ins)?;
        let registry = Registry::new(services);
        let shortest_service_idle = registry
            .services()
            .filter_map(|service| service.udp_flows.idle_timeout)
            .min();
        for tls in listen
            .iter_mut()
            .filter_map(|spec| spec.options.tls.as_mut())
        {
            tls::offer_alpn(tls, &registry);
        }
        let mut warnings = Vec::new();
        if registry.is_empty() {
            warnings.push(format!("{origin}: no services (builtin_services = false and no [service.*] table): every client will be refused"));
        }
        listen::check_targets(src, listed.as_ref(), &listen, &registry)?;
        warnings.extend(backend_tls::warnings(&registry));
        if let Some(tls) = listen.iter().find(|spec| spec.options.tls.is_some()) {
            if let Some(service) = registry
                .services()
                .find(|s| matches!(s.kind, crate::model::ServiceKind::Handoff(_)))
            {
                return Err(src.whole(format!(
                    "handoff service {} cannot run beside the TLS listener {}: handing a TLS session to another process needs kernel TLS, which tcpmuxd does not use; serve handoff services from a tcpmuxd without TLS listeners",
                    service.name, tls.addr
                )));
            }
        }
        if registry.has_handoff() && raw.handoff_socket.is_none() {
            return Err(src.whole(
                "handoff services need `handoff_socket = \"/path\"`, where their backends register",
            ));
        }
        Ok(Config {
            listen,
            negotiation_timeout: positive_duration(
                src,
                "negotiation_timeout",
                raw.negotiation_timeout.as_ref(),
            )?
            .unwrap_or(DEFAULT_NEGOTIATION_TIMEOUT),
            close_drain_timeout: raw
                .close_drain_timeout
                .as_ref()
                .map_or(DEFAULT_CLOSE_DRAIN_TIMEOUT, |t| t.get_ref().0),
            registry,
            handoff_socket: raw.handoff_socket.clone().map(Into::into),
            upgrade_socket: raw.upgrade_socket.clone().map(Into::into),
            admin: users::admin(src, &raw)?,
            shutdown_grace: raw
                .shutdown_grace
                .as_ref()
                .map_or(DEFAULT_SHUTDOWN_GRACE, |g| g.get_ref().0),
            shutdown_delay: raw
                .shutdown_delay
                .as_ref()
                .map_or(Duration::ZERO, |d| d.get_ref().0),
            limits: limits::limits(src, &raw)?,
            control_limits: limits::control_limits(src, &raw)?,
            run_as: users::resolve_user(src, raw.user.as_ref(), raw.group.as_ref())?,
            metrics_listen: metrics::metrics_listen(src, &raw)?,
            metrics_hosts: metrics::metrics_hosts(src, &raw)?,
            dns: dns::dns(src, &raw)?,
            udp: udp::settings(src, &raw, (quic_servers, shortest_service_idle))?,
            cluster: cluster::cluster(src, raw.cluster.as_ref())?.map(std::sync::Arc::new),
            warnings,
        })
    }
}

/// Every IPv4 address, on RFC 1078's port.
fn default_listen() -> Vec<ListenSpec> {
    let any = SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT));
    vec![ListenSpec::from(ListenAddr::Tcp(any))]
}

#[cfg(test)]
mod tests;
