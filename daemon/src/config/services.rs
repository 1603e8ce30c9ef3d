//! `[service.NAME]` tables (and `builtin_services`, `import_etc_services`): the
//! services by name, each with its kind, message, access rules and cap.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use tcpmux_proto::ServiceName;
use toml::Spanned;

use super::checks::{at_least_one, positive_duration};
use super::claims::Claims;
use super::error::{ConfigError, Source};
use super::raw::{self, RawConfig, RawDropIn, RawService, ServiceTables};
use super::{etc_services, exec, proxy};
use std::net::IpAddr;

use crate::model::{
    Access, Backend, Builtin, Cidr, HandoffRule, HostPattern, ListenAddr, ListenSpec, Queue,
    QuicServers, Service, ServiceKind, DEFAULT_QUEUE_MAX,
};
use crate::registry::{default_services, loopback, Services};

/// Where a name was first defined: the file and line, for "defined twice".
type Seen<'a> = std::collections::HashMap<ServiceName, (&'a str, usize)>;

/// What the tables of every file add up to: the services they define (in
/// file order), where each name was defined (those disabled with `enabled =
/// false` too), the names claimed, the QUIC servers' IDs.
#[derive(Default)]
struct Gathered<'a> {
    defined: Vec<(ServiceName, Box<Service>)>,
    seen: Seen<'a>,
    claims: Claims,
    quic_servers: QuicServers,
}

/// Every service the file and its drop-ins (`include`, each `(path, text)`,
/// in order) define, on top of the built-ins and imports the file keeps.
pub(crate) fn services(
    src: Source<'_>,
    raw: &RawConfig,
    tables: ServiceTables<'_>,
    listen: &[ListenSpec],
    drop_ins: &[(String, String)],
) -> Result<(Services, QuicServers), ConfigError> {
    let mut services = if raw.builtin_services.unwrap_or(true) {
        default_services()
    } else {
        BTreeMap::new()
    };
    if let Some(import) = &raw.import_etc_services {
        etc_services::import(src, import, &mut services)?;
    }
    let mut gathered = Gathered::default();
    add_tables(src, tables, listen, &mut gathered)?;
    for (path, text) in drop_ins {
        let src = Source { text, origin: path };
        let (RawDropIn { .. }, tables) = raw::read(src)?;
        add_tables(src, tables, listen, &mut gathered)?;
    }
    let Gathered {
        defined,
        seen,
        quic_servers,
        ..
    } = gathered;
    // A table replaces the built-in or imported service of its name, or
    // with `enabled = false` removes it. The rest sorted by name and built
    // in one go: at 100,000 services, inserting them one by one was a third
    // of the load.
    services.retain(|name, _| !seen.contains_key(name));
    let mut all: Vec<_> = services.into_iter().chain(defined).collect();
    all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok((all.into_iter().collect(), quic_servers))
}

/// The `[service.NAME]` tables of one file.
fn add_tables<'a>(
    src: Source<'a>,
    mut tables: ServiceTables<'_>,
    listen: &[ListenSpec],
    gathered: &mut Gathered<'a>,
) -> Result<(), ConfigError> {
    // In file order (as toml keeps them, but a `[service]` table written
    // after `[service.x]` adds its keys after x's), so a name given twice
    // is reported at its second place.
    tables.sort_by_key(|(key, _)| key.span().start);
    // Lines counted as the tables go by, not from the top for each.
    let (mut counted_to, mut line) = (0, 1);
    gathered.seen.reserve(tables.len());
    gathered.defined.reserve(tables.len());
    for (key, table) in tables {
        let key = Spanned::new(key.span(), key.get_ref().as_ref());
        let name = service_name(src, &key, &gathered.seen)?;
        let start = key.span().start.min(src.text.len());
        line += src.text.as_bytes()[counted_to..start]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        counted_to = start;
        gathered.seen.insert(name.clone(), (src.origin, line));
        let table = RawService::read(src, table)?;
        if table.enabled == Some(false) {
            continue;
        }
        super::udp::quic_server_ids(src, &name, &table, &mut gathered.quic_servers)?;
        let service = service(src, name.clone(), key.span(), &table)?;
        if let ServiceKind::Proxy(proxy) = &service.kind {
            if let Some(backend) = proxy
                .backends
                .iter()
                .map(|b| &b.backend)
                .find(|b| is_own_address(b, listen))
            {
                return Err(src.at(
                    key.span(),
                    format!(
                        "service {name}: backend {backend} is this daemon's own listen address; \
                         every client would loop back into it"
                    ),
                ));
            }
        }
        gathered.claims.claim(src, key.span(), &service)?;
        gathered.defined.push((name, Box::new(service)));
    }
    Ok(())
}

