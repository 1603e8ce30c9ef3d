//! The TOML configuration: what the daemon listens on, its timeouts and its
//! services. Every error names the file, line and column it comes from.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use tcpmux_proto::ServiceName;
use toml::Spanned;

use crate::model::{
    Access, Backend, Builtin, Cidr, Exec, ExecReply, HandoffRule, Limits, ListenAddr,
    ListenOptions, ListenSpec, OnShutdown, Proxy, ProxyVersion, RelayMode, Service, ServiceKind,
    DEFAULT_CONNECT_TIMEOUT,
};
use crate::registry::{default_services, Registry};

/// RFC 1078's port. Binding it needs root or CAP_NET_BIND_SERVICE.
pub const DEFAULT_PORT: u16 = 1;
pub const DEFAULT_NEGOTIATION_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_CLOSE_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Far above what one event loop needs for ordinary loads, low enough that a flood
/// meets a `-` instead of the descriptor limit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;

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
    pub handoff_socket: Option<std::path::PathBuf>,
    /// On SIGTERM/SIGINT, how long running sessions may take to finish.
    pub shutdown_grace: Duration,
    pub limits: Limits,
    /// After binding, switch to this uid and gid (top-level `user`/`group`).
    pub run_as: Option<(u32, u32)>,
    /// Where to serve Prometheus metrics over HTTP, if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// A configuration that cannot be used, located as precisely as we can.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{origin}:{line}:{column}: {message}")]
    Invalid {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
}

impl Default for Config {
    /// No file: every built-in under its own name, on the RFC's port.
    fn default() -> Self {
        Self {
            listen: vec![ListenSpec::from(ListenAddr::Tcp(
                std::net::SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
            ))],
            negotiation_timeout: DEFAULT_NEGOTIATION_TIMEOUT,
            close_drain_timeout: DEFAULT_CLOSE_DRAIN_TIMEOUT,
            registry: Registry::builtins(),
            handoff_socket: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            limits: Limits {
                max_connections: Some(DEFAULT_MAX_CONNECTIONS),
                ..Limits::default()
            },
            run_as: None,
            metrics_listen: None,
            listen_from_command_line: false,
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

    /// Parses and validates `text`; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let at = |span: Option<Range<usize>>, message: String| {
            let (line, column) = line_column(text, span.map_or(0, |s| s.start));
            ConfigError::Invalid {
                origin: origin.to_owned(),
                line,
                column,
                message,
            }
        };
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| at(e.span(), e.message().trim_end().to_owned()))?;

