//! The names that route a client to a service (`sni`, `http_host`, `alpn`,
//! `sni_terminate`): each is one service's, and a name is either passed
//! through or terminated, never both; a second claim is an error at its place.

use std::collections::BTreeMap;

use tcpmux_proto::ServiceName;
use toml::Spanned;

use super::error::{ConfigError, Source};
use crate::model::{HostPattern, Service};

/// A host name routes to one service only; with `alpn`, a host name and a
/// protocol do (two services may share a name for different protocols), and
/// a protocol of services without `sni` routes to one of them.
pub(super) fn claim_host_names(
    src: Source<'_>,
    key: &Spanned<String>,
    service: &Service,
    services: &BTreeMap<ServiceName, Service>,
) -> Result<(), ConfigError> {
    let both_alpn = |other: &Service| match (service.alpn.is_empty(), other.alpn.is_empty()) {
        (true, true) => Some(String::new()),
        (false, false) => service
            .alpn
            .iter()
            .find(|p| other.alpn.contains(p))
            .cloned(),
        _ => None,
    };
    for other in services.values().filter(|o| o.name != service.name) {
        let sni = service.sni.iter().find(|p| other.sni.contains(p));
        let http = service
            .http_host
            .iter()
            .find(|h| other.http_host.contains(h));
        let shared_alpn = both_alpn(other);
        let (what, host) = match (sni, http, shared_alpn) {
            (Some(p), _, Some(a)) if a.is_empty() => ("sni", p.to_string()),
            (Some(p), _, Some(a)) => ("sni", format!("{p} with alpn {a}")),
            (_, Some(h), _) => ("http_host", h.clone()),
            (None, None, Some(a))
                if !a.is_empty() && service.sni.is_empty() && other.sni.is_empty() =>
            {
                ("alpn", a)
            }
            _ => continue,
        };
        return Err(src.at(
            key.span(),
            format!(
                "service {}: {what} {host} is already claimed by service {}",
                service.name, other.name
            ),
        ));
    }
    Ok(())
}

/// An `sni_terminate` name routes to one service, and is nobody's `sni`: on
/// a listener that does both, a name in `sni` is passed through, never
/// terminated, so the same name in both could only mislead.
pub(super) fn claim_terminated_names(
    src: Source<'_>,
    key: &Spanned<String>,
    service: &Service,
    services: &BTreeMap<ServiceName, Service>,
) -> Result<(), ConfigError> {
    let fault = |message: String| Err(src.at(key.span(), message));
    let name = &service.name;
    if let Some(p) = service
        .sni
        .iter()
        .find(|p| service.sni_terminate.contains(p))
    {
        return fault(format!(
            "service {name}: {p} is in both sni (passed through) and sni_terminate (terminated); keep one"
        ));
    }
    for other in services.values().filter(|o| o.name != *name) {
        let terminated = |of: &Service, names: &[HostPattern]| {
            of.sni_terminate.iter().find(|p| names.contains(p)).cloned()
        };
        if let Some(p) = terminated(service, &other.sni_terminate) {
            return fault(format!(
                "service {name}: sni_terminate {p} is already claimed by service {}",
                other.name
            ));
        }
        if let Some(p) = terminated(service, &other.sni).or(terminated(other, &service.sni)) {
            return fault(format!(
                "service {name}: {p} is passed through by one of services {name} and {} (sni) and terminated by the other (sni_terminate); keep one",
                other.name
            ));
        }
    }
    Ok(())
}