/// Whether connecting to `backend` reaches one of the `listen` addresses: the
/// same address, or a wildcard listener's port on a loopback or wildcard
/// address (or `localhost`). Other local addresses behind a wildcard are caught
/// at run time, when the looping connection arrives.
fn is_own_address(backend: &Backend, listen: &[ListenSpec]) -> bool {
    listen.iter().any(|spec| match (backend, &spec.addr) {
        (Backend::Unix(path), ListenAddr::Unix(own)) => path == own,
        (Backend::Tcp { host, port }, ListenAddr::Tcp(own)) if *port == own.port() => {
            let ip = match host.parse::<IpAddr>() {
                Ok(ip) => ip,
                Err(_) if host.eq_ignore_ascii_case("localhost") => {
                    return own.ip().is_loopback() || own.ip().is_unspecified()
                }
                Err(_) => return false,
            };
            ip == own.ip()
                || (own.ip().is_unspecified()
                    && ip.is_ipv4() == own.is_ipv4()
                    && (ip.is_loopback() || ip.is_unspecified()))
        }
        _ => false,
    })
}

/// The table's name: valid, not `help`, and not a second spelling of one seen.
fn service_name(
    src: Source<'_>,
    key: &Spanned<&str>,
    seen: &Seen,
) -> Result<ServiceName, ConfigError> {
    let name = ServiceName::parse(key.get_ref())
        .map_err(|e| src.at(key.span(), format!("service {:?}: {e}", key.get_ref())))?;
    if name.is_help() {
        return Err(src.at(
            key.span(),
            "`help` is reserved by RFC 1078 and always lists the services",
        ));
    }
    if let Some((origin, line)) = seen.get(&name) {
        let place = match *origin == src.origin {
            true => format!("line {line}"),
            false => format!("{origin}:{line}"),
        };
        return Err(src.at(
            key.span(),
            format!("service {name} is defined twice (names ignore case; first on {place})"),
        ));
    }
    Ok(name)
}

fn service(
    src: Source<'_>,
    name: ServiceName,
    key_span: Range<usize>,
    table: &RawService,
) -> Result<Service, ConfigError> {
    let kind = kind(src, &name, key_span, table)?;
    let access = access(src, table, &kind)?;
    let max_connections = at_least_one(src, "max_connections", table.max_connections.as_ref())?;
    let HostNames {
        sni,
        sni_terminate,
        http_host,
    } = host_names(src, table)?;
    let alpn = alpn(src, table)?;
    let udp = table
        .proxy_udp
        .as_ref()
        .map(|value| super::udp::proxy_udp(src, table, value))
        .transpose()?
        .map(Arc::new);
    let mut service = Service {
        message: table.message.clone().unwrap_or_default(),
        access,
        max_connections,
        sni,
        sni_terminate,
        http_host,
        alpn,
        udp,
        udp_flows: super::udp::service_flows(src, table)?,
        ..Service::new(name, kind)
    };
    // The cap the queue waits on is the service's own or its backends'.
    service.queue = queue(src, table, service.connection_cap())?;
    Ok(service)
}

/// `queue_timeout` and `queue_max`: a queue needs a cap to wait for.
fn queue(
    src: Source<'_>,
    table: &RawService,
    max_connections: Option<usize>,
) -> Result<Option<Queue>, ConfigError> {
    let timeout = positive_duration(src, "queue_timeout", table.queue_timeout.as_ref())?;
    let max = at_least_one(src, "queue_max", table.queue_max.as_ref())?;
    match (timeout, &table.queue_max, max_connections) {
        (None, Some(given), _) => Err(src.at(
            given.span(),
            "queue_max needs queue_timeout: how long a client may wait",
        )),
        (Some(_), _, None) => Err(src.at(
            table.queue_timeout.as_ref().map_or(0..0, |t| t.span()),
            "queue_timeout needs max_connections (on the service, or on every backend): the queue waits for a free connection",
        )),
        (Some(timeout), _, Some(_)) => Ok(Some(Queue {
            max: max.unwrap_or(DEFAULT_QUEUE_MAX),
            timeout,
        })),
        (None, None, _) => Ok(None),
    }
}