        let listen = match raw.listen {
            None => Config::default().listen,
            Some(list) if list.is_empty() => {
                return Err(at(
                    None,
                    "`listen` is empty: give at least one address".into(),
                ))
            }
            Some(list) => list
                .iter()
                .map(|item| {
                    let (address, accept_proxy_from) = match item.get_ref() {
                        RawListen::Address(address) => (address, &[][..]),
                        RawListen::Table {
                            address,
                            accept_proxy_from,
                        } => (address, &accept_proxy_from[..]),
                    };
                    let addr = address
                        .parse::<ListenAddr>()
                        .map_err(|e| at(Some(item.span()), e.to_string()))?;
                    let accept_proxy_from = accept_proxy_from
                        .iter()
                        .map(|range| {
                            range
                                .parse::<Cidr>()
                                .map_err(|e| at(Some(item.span()), e.to_string()))
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    if !accept_proxy_from.is_empty() && matches!(addr, ListenAddr::Unix(_)) {
                        return Err(at(
                            Some(item.span()),
                            "accept_proxy_from needs a TCP listener (upstreams are matched by IP)"
                                .into(),
                        ));
                    }
                    Ok(ListenSpec {
                        addr,
                        options: ListenOptions { accept_proxy_from },
                    })
                })
                .collect::<Result<_, _>>()?,
        };

        let negotiation_timeout = match raw.negotiation_timeout {
            None => DEFAULT_NEGOTIATION_TIMEOUT,
            Some(t) if t.get_ref().0.is_zero() => {
                return Err(at(
                    Some(t.span()),
                    "negotiation_timeout must be greater than zero".into(),
                ))
            }
            Some(t) => t.into_inner().0,
        };
        let close_drain_timeout = raw
            .close_drain_timeout
            .map_or(DEFAULT_CLOSE_DRAIN_TIMEOUT, |t| t.into_inner().0);

        let mut services = if raw.builtin_services.unwrap_or(true) {
            default_services()
        } else {
            BTreeMap::new()
        };
        if let Some(import) = &raw.import_etc_services {
            import_etc_services(import, &mut services, &at)?;
        }
        let mut seen: BTreeMap<ServiceName, Range<usize>> = BTreeMap::new();
        for (key, table) in raw.service {
            let name = ServiceName::parse(key.get_ref()).map_err(|e| {
                at(
                    Some(key.span()),
                    format!("service {:?}: {e}", key.get_ref()),
                )
            })?;
            if name.is_help() {
                return Err(at(
                    Some(key.span()),
                    "`help` is reserved by RFC 1078 and always lists the services".into(),
                ));
            }
            if let Some(first) = seen.get(&name) {
                let (line, _) = line_column(text, first.start);
                return Err(at(
                    Some(key.span()),
                    format!(
                        "service {name} is defined twice (names ignore case; first on line {line})"
                    ),
                ));
            }
            seen.insert(name.clone(), key.span());

            if table.enabled == Some(false) {
                services.remove(&name);
                continue;
            }
            let kind = service_kind(&name, key.span(), &table, &at)?;
            let ranges = |list: &Option<Spanned<Vec<String>>>| -> Result<Vec<Cidr>, ConfigError> {
                let Some(list) = list else {
                    return Ok(Vec::new());
                };
                list.get_ref()
                    .iter()
                    .map(|r| {
                        r.parse::<Cidr>()
                            .map_err(|e| at(Some(list.span()), e.to_string()))
                    })
                    .collect()
            };
            let mut access = Access {
                allow: ranges(&table.allow)?,
                deny: ranges(&table.deny)?,
                uids: table.allow_uid.clone().unwrap_or_default(),
                gids: table.allow_gid.clone().unwrap_or_default(),
            };
            if kind == ServiceKind::Builtin(Builtin::Stats) && table.allow.is_none() {
                access.allow = crate::registry::loopback();
            }
            let max_connections = match &table.max_connections {
                Some(max) if *max.get_ref() == 0 => {
                    return Err(at(
                        Some(max.span()),
                        "max_connections must be at least 1".into(),
                    ))
                }
                other => other.as_ref().map(|m| *m.get_ref()),
            };
            services.insert(
                name.clone(),
                Service {
                    message: table.message.clone().unwrap_or_default(),
                    access,
                    max_connections,
                    ..Service::new(name, kind)
                },
            );
        }

        let registry = Registry::new(services);
        if registry.has_handoff() && raw.handoff_socket.is_none() {
            return Err(at(
                None,
                "handoff services need `handoff_socket = \"/path\"`, where their backends register"
                    .into(),
            ));
        }
        let positive = |value: &Option<Spanned<usize>>, key: &str| match value {
            Some(v) if *v.get_ref() == 0 => {
                Err(at(Some(v.span()), format!("{key} must be at least 1")))
            }
            other => Ok(other.as_ref().map(|v| *v.get_ref())),
        };
        let connection_rate_per_ip = match &raw.connection_rate_per_ip {
            Some(rate) if !(*rate.get_ref() >= 1.0 && rate.get_ref().is_finite()) => {
                return Err(at(
                    Some(rate.span()),
                    "connection_rate_per_ip must be at least 1 (new connections per second)".into(),
                ))
            }
            other => other.as_ref().map(|r| *r.get_ref()),
        };
        let limits = Limits {
            max_connections: Some(
                positive(&raw.max_connections, "max_connections")?
                    .unwrap_or(DEFAULT_MAX_CONNECTIONS),
            ),
            max_connections_per_ip: positive(
                &raw.max_connections_per_ip,
                "max_connections_per_ip",
            )?,
            connection_rate_per_ip,
        };
        Ok(Config {
            listen,
            listen_from_command_line: false,
            negotiation_timeout,
            close_drain_timeout,
            registry,
            handoff_socket: raw.handoff_socket.map(Into::into),
            shutdown_grace: raw
                .shutdown_grace
                .map_or(DEFAULT_SHUTDOWN_GRACE, |g| g.into_inner().0),
            limits,
            run_as: resolve_user(raw.user.as_ref(), raw.group.as_ref(), &at)?,
            metrics_listen: match &raw.metrics_listen {
                None => None,
                Some(addr) => Some(addr.get_ref().parse().map_err(|_| {
                    at(
                        Some(addr.span()),
                        format!("metrics_listen {:?}: expected IP:PORT", addr.get_ref()),
                    )
                })?),
            },
        })
    }
}

fn builtin_list() -> String {
    Builtin::ALL.map(Builtin::name).join(", ")
}

/// 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, column)
}

