//! `listen`: the addresses to serve and each one's options.

use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::RawListen;
use crate::model::{Cidr, ListenAddr, ListenOptions, ListenSpec};

/// The listen list as written; `None` when the key is absent.
pub(crate) fn listen(
    src: Source<'_>,
    list: Option<&Spanned<Vec<Spanned<RawListen>>>>,
) -> Result<Option<Vec<ListenSpec>>, ConfigError> {
    let Some(list) = list else { return Ok(None) };
    if list.get_ref().is_empty() {
        return Err(src.at(list.span(), "`listen` is empty: give at least one address"));
    }
    let specs = list.get_ref().iter().map(|item| one(src, item));
    specs.collect::<Result<_, _>>().map(Some)
}

fn one(src: Source<'_>, item: &Spanned<RawListen>) -> Result<ListenSpec, ConfigError> {
    let (address, accept_proxy_from) = match item.get_ref() {
        RawListen::Address(address) => (address, &[][..]),
        RawListen::Table {
            address,
            accept_proxy_from,
        } => (address, &accept_proxy_from[..]),
    };
    let addr = address
        .parse::<ListenAddr>()
        .map_err(|e| src.at(item.span(), e.to_string()))?;
    let accept_proxy_from = accept_proxy_from
        .iter()
        .map(|range| {
            range
                .parse::<Cidr>()
                .map_err(|e| src.at(item.span(), e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !accept_proxy_from.is_empty() && matches!(addr, ListenAddr::Unix(_)) {
        return Err(src.at(
            item.span(),
            "accept_proxy_from needs a TCP listener (upstreams are matched by IP)",
        ));
    }
    Ok(ListenSpec {
        addr,
        options: ListenOptions { accept_proxy_from },
    })
}