/// `alpn`: protocol names as a ClientHello carries them (1 to 255 bytes),
/// other than `tcpmux`, which asks a TLS listener for a TCPMUX line.
fn alpn(src: Source<'_>, table: &RawService) -> Result<Vec<String>, ConfigError> {
    let Some(list) = &table.alpn else {
        return Ok(Vec::new());
    };
    let fault = |why: String| Err(src.at(list.span(), why));
    if list.get_ref().is_empty() {
        return fault("alpn needs at least one protocol name, e.g. [\"h2\"]".into());
    }
    for name in list.get_ref() {
        if name.is_empty() || name.len() > 255 {
            return fault(format!("alpn protocol {name:?} must be 1 to 255 bytes"));
        }
        if name.as_bytes() == super::tls::ALPN {
            return fault("alpn \"tcpmux\" is TCPMUX over TLS itself: leave it out".into());
        }
        if name.as_bytes() == crate::model::ACME_TLS_ALPN {
            return fault(
                "alpn \"acme-tls/1\" is ACME's certificate validation: leave it out".into(),
            );
        }
    }
    Ok(list.get_ref().clone())
}

/// The names a service is routed by.
struct HostNames {
    sni: Vec<HostPattern>,
    sni_terminate: Vec<HostPattern>,
    http_host: Vec<String>,
}

/// `sni` and `sni_terminate` (host names, `*.` one-label wildcards allowed)
/// and `http_host`.
fn host_names(src: Source<'_>, table: &RawService) -> Result<HostNames, ConfigError> {
    let patterns = |list: &Option<Spanned<Vec<String>>>| -> Result<Vec<HostPattern>, ConfigError> {
        let Some(list) = list else {
            return Ok(Vec::new());
        };
        let parse = |n: &String| {
            n.parse::<HostPattern>()
                .map_err(|e| src.at(list.span(), e.to_string()))
        };
        list.get_ref().iter().map(parse).collect()
    };
    let sni = patterns(&table.sni)?;
    let sni_terminate = patterns(&table.sni_terminate)?;
    let http_host = patterns(&table.http_host)?
        .into_iter()
        .map(|pattern| match pattern {
            HostPattern::Exact(host) => Ok(host),
            HostPattern::Wildcard(_) => Err(src.at(
                table.http_host.as_ref().map_or(0..0, Spanned::span),
                "http_host takes exact host names, not wildcards",
            )),
        })
        .collect::<Result<_, _>>()?;
    Ok(HostNames {
        sni,
        sni_terminate,
        http_host,
    })
}

/// `allow`, `deny`, `allow_uid`, `allow_gid`; `stats` is for loopback clients
/// unless `allow` says otherwise.
fn access(src: Source<'_>, table: &RawService, kind: &ServiceKind) -> Result<Access, ConfigError> {
    let ranges = |list: &Option<Spanned<Vec<String>>>| -> Result<Vec<Cidr>, ConfigError> {
        let Some(list) = list else {
            return Ok(Vec::new());
        };
        let parse = |r: &String| {
            r.parse::<Cidr>()
                .map_err(|e| src.at(list.span(), e.to_string()))
        };
        list.get_ref().iter().map(parse).collect()
    };
    let mut access = Access {
        allow: ranges(&table.allow)?,
        deny: ranges(&table.deny)?,
        uids: table.allow_uid.clone().unwrap_or_default(),
        gids: table.allow_gid.clone().unwrap_or_default(),
        cert_names: Vec::new(),
    };
    if let Some(names) = &table.allow_cert_names {
        if names.get_ref().is_empty() || names.get_ref().iter().any(|n| n.trim().is_empty()) {
            return Err(src.at(
                names.span(),
                "allow_cert_names: list one or more certificate names (DNS names or CNs)",
            ));
        }
        access.cert_names = names.get_ref().clone();
    }
    if *kind == ServiceKind::Builtin(Builtin::Stats) && table.allow.is_none() {
        access.allow = loopback();
    }
    Ok(access)
}

