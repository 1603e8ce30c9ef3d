//! A `proxy` service's table: its backends and relay settings.

use toml::Spanned;

use super::checks::{choice, positive_duration};
use super::error::{ConfigError, Source};
use super::raw::RawService;
use crate::model::{Backend, Proxy, ProxyVersion, RelayMode, DEFAULT_CONNECT_TIMEOUT};

/// `proxy = "host:port"` or a list of them, with the proxy-only keys.
pub(crate) fn proxy(
    src: Source<'_>,
    table: &RawService,
    proxy: &Spanned<toml::Value>,
) -> Result<Proxy, ConfigError> {
    let backends = backends(src, proxy)?;
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
    Ok(Proxy {
        backends,
        connect_timeout,
        idle_timeout,
        send_proxy,
        relay,
    })
}

fn backends(src: Source<'_>, proxy: &Spanned<toml::Value>) -> Result<Vec<Backend>, ConfigError> {
    let not_strings = || {
        src.at(
            proxy.span(),
            "`proxy` must be a string or an array of strings",
        )
    };
    let texts: Vec<&str> = match proxy.get_ref() {
        toml::Value::String(one) => vec![one.as_str()],
        toml::Value::Array(many) => many
            .iter()
            .map(|v| v.as_str())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(not_strings)?,
        _ => return Err(not_strings()),
    };
    if texts.is_empty() {
        return Err(src.at(proxy.span(), "`proxy` lists no backend"));
    }
    texts
        .iter()
        .map(|t| {
            t.parse::<Backend>()
                .map_err(|e| src.at(proxy.span(), e.to_string()))
        })
        .collect()
}