/// Decides what a `[service.NAME]` table runs: exactly one of `builtin`, `proxy`
/// and `exec`, and no key that belongs to another kind.
fn service_kind(
    name: &ServiceName,
    key_span: Range<usize>,
    table: &RawService,
    at: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
) -> Result<ServiceKind, ConfigError> {
    let kinds: Vec<(&str, Range<usize>)> = [
        ("builtin", table.builtin.as_ref().map(Spanned::span)),
        ("proxy", table.proxy.as_ref().map(Spanned::span)),
        ("exec", table.exec.as_ref().map(Spanned::span)),
        ("handoff", table.handoff.as_ref().map(Spanned::span)),
    ]
    .into_iter()
    .filter_map(|(kind, span)| Some((kind, span?)))
    .collect();
    if let [(first, _), (second, span), ..] = &kinds[..] {
        return Err(at(
            Some(span.clone()),
            format!("service {name} has both `{first}` and `{second}`; choose one"),
        ));
    }
    let kind = kinds.first().map(|(kind, _)| *kind);
    for (key, span, owner) in table.kind_specific_keys() {
        if kind != Some(owner) {
            return Err(at(
                Some(span),
                format!("service {name}: `{key}` only applies to `{owner}` services"),
            ));
        }
    }
    if let (Some("handoff"), Some(rule)) = (kind, &table.handoff) {
        let rule = rule.get_ref();
        if rule.uid.is_empty() && rule.gid.is_empty() {
            return Err(at(
                Some(key_span),
                format!(
                    "handoff service {name} allows no one: give `uid = [...]` and/or `gid = [...]`"
                ),
            ));
        }
        return Ok(ServiceKind::Handoff(std::sync::Arc::new(HandoffRule {
            uids: rule.uid.clone(),
            gids: rule.gid.clone(),
        })));
    }
    match (kind, &table.builtin, &table.proxy, &table.exec) {
        (Some("builtin"), Some(builtin), _, _) => Builtin::from_name(builtin.get_ref())
            .map(ServiceKind::Builtin)
            .ok_or_else(|| {
                at(
                    Some(builtin.span()),
                    format!(
                        "unknown builtin {:?}; the builtins are {}",
                        builtin.get_ref(),
                        builtin_list()
                    ),
                )
            }),
        (Some("proxy"), _, Some(proxy), _) => Ok(ServiceKind::Proxy(std::sync::Arc::new(
            proxy_settings(table, proxy, at)?,
        ))),
        (Some("exec"), _, _, Some(argv)) => Ok(ServiceKind::Exec(std::sync::Arc::new(
            exec_settings(table, argv, at)?,
        ))),
        // `[service.echo]` with only a message refines the built-in of that name.
        _ => Builtin::from_name(name.as_str())
            .map(ServiceKind::Builtin)
            .ok_or_else(|| {
                at(
                    Some(key_span),
                    format!(
                        "service {name} says nothing to do: set `proxy = \"host:port\"`, \
                         `exec = [\"/path/program\"]`, `handoff = {{ uid = [...] }}` or `builtin = \"...\"` ({})",
                        builtin_list()
                    ),
                )
            }),
    }
}