/// Decides what a table runs: exactly one of `builtin`, `proxy`, `exec` and
/// `handoff`, and no key that belongs to another kind.
fn kind(
    src: Source<'_>,
    name: &ServiceName,
    key_span: Range<usize>,
    table: &RawService,
) -> Result<ServiceKind, ConfigError> {
    let chosen = chosen_kind(src, name, table)?;
    for (key, span, owner) in table.kind_specific_keys() {
        // `transparent` is for a service's datagrams too.
        let for_udp = matches!(
            key,
            "transparent" | "udp_health_check" | "udp_idle_timeout" | "udp_responses"
        ) && table.proxy_udp.is_some();
        if chosen != Some(owner) && !for_udp {
            let hint = match (key, &table.proxy_udp) {
                ("health_check", Some(_)) => {
                    " (proxy_udp's backends are checked by `udp_health_check`)"
                }
                _ => "",
            };
            return Err(src.at(
                span,
                format!("service {name}: `{key}` only applies to `{owner}` services{hint}"),
            ));
        }
    }
    match (chosen, table) {
        (Some("handoff"), RawService { handoff: Some(rule), .. }) => {
            let rule = rule.get_ref();
            if rule.uid.is_empty() && rule.gid.is_empty() {
                return Err(src.at(
                    key_span,
                    format!("handoff service {name} allows no one: give `uid = [...]` and/or `gid = [...]`"),
                ));
            }
            Ok(ServiceKind::Handoff(Arc::new(HandoffRule {
                uids: rule.uid.clone(),
                gids: rule.gid.clone(),
            })))
        }
        (Some("builtin"), RawService { builtin: Some(builtin), .. }) => {
            Builtin::from_name(builtin.get_ref())
                .map(ServiceKind::Builtin)
                .ok_or_else(|| {
                    let message = format!(
                        "unknown builtin {:?}; the builtins are {}",
                        builtin.get_ref(),
                        builtin_list()
                    );
                    src.at(builtin.span(), message)
                })
        }
        (Some("proxy"), RawService { proxy: Some(p), .. }) => {
            Ok(ServiceKind::Proxy(Arc::new(proxy::proxy(src, table, p)?)))
        }
        (Some("exec"), RawService { exec: Some(argv), .. }) => {
            Ok(ServiceKind::Exec(Arc::new(exec::exec(src, table, argv)?)))
        }
        (None, RawService { proxy_udp: Some(_), .. }) => Ok(ServiceKind::UdpOnly),
        // `[service.echo]` with only a message refines the built-in of that name.
        _ => Builtin::from_name(name.as_str())
            .map(ServiceKind::Builtin)
            .ok_or_else(|| {
                src.at(
                    key_span,
                    format!(
                        "service {name} says nothing to do: set `proxy = \"host:port\"`, `proxy_udp = \"IP:PORT\"`, \
                         `exec = [\"/path/program\"]`, `handoff = {{ uid = [...] }}` or `builtin = \"...\"` ({})",
                        builtin_list()
                    ),
                )
            }),
    }
}

/// Which kind key the table sets, if any; two of them is an error.
fn chosen_kind(
    src: Source<'_>,
    name: &ServiceName,
    table: &RawService,
) -> Result<Option<&'static str>, ConfigError> {
    let kinds: Vec<(&str, Range<usize>)> = [
        ("builtin", table.builtin.as_ref().map(Spanned::span)),
        ("proxy", table.proxy.as_ref().map(Spanned::span)),
        ("exec", table.exec.as_ref().map(Spanned::span)),
        ("handoff", table.handoff.as_deref().map(Spanned::span)),
    ]
    .into_iter()
    .filter_map(|(kind, span)| Some((kind, span?)))
    .collect();
    if let [(first, _), (second, span), ..] = &kinds[..] {
        return Err(src.at(
            span.clone(),
            format!("service {name} has both `{first}` and `{second}`; choose one"),
        ));
    }
    Ok(kinds.first().map(|(kind, _)| *kind))
}

fn builtin_list() -> String {
    Builtin::ALL.map(Builtin::name).join(", ")
}
