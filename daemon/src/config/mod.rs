//! The TOML configuration: what the daemon listens on, its timeouts and its
//! services. Parsing runs in small named steps, one module per part of the file;
//! every error names the file and, where the file has a place for it, the line
//! and column.

pub mod acme;
mod backend_tls;
mod certs;
mod checks;
mod detect;
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
mod users;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::model::{AdminSettings, ControlLimits, Dns, Limits, ListenAddr, ListenSpec};
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
    /// `--listen` replaced the file's `listen`: a reload then has no business
    /// comparing the file's addresses with the ones in use.
    pub listen_from_command_line: bool,
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
            limits: Limits {
                max_connections: Some(DEFAULT_MAX_CONNECTIONS),
                ..Limits::default()
            },
            control_limits: ControlLimits::default(),
            run_as: None,
            metrics_listen: None,
            metrics_hosts: metrics::DEFAULT_HOSTS.map(str::to_owned).to_vec(),
            listen_from_command_line: false,
            dns: Dns::default(),
            warnings: Vec::new(),
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Serves `listen` instead of the file's (`--listen`), and remembers that it
    /// did, so the two can never disagree.
    pub fn override_listen(&mut self, listen: Vec<ListenSpec>) {
        self.listen = listen;
        self.listen_from_command_line = true;
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

    /// Parses and validates `text`; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let src = Source { text, origin };
        let raw: RawConfig = toml::from_str(text).map_err(|e| src.toml(&e))?;
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
        let mut listen = listen::listen(src, listed.as_ref())?.unwrap_or_else(default_listen);
        let drop_ins = include::read(src, raw.include.as_ref())?;
        let registry = Registry::new(services::services(src, &raw, &listen, &drop_ins)?);
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
            listen_from_command_line: false,
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
            limits: limits::limits(src, &raw)?,
            control_limits: limits::control_limits(src, &raw)?,
            run_as: users::resolve_user(src, raw.user.as_ref(), raw.group.as_ref())?,
            metrics_listen: metrics::metrics_listen(src, &raw)?,
            metrics_hosts: metrics::metrics_hosts(src, &raw)?,
            dns: dns(src, &raw)?,
            warnings,
        })
    }
}

/// Every IPv4 address, on RFC 1078's port.
fn default_listen() -> Vec<ListenSpec> {
    let any = SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT));
    vec![ListenSpec::from(ListenAddr::Tcp(any))]
}