/// An exec service from its table.
fn exec_settings(
    table: &RawService,
    argv: &Spanned<Vec<String>>,
    at: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
) -> Result<Exec, ConfigError> {
    let program = argv.get_ref().first().ok_or_else(|| {
        at(
            Some(argv.span()),
            "`exec` is empty: give the program's path".into(),
        )
    })?;
    let path = std::path::Path::new(program);
    if !path.is_absolute() {
        return Err(at(
            Some(argv.span()),
            format!("exec program {program:?} must be an absolute path (no shell or PATH search is used)"),
        ));
    }
    if !path.is_file() {
        return Err(at(
            Some(argv.span()),
            format!("exec program {program} does not exist"),
        ));
    }
    let reply = choice(
        "reply",
        table.reply.as_ref(),
        &[
            ("server", ExecReply::Server),
            ("program", ExecReply::Program),
        ],
        at,
    )?
    .unwrap_or_default();
    let user = resolve_user(table.user.as_ref(), table.group.as_ref(), at)?;
    let on_shutdown = choice(
        "on_shutdown",
        table.on_shutdown.as_ref(),
        &[("kill", OnShutdown::Kill), ("leave", OnShutdown::Leave)],
        at,
    )?
    .unwrap_or_default();
    let max_instances = match &table.max_instances {
        Some(max) if *max.get_ref() == 0 => {
            return Err(at(
                Some(max.span()),
                "max_instances must be at least 1".into(),
            ))
        }
        other => other.as_ref().map(|m| *m.get_ref()),
    };
    if let Some(cwd) = &table.cwd {
        if !std::path::Path::new(cwd).is_dir() {
            return Err(at(
                Some(argv.span()),
                format!("exec cwd {cwd} is not a directory"),
            ));
        }
    }
    Ok(Exec {
        argv: argv.get_ref().clone(),
        reply,
        user,
        cwd: table.cwd.clone().map(Into::into),
        env: table.env.clone().unwrap_or_default(),
        max_instances,
        on_shutdown,
    })
}

/// A key whose value is one of a few words: `None` when absent, an error naming
/// the allowed words when it is none of them.
fn choice<T: Copy>(
    key: &str,
    value: Option<&Spanned<String>>,
    words: &[(&str, T)],
    at: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
) -> Result<Option<T>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    match words.iter().find(|(word, _)| *word == value.get_ref()) {
        Some((_, chosen)) => Ok(Some(*chosen)),
        None => {
            let allowed: Vec<String> = words.iter().map(|(w, _)| format!("\"{w}\"")).collect();
            Err(at(
                Some(value.span()),
                format!(
                    "{key} {:?}: expected {}",
                    value.get_ref(),
                    allowed.join(" or ")
                ),
            ))
        }
    }
}

/// A `user` (name or uid; its primary group by default) and optional `group`
/// (name or gid) to (uid, gid).
fn resolve_user(
    user: Option<&Spanned<String>>,
    group: Option<&Spanned<String>>,
    at: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
) -> Result<Option<(u32, u32)>, ConfigError> {
    let user = match user {
        None => None,
        Some(user) => Some(
            user.get_ref()
                .parse::<u32>()
                .ok()
                .map(|uid| (uid, lookup_primary_gid(uid).unwrap_or(uid)))
                .or_else(|| lookup_id("/etc/passwd", user.get_ref()))
                .ok_or_else(|| {
                    at(
                        Some(user.span()),
                        format!("unknown user {:?}", user.get_ref()),
                    )
                })?,
        ),
    };
    match (group, user) {
        (None, user) => Ok(user),
        (Some(group), user) => {
            let gid = group
                .get_ref()
                .parse::<u32>()
                .ok()
                .or_else(|| lookup_id("/etc/group", group.get_ref()).map(|(gid, _)| gid))
                .ok_or_else(|| {
                    at(
                        Some(group.span()),
                        format!("unknown group {:?}", group.get_ref()),
                    )
                })?;
            // A group alone keeps the daemon's uid.
            let uid = user.map_or_else(|| rustix::process::getuid().as_raw(), |(uid, _)| uid);
            Ok(Some((uid, gid)))
        }
    }
}

/// Reads a user or group database (`/etc/passwd`, `/etc/group`) for `name`: the
/// numeric fields of its line. Names served by NSS modules (LDAP...) are not seen;
/// give numeric ids for those.
pub fn lookup_id(database: &str, name: &str) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(database).ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        let id = fields.next()?.parse().ok()?;
        let second = fields.next().and_then(|f| f.parse().ok()).unwrap_or(id);
        Some((id, second))
    })
}

fn lookup_primary_gid(uid: u32) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.get(2)?.parse::<u32>().ok()? == uid).then(|| fields.get(3)?.parse().ok())?
    })
}

