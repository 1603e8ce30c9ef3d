//! Routing for clients that send no TCPMUX name: which service a detecting
//! listener gives an SSH, HTTP, TLS, silent or other recognized client (by a
//! probe or a `match` rule), and the host names (TLS SNI, HTTP Host) a
//! service answers to.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use tcpmux_proto::sniff::{Probes, Protocol};
use tcpmux_proto::ServiceName;

use super::Pattern;

/// How long a detecting listener waits for a first byte before it takes the
/// client for one of those that wait for the server to speak first.
pub const DEFAULT_DETECT_TIMEOUT: Duration = Duration::from_millis(500);

/// A detecting listener's routes (`detect = true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detect {
    /// For SSH clients (`SSH-…` first).
    pub ssh: Option<ServiceName>,
    /// For HTTP requests whose Host no service claims.
    pub http: Option<ServiceName>,
    /// For clients that send nothing within `timeout`.
    pub silent: Option<ServiceName>,
    /// For TLS ClientHellos whose SNI no service claims, or without one.
    pub sni_default: Option<ServiceName>,
    /// The optional probes this listener runs (`openvpn = "vpn"`, ...), each
    /// with the service its clients go to.
    pub probes: Vec<(Protocol, ServiceName)>,
    /// `match = [{ regex, service }, ...]`, tried in order on clients no
    /// probe recognized.
    pub rules: Vec<MatchRule>,
    pub timeout: Duration,
}

/// One `match` rule: clients whose first bytes match go to `service`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchRule {
    pub pattern: Pattern,
    pub service: ServiceName,
}

impl Detect {
    /// The listener's services by name, for checking that each exists.
    pub fn targets(&self) -> impl Iterator<Item = (&'static str, &ServiceName)> {
        [
            ("ssh", &self.ssh),
            ("http", &self.http),
            ("silent", &self.silent),
            ("sni_default", &self.sni_default),
        ]
        .into_iter()
        .filter_map(|(key, name)| Some((key, name.as_ref()?)))
        .chain(self.probes.iter().map(|(p, name)| (p.name(), name)))
        .chain(self.rules.iter().map(|rule| ("match", &rule.service)))
    }

    /// The optional probes to run.
    pub fn enabled(&self) -> Probes {
        self.probes
            .iter()
            .fold(Probes::NONE, |set, (protocol, _)| set.with(*protocol))
    }

    /// The service `protocol`'s clients go to.
    pub fn probe_route(&self, protocol: Protocol) -> Option<&ServiceName> {
        let mut routes = self.probes.iter();
        routes.find(|(p, _)| *p == protocol).map(|(_, name)| name)
    }
}

/// A host name a service answers to: exact (`db.example.com`) or one-label
/// wildcard (`*.example.org`, which matches `a.example.org` but neither
/// `example.org` nor `a.b.example.org`). Lower case.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostPattern {
    Exact(String),
    /// The suffix after `*.`.
    Wildcard(String),
}

#[derive(Debug, thiserror::Error)]
#[error("invalid host name {0:?}: expected e.g. db.example.com or *.example.org")]
pub struct HostPatternError(String);

