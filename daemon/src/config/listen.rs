//! `listen`: the addresses to serve and each one's options.

use crate::keys::Keys;
use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::RawListenTable;
use crate::model::{Cidr, ListenAddr, ListenOptions, ListenSpec};
use crate::registry::Registry;

/// `fast_open = true`: the queue length nginx and HAProxy use by default too.
const DEFAULT_FAST_OPEN_QUEUE: u32 = 256;

/// The listen list as written; `None` when the key is absent.
pub(crate) fn listen(
    src: Source<'_>,
    list: Option<&Spanned<Vec<Spanned<toml::Value>>>>,
    keys: &Keys,
) -> Result<Option<Vec<ListenSpec>>, ConfigError> {
    let Some(list) = list else { return Ok(None) };
    if list.get_ref().is_empty() {
        return Err(src.at(list.span(), "`listen` is empty: give at least one address"));
    }
    let mut specs: Vec<(ListenSpec, usize)> = Vec::new();
    for item in list.get_ref() {
        let spec = one(src, item, keys)?;
        unix_directory(src, item, &spec.addr)?;
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

/// One entry of the list: its address and options, as written (what the
/// machine has, such as a socket's directory, is checked by the caller).
fn one(
    src: Source<'_>,
    item: &Spanned<toml::Value>,
    keys: &Keys,
) -> Result<ListenSpec, ConfigError> {
    let at = |message: String| src.at(item.span(), message);
    let table = table(src, item)?;
    let addr = match table.address.parse::<ListenAddr>() {
        // A relative socket path is the config file's, like every other path.
        Ok(ListenAddr::Unix(path)) if path.is_relative() => {
            let base = std::path::Path::new(src.origin)
                .parent()
                .unwrap_or(std::path::Path::new(""));
            ListenAddr::Unix(base.join(path))
        }
        parsed => parsed.map_err(|e| at(e.to_string()))?,
    };
    let unix = matches!(addr, ListenAddr::Unix(_));
    let accept_proxy_from = table
        .accept_proxy_from
        .iter()
        .map(|range| range.parse::<Cidr>().map_err(|e| at(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    if !accept_proxy_from.is_empty() && unix {
        return Err(at(
            "accept_proxy_from needs a TCP listener (upstreams are matched by IP)".into(),
        ));
    }
    let rules = super::detect::rules(src, item, &table)?;
    let detect = super::detect::routes(src, item, &table, &rules)?;
    if let Some(name) = table
        .name
        .as_ref()
        .filter(|n| n.is_empty() || n.contains(':'))
    {
        return Err(at(format!(
            "listen: name {name:?} must be non-empty, without ':'"
        )));
    }
    let tls = match &table.tls {
        Some(raw) => {
            Some(super::tls::load(src, raw, keys).map_err(|e| at(format!("listen {addr}: {e}")))?)
        }
        None => None,
    };
    if tls.is_some() && detect.as_ref().is_some_and(|d| d.sni_default.is_some()) {
        return Err(at(format!("listen {addr}: `sni_default` and `tls` do not mix: with `tls`, a TLS client whose name no service's `sni` takes is terminated here, so nothing would reach sni_default")));
    }
    let fast_open = fast_open(table.fast_open.as_ref()).ok_or_else(|| {
        at(format!(
            "listen {addr}: fast_open is true, false or a queue length from 1 to 65535"
        ))
    })?;
    let defer_accept = table.defer_accept.unwrap_or(false);
    let udp = super::udp::routes(src, item, &table, (&addr, &rules))?;
    let tcp = table.tcp.unwrap_or(true);
    if !tcp {
        let tcp_only = [
            ("detect", detect.is_some()),
            ("tls", tls.is_some()),
            ("accept_proxy_from", !accept_proxy_from.is_empty()),
            ("fast_open", fast_open.is_some()),
            ("defer_accept", defer_accept),
        ];
        if let Some((key, _)) = tcp_only.iter().find(|(_, given)| *given) {
            return Err(at(format!(
                "listen {addr}: `{key}` is for the TCP socket, which `tcp = false` leaves out"
            )));
        }
    }
    if (fast_open.is_some() || defer_accept) && unix {
        return Err(at(format!(
            "listen {addr}: fast_open and defer_accept are TCP options"
        )));
    }
    Ok(ListenSpec {
        addr,
        options: ListenOptions {
            accept_proxy_from,
            detect,
            tls,
            fast_open,
            defer_accept,
            udp,
        },
        name: table.name,
        tcp,
    })
}

/// An entry as serde reads it: a plain string is the address alone.
fn table(src: Source<'_>, item: &Spanned<toml::Value>) -> Result<RawListenTable, ConfigError> {
    match item.get_ref() {
        toml::Value::String(address) => Ok(RawListenTable {
            address: address.clone(),
            ..RawListenTable::default()
        }),
        toml::Value::Table(_) => item
            .get_ref()
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| {
                src.at(
                    item.span(),
                    format!("listen: {}", super::error::humanize(e.message().trim_end())),
                )
            }),
        _ => Err(src.at(
            item.span(),
            "a listen entry is an address string or a table with `address`",
        )),
    }
}

/// `fast_open`: off, on at the default queue length, or a queue length;
/// `None` for anything else.
fn fast_open(value: Option<&toml::Value>) -> Option<Option<u32>> {
    match value {
        None | Some(toml::Value::Boolean(false)) => Some(None),
        Some(toml::Value::Boolean(true)) => Some(Some(DEFAULT_FAST_OPEN_QUEUE)),
        Some(toml::Value::Integer(n)) if (1..=65535).contains(n) => Some(Some(*n as u32)),
        Some(_) => None,
    }
}

/// A Unix socket's directory must exist: the bind would fail later, after
/// the privilege drop, with a less helpful message.
fn unix_directory(
    src: Source<'_>,
    item: &Spanned<toml::Value>,
    addr: &ListenAddr,
) -> Result<(), ConfigError> {
    let ListenAddr::Unix(path) = addr else {
        return Ok(());
    };
    let directory = path.parent().filter(|d| !d.as_os_str().is_empty());
    match directory.filter(|d| !d.is_dir()) {
        Some(directory) => Err(src.at(
            item.span(),
            format!(
                "listen {addr}: directory {} does not exist",
                directory.display()
            ),
        )),
        None => Ok(()),
    }
}

/// Every service a listener routes to must exist; those its UDP side
/// routes to must take datagrams (`proxy_udp`).
pub(crate) fn check_targets(
    src: Source<'_>,
    list: Option<&Spanned<Vec<Spanned<toml::Value>>>>,
    specs: &[ListenSpec],
    registry: &Registry,
) -> Result<(), ConfigError> {
    let Some(list) = list else { return Ok(()) };
    for (item, spec) in list.get_ref().iter().zip(specs) {
        let streams = spec.options.detect.iter().flat_map(|d| d.targets());
        let datagrams = spec.options.udp.iter().flat_map(|u| u.targets());
        let targets = streams
            .map(|target| (target, false))
            .chain(datagrams.map(|target| (target, true)));
        for ((key, name), udp) in targets {
            let problem = match registry.lookup(name) {
                None => "is not a service",
                Some(service) if udp && service.udp.is_none() => {
                    "routes datagrams to a service without `proxy_udp`"
                }
                Some(_) => continue,
            };
            return Err(src.at(
                item.span(),
                format!("listen {}: {key} = \"{name}\" {problem}", spec.addr),
            ));
        }
    }
    Ok(())
}
