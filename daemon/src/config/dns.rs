//! `dns_min_ttl`, `dns_max_ttl` and `resolvers`: how the proxies' backends
//! named by host name or SRV record are looked up and followed.

use std::net::{IpAddr, SocketAddr};

use super::checks::positive_duration;
use super::error::{ConfigError, Source};
use super::raw::RawConfig;
use crate::model::Dns;

/// `dns_min_ttl`, `dns_max_ttl` and `resolvers` (`ip` or `ip:port`).
pub(super) fn dns(src: Source<'_>, raw: &RawConfig) -> Result<Dns, ConfigError> {
    let defaults = Dns::default();
    let min_ttl = positive_duration(src, "dns_min_ttl", raw.dns_min_ttl.as_ref())?
        .unwrap_or(defaults.min_ttl);
    let max_ttl = positive_duration(src, "dns_max_ttl", raw.dns_max_ttl.as_ref())?
        .unwrap_or(defaults.max_ttl);
    if min_ttl > max_ttl {
        let span = raw.dns_max_ttl.as_ref().or(raw.dns_min_ttl.as_ref());
        let message = format!("dns_min_ttl ({min_ttl:?}) is longer than dns_max_ttl ({max_ttl:?})");
        return Err(match span {
            Some(span) => src.at(span.span(), message),
            None => src.whole(message),
        });
    }
    let mut resolvers = Vec::new();
    if let Some(list) = &raw.resolvers {
        for text in list.get_ref() {
            let addr = text
                .parse::<SocketAddr>()
                .or_else(|_| text.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
                .map_err(|_| {
                    src.at(
                        list.span(),
                        format!("resolvers: {text:?} is not an IP address or IP:port"),
                    )
                })?;
            resolvers.push(addr);
        }
        if resolvers.is_empty() {
            return Err(src.at(list.span(), "`resolvers` lists no name server"));
        }
    }
    Ok(Dns {
        min_ttl,
        max_ttl,
        resolvers,
    })
}
