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
    let backends = backends(src, proxy)?;
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
        health_check: health_check(src, table)?,
        connect_timeout,
        idle_timeout,
        send_proxy,
        relay,
        transparent,
        backend_tls,
    })
}

/// `"host:port"`, or a list of those and `{ address = "host:port", weight = N }`.
fn backends(src: Source<'_>, proxy: &Spanned<toml::Value>) -> Result<Vec<Weighted>, ConfigError> {
    let wrong = || {
        src.at(
            proxy.span(),
            "`proxy` must be \"host:port\", \"srv:NAME\" or a list of those and { address = \"host:port\", weight = N }",
        )
    };
    let entries: Vec<&toml::Value> = match proxy.get_ref() {
        toml::Value::Array(many) => many.iter().collect(),
        one => vec![one],
    };
    if entries.is_empty() {
        return Err(src.at(proxy.span(), "`proxy` lists no backend"));
    }
    let mut backends = Vec::new();
    for entry in entries {
        let mut max_connections = None;
        let (address, weight) = match entry {
            toml::Value::String(address) => (address.as_str(), 1),
            toml::Value::Table(table) => {
                const KEYS: [&str; 3] = ["address", "weight", "max_connections"];
                if let Some(key) = table.keys().find(|k| !KEYS.contains(&k.as_str())) {
                    return Err(src.at(
                        proxy.span(),
                        format!("proxy: unknown key `{key}` (address, weight, max_connections)"),
                    ));
                }
                max_connections = match table.get("max_connections") {
                    None => None,
                    Some(n) => Some(
                        n.as_integer()
                            .and_then(|n| usize::try_from(n).ok())
                            .filter(|n| *n >= 1)
                            .ok_or_else(|| {
                                src.at(proxy.span(), "proxy: max_connections must be at least 1")
                            })?,
                    ),
                };
                let address = table
                    .get("address")
                    .and_then(toml::Value::as_str)
                    .ok_or_else(wrong)?;
                let weight = backend_weight(table).ok_or_else(|| {
                    src.at(
                        proxy.span(),
                        "proxy: weight must be a whole number from 1 to 1000",
                    )
                })?;
                (address, weight)
            }
            _ => return Err(wrong()),
        };
        let backend = address
            .parse::<Backend>()
            .map_err(|e| src.at(proxy.span(), e.to_string()))?;
        if matches!(backend, Backend::Srv(_)) && weight != 1 {
            return Err(src.at(
                proxy.span(),
                format!("proxy: {backend} takes its weights from its SRV records; drop `weight`"),
            ));
        }
        if max_connections.is_some() && backend.fixed().is_none() {
            return Err(src.at(
                proxy.span(),
                format!("proxy: max_connections needs a fixed address (an IP or unix:), not {backend}, whose members DNS decides"),
            ));
        }
        backends.push(Weighted {
            backend,
            weight,
            max_connections,
        });
    }
    Ok(backends)
}

/// `health_check = { interval, timeout, rise, fall, send, expect }`.
fn health_check(src: Source<'_>, table: &RawService) -> Result<Option<HealthCheck>, ConfigError> {
    let Some(raw) = &table.health_check else {
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
            "health_check: interval and timeout must be greater than zero",
        ));
    }
    if check.rise == 0 || check.fall == 0 {
        return Err(src.at(span, "health_check: rise and fall must be at least 1"));
    }
    if check.expect.as_deref() == Some("") {
        return Err(src.at(span, "health_check: expect must not be empty"));
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
