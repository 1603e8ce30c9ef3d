//! The registry: service names to services, and the HELP text derived from them.
//! Built once per configuration and never changed: a reload builds a new one.

use std::collections::{BTreeMap, HashMap};

use tcpmux_proto::ServiceName;

use crate::model::{Builtin, Cidr, HostMap, Service, ServiceKind};

/// Services by name, each boxed: a map of 100,000 is built and searched
/// without moving 320-byte values through the tree's nodes.
pub(crate) type Services = BTreeMap<ServiceName, Box<Service>>;

/// Names to services.
#[derive(Clone, Debug)]
pub struct Registry {
    services: Services,
    help_text: Vec<u8>,
    /// Host names to services, for detecting listeners; a TLS name may have
    /// several services, one per `alpn` set.
    sni: HostMap<Vec<ServiceName>>,
    http_hosts: HashMap<String, ServiceName>,
    /// `sni_terminate` names.
    terminated: HostMap<ServiceName>,
    /// ALPN protocols of services without `sni`.
    alpn_only: HashMap<String, ServiceName>,
}

/// Why a TLS client got its service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMatch {
    /// Its server name alone.
    Sni,
    /// One of its ALPN protocols (with its server name, or alone).
    Alpn,
}

impl Registry {
    /// Builds a registry; names are already unique because they are map keys.
    pub fn new(services: Services) -> Self {
        // HELP lists what a TCPMUX client can ask for.
        let streams = services.values().filter(|s| s.kind != ServiceKind::UdpOnly);
        let help_text = render_help(streams.map(|s| s.name.as_str()));
        let mut sni: HostMap<Vec<ServiceName>> = HostMap::default();
        let mut http_hosts: HashMap<String, ServiceName> = HashMap::new();
        let mut alpn_only: HashMap<String, ServiceName> = HashMap::new();
        let mut terminated = HostMap::default();
        for service in services.values() {
            for pattern in &service.sni_terminate {
                terminated.insert(pattern, service.name.clone());
            }
            for pattern in &service.sni {
                sni.entry(pattern).push(service.name.clone());
            }
            if service.sni.is_empty() {
                for protocol in &service.alpn {
                    alpn_only.insert(protocol.clone(), service.name.clone());
                }
            }
            for host in &service.http_host {
                http_hosts.insert(host.clone(), service.name.clone());
            }
        }
        Self {
            services,
            help_text,
            sni,
            http_hosts,
            terminated,
            alpn_only,
        }
    }

    /// Every built-in under its own name, the daemon's default service set.
    pub fn builtins() -> Self {
        Self::new(default_services())
    }

    pub fn lookup(&self, name: &ServiceName) -> Option<&Service> {
        self.services.get(name).map(|s| &**s)
    }

    /// The service whose `sni` matches `server_name` (lower case) for a
    /// client that offers no ALPN protocol.
    pub fn by_sni(&self, server_name: &str) -> Option<&Service> {
        self.by_hello::<&str>(Some(server_name), &[])
            .map(|(service, _)| service)
    }

    /// The service for a ClientHello with `server_name` (lower case) that
    /// offers `alpn` (in its order of preference). The most specific wins:
    /// an exact name before a one-label wildcard; for a name, a service that
    /// also lists one of the protocols before one without `alpn`; then a
    /// service without `sni` that lists one of the protocols.
    pub fn by_hello<P: AsRef<str>>(
        &self,
        server_name: Option<&str>,
        alpn: &[P],
    ) -> Option<(&Service, TlsMatch)> {
        let named = server_name
            .into_iter()
            .flat_map(|name| self.sni.matches(name));
        // Looked up, not collected: this runs for every ClientHello.
        for names in named {
            let candidates = || names.iter().filter_map(|n| self.lookup(n));
            let with_protocol = alpn
                .iter()
                .find_map(|p| candidates().find(|s| s.alpn.iter().any(|a| a == p.as_ref())));
            if let Some(service) = with_protocol {
                return Some((service, TlsMatch::Alpn));
            }
            if let Some(service) = candidates().find(|s| s.alpn.is_empty()) {
                return Some((service, TlsMatch::Sni));
            }
        }
        let by_protocol = alpn.iter().find_map(|p| self.alpn_only.get(p.as_ref()))?;
        Some((self.lookup(by_protocol)?, TlsMatch::Alpn))
    }

    /// On a TLS listener, the service for the protocol the handshake agreed
    /// on: one whose `alpn` lists it and whose `sni` (if any) matches the
    /// name the client asked for.
    pub fn by_negotiated(&self, server_name: Option<&str>, protocol: &str) -> Option<&Service> {
        match self.by_hello(server_name, &[protocol])? {
            (service, TlsMatch::Alpn) => Some(service),
            (_, TlsMatch::Sni) => None,
        }
    }

