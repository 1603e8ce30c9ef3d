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
    let mut specs: Vec<(ListenSpec, usize)> = Vec::new();
    for item in list.get_ref() {
        let spec = one(src, item)?;
        if let Some((first, at)) = specs.iter().find(|(seen, _)| clash(&seen.addr, &spec.addr)) {
            let (line, _) = src.line_column(*at);
            return Err(src.at(
                item.span(),
                format!(
                    "listen address {} clashes with {} on line {line}: both cannot be bound",
                    spec.addr, first.addr
                ),
            ));
        }
        specs.push((spec, item.span().start));
    }
    Ok(Some(specs.into_iter().map(|(spec, _)| spec).collect()))
}

/// Whether binding both addresses must fail: the same address, or on one port
/// a wildcard and an address of its family (Linux refuses the second bind). A
/// port 0 never clashes: the kernel picks a free one each time.
fn clash(a: &ListenAddr, b: &ListenAddr) -> bool {
    match (a, b) {
        (ListenAddr::Unix(a), ListenAddr::Unix(b)) => a == b,
        (ListenAddr::Tcp(a), ListenAddr::Tcp(b)) => {
            a.port() != 0
                && a.port() == b.port()
                && a.is_ipv4() == b.is_ipv4()
                && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
        }
        _ => false,
    }
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
    if let ListenAddr::Unix(path) = &addr {
        let directory = path.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(directory) = directory.filter(|d| !d.is_dir()) {
            return Err(src.at(
                item.span(),
                format!(
                    "listen {addr}: directory {} does not exist",
                    directory.display()
                ),
            ));
        }
    }
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
