//! Datagrams in the file: a listener's `udp = true` and its routes, a
//! service's `proxy_udp`, and the daemon-wide `max_udp_flows`,
//! `max_udp_flows_per_ip` and `udp_idle_timeout`.

use std::net::SocketAddr;

use tcpmux_proto::sniff::datagram::Datagram;
use tcpmux_proto::ServiceName;
use toml::Spanned;

use super::checks::{at_least_one, positive_duration};
use super::error::{ConfigError, Source};
use super::raw::{RawConfig, RawListenTable};
use crate::model::{
    ListenAddr, ListenSpec, UdpProxy, UdpRoutes, UdpSettings, DEFAULT_MAX_UDP_FLOWS,
};
use crate::registry::Registry;

/// The UDP side of a listener table, if `udp = true`; its keys need it.
pub(super) fn routes(
    src: Source<'_>,
    item: &Spanned<toml::Value>,
    table: &RawListenTable,
    addr: &ListenAddr,
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
    let name = |key: &str, value: &str| -> Result<ServiceName, ConfigError> {
        ServiceName::parse(value).map_err(|e| at(format!("listen {addr}: {key} {value:?}: {e}")))
    };
    let mut routed = Vec::new();
    for (protocol, value) in probes {
        if let Some(v) = value {
            routed.push((protocol, name(protocol.name(), v)?));
        }
    }
    Ok(Some(UdpRoutes {
        probes: routed,
        rules: super::detect::rules(src, item, table)?,
        default: table
            .udp_default
            .as_deref()
            .map(|v| name("udp_default", v))
            .transpose()?,
    }))
}

/// `proxy_udp = "IP:PORT"` or a list of them.
pub(super) fn proxy_udp(
    src: Source<'_>,
    value: &Spanned<toml::Value>,
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
        let Some(text) = entry.as_str() else {
            return Err(wrong(
                "`proxy_udp` must be \"IP:PORT\" or a list of them".into(),
            ));
        };
        let addr = text.parse::<SocketAddr>().map_err(|_| {
            wrong(format!(
                "proxy_udp {text:?}: expected IP:PORT or [IPv6]:PORT (UDP backends are IP addresses; names are not followed)"
            ))
        })?;
        if addr.port() == 0 {
            return Err(wrong(format!("proxy_udp {text:?}: port 0 is no backend")));
        }
        backends.push(addr);
    }
    Ok(UdpProxy { backends })
}

/// The daemon-wide flow settings.
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

/// Every service a UDP side routes to must exist and have `proxy_udp`.
pub(super) fn check_targets(
    src: Source<'_>,
    list: Option<&Spanned<Vec<Spanned<toml::Value>>>>,
    specs: &[ListenSpec],
    registry: &Registry,
) -> Result<(), ConfigError> {
    let Some(list) = list else { return Ok(()) };
    for (item, spec) in list.get_ref().iter().zip(specs) {
        let Some(udp) = &spec.options.udp else {
            continue;
        };
        for (key, name) in udp.targets() {
            let message = match registry.lookup(name) {
                None => format!("listen {}: {key} = \"{name}\" is not a service", spec.addr),
                Some(service) if service.udp.is_none() => format!(
                    "listen {}: {key} = \"{name}\" routes datagrams to a service without `proxy_udp`",
                    spec.addr
                ),
                Some(_) => continue,
            };
            return Err(src.at(item.span(), message));
        }
    }
    Ok(())
}
