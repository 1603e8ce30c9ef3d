//! A `proxy` service's table: its backends and relay settings.

use toml::Spanned;

use super::checks::{choice, positive_duration};
use super::error::{ConfigError, Source};
use super::raw::RawService;
use std::time::Duration;

use crate::model::{
    Backend, Balance, HashKey, HealthCheck, Proxy, ProxyVersion, RelayMode, Weighted,
    DEFAULT_CONNECT_TIMEOUT,
};

/// `proxy = "host:port"` or a list of them, with the proxy-only keys.
pub(crate) fn proxy(
    src: Source<'_>,
    table: &RawService,
    proxy: &Spanned<toml::Value>,
) -> Result<Proxy, ConfigError> {
    let backends = backends(src, "proxy", proxy)?;
    let balance = choice(
        src,
        "balance",
        table.balance.as_ref(),
        &[
            ("first", Balance::First),
            ("round-robin", Balance::RoundRobin),
            ("least-connections", Balance::LeastConnections),
            ("random-two", Balance::RandomTwo),
            ("source", Balance::Source),
        ],
    )?
    .unwrap_or_default();
    let hash_key = choice(
        src,
        "hash_key",
        table.hash_key.as_ref(),
        &[("source", HashKey::Source), ("sni", HashKey::Sni)],
    )?;
    if let (Some(key), true) = (&table.hash_key, balance != Balance::Source) {
        return Err(src.at(
            key.span(),
            "hash_key needs balance = \"source\": only that balance hashes",
        ));
    }
    let connect_timeout =
        positive_duration(src, "connect_timeout", table.connect_timeout.as_ref())?
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    let idle_timeout = table
        .idle_timeout
        .as_ref()
        .map(|t| t.get_ref().0)
        .filter(|t| !t.is_zero());
    let send_proxy = choice(
        src,
        "send_proxy",
        table.send_proxy.as_ref(),
        &[("v1", ProxyVersion::V1), ("v2", ProxyVersion::V2)],
    )?;
    let relay = choice(
        src,
        "relay",
        table.relay.as_ref(),
        &[("splice", RelayMode::Splice), ("copy", RelayMode::Copy)],
    )?
    .unwrap_or_default();
    let transparent = table.transparent.as_ref().is_some_and(|t| *t.get_ref());
    let backend_tls = table
        .backend_tls
        .as_ref()
        .map(|raw| super::backend_tls::backend_tls(src, raw, &backends))
        .transpose()?;
    if let Some(unix) = backends
        .iter()
        .find(|b| matches!(b.backend, Backend::Unix(_)))
    {
        if transparent {
            return Err(src.at(
                proxy.span(),
                format!(
                    "transparent = true needs TCP backends: {} is a Unix socket",
                    unix.backend
                ),
            ));
        }
    }
    Ok(Proxy {
        backends,
        balance,
        hash_key: hash_key.unwrap_or_default(),
        health_check: health_check(src, "health_check", table.health_check.as_deref())?,
        connect_timeout,
        idle_timeout,
        send_proxy,
        relay,
        transparent,
        backend_tls,
    })
}

/// `"host:port"`, `"srv:NAME"`, or a list of those and `{ address, weight,
/// max_connections }` tables: the backends of `key` (`proxy`, or
/// `proxy_udp`, whose backends are neither Unix sockets nor capped: a
/// datagram holds no connection).
pub(super) fn backends(
    src: Source<'_>,
    key: &str,
    value: &Spanned<toml::Value>,
) -> Result<Vec<Weighted>, ConfigError> {
    let datagrams = key == "proxy_udp";
    let at = |what: String| src.at(value.span(), what);
    let shape = || {
        at(format!(
            "`{key}` must be \"host:port\", \"srv:NAME\" or a list of those and {{ address = \"host:port\", weight = N }}"
        ))
    };
    let entries: Vec<&toml::Value> = match value.get_ref() {
        toml::Value::Array(many) => many.iter().collect(),
        one => vec![one],
    };
    if entries.is_empty() {
        return Err(at(format!("`{key}` lists no backend")));
    }
    let mut backends = Vec::new();
    for entry in entries {
        let (address, weight, max_connections) = match entry {
            toml::Value::String(address) => (address.as_str(), 1, None),
            toml::Value::Table(table) => backend_table(key, table).map_err(at)?,
            _ => return Err(shape()),
        };
        let backend = address.parse::<Backend>().map_err(|e| at(e.to_string()))?;
        if matches!(backend, Backend::Srv(_)) && weight != 1 {
            return Err(at(format!(
                "{key}: {backend} takes its weights from its SRV records; drop `weight`"
            )));
        }
        if max_connections.is_some() && backend.fixed().is_none() {
            return Err(at(format!("{key}: max_connections needs a fixed address (an IP or unix:), not {backend}, whose members DNS decides")));
        }
        if datagrams && matches!(backend, Backend::Unix(_)) {
            return Err(at(format!(
                "{key}: {backend} is a Unix socket; UDP backends are IP:PORT, host:port or srv:NAME"
            )));
        }
        backends.push(Weighted {
            backend,
            weight,
            max_connections,
        });
    }
    Ok(backends)
}

