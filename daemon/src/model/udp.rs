//! Datagrams: a UDP listener's routes (which service a flow's first
//! datagram goes to) and the daemon-wide flow settings. A service's UDP
//! backends (`proxy_udp`) are a pool like a TCP proxy's ([`super::Proxy`]).

use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::time::Duration;

use tcpmux_proto::sniff::datagram::Datagram;
use tcpmux_proto::ServiceName;

use super::MatchRule;

/// A flow with no datagram either way for this long ends.
pub const DEFAULT_UDP_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A QUIC flow's idle timeout when `udp_idle_timeout` is not set: QUIC
/// endpoints keep a connection alive with their own PINGs well within it.
pub const DEFAULT_QUIC_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Flows at once on one UDP listener when `max_udp_flows` is not set: each
/// costs a socket, so this stays well under a raised descriptor limit.
pub const DEFAULT_MAX_UDP_FLOWS: usize = 16_384;

/// A UDP listener's routes (`udp = true` and the keys beside it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UdpRoutes {
    /// The probes this listener runs (`wireguard = "wg"`, ...), each with
    /// the service its flows go to. QUIC and DTLS clients are routed by
    /// their server name first (the services' `sni` and `alpn`).
    pub probes: Vec<(Datagram, ServiceName)>,
    /// `match = [{ regex, service }, ...]`, tried in order on datagrams no
    /// probe and no server name routed.
    pub rules: Vec<MatchRule>,
    /// Where a flow nothing else routed goes (`udp_default`); without it,
    /// its datagrams are dropped and counted.
    pub default: Option<ServiceName>,
}

impl UdpRoutes {
    /// The listener's services by key, for checking each exists and takes
    /// datagrams.
    pub fn targets(&self) -> impl Iterator<Item = (&'static str, &ServiceName)> {
        let probes = self.probes.iter().map(|(p, name)| (p.name(), name));
        let rules = self.rules.iter().map(|rule| ("match", &rule.service));
        probes
            .chain(rules)
            .chain(self.default.iter().map(|name| ("udp_default", name)))
    }

    /// The probes to run: those routed, and QUIC and DTLS always, whose
    /// clients may be routed by server name.
    pub fn enabled(&self) -> Vec<Datagram> {
        let mut enabled = vec![Datagram::Quic, Datagram::Dtls];
        for (protocol, _) in &self.probes {
            if !enabled.contains(protocol) {
                enabled.push(*protocol);
            }
        }
        enabled
    }

    /// The service `protocol`'s flows go to.
    pub fn probe_route(&self, protocol: Datagram) -> Option<&ServiceName> {
        let mut routes = self.probes.iter();
        routes.find(|(p, _)| *p == protocol).map(|(_, name)| name)
    }
}

/// A UDP flow handed from a daemon to its successor in a binary upgrade:
/// what its task knew, and its backend socket, so that the backend keeps
/// seeing the same source port.
#[derive(Debug)]
pub struct HandedFlow {
    /// The listener socket's address.
    pub listener: SocketAddr,
    pub client: SocketAddr,
    pub service: ServiceName,
    pub backend: SocketAddr,
    /// How it was routed, as the metrics and the log word it.
    pub routed: String,
    pub idle: Duration,
    pub quic: bool,
    /// Where its replies leave from on a wildcard listener, and the
    /// interface.
    pub reply_from: Option<(IpAddr, u32)>,
    /// The QUIC connection IDs it carries.
    pub cids: Vec<Vec<u8>>,
    /// Its backend socket, connected to `backend`.
    pub socket: OwnedFd,
}

/// How a service's flows end besides the daemon's settings: its own
/// `udp_idle_timeout`, and `udp_responses`, the replies a client datagram
/// expects (DNS: 1), after which the flow ends at once instead of idling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceFlows {
    pub idle_timeout: Option<Duration>,
    pub responses: Option<u32>,
}

/// The flow settings: `max_udp_flows` (the daemon's), `max_udp_flows_per_ip`
/// (each listener socket's), `udp_idle_timeout`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpSettings {
    pub max_flows: usize,
    pub max_flows_per_ip: Option<usize>,
    /// As configured; `None`: 60 s, 30 s for QUIC.
    pub idle_timeout: Option<Duration>,
    /// The shortest of the services' own `udp_idle_timeout`s, if any set one.
    pub shortest_service_idle: Option<Duration>,
    /// The `proxy_udp` backends' `quic_server_id`s, daemon-wide.
    pub quic_servers: super::QuicServers,
}

impl Default for UdpSettings {
    fn default() -> Self {
        UdpSettings {
            max_flows: DEFAULT_MAX_UDP_FLOWS,
            max_flows_per_ip: None,
            idle_timeout: None,
            shortest_service_idle: None,
            quic_servers: super::QuicServers::default(),
        }
    }
}

impl UdpSettings {
    /// How long a flow of `protocol` may stay idle.
    pub fn idle_timeout(&self, protocol: Option<Datagram>) -> Duration {
        match (self.idle_timeout, protocol) {
            (Some(configured), _) => configured,
            (None, Some(Datagram::Quic)) => DEFAULT_QUIC_IDLE_TIMEOUT,
            (None, _) => DEFAULT_UDP_IDLE_TIMEOUT,
        }
    }

    /// How long a flow of `protocol` to a service with `own` settings may
    /// stay idle: the service's `udp_idle_timeout`, else the daemon's.
    pub fn idle_timeout_for(&self, own: &ServiceFlows, protocol: Option<Datagram>) -> Duration {
        own.idle_timeout
            .unwrap_or_else(|| self.idle_timeout(protocol))
    }

    /// The shortest idle timeout any flow may have now.
    pub fn shortest_idle(&self) -> Duration {
        let daemon = self
            .idle_timeout(None)
            .min(self.idle_timeout(Some(Datagram::Quic)));
        self.shortest_service_idle.map_or(daemon, |s| s.min(daemon))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quic_flows_idle_out_sooner_unless_configured() {
        let mut settings = UdpSettings::default();
        assert_eq!(
            settings.idle_timeout(Some(Datagram::Quic)),
            DEFAULT_QUIC_IDLE_TIMEOUT
        );
        assert_eq!(settings.idle_timeout(None), DEFAULT_UDP_IDLE_TIMEOUT);
        settings.idle_timeout = Some(Duration::from_secs(5));
        assert_eq!(
            settings.idle_timeout(Some(Datagram::Quic)),
            Duration::from_secs(5)
        );
        assert_eq!(settings.shortest_idle(), Duration::from_secs(5));
        // A service's own timeout comes first, and may be the shortest.
        let own = ServiceFlows {
            idle_timeout: Some(Duration::from_secs(2)),
            responses: Some(1),
        };
        assert_eq!(
            settings.idle_timeout_for(&own, None),
            Duration::from_secs(2)
        );
        let none = ServiceFlows::default();
        assert_eq!(
            settings.idle_timeout_for(&none, None),
            Duration::from_secs(5)
        );
        settings.shortest_service_idle = own.idle_timeout;
        assert_eq!(settings.shortest_idle(), Duration::from_secs(2));
    }
}
