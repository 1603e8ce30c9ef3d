//! Datagrams in the file: a listener's `udp = true` and its routes, a
//! service's `proxy_udp`, and the top-level `max_udp_flows`,
//! `max_udp_flows_per_ip` and `udp_idle_timeout`.

use std::net::SocketAddr;

use tcpmux_proto::sniff::datagram::Datagram;
use toml::Spanned;

use super::checks::{at_least_one, positive_duration};
use super::error::{ConfigError, Source};
use super::raw::{RawConfig, RawListenTable};
use crate::model::{
    ListenAddr, MatchRule, UdpBackend, UdpProxy, UdpRoutes, UdpSettings, DEFAULT_MAX_UDP_FLOWS,
};

/// The UDP side of a listener table, if `udp = true`; its keys need it.
pub(super) fn routes(
    src: Source<'_>,
    item: &Spanned<toml::Value>,
    table: &RawListenTable,
    (addr, rules): (&ListenAddr, &[MatchRule]),
) -> Result<Option<UdpRoutes>, ConfigError> {
    let at = |message: String| src.at(item.span(), message);
    let probes = [
        (Datagram::Quic, &table.quic),
        (Datagram::Dtls, &table.dtls),
        (Datagram::WireGuard, &table.wireguard),
        (Datagram::Dns, &table.dns),
        (Datagram::OpenVpn, &table.openvpn),
    ];
    if table.udp != Some(true) {
        let only_udp = probes.iter().take(4).find(|(_, v)| v.is_some());
        let given = only_udp.map(|(p, _)| p.name());
        let given = given.or(table.udp_default.as_ref().map(|_| "udp_default"));
        let given = given.or(table.tcp.map(|_| "tcp"));
        return match given {
            Some(key) => Err(at(format!("listen {addr}: `{key}` needs `udp = true`"))),
            None => Ok(None),
        };
    }
    if !matches!(addr, ListenAddr::Tcp(_)) {
        return Err(at(format!(
            "listen {addr}: `udp = true` needs an IP:PORT address"
        )));
    }
    let name = |key: &str, value: &str| super::detect::route_name(src, item, key, value);
    let mut routed = Vec::new();
    for (protocol, value) in probes {
        if let Some(v) = value {
            routed.push((protocol, name(protocol.name(), v)?));
        }
    }
    Ok(Some(UdpRoutes {
        probes: routed,
        rules: rules.to_vec(),
        default: table
            .udp_default
            .as_deref()
            .map(|v| name("udp_default", v))
            .transpose()?,
    }))
}

/// `proxy_udp = "IP:PORT"`, or a list of them and of `{ address =
/// "IP:PORT", weight = N }` tables.
pub(super) fn proxy_udp(
    src: Source<'_>,
    value: &Spanned<toml::Value>,
    transparent: bool,
) -> Result<UdpProxy, ConfigError> {
    let wrong = |what: String| src.at(value.span(), what);
    let entries: Vec<&toml::Value> = match value.get_ref() {
        toml::Value::Array(many) => many.iter().collect(),
        one => vec![one],
    };
    if entries.is_empty() {
        return Err(wrong("`proxy_udp` lists no backend".into()));
    }
    let mut backends = Vec::new();
    for entry in entries {
        backends.push(udp_backend(entry).map_err(wrong)?);
    }
    Ok(UdpProxy {
        backends,
        transparent,
    })
}

/// One `proxy_udp` entry: `"IP:PORT"` or `{ address = "IP:PORT", weight = N }`.
fn udp_backend(entry: &toml::Value) -> Result<UdpBackend, String> {
    let shape = || {
        "`proxy_udp` entries are \"IP:PORT\" or { address = \"IP:PORT\", weight = N }".to_owned()
    };
    let (text, weight) = match entry {
        toml::Value::String(text) => (text.as_str(), 1),
        toml::Value::Table(table) => {
            if let Some(key) = table
                .keys()
                .find(|k| !matches!(k.as_str(), "address" | "weight"))
            {
                return Err(format!("proxy_udp: unknown key `{key}` ({})", shape()));
            }
            let text = table
                .get("address")
                .and_then(toml::Value::as_str)
                .ok_or_else(shape)?;
            let weight = super::proxy::backend_weight(table)
                .ok_or_else(|| format!("proxy_udp {text:?}: weight must be 1 to 1000"))?;
            (text, weight)
        }
        _ => return Err(shape()),
    };
    let addr = text.parse::<SocketAddr>().map_err(|_| {
        format!(
            "proxy_udp {text:?}: expected IP:PORT or [IPv6]:PORT (UDP backends are IP addresses; names are not followed)"
        )
    })?;
    if addr.port() == 0 {
        return Err(format!("proxy_udp {text:?}: port 0 is no backend"));
    }
    Ok(UdpBackend { addr, weight })
}

/// The top-level flow settings.
pub(super) fn settings(src: Source<'_>, raw: &RawConfig) -> Result<UdpSettings, ConfigError> {
    Ok(UdpSettings {
        max_flows: at_least_one(src, "max_udp_flows", raw.max_udp_flows.as_ref())?
            .unwrap_or(DEFAULT_MAX_UDP_FLOWS),
        max_flows_per_ip: at_least_one(
            src,
            "max_udp_flows_per_ip",
            raw.max_udp_flows_per_ip.as_ref(),
        )?,
        idle_timeout: positive_duration(src, "udp_idle_timeout", raw.udp_idle_timeout.as_ref())?,
    })
}