/// `dns_min_ttl`, `dns_max_ttl` and `resolvers` (`ip` or `ip:port`).
fn dns(src: Source<'_>, raw: &RawConfig) -> Result<Dns, ConfigError> {
    let defaults = Dns::default();
    let min_ttl = positive_duration(src, "dns_min_ttl", raw.dns_min_ttl.as_ref())?
        .unwrap_or(defaults.min_ttl);
    let max_ttl = positive_duration(src, "dns_max_ttl", raw.dns_max_ttl.as_ref())?
        .unwrap_or(defaults.max_ttl);
    if min_ttl > max_ttl {
        let span = raw.dns_max_ttl.as_ref().or(raw.dns_min_ttl.as_ref());
        let message = format!("dns_min_ttl ({min_ttl:?}) is longer than dns_max_ttl ({max_ttl:?})");
        return Err(match span {
            Some(span) => src.at(span.span(), message),
            None => src.whole(message),
        });
    }
    let mut resolvers = Vec::new();
    if let Some(list) = &raw.resolvers {
        for text in list.get_ref() {
            let addr = text
                .parse::<SocketAddr>()
                .or_else(|_| text.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
                .map_err(|_| {
                    src.at(
                        list.span(),
                        format!("resolvers: {text:?} is not an IP address or IP:port"),
                    )
                })?;
            resolvers.push(addr);
        }
        if resolvers.is_empty() {
            return Err(src.at(list.span(), "`resolvers` lists no name server"));
        }
    }
    Ok(Dns {
        min_ttl,
        max_ttl,
        resolvers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::{Builtin, ServiceKind};
    use tcpmux_proto::ServiceName;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, "test.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn empty_file_is_the_default() {
        let config = parse("").unwrap();
        assert_eq!(config.listen, Config::default().listen);
        assert_eq!(config.negotiation_timeout, DEFAULT_NEGOTIATION_TIMEOUT);
        assert_eq!(config.registry.len(), Builtin::ALL.len());
    }

    #[test]
    fn full_file() {
        let config = parse(
            r#"
listen = ["127.0.0.1:41397", "[::1]:41397", "unix:/tmp/tcpmux.sock"]
negotiation_timeout = "1500ms"
close_drain_timeout = 0.25
builtin_services = false

[service.Clock]
builtin = "isotime"
message = "the time follows"

[service.echo]
"#,
        )
        .unwrap();
        assert_eq!(config.listen.len(), 3);
        assert_eq!(config.negotiation_timeout, Duration::from_millis(1500));
        assert_eq!(config.close_drain_timeout, Duration::from_millis(250));
        assert_eq!(
            config.registry.names().collect::<Vec<_>>(),
            ["clock", "echo"]
        );
        let clock = config
            .registry
            .lookup(&ServiceName::parse("CLOCK").unwrap())
            .unwrap();
        assert_eq!(clock.kind, ServiceKind::Builtin(Builtin::Isotime));
        assert_eq!(clock.message, "the time follows");
    }

    #[test]
    fn disabling_a_builtin_removes_it() {
        let config = parse("[service.chargen]\nenabled = false\n").unwrap();
        assert!(!config.registry.names().any(|n| n == "chargen"));
        assert!(config.registry.names().any(|n| n == "echo"));
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            (
                "listen = [\"nowhere\"]\n",
                "test.toml:1:",
                "invalid listen address",
            ),
            (
                "\n\n[service.x]\nbuiltin = \"ech\"\n",
                "test.toml:4:",
                "unknown builtin \"ech\"",
            ),
            (
                "[service.help]\nbuiltin = \"echo\"\n",
                "test.toml:1:",
                "reserved",
            ),
            (
                "[service.\"a b\"]\nbuiltin = \"echo\"\n",
                "test.toml:1:",
                "0x20",
            ),
            ("[service.mine]\n", "test.toml:1:", "says nothing to do"),
            (
                "negotiation_timeout = \"10 parsecs\"\n",
                "test.toml:1:",
                "unit",
            ),
            (
                "negotiation_timeout = 0\n",
                "test.toml:1:",
                "greater than zero",
            ),
            ("\nlisten = 5\n", "test.toml:2:", "found the number 5"),
            (
                "colour = \"blue\"\n",
                "test.toml:1:",
                "unknown key `colour`",
            ),
            (
                "[service.echo]\nbuiltn = \"echo\"\n",
                "test.toml:2:",
                "did you mean `builtin`?",
            ),
            (
                "[service.Echo]\n[service.echo]\n",
                "test.toml:2:",
                "defined twice",
            ),
            ("listen = [\n", "test.toml:", ""),
        ];
        for (text, location, words) in cases {
            let error = parse(text).expect_err(text);
            assert!(error.starts_with(location), "{text:?} gave {error}");
            assert!(error.contains(words), "{text:?} gave {error}");
        }
    }

    #[test]
    fn an_error_without_a_place_says_so() {
        let error = parse("[service.app]\nhandoff = { uid = [1000] }\n").unwrap_err();
        assert!(
            error.starts_with("test.toml: handoff services need `handoff_socket"),
            "{error}"
        );
        let error = parse("listen = []\n").unwrap_err();
        assert!(
            error.starts_with("test.toml:1:10: `listen` is empty"),
            "{error}"
        );
    }

    #[test]
    fn a_name_given_twice_is_reported_at_its_second_place() {
        let error = parse("[service.a]\nbuiltin = \"echo\"\n\n[service.A]\nbuiltin = \"echo\"\n")
            .unwrap_err();
        assert!(error.starts_with("test.toml:4:"), "{error}");
        assert!(error.contains("first on line 1"), "{error}");
    }

    #[test]
    fn listen_addresses_that_cannot_all_be_bound_are_refused() {
        for (text, words) in [
            (
                "listen = [\"127.0.0.1:5000\", \"127.0.0.1:5000\"]\n",
                "clashes with 127.0.0.1:5000",
            ),
            (
                "listen = [\"0.0.0.0:5000\",\n  \"127.0.0.1:5000\"]\n",
                "on line 1",
            ),
            (
                "listen = [\"unix:/tmp/a.sock\", \"unix:/tmp/a.sock\"]\n",
                "clashes",
            ),
            (
                "listen = [\"unix:/nonexistent/dir/x.sock\"]\n",
                "directory /nonexistent/dir does not exist",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(words), "{text:?} gave {error}");
        }
        // Different families, or ports the kernel picks, do not clash.
        parse("listen = [\"0.0.0.0:5000\", \"[::]:5000\", \"127.0.0.1:0\", \"127.0.0.1:0\"]\n")
            .unwrap();
    }

    #[test]
    fn a_proxy_to_the_daemons_own_address_is_refused() {
        for (listen, backend) in [
            ("127.0.0.1:5000", "127.0.0.1:5000"),
            ("0.0.0.0:5000", "127.0.0.1:5000"),
            ("0.0.0.0:5000", "localhost:5000"),
            ("[::]:5000", "[::1]:5000"),
            ("unix:/tmp/mux.sock", "unix:/tmp/mux.sock"),
        ] {
            let text = format!("listen = [\"{listen}\"]\n[service.loop]\nproxy = \"{backend}\"\n");
            let error = parse(&text).unwrap_err();
            assert!(
                error.contains("this daemon's own listen address"),
                "{text}: {error}"
            );
            assert!(error.starts_with("test.toml:2:"), "{error}");
        }
        // Another port, or an address that is not ours, is fine.
        parse("listen = [\"127.0.0.1:5000\"]\n[service.ok]\nproxy = [\"127.0.0.1:5001\", \"192.0.2.1:5000\"]\n")
            .unwrap();
    }

    #[test]
    fn detecting_listeners_and_host_names() {
        let config = parse(
            "listen = [{ address = \"127.0.0.1:443\", detect = true, ssh = \"echo\", sni_default = \"daytime\" }]\n\
             [service.db]\nproxy = \"127.0.0.1:5432\"\nsni = [\"DB.example.com\", \"*.example.org\"]\n\
             [service.web]\nproxy = \"127.0.0.1:8080\"\nhttp_host = [\"app.example.com\"]\n",
        )
        .unwrap();
        let detect = config.listen[0].options.detect.as_ref().unwrap();
        assert_eq!(detect.ssh.as_ref().map(|n| n.as_str()), Some("echo"));
        assert_eq!(detect.timeout, crate::model::DEFAULT_DETECT_TIMEOUT);
        let registry = &config.registry;
        assert_eq!(
            registry.by_sni("db.example.com").map(|s| s.name.as_str()),
            Some("db")
        );
        assert_eq!(
            registry.by_sni("a.example.org").map(|s| s.name.as_str()),
            Some("db")
        );
        assert!(registry.by_sni("a.b.example.org").is_none());
        assert!(registry.by_sni("example.org").is_none());
        assert_eq!(
            registry
                .by_http_host("app.example.com")
                .map(|s| s.name.as_str()),
            Some("web")
        );
        for (text, words) in [
            ("listen = [{ address = \"127.0.0.1:1\", detct = true }]\n", "unknown key `detct`; did you mean `detect`?"),
            ("listen = [{ address = \"127.0.0.1:1\", ssh = \"echo\" }]\n", "`ssh` needs `detect = true`"),
            ("listen = [{ address = \"127.0.0.1:1\", detect = true, http = \"nope\" }]\n", "http = \"nope\" is not a service"),
            ("[service.a]\nbuiltin = \"echo\"\nsni = [\"x.example\"]\n[service.b]\nbuiltin = \"echo\"\nsni = [\"X.example\"]\n", "sni x.example is already claimed by service a"),
            ("[service.a]\nbuiltin = \"echo\"\nhttp_host = [\"*.example\"]\n", "not wildcards"),
            ("[service.a]\nbuiltin = \"echo\"\nsni = [\"a b\"]\n", "invalid host name"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(words), "{text:?} gave {error}");
        }
    }
}
