//! The decision for a flow's first datagram: which service, and so which
//! UDP backend, it goes to, or why it is dropped. Pure: the datagram, the
//! listener's routes and the registry in, a route or a drop out.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;

use tcpmux_proto::sniff::client_hello::ClientHello;
use tcpmux_proto::sniff::datagram::{self, Datagram};

use crate::model::{Balance, ClientInfo, Endpoint, Peer, Proxy, Service, UdpRoutes};
use crate::pool::Pool;
use crate::state::Settings;
use tcpmux_proto::ServiceName;

/// Where a new flow goes.
#[derive(Debug)]
pub(crate) struct Route<'s> {
    pub(crate) service: &'s Service,
    pub(crate) proxy: &'s Proxy,
    /// The pool of its UDP backends: their health, weights and counts.
    pub(crate) pool: &'s std::sync::Arc<Pool>,
    /// How it was routed, for the log and the metrics: `sni`, a probe's
    /// name, `match`, `udp_default`, `connection_id` (a QUIC connection
    /// another flow carries) or `server_id` (a QUIC connection ID naming
    /// its server by `quic_server_id`).
    pub(crate) routed: &'static str,
    /// The protocol its first datagram was recognized as, if any.
    pub(crate) protocol: Option<Datagram>,
}

/// How a flow may be routed besides by a probe's name, as the metrics and
/// the log word it (`Route::routed`); `upgrade` for a handed-over flow
/// whose word this daemon does not know.
pub(crate) const ROUTED: [&str; 6] = [
    "sni",
    "match",
    "udp_default",
    "connection_id",
    "server_id",
    "upgrade",
];

/// Why a first datagram starts no flow: each a fixed word, the drop
/// counter's `reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// Nothing routes it and the listener has no `udp_default`.
    Unrouted,
    /// Its service is gone (a reload) or takes no datagrams.
    NoService,
    /// The service's `allow`/`deny` rules.
    AccessDenied,
    /// Disabled on the admin socket.
    Disabled,
    /// `max_udp_flows_per_ip`.
    PerIpLimit,
    /// `max_udp_flows`, all held by other listeners or workers.
    FlowLimit,
    /// No backend is usable (down, ejected, drained, or DNS has not
    /// answered yet), or the backend socket could not be opened.
    BackendUnavailable,
    /// A datagram of a flow its backend could not take at once.
    BackendBusy,
    /// A backend's reply the client's address could not be sent.
    ClientUnreachable,
    /// A backend's reply beyond the `udp_responses` its client's
    /// datagrams asked for.
    Unasked,
}

impl Dropped {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Dropped::Unrouted => "unrouted",
            Dropped::NoService => "no_service",
            Dropped::AccessDenied => "access_denied",
            Dropped::Disabled => "disabled",
            Dropped::PerIpLimit => "per_ip_limit",
            Dropped::FlowLimit => "flow_limit",
            Dropped::BackendUnavailable => "backend_unavailable",
            Dropped::BackendBusy => "backend_busy",
            Dropped::ClientUnreachable => "client_unreachable",
            Dropped::Unasked => "unasked",
        }
    }
}

/// The route of a flow from `client` whose first datagram is `first`;
/// `quic_hello` is the ClientHello its QUIC Initials gathered, if they did
/// (gather.rs).
pub(crate) fn route<'s>(
    (first, quic_hello): (&[u8], Option<ClientHello>),
    client: &ClientInfo,
    routes: &UdpRoutes,
    settings: &'s Settings,
) -> Result<Route<'s>, Dropped> {
    let registry = &settings.registry;
    let protocol = datagram::classify(first, &routes.enabled());
    // DTLS's ClientHello is in clear; QUIC's was opened with the keys any
    // observer derives from its connection ID.
    let hello = match protocol {
        Some(Datagram::Dtls) => datagram::dtls_record(first),
        Some(Datagram::Quic) => quic_hello,
        _ => None,
    };
    let by_name = hello.and_then(|hello| {
        let (service, _) = registry.by_hello(hello.server_name.as_deref(), &hello.alpn)?;
        service.udp.is_some().then_some(service)
    });
    let (service, routed) = match by_name {
        Some(service) => (Some(service), "sni"),
        None => {
            let probed = protocol.and_then(|p| Some((routes.probe_route(p)?, p.name())));
            let matched = || {
                let rule = routes
                    .rules
                    .iter()
                    .find(|rule| rule.pattern.decide(first, true) == Some(true))?;
                Some((&rule.service, "match"))
            };
            let default = || Some((routes.default.as_ref()?, "udp_default"));
            let (name, routed) = probed
                .or_else(matched)
                .or_else(default)
                .ok_or(Dropped::Unrouted)?;
            (registry.lookup(name), routed)
        }
    };
    admit(
        service.ok_or(Dropped::NoService)?,
        routed,
        protocol,
        client,
        settings,
    )
}

