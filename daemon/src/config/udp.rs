//! Datagrams in the file: a listener's `udp = true` and its routes, a
//! service's `proxy_udp` (with its own `udp_idle_timeout` and
//! `udp_responses`), and the top-level `max_udp_flows`,
//! `max_udp_flows_per_ip` and `udp_idle_timeout`.

use tcpmux_proto::sniff::datagram::Datagram;
use toml::Spanned;

use super::checks::{at_least_one, positive_duration};
use super::error::{ConfigError, Source};
use super::raw::{RawConfig, RawListenTable, RawService};
use crate::model::{
    Balance, HashKey, ListenAddr, MatchRule, Proxy, QuicServer, QuicServers, RelayMode,
    ServiceFlows, UdpRoutes, UdpSettings, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_UDP_FLOWS,
    MAX_QUIC_SERVER_ID,
};
use tcpmux_proto::ServiceName;

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

/// `proxy_udp = "host:port"`, or a list of them (names and `srv:` followed
/// as a TCP proxy's) and of `{ address, weight }` tables, with the service's
/// `udp_health_check` and `transparent`: a pool balanced by the client's
/// address.
pub(super) fn proxy_udp(
    src: Source<'_>,
    table: &RawService,
    value: &Spanned<toml::Value>,
) -> Result<Proxy, ConfigError> {
    let backends = super::proxy::backends(src, "proxy_udp", value)?;
    let health_check =
        super::proxy::health_check(src, "udp_health_check", table.udp_health_check.as_deref())?;
    Ok(Proxy {
        backends,
        balance: Balance::Source,
        hash_key: HashKey::Source,
        health_check,
        connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        idle_timeout: None,
        send_proxy: None,
        relay: RelayMode::default(),
        transparent: table.transparent.as_ref().is_some_and(|t| *t.get_ref()),
        backend_tls: None,
    })
}

/// A service's own `udp_idle_timeout` and `udp_responses` (1 or more
/// replies per client datagram, at most 2^32 - 1).
pub(super) fn service_flows(
    src: Source<'_>,
    table: &RawService,
) -> Result<ServiceFlows, ConfigError> {
    let responses = at_least_one(src, "udp_responses", table.udp_responses.as_ref())?;
    let responses = match (responses, &table.udp_responses) {
        (Some(n), Some(given)) => Some(u32::try_from(n).map_err(|_| {
            src.at(
                given.span(),
                format!("udp_responses {n}: at most {}", u32::MAX),
            )
        })?),
        _ => None,
    };
    Ok(ServiceFlows {
        idle_timeout: positive_duration(src, "udp_idle_timeout", table.udp_idle_timeout.as_ref())?,
        responses,
    })
}

/// The top-level flow settings; `shortest_service_idle` is the shortest
/// of the services' own `udp_idle_timeout`s.
pub(super) fn settings(
    src: Source<'_>,
    raw: &RawConfig,
    (quic_servers, shortest_service_idle): (QuicServers, Option<std::time::Duration>),
) -> Result<UdpSettings, ConfigError> {
    Ok(UdpSettings {
        max_flows: at_least_one(src, "max_udp_flows", raw.max_udp_flows.as_ref())?
            .unwrap_or(DEFAULT_MAX_UDP_FLOWS),
        max_flows_per_ip: at_least_one(
            src,
            "max_udp_flows_per_ip",
            raw.max_udp_flows_per_ip.as_ref(),
        )?,
        idle_timeout: positive_duration(src, "udp_idle_timeout", raw.udp_idle_timeout.as_ref())?,
        shortest_service_idle,
        quic_servers,
    })
}

/// The `quic_server_id`s of the service `name`'s `proxy_udp` backends
/// (`{ address = "IP:PORT", quic_server_id = "HEX" }`), added to `servers`,
/// which holds every earlier service's: each a fixed address's, 1 to 15
/// bytes, none the beginning of another in the whole configuration.
pub(super) fn quic_server_ids(
    src: Source<'_>,
    name: &ServiceName,
    table: &RawService,
    servers: &mut QuicServers,
) -> Result<(), ConfigError> {
    let Some(value) = &table.proxy_udp else {
        return Ok(());
    };
    let at = |what: String| src.at(value.span(), what);
    let entries: Vec<&toml::Value> = match value.get_ref() {
        toml::Value::Array(many) => many.iter().collect(),
        one => vec![one],
    };
    for entry in entries {
        let Some(hex) = entry.get("quic_server_id") else {
            continue;
        };
        let id = hex.as_str().and_then(server_id).ok_or_else(|| {
            at(format!(
                "quic_server_id {hex}: give 1 to {MAX_QUIC_SERVER_ID} bytes in hex, such as \"0a\""
            ))
        })?;
        let address = entry
            .get("address")
            .and_then(toml::Value::as_str)
            .unwrap_or("");
        let backend = address.parse::<std::net::SocketAddr>().map_err(|_| {
            at(format!("quic_server_id needs a fixed address (IP:PORT), not {address:?}, whose members DNS decides"))
        })?;
        let shown = tcpmux_proto::hex::encode(&id);
        let server = QuicServer {
            id,
            service: name.clone(),
            backend,
        };
        if let Err(other) = servers.add(server) {
            return Err(at(format!(
                "quic_server_id {shown}: {} of service {} has {}, and a connection ID could name either",
                other.backend,
                other.service,
                tcpmux_proto::hex::encode(&other.id)
            )));
        }
    }
    Ok(())
}

/// `"0a1b"`: the bytes, 1 to 15 of them.
fn server_id(hex: &str) -> Option<Vec<u8>> {
    tcpmux_proto::hex::decode(hex).filter(|id| (1..=MAX_QUIC_SERVER_ID).contains(&id.len()))
}
