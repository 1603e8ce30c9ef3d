//! The metrics endpoint's keys: `metrics_listen` (where it listens) and
//! `metrics_hosts` (the names, besides IP literals, a request's Host may
//! give: a web page whose name was rebound to this address is refused).

use std::net::SocketAddr;

use super::error::{ConfigError, Source};
use super::raw::RawConfig;

/// The names a browser may reach the dashboard by when `metrics_hosts` is
/// not set (IP literals always may).
pub(super) const DEFAULT_HOSTS: [&str; 1] = ["localhost"];

pub(super) fn metrics_listen(
    src: Source<'_>,
    raw: &RawConfig,
) -> Result<Option<SocketAddr>, ConfigError> {
    let Some(addr) = &raw.metrics_listen else {
        return Ok(None);
    };
    let message = || format!("metrics_listen {:?}: expected IP:PORT", addr.get_ref());
    addr.get_ref()
        .parse()
        .map(Some)
        .map_err(|_| src.at(addr.span(), message()))
}

/// `metrics_hosts`: host names, lower-cased, without a trailing dot.
pub(super) fn metrics_hosts(src: Source<'_>, raw: &RawConfig) -> Result<Vec<String>, ConfigError> {
    let Some(list) = &raw.metrics_hosts else {
        return Ok(DEFAULT_HOSTS.iter().map(|h| (*h).to_owned()).collect());
    };
    if raw.metrics_listen.is_none() {
        return Err(src.at(list.span(), "metrics_hosts needs metrics_listen"));
    }
    list.get_ref()
        .iter()
        .map(|name| {
            let host = name.trim_end_matches('.').to_ascii_lowercase();
            let valid = !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if valid {
                Ok(host)
            } else {
                Err(src.at(
                    list.span(),
                    format!(
                        "metrics_hosts: {name:?} is not a host name (no port, scheme or path: \
                         e.g. \"metrics.example.com\")"
                    ),
                ))
            }
        })
        .collect()
}