/// The route of a flow from a client with no flow whose datagram is
/// addressed to a QUIC connection whose server is known: by an ID another
/// flow carries (`routed = connection_id`) or by the server's own ID in it
/// (`server_id`). That server's service and backend, if both are still
/// there; `None` sends the datagram through [`route`] instead.
pub(crate) fn by_connection<'s>(
    (service, backend, routed): (&ServiceName, SocketAddr, &'static str),
    client: &ClientInfo,
    settings: &'s Settings,
) -> Option<Result<(Route<'s>, SocketAddr), Dropped>> {
    let service = settings.registry.lookup(service)?;
    let proxy = service.udp.as_deref()?;
    let pool = &settings.usage.get(&service.name)?.udp_pool;
    let members = pool.current(proxy)?;
    if !members.contains(&Endpoint::Tcp(backend)) {
        return None;
    }
    let route = admit(service, routed, Some(Datagram::Quic), client, settings);
    Some(route.map(|route| (route, backend)))
}

/// `service`'s route, if its access rules and the admin socket let
/// `client` in.
fn admit<'s>(
    service: &'s Service,
    routed: &'static str,
    protocol: Option<Datagram>,
    client: &ClientInfo,
    settings: &'s Settings,
) -> Result<Route<'s>, Dropped> {
    let proxy = service.udp.as_deref().ok_or(Dropped::NoService)?;
    if !service.access.permits_client(client) {
        return Err(Dropped::AccessDenied);
    }
    let counts = settings
        .usage
        .get(&service.name)
        .ok_or(Dropped::NoService)?;
    if counts.disabled.load(Ordering::Acquire) {
        return Err(Dropped::Disabled);
    }
    Ok(Route {
        service,
        proxy,
        pool: &counts.udp_pool,
        routed,
        protocol,
    })
}

