//! `import_etc_services`: RFC 1078 suggests offering the host's /etc/services by
//! name; we do it for the names an administrator allows, as proxies to the same
//! port on `host`.

use std::collections::BTreeMap;
use std::sync::Arc;

use tcpmux_proto::ServiceName;

use super::error::{ConfigError, Source};
use super::raw::RawImport;
use crate::model::{
    Backend, Proxy, RelayMode, Service, ServiceKind, Weighted, DEFAULT_CONNECT_TIMEOUT,
};

/// Adds a proxy service for each allowed name.
pub(crate) fn import(
    src: Source<'_>,
    import: &RawImport,
    services: &mut crate::registry::Services,
) -> Result<(), ConfigError> {
    let file = import.file.as_deref().unwrap_or("/etc/services");
    let text = std::fs::read_to_string(file)
        .map_err(|e| src.whole(format!("import_etc_services: cannot read {file}: {e}")))?;
    let ports = tcp_ports(&text);
    let host = import.host.as_deref().unwrap_or("127.0.0.1");
    for wanted in &import.allow {
        let name = ServiceName::parse(wanted.get_ref()).map_err(|e| {
            src.at(
                wanted.span(),
                format!("import_etc_services: {:?}: {e}", wanted.get_ref()),
            )
        })?;
        let Some(&port) = ports.get(name.as_str()) else {
            return Err(src.at(
                wanted.span(),
                format!("import_etc_services: {name} is not a TCP service in {file}"),
            ));
        };
        let backend = format!("{host}:{port}")
            .parse::<Backend>()
            .map_err(|e| src.whole(format!("import_etc_services: host {host:?}: {e}")))?;
        let proxy = Proxy {
            backends: vec![Weighted::one(backend)],
            balance: Default::default(),
            hash_key: Default::default(),
            health_check: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: None,
            send_proxy: None,
            relay: RelayMode::default(),
            transparent: false,
            backend_tls: None,
        };
        let kind = ServiceKind::Proxy(Arc::new(proxy));
        services.insert(name.clone(), Box::new(Service::new(name, kind)));
    }
    Ok(())
}

/// `name port/proto aliases... # comment` lines: every TCP name and alias (folded
/// to lower case) to its port. Malformed lines are skipped, as libc does.
fn tcp_ports(text: &str) -> BTreeMap<String, u16> {
    let mut ports = BTreeMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut fields = line.split_whitespace();
        let (Some(name), Some(port_proto)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((port, "tcp")) = port_proto.split_once('/') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        for alias in std::iter::once(name).chain(fields) {
            ports.entry(alias.to_ascii_lowercase()).or_insert(port);
        }
    }
    ports
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_of_tcp_lines() {
        let ports = tcp_ports(
            "# comment\nssh 22/tcp\nntp 123/udp\nsmtp 25/tcp mail # alias\nbroken/tcp\nx abc/tcp\n",
        );
        assert_eq!(ports.get("ssh"), Some(&22));
        assert_eq!(ports.get("mail"), Some(&25));
        assert_eq!(ports.get("ntp"), None);
        assert_eq!(ports.len(), 3);
    }
}