/// A proxy service from its table.
fn proxy_settings(
    table: &RawService,
    proxy: &Spanned<toml::Value>,
    at: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
) -> Result<Proxy, ConfigError> {
    let texts: Vec<&str> = match proxy.get_ref() {
        toml::Value::String(one) => vec![one.as_str()],
        toml::Value::Array(many) => many
            .iter()
            .map(|v| v.as_str())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                at(
                    Some(proxy.span()),
                    "`proxy` must be a string or an array of strings".into(),
                )
            })?,
        _ => {
            return Err(at(
                Some(proxy.span()),
                "`proxy` must be a string or an array of strings".into(),
            ))
        }
    };
    if texts.is_empty() {
        return Err(at(Some(proxy.span()), "`proxy` lists no backend".into()));
    }
    let backends = texts
        .iter()
        .map(|t| {
            t.parse::<Backend>()
                .map_err(|e| at(Some(proxy.span()), e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let connect_timeout = match &table.connect_timeout {
        None => DEFAULT_CONNECT_TIMEOUT,
        Some(t) if t.get_ref().0.is_zero() => {
            return Err(at(
                Some(t.span()),
                "connect_timeout must be greater than zero".into(),
            ))
        }
        Some(t) => t.get_ref().0,
    };
    let idle_timeout = table
        .idle_timeout
        .as_ref()
        .map(|t| t.get_ref().0)
        .filter(|t| !t.is_zero());
    let send_proxy = choice(
        "send_proxy",
        table.send_proxy.as_ref(),
        &[("v1", ProxyVersion::V1), ("v2", ProxyVersion::V2)],
        at,
    )?;
    let relay = choice(
        "relay",
        table.relay.as_ref(),
        &[("splice", RelayMode::Splice), ("copy", RelayMode::Copy)],
        at,
    )?
    .unwrap_or_default();
    Ok(Proxy {
        backends,
        connect_timeout,
        idle_timeout,
        send_proxy,
        relay,
    })
}

/// RFC 1078 suggests offering the host's /etc/services by name; we do it for the
/// names an administrator allows, as proxies to the same port on `host`.
fn import_etc_services(
    import: &RawImport,
    services: &mut BTreeMap<ServiceName, Service>,
    at: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let file = import.file.as_deref().unwrap_or("/etc/services");
    let text = std::fs::read_to_string(file).map_err(|e| {
        at(
            None,
            format!("import_etc_services: cannot read {file}: {e}"),
        )
    })?;
    let ports = etc_services_tcp_ports(&text);
    let host = import.host.as_deref().unwrap_or("127.0.0.1");
    for wanted in &import.allow {
        let name = ServiceName::parse(wanted.get_ref()).map_err(|e| {
            at(
                Some(wanted.span()),
                format!("import_etc_services: {:?}: {e}", wanted.get_ref()),
            )
        })?;
        let Some(&port) = ports.get(name.as_str()) else {
            return Err(at(
                Some(wanted.span()),
                format!("import_etc_services: {name} is not a TCP service in {file}"),
            ));
        };
        let backend = format!("{host}:{port}")
            .parse::<Backend>()
            .map_err(|e| at(None, format!("import_etc_services: host {host:?}: {e}")))?;
        let proxy = Proxy {
            backends: vec![backend],
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: None,
            send_proxy: None,
            relay: RelayMode::default(),
        };
        services.insert(
            name.clone(),
            Service::new(name, ServiceKind::Proxy(std::sync::Arc::new(proxy))),
        );
    }
    Ok(())
}

/// `name port/proto aliases... # comment` lines: every TCP name and alias (folded
/// to lower case) to its port. Malformed lines are skipped, as libc does.
fn etc_services_tcp_ports(text: &str) -> BTreeMap<String, u16> {
    let mut ports = BTreeMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut fields = line.split_whitespace();
        let (Some(name), Some(port_proto)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((port, "tcp")) = port_proto.split_once('/') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        for alias in std::iter::once(name).chain(fields) {
            ports.entry(alias.to_ascii_lowercase()).or_insert(port);
        }
    }
    ports
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawListen {
    Address(String),
    Table {
        address: String,
        #[serde(default)]
        accept_proxy_from: Vec<String>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHandoff {
    #[serde(default)]
    uid: Vec<u32>,
    #[serde(default)]
    gid: Vec<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawImport {
    allow: Vec<Spanned<String>>,
    host: Option<String>,
    file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<Vec<Spanned<RawListen>>>,
    import_etc_services: Option<RawImport>,
    handoff_socket: Option<String>,
    shutdown_grace: Option<Spanned<ConfigDuration>>,
    user: Option<Spanned<String>>,
    group: Option<Spanned<String>>,
    metrics_listen: Option<Spanned<String>>,
    max_connections: Option<Spanned<usize>>,
    max_connections_per_ip: Option<Spanned<usize>>,
    connection_rate_per_ip: Option<Spanned<f64>>,
    negotiation_timeout: Option<Spanned<ConfigDuration>>,
    close_drain_timeout: Option<Spanned<ConfigDuration>>,
    builtin_services: Option<bool>,
    #[serde(default)]
    service: BTreeMap<Spanned<String>, RawService>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    builtin: Option<Spanned<String>>,
    proxy: Option<Spanned<toml::Value>>,
    message: Option<String>,
    enabled: Option<bool>,
    connect_timeout: Option<Spanned<ConfigDuration>>,
    idle_timeout: Option<Spanned<ConfigDuration>>,
    send_proxy: Option<Spanned<String>>,
    relay: Option<Spanned<String>>,
    exec: Option<Spanned<Vec<String>>>,
    handoff: Option<Spanned<RawHandoff>>,
    reply: Option<Spanned<String>>,
    user: Option<Spanned<String>>,
    group: Option<Spanned<String>>,
    cwd: Option<String>,
    env: Option<BTreeMap<String, String>>,
    max_instances: Option<Spanned<usize>>,
    on_shutdown: Option<Spanned<String>>,
    allow: Option<Spanned<Vec<String>>>,
    deny: Option<Spanned<Vec<String>>>,
    allow_uid: Option<Vec<u32>>,
    allow_gid: Option<Vec<u32>>,
    max_connections: Option<Spanned<usize>>,
}

impl RawService {
    /// Keys present that belong to one kind only: (key, where, kind).
    fn kind_specific_keys(&self) -> Vec<(&'static str, Range<usize>, &'static str)> {
        let spans = [
            (
                "connect_timeout",
                self.connect_timeout.as_ref().map(Spanned::span),
                "proxy",
            ),
            (
                "idle_timeout",
                self.idle_timeout.as_ref().map(Spanned::span),
                "proxy",
            ),
            (
                "send_proxy",
                self.send_proxy.as_ref().map(Spanned::span),
                "proxy",
            ),
            ("relay", self.relay.as_ref().map(Spanned::span), "proxy"),
            ("reply", self.reply.as_ref().map(Spanned::span), "exec"),
            ("user", self.user.as_ref().map(Spanned::span), "exec"),
            ("group", self.group.as_ref().map(Spanned::span), "exec"),
            (
                "max_instances",
                self.max_instances.as_ref().map(Spanned::span),
                "exec",
            ),
            (
                "on_shutdown",
                self.on_shutdown.as_ref().map(Spanned::span),
                "exec",
            ),
        ];
        spans
            .into_iter()
            .filter_map(|(key, span, kind)| Some((key, span?, kind)))
            .collect()
    }
}

/// A duration written as seconds (`10`, `0.5`) or with a unit (`"250ms"`, `"10s"`,
/// `"5m"`, `"1h"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

impl std::str::FromStr for ConfigDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let value: f64 = number.parse().map_err(|_| {
            format!("invalid duration {text:?}: expected e.g. \"10s\" or \"250ms\"")
        })?;
        let scale = match unit.trim() {
            "ms" => 1e-3,
            "" | "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => {
                return Err(format!(
                    "invalid duration unit {other:?} (use ms, s, m or h)"
                ))
            }
        };
        seconds(value * scale).map(ConfigDuration)
    }
}

fn seconds(value: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("duration {value} s is negative or too large"))
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = ConfigDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration: seconds as a number, or a string such as \"250ms\" or \"10s\"",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                seconds(v as f64).map(ConfigDuration).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                seconds(v as f64).map(ConfigDuration).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                seconds(v).map(ConfigDuration).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_any(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ("\nlisten = 5\n", "test.toml:2:", "invalid type"),
            ("colour = \"blue\"\n", "test.toml:1:", "unknown field"),
            (
                "[service.echo]\nbuiltn = \"echo\"\n",
                "test.toml:2:",
                "unknown field",
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
    fn durations() {
        for (text, ms) in [
            ("250ms", 250),
            ("10s", 10_000),
            ("1.5", 1500),
            ("2m", 120_000),
        ] {
            assert_eq!(
                text.parse::<ConfigDuration>().unwrap().0,
                Duration::from_millis(ms)
            );
        }
        assert!("-1s".parse::<ConfigDuration>().is_err());
        assert!("s".parse::<ConfigDuration>().is_err());
    }
}