/// The backend of `proxy` for a client at `client`: rendezvous-hashed on
/// its address with the members' weights (`balance = "source"`), so a
/// client whose flow ended comes back to the same backend whatever its
/// port, and a backend added moves only its share of clients. Members that
/// are down, ejected, drained or in maintenance are passed over; `None`
/// when none is usable or DNS has not answered yet.
pub(crate) fn backend_for(proxy: &Proxy, pool: &Pool, client: IpAddr) -> Option<SocketAddr> {
    let members = pool.current(proxy)?;
    let sticky = match client {
        IpAddr::V4(ip) => ip.octets().to_vec(),
        IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    let first = pool.order(Balance::Source, &members, &sticky).next()?;
    match members.list.get(first)?.endpoint {
        Endpoint::Tcp(addr) => Some(addr),
        Endpoint::Unix(_) => None,
    }
}

/// A datagram's client as the access rules see it.
pub(crate) fn client_info(client: SocketAddr, local: SocketAddr) -> ClientInfo {
    ClientInfo {
        peer: Peer::Tcp(client),
        local: Some(local),
        tls: None,
        sni: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(weights: &[u32]) -> std::sync::Arc<Proxy> {
        let backends = weights.iter().enumerate().map(|(i, &weight)| {
            let host = "127.0.0.1".to_owned();
            crate::model::Weighted {
                weight,
                ..crate::model::Weighted::one(crate::model::Backend::Tcp {
                    host,
                    port: 1 + i as u16,
                })
            }
        });
        std::sync::Arc::new(Proxy {
            backends: backends.collect(),
            balance: Balance::Source,
            hash_key: crate::model::HashKey::Source,
            health_check: None,
            connect_timeout: std::time::Duration::from_secs(1),
            idle_timeout: None,
            send_proxy: None,
            relay: Default::default(),
            transparent: false,
            backend_tls: None,
        })
    }

    fn pool(proxy: &std::sync::Arc<Proxy>) -> Pool {
        let pool = Pool::default();
        pool.configure(proxy);
        pool
    }

    #[test]
    fn a_client_keeps_its_backend_whatever_its_port_and_clients_spread() {
        let proxy = proxy(&[1, 1, 1]);
        let pool = pool(&proxy);
        let client: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(
            backend_for(&proxy, &pool, client),
            backend_for(&proxy, &pool, client)
        );
        let picked: std::collections::HashSet<_> = (1..=100u8)
            .map(|n| backend_for(&proxy, &pool, IpAddr::from([192, 0, 2, n])))
            .collect();
        assert_eq!(picked.len(), 3);
    }

    #[test]
    fn weights_share_the_clients_and_a_failing_or_drained_backend_is_passed_over() {
        let proxy = proxy(&[1, 3]);
        let pool = pool(&proxy);
        let clients = (0..4000u32).map(|n| IpAddr::from([10, 1, (n >> 8) as u8, n as u8]));
        let heavy = SocketAddr::from(([127, 0, 0, 1], 2));
        let to_heavy = clients
            .clone()
            .filter(|&c| backend_for(&proxy, &pool, c) == Some(heavy))
            .count();
        assert!(
            (2800..3200).contains(&to_heavy),
            "{to_heavy} of 4000 to weight 3 of 4"
        );
        // Three flows that met an ICMP port unreachable in a row eject it.
        let endpoint = Endpoint::Tcp(heavy);
        for _ in 0..3 {
            assert!(clients
                .clone()
                .any(|c| backend_for(&proxy, &pool, c) == Some(heavy)));
            pool.flow_ended("s", &endpoint, (10, 0), true);
        }
        assert!(clients
            .clone()
            .all(|c| backend_for(&proxy, &pool, c) == Some(SocketAddr::from(([127, 0, 0, 1], 1)))));
        // Drained by an operator: the same.
        let proxy = self::proxy(&[1, 3]);
        let pool = self::pool(&proxy);
        pool.set_state(&endpoint, crate::model::AdminState::Drain, None);
        assert!(clients
            .clone()
            .all(|c| backend_for(&proxy, &pool, c) != Some(heavy)));
        // None usable: no backend, the datagram is dropped.
        pool.set_state(
            &Endpoint::Tcp(SocketAddr::from(([127, 0, 0, 1], 1))),
            crate::model::AdminState::Maint,
            None,
        );
        assert_eq!(
            backend_for(&proxy, &pool, IpAddr::from([10, 9, 9, 9])),
            None
        );
    }

    #[test]
    fn a_named_backend_has_no_member_until_dns_answers() {
        let host = "backend.test".to_owned();
        let proxy = std::sync::Arc::new(Proxy {
            backends: vec![crate::model::Weighted::one(crate::model::Backend::Tcp {
                host,
                port: 53,
            })],
            ..(*self::proxy(&[])).clone()
        });
        let pool = pool(&proxy);
        assert_eq!(
            backend_for(&proxy, &pool, IpAddr::from([10, 0, 0, 1])),
            None
        );
        let found = SocketAddr::from(([127, 0, 0, 9], 53));
        let member = crate::model::Member {
            endpoint: Endpoint::Tcp(found),
            weight: 1,
            priority: 0,
            max_connections: None,
        };
        assert!(pool.publish(&proxy, vec![member]));
        assert_eq!(
            backend_for(&proxy, &pool, IpAddr::from([10, 0, 0, 1])),
            Some(found)
        );
    }
}
