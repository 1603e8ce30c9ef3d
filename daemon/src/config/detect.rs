//! A detecting listener's routes (`detect = true` and the keys beside it):
//! which service gets SSH, HTTP, TLS, silent and probed clients, and the
//! `match` rules.

use tcpmux_proto::sniff::Protocol;
use tcpmux_proto::ServiceName;
use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::RawListenTable;
use crate::model::{Detect, MatchRule, Pattern, DEFAULT_DETECT_TIMEOUT};

/// The detection routes of a listener table; its route keys need `detect`.
pub(super) fn routes(
    src: Source<'_>,
    item: &Spanned<toml::Value>,
    table: &RawListenTable,
    rules: &[MatchRule],
) -> Result<Option<Detect>, ConfigError> {
    let at = |message: String| src.at(item.span(), message);
    let names = [
        ("ssh", &table.ssh),
        ("http", &table.http),
        ("silent", &table.silent),
        ("sni_default", &table.sni_default),
    ];
    let probes = [
        (Protocol::OpenVpn, &table.openvpn),
        (Protocol::Xmpp, &table.xmpp),
        (Protocol::Socks, &table.socks),
        (Protocol::Postgres, &table.postgres),
        (Protocol::Rdp, &table.rdp),
    ];
    if !table.detect {
        // `openvpn` and `match` route a UDP side's flows too.
        let udp = table.udp == Some(true);
        let given = names.iter().find(|(_, v)| v.is_some()).map(|(k, _)| *k);
        let given = given.or_else(|| {
            let probe = probes
                .iter()
                .find(|(p, v)| v.is_some() && !(udp && *p == Protocol::OpenVpn));
            probe.map(|(p, _)| p.name())
        });
        let given = given.or(table.rules.as_ref().filter(|_| !udp).map(|_| "match"));
        let given = given.or(table.detect_timeout.map(|_| "detect_timeout"));
        return match given {
            Some(key) => Err(at(format!("listen: `{key}` needs `detect = true`"))),
            None => Ok(None),
        };
    }
    let name = |key: &str, value: &str| route_name(src, item, key, value);
    let optional =
        |key: &str, value: &Option<String>| value.as_deref().map(|v| name(key, v)).transpose();
    let timeout = table.detect_timeout.map_or(DEFAULT_DETECT_TIMEOUT, |t| t.0);
    if timeout.is_zero() {
        return Err(at("listen: detect_timeout must be greater than zero".into()));
    }
    let mut routed = Vec::new();
    for (protocol, value) in probes {
        if let Some(v) = value {
            routed.push((protocol, name(protocol.name(), v)?));
        }
    }
    Ok(Some(Detect {
        ssh: optional("ssh", &table.ssh)?,
        http: optional("http", &table.http)?,
        silent: optional("silent", &table.silent)?,
        sni_default: optional("sni_default", &table.sni_default)?,
        probes: routed,
        rules: rules.to_vec(),
        timeout,
    }))
}

/// The service a route key (`ssh = "sshd"`, `wireguard = "wg"`, a `match`
/// rule's `service`) names.
pub(super) fn route_name(
    src: Source<'_>,
    item: &Spanned<toml::Value>,
    key: &str,
    value: &str,
) -> Result<ServiceName, ConfigError> {
    ServiceName::parse(value)
        .map_err(|e| src.at(item.span(), format!("listen: {key} {value:?}: {e}")))
}

/// The listener's `match` rules, compiled once for its TCP and its UDP side
/// alike.
pub(super) fn rules(
    src: Source<'_>,
    item: &Spanned<toml::Value>,
    table: &RawListenTable,
) -> Result<Vec<MatchRule>, ConfigError> {
    let at = |message: String| src.at(item.span(), message);
    let mut rules = Vec::new();
    let mut memory = 0;
    for (i, rule) in table.rules.iter().flatten().enumerate() {
        let shown = quoted_pattern(&rule.regex);
        let pattern = Pattern::new(&rule.regex)
            .map_err(|e| at(format!("listen: match[{i}] regex {shown}: {e}")))?;
        memory += pattern.memory();
        if memory > MATCH_MEMORY {
            return Err(at(format!(
                "listen: match[{i}] regex {shown}: the listener's match rules would take over {} MiB together; use fewer or simpler patterns",
                MATCH_MEMORY >> 20
            )));
        }
        let service = route_name(src, item, &format!("match[{i}] service"), &rule.service)?;
        rules.push(MatchRule { pattern, service });
    }
    Ok(rules)
}

/// The most memory one listener's `match` automata may take together, so
/// that no configuration (or reload) costs the daemon more than a bounded
/// amount.
const MATCH_MEMORY: usize = 16 << 20;

/// A pattern as an error line shows it: quoted, at most 200 bytes of it.
fn quoted_pattern(pattern: &str) -> String {
    const SHOWN: usize = 200;
    if pattern.len() <= SHOWN {
        return format!("{pattern:?}");
    }
    let mut end = SHOWN;
    while !pattern.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &pattern[..end], pattern.len())
}
