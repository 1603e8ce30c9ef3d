//! The names that route a client to a service (`sni`, `http_host`, `alpn`,
//! `sni_terminate`): each is one service's, and a name is either passed
//! through or terminated, never both; a second claim is an error at its place.
//! Indexed by name, so a file of 100,000 services loads in linear time.

use std::collections::HashMap;
use std::ops::Range;

use tcpmux_proto::ServiceName;

use super::error::{ConfigError, Source};
use crate::model::{HostPattern, Service};

/// Who claimed each routing name so far, in file order.
#[derive(Default)]
pub(super) struct Claims {
    /// Passed-through names, each with the services (and their `alpn`) that
    /// route it: several only when their `alpn` lists do not overlap.
    sni: HashMap<HostPattern, Vec<(ServiceName, Vec<String>)>>,
    http_host: HashMap<String, ServiceName>,
    /// Protocols of services without `sni`.
    alpn: HashMap<String, ServiceName>,
    sni_terminate: HashMap<HostPattern, ServiceName>,
}

impl Claims {
    /// Checks `service`'s names against the claims so far, then records them.
    pub(super) fn claim(
        &mut self,
        src: Source<'_>,
        key: Range<usize>,
        service: &Service,
    ) -> Result<(), ConfigError> {
        self.check(service)
            .map_err(|message| src.at(key, message))?;
        self.record(service);
        Ok(())
    }

    fn check(&self, service: &Service) -> Result<(), String> {
        let name = &service.name;
        let taken = |what: &str, host: String, other: &ServiceName| {
            Err(format!(
                "service {name}: {what} {host} is already claimed by service {other}"
            ))
        };
        for pattern in &service.sni {
            for (other, alpn) in self.sni.get(pattern).into_iter().flatten() {
                match shared_alpn(&service.alpn, alpn) {
                    Some(a) if a.is_empty() => return taken("sni", pattern.to_string(), other),
                    Some(a) => return taken("sni", format!("{pattern} with alpn {a}"), other),
                    None => {}
                }
            }
        }
        for host in &service.http_host {
            if let Some(other) = self.http_host.get(host) {
                return taken("http_host", host.clone(), other);
            }
        }
        if service.sni.is_empty() {
            for protocol in &service.alpn {
                if let Some(other) = self.alpn.get(protocol) {
                    return taken("alpn", protocol.clone(), other);
                }
            }
        }
        self.check_terminated(service)
    }

    /// An `sni_terminate` name routes to one service, and is nobody's `sni`:
    /// on a listener that does both, a name in `sni` is passed through, never
    /// terminated, so the same name in both could only mislead.
    fn check_terminated(&self, service: &Service) -> Result<(), String> {
        let name = &service.name;
        if let Some(p) = service
            .sni
            .iter()
            .find(|p| service.sni_terminate.contains(p))
        {
            return Err(format!(
                "service {name}: {p} is in both sni (passed through) and sni_terminate (terminated); keep one"
            ));
        }
        let mixed = |p: &HostPattern, other: &ServiceName| {
            Err(format!(
                "service {name}: {p} is passed through by one of services {name} and {other} (sni) and terminated by the other (sni_terminate); keep one"
            ))
        };
        for p in &service.sni_terminate {
            if let Some(other) = self.sni_terminate.get(p) {
                return Err(format!(
                    "service {name}: sni_terminate {p} is already claimed by service {other}"
                ));
            }
            if let Some((other, _)) = self.sni.get(p).and_then(|claims| claims.first()) {
                return mixed(p, other);
            }
        }
        for p in &service.sni {
            if let Some(other) = self.sni_terminate.get(p) {
                return mixed(p, other);
            }
        }
        Ok(())
    }

    fn record(&mut self, service: &Service) {
        let name = &service.name;
        for pattern in &service.sni {
            self.sni
                .entry(pattern.clone())
                .or_default()
                .push((name.clone(), service.alpn.clone()));
        }
        for host in &service.http_host {
            self.http_host.insert(host.clone(), name.clone());
        }
        if service.sni.is_empty() {
            for protocol in &service.alpn {
                self.alpn.insert(protocol.clone(), name.clone());
            }
        }
        for pattern in &service.sni_terminate {
            self.sni_terminate.insert(pattern.clone(), name.clone());
        }
    }
}

/// The protocol two `alpn` lists share: `Some("")` when both are empty (the
/// name alone decides, so the two collide), `None` when they cannot collide.
fn shared_alpn(ours: &[String], theirs: &[String]) -> Option<String> {
    match (ours.is_empty(), theirs.is_empty()) {
        (true, true) => Some(String::new()),
        (false, false) => ours.iter().find(|p| theirs.contains(p)).cloned(),
        _ => None,
    }
}
