//! The decision for a flow's first datagram: which service, and so which
//! UDP backend, it goes to, or why it is dropped. Pure: the datagram, the
//! listener's routes and the registry in, a route or a drop out.

use std::sync::atomic::Ordering;

use tcpmux_proto::sniff::datagram::{self, Datagram};

use crate::model::{ClientInfo, Peer, Service, UdpProxy, UdpRoutes};
use crate::state::Settings;

/// Where a new flow goes.
#[derive(Debug)]
pub(crate) struct Route<'s> {
    pub(crate) service: &'s Service,
    pub(crate) proxy: &'s UdpProxy,
    /// How it was routed, for the log and the metrics: `sni`, a probe's
    /// name, `match` or `udp_default`.
    pub(crate) routed: &'static str,
    /// The protocol its first datagram was recognized as, if any.
    pub(crate) protocol: Option<Datagram>,
}

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
    /// The backend socket could not be opened.
    BackendUnavailable,
    /// A datagram of a flow its backend could not take at once.
    BackendBusy,
}

impl Dropped {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Dropped::Unrouted => "unrouted",
            Dropped::NoService => "no_service",
            Dropped::AccessDenied => "access_denied",
            Dropped::Disabled => "disabled",
            Dropped::PerIpLimit => "per_ip_limit",
            Dropped::BackendUnavailable => "backend_unavailable",
            Dropped::BackendBusy => "backend_busy",
        }
    }
}

/// The route of a flow from `client` whose first datagram is `first`.
pub(crate) fn route<'s>(
    first: &[u8],
    client: &ClientInfo,
    routes: &UdpRoutes,
    settings: &'s Settings,
) -> Result<Route<'s>, Dropped> {
    let registry = &settings.registry;
    let protocol = datagram::classify(first, &routes.enabled());
    let by_name = match protocol {
        Some(Datagram::Dtls) => datagram::dtls_record(first).and_then(|hello| {
            let (service, _) = registry.by_hello(hello.server_name.as_deref(), &hello.alpn)?;
            service.udp.is_some().then_some(service)
        }),
        _ => None,
    };
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
    let service = service.ok_or(Dropped::NoService)?;
    let proxy = service.udp.as_deref().ok_or(Dropped::NoService)?;
    if !service.access.permits_client(client) {
        return Err(Dropped::AccessDenied);
    }
    let disabled = settings
        .usage
        .get(&service.name)
        .is_some_and(|counts| counts.disabled.load(Ordering::Acquire));
    if disabled {
        return Err(Dropped::Disabled);
    }
    Ok(Route {
        service,
        proxy,
        routed,
        protocol,
    })
}

/// A datagram's client as the access rules see it.
pub(crate) fn client_info(client: std::net::SocketAddr, local: std::net::SocketAddr) -> ClientInfo {
    ClientInfo {
        peer: Peer::Tcp(client),
        local: Some(local),
        tls: None,
        sni: None,
    }
}
