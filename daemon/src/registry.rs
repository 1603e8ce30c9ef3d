//! The registry: service names to services, and the HELP text derived from them.
//! Built once per configuration and never changed: a reload builds a new one.

use std::collections::{BTreeMap, HashMap};

use tcpmux_proto::ServiceName;

use crate::model::{Builtin, Cidr, HostPattern, Service, ServiceKind};

/// Names to services.
#[derive(Clone, Debug)]
pub struct Registry {
    services: BTreeMap<ServiceName, Service>,
    help_text: Vec<u8>,
    /// Host names to services, for detecting listeners.
    sni_exact: HashMap<String, ServiceName>,
    sni_wildcard: HashMap<String, ServiceName>,
    http_hosts: HashMap<String, ServiceName>,
}

impl Registry {
    /// Builds a registry; names are already unique because they are map keys.
    pub fn new(services: BTreeMap<ServiceName, Service>) -> Self {
        let help_text = render_help(services.keys().map(ServiceName::as_str));
        let mut sni_exact: HashMap<String, ServiceName> = HashMap::new();
        let mut sni_wildcard: HashMap<String, ServiceName> = HashMap::new();
        let mut http_hosts: HashMap<String, ServiceName> = HashMap::new();
        for service in services.values() {
            for pattern in &service.sni {
                let (map, host): (&mut HashMap<_, _>, _) = match pattern {
                    HostPattern::Exact(host) => (&mut sni_exact, host),
                    HostPattern::Wildcard(suffix) => (&mut sni_wildcard, suffix),
                };
                map.insert(host.clone(), service.name.clone());
            }
            for host in &service.http_host {
                http_hosts.insert(host.clone(), service.name.clone());
            }
        }
        Self {
            services,
            help_text,
            sni_exact,
            sni_wildcard,
            http_hosts,
        }
    }

    /// Every built-in under its own name, the daemon's default service set.
    pub fn builtins() -> Self {
        Self::new(default_services())
    }

    pub fn lookup(&self, name: &ServiceName) -> Option<&Service> {
        self.services.get(name)
    }

    /// The service whose `sni` matches `server_name` (lower case): an exact
    /// name first, then a one-label wildcard.
    pub fn by_sni(&self, server_name: &str) -> Option<&Service> {
        let name = self.sni_exact.get(server_name).or_else(|| {
            let (_, parent) = server_name.split_once('.')?;
            self.sni_wildcard.get(parent)
        })?;
        self.services.get(name)
    }

    /// The service whose `http_host` is `host` (lower case, no port).
    pub fn by_http_host(&self, host: &str) -> Option<&Service> {
        self.services.get(self.http_hosts.get(host)?)
    }

    /// Every service, in HELP order.
    pub fn services(&self) -> impl Iterator<Item = &Service> {
        self.services.values()
    }

    /// Whether any service is a handoff, whose HELP entry depends on live backends.
    pub fn has_handoff(&self) -> bool {
        self.services()
            .any(|s| matches!(s.kind, ServiceKind::Handoff(_)))
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
pub fn loopback() -> Vec<Cidr> {
    ["127.0.0.0/8", "::1/128"]
        .iter()
        .filter_map(|r| r.parse().ok())
        .collect()
}

/// The HELP answer (RFC 1078) for `names`: one per CRLF line, no status line.
/// Rendered once per registry, so serving it is a single write.
pub fn render_help<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut text = Vec::new();
    for name in names {
        text.extend_from_slice(name.as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    text
}

/// The built-ins keyed by their own names, to start a configuration from.
pub fn default_services() -> BTreeMap<ServiceName, Service> {
    Builtin::ALL
        .into_iter()
        .filter_map(|builtin| {
            let name = ServiceName::parse(builtin.name()).ok()?;
            let mut service = Service::new(name.clone(), ServiceKind::Builtin(builtin));
            if builtin == Builtin::Stats {
                // Counters say what runs here: not for everyone by default.
                service.access.allow = loopback();
            }
            Some((name, service))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