/// A backend's table: its address, weight and (TCP only) max_connections.
fn backend_table<'t>(
    key: &str,
    table: &'t toml::Table,
) -> Result<(&'t str, u32, Option<usize>), String> {
    let keys: &[&str] = match key {
        "proxy_udp" => &["address", "weight", "quic_server_id"],
        _ => &["address", "weight", "max_connections"],
    };
    if let Some(unknown) = table.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(format!(
            "{key}: unknown key `{unknown}` ({})",
            keys.join(", ")
        ));
    }
    let max_connections = match table.get("max_connections") {
        None => None,
        Some(n) => Some(
            n.as_integer()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n >= 1)
                .ok_or_else(|| format!("{key}: max_connections must be at least 1"))?,
        ),
    };
    let address = table
        .get("address")
        .and_then(toml::Value::as_str)
        .ok_or_else(|| format!("{key}: a backend's table needs `address = \"host:port\"`"))?;
    let weight = backend_weight(table)
        .ok_or_else(|| format!("{key}: weight must be a whole number from 1 to 1000"))?;
    Ok((address, weight, max_connections))
}

/// `health_check` (or `udp_health_check`) `= { interval, timeout, rise,
/// fall, send, expect }`. A UDP check needs `send`: a datagram backend
/// answers nothing until asked.
pub(super) fn health_check(
    src: Source<'_>,
    key: &str,
    raw: Option<&Spanned<super::raw::RawHealthCheck>>,
) -> Result<Option<HealthCheck>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let span = raw.span();
    let raw = raw.get_ref();
    let check = HealthCheck {
        interval: raw.interval.map_or(Duration::from_secs(2), |d| d.0),
        timeout: raw.timeout.map_or(Duration::from_secs(1), |d| d.0),
        rise: raw.rise.unwrap_or(2),
        fall: raw.fall.unwrap_or(3),
        send: raw.send.clone(),
        expect: raw.expect.clone(),
    };
    if check.interval.is_zero() || check.timeout.is_zero() {
        return Err(src.at(
            span,
            format!("{key}: interval and timeout must be greater than zero"),
        ));
    }
    if check.rise == 0 || check.fall == 0 {
        return Err(src.at(span, format!("{key}: rise and fall must be at least 1")));
    }
    if check.expect.as_deref() == Some("") {
        return Err(src.at(span, format!("{key}: expect must not be empty")));
    }
    if key == "udp_health_check" && check.send.as_deref().map_or(true, str::is_empty) {
        return Err(src.at(
            span,
            format!(
                "{key}: set `send`, the datagram a backend answers (UDP has no connect to check)"
            ),
        ));
    }
    Ok(Some(check))
}

/// A backend table's `weight` (`proxy`, `proxy_udp`): 1 when absent, `None`
/// when it is not a whole number from 1 to 1000.
pub(super) fn backend_weight(table: &toml::Table) -> Option<u32> {
    match table.get("weight") {
        None => Some(1),
        Some(w) => w
            .as_integer()
            .and_then(|w| u32::try_from(w).ok())
            .filter(|w| (1..=1000).contains(w)),
    }
}
