//! Datagrams: a UDP listener's routes (which service a flow's first
//! datagram goes to), a service's UDP backends (`proxy_udp`) and the
//! daemon-wide flow settings.

use std::net::SocketAddr;
use std::time::Duration;

use tcpmux_proto::sniff::datagram::Datagram;
use tcpmux_proto::ServiceName;

use super::MatchRule;

/// A flow with no datagram either way for this long ends.
pub const DEFAULT_UDP_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A QUIC flow's idle timeout when `udp_idle_timeout` is not set: QUIC
/// endpoints keep a connection alive with their own PINGs well within it.
pub const DEFAULT_QUIC_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Flows at once, daemon-wide, when `max_udp_flows` is not set: each costs
/// a socket, so this stays well under a raised descriptor limit.
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

/// A service's UDP backends (`proxy_udp`): a flow goes to one of them,
/// picked by the client's address, so a client whose flow ended comes back
/// to the same backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpProxy {
    pub backends: Vec<SocketAddr>,
}

impl UdpProxy {
    /// The backend for a client at `client`.
    pub fn pick(&self, client: SocketAddr) -> Option<SocketAddr> {
        if self.backends.is_empty() {
            return None;
        }
        // FNV-1a over the address: stable across restarts and workers.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let ip = match client.ip() {
            std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
            std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        for byte in ip.iter().chain(&client.port().to_be_bytes()) {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
        let at = (hash % self.backends.len() as u64) as usize;
        Some(self.backends[at])
    }
}

/// The daemon-wide flow settings: `max_udp_flows`, `max_udp_flows_per_ip`,
/// `udp_idle_timeout`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpSettings {
    pub max_flows: usize,
    pub max_flows_per_ip: Option<usize>,
    /// As configured; `None`: 60 s, 30 s for QUIC.
    pub idle_timeout: Option<Duration>,
}

impl Default for UdpSettings {
    fn default() -> Self {
        UdpSettings {
            max_flows: DEFAULT_MAX_UDP_FLOWS,
            max_flows_per_ip: None,
            idle_timeout: None,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_keeps_its_backend_and_clients_spread() {
        let proxy = UdpProxy {
            backends: ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
                .map(|a| a.parse().unwrap())
                .to_vec(),
        };
        let client: SocketAddr = "192.0.2.7:5353".parse().unwrap();
        assert_eq!(proxy.pick(client), proxy.pick(client));
        let picked: std::collections::HashSet<_> = (1000..1100)
            .map(|port| proxy.pick(SocketAddr::new(client.ip(), port)))
            .collect();
        assert_eq!(picked.len(), 3);
        assert_eq!(UdpProxy { backends: vec![] }.pick(client), None);
    }

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
    }
}