impl FromStr for HostPattern {
    type Err = HostPatternError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let lower = text.trim_end_matches('.').to_ascii_lowercase();
        let (wildcard, host) = match lower.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, lower.as_str()),
        };
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
            return Err(HostPatternError(text.to_owned()));
        }
        Ok(match wildcard {
            true => HostPattern::Wildcard(host.to_owned()),
            false => HostPattern::Exact(host.to_owned()),
        })
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(host) => f.write_str(host),
            HostPattern::Wildcard(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

/// Values by [`HostPattern`]: what a name finds is its exact entry, then
/// the wildcard entry of its parent. The one lookup of `sni`,
/// `sni_terminate` and the certificates picked by SNI.
#[derive(Clone, Debug)]
pub struct HostMap<T> {
    exact: HashMap<String, T>,
    /// By the suffix after `*.`.
    wildcard: HashMap<String, T>,
}

impl<T> Default for HostMap<T> {
    fn default() -> Self {
        HostMap {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        }
    }
}

impl<T> HostMap<T> {
    /// The entry of `pattern`, made with `T::default()` if it has none.
    pub fn entry(&mut self, pattern: &HostPattern) -> &mut T
    where
        T: Default,
    {
        let (map, host) = match pattern {
            HostPattern::Exact(host) => (&mut self.exact, host),
            HostPattern::Wildcard(suffix) => (&mut self.wildcard, suffix),
        };
        map.entry(host.clone()).or_default()
    }

    /// Sets `pattern`'s value unless it has one: the first wins.
    pub fn insert(&mut self, pattern: &HostPattern, value: T) {
        let (map, host) = match pattern {
            HostPattern::Exact(host) => (&mut self.exact, host),
            HostPattern::Wildcard(suffix) => (&mut self.wildcard, suffix),
        };
        map.entry(host.clone()).or_insert(value);
    }

    /// The entries `name` (any case) finds: its own, then its parent's
    /// wildcard one.
    pub fn matches(&self, name: &str) -> impl Iterator<Item = &T> {
        // Names arrive in lower case; only others cost a copy.
        let name: Cow<'_, str> = match name.bytes().any(|b| b.is_ascii_uppercase()) {
            true => name.to_ascii_lowercase().into(),
            false => name.into(),
        };
        let parent = name.split_once('.').map(|(_, parent)| parent);
        let found = [
            self.exact.get(&*name),
            parent.and_then(|p| self.wildcard.get(p)),
        ];
        found.into_iter().flatten()
    }

    /// Whether `name` (lower case) has an entry of its own, not a wildcard's.
    pub fn has_exact(&self, name: &str) -> bool {
        self.exact.contains_key(name)
    }

    /// The first entry `name` finds.
    pub fn get(&self, name: &str) -> Option<&T> {
        self.matches(name).next()
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty()
    }
}

/// How a connection reached its service, for the log and the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routed {
    Tcpmux,
    Sni,
    /// By a TLS client's ALPN protocol (with its SNI or alone), passed
    /// through or, on a TLS listener, by the protocol the handshake agreed.
    Alpn,
    /// By the server name of a TLS client this listener terminated
    /// (`sni_terminate`).
    SniTerminate,
    Ssh,
    Http,
    Silent,
    /// By an optional probe (OpenVPN, XMPP, SOCKS, PostgreSQL, RDP).
    Probe(Protocol),
    /// By a listener's `match` rule.
    Match,
    /// A UDP flow, by its first datagram: the route's word (`sni`,
    /// `wireguard`, `udp_default`, ...).
    Udp(&'static str),
}

impl Routed {
    pub fn label(self) -> &'static str {
        match self {
            Routed::Tcpmux => "tcpmux",
            Routed::Sni => "sni",
            Routed::Alpn => "alpn",
            Routed::SniTerminate => "sni_terminate",
            Routed::Ssh => "ssh",
            Routed::Http => "http",
            Routed::Silent => "silent",
            Routed::Probe(protocol) => protocol.name(),
            Routed::Match => "match",
            Routed::Udp(word) => word,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_map_finds_the_exact_name_then_its_parents_wildcard() {
        let mut map = HostMap::default();
        for (pattern, value) in [
            ("*.example.org", 1),
            ("db.example.org", 2),
            ("*.EXAMPLE.org", 3),
        ] {
            map.insert(&pattern.parse().unwrap(), value);
        }
        assert_eq!(map.get("db.example.org"), Some(&2));
        assert_eq!(map.matches("DB.Example.org").collect::<Vec<_>>(), [&2, &1]);
        // The first value of a pattern wins.
        assert_eq!(map.get("web.example.org"), Some(&1));
        assert_eq!(map.get("example.org"), None);
        assert_eq!(map.get("a.b.example.org"), None);
        assert!(!map.is_empty() && HostMap::<u8>::default().is_empty());
    }

    #[test]
    fn host_patterns() {
        assert_eq!(
            "DB.Example.com.".parse::<HostPattern>().unwrap(),
            HostPattern::Exact("db.example.com".into())
        );
        assert_eq!(
            "*.example.org".parse::<HostPattern>().unwrap(),
            HostPattern::Wildcard("example.org".into())
        );
        for bad in ["", "*.", "a..b", "a b.com", "*.*.x", "x*.y"] {
            assert!(bad.parse::<HostPattern>().is_err(), "{bad}");
        }
    }
}