    /// On a TLS listener, the service whose `sni_terminate` matches the
    /// name the client asked for: an exact name before a wildcard.
    pub fn by_terminated_sni(&self, server_name: &str) -> Option<&Service> {
        self.lookup(self.terminated.get(server_name)?)
    }

    /// Whether `server_name` (lower case) is an exact `sni_terminate` name
    /// and no exact `sni` one: then termination wins over an `sni` wildcard
    /// (exact names win over wildcards across both keys).
    pub fn terminates_before_wildcard(&self, server_name: &str) -> bool {
        self.terminated.has_exact(server_name) && !self.sni.has_exact(server_name)
    }

    /// Every protocol some service lists in `alpn`, in service order, once.
    pub fn alpn_protocols(&self) -> Vec<&str> {
        let mut all: Vec<&str> = Vec::new();
        for protocol in self.services().flat_map(|s| &s.alpn) {
            if !all.contains(&protocol.as_str()) {
                all.push(protocol);
            }
        }
        all
    }

    /// The service whose `http_host` is `host` (lower case, no port).
    pub fn by_http_host(&self, host: &str) -> Option<&Service> {
        self.lookup(self.http_hosts.get(host)?)
    }

    /// Every service, in HELP order.
    pub fn services(&self) -> impl Iterator<Item = &Service> {
        self.services.values().map(|s| &**s)
    }

    /// Whether any service is a handoff, whose HELP entry depends on live backends.
    pub fn has_handoff(&self) -> bool {
        self.services()
            .any(|s| matches!(s.kind, ServiceKind::Handoff(_)))
    }

    /// Whether a proxy service connects from its clients' addresses.
    pub fn has_transparent_proxy(&self) -> bool {
        self.services().any(|s| {
            matches!(&s.kind, ServiceKind::Proxy(p) if p.transparent)
                || s.udp.as_ref().is_some_and(|udp| udp.transparent)
        })
    }

    /// Names in HELP order (sorted).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.services.keys().map(ServiceName::as_str)
    }

    pub fn len(&self) -> usize {
        self.services.len()
    }

    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// The HELP answer: one name per CRLF line.
    pub fn help_text(&self) -> &[u8] {
        &self.help_text
    }
}

/// The loopback ranges, the default audience of `stats`.
pub(crate) fn loopback() -> Vec<Cidr> {
    ["127.0.0.0/8", "::1/128"]
        .iter()
        .filter_map(|r| r.parse().ok())
        .collect()
}

/// The HELP answer (RFC 1078) for `names`: one per CRLF line, no status line.
/// Rendered once per registry, so serving it is a single write.
pub(crate) fn render_help<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut text = Vec::new();
    for name in names {
        text.extend_from_slice(name.as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    text
}

/// The built-ins keyed by their own names, to start a configuration from.
pub(crate) fn default_services() -> Services {
    Builtin::ALL
        .into_iter()
        .filter_map(|builtin| {
            let name = ServiceName::parse(builtin.name()).ok()?;
            let mut service = Service::new(name.clone(), ServiceKind::Builtin(builtin));
            if builtin == Builtin::Stats {
                // Counters say what runs here: not for everyone by default.
                service.access.allow = loopback();
            }
            Some((name, Box::new(service)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminated_names_find_their_service_exact_before_wildcard() {
        let mut services = default_services();
        for (name, patterns) in [
            ("app", &["app.example.com"][..]),
            ("any", &["*.example.com"]),
        ] {
            let name = ServiceName::parse(name).unwrap();
            let mut service = Service::new(name.clone(), ServiceKind::Builtin(Builtin::Echo));
            service.sni_terminate = patterns.iter().map(|p| p.parse().unwrap()).collect();
            services.insert(name, Box::new(service));
        }
        let registry = Registry::new(services);
        let found = |n: &str| registry.by_terminated_sni(n).map(|s| s.name.to_string());
        assert_eq!(found("app.example.com").as_deref(), Some("app"));
        assert_eq!(found("db.example.com").as_deref(), Some("any"));
        assert_eq!(found("example.com"), None);
        assert_eq!(found("a.b.example.com"), None);
        // Terminated names are not passed through.
        assert!(registry.by_sni("app.example.com").is_none());
    }

    #[test]
    fn builtins_are_all_listed_in_order() {
        let registry = Registry::builtins();
        assert_eq!(registry.len(), Builtin::ALL.len());
        assert_eq!(
            registry.help_text(),
            b"chargen\r\ndaytime\r\ndiscard\r\necho\r\nisotime\r\nsometext\r\nstats\r\ntime\r\n"
        );
        let echo = ServiceName::parse("ECHO").unwrap();
        assert_eq!(
            registry.lookup(&echo).map(|s| &s.kind),
            Some(&ServiceKind::Builtin(Builtin::Echo))
        );
    }
}
