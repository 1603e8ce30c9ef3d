//! The file's shape, as serde reads it: every key optional and spanned where an
//! error may need to point at it. Checking the values is the other modules' job.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::de::IntoDeserializer;
use serde::Deserialize;
use toml::de::{DeString, DeTable, DeValue};
use toml::Spanned;

use super::durations::ConfigDuration;
use super::error::{ConfigError, Source};

/// A `listen` entry written as a table; a plain string is the address alone
/// (the table's other fields at their defaults).
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawListenTable {
    pub(crate) address: String,
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) accept_proxy_from: Vec<String>,
    #[serde(default)]
    pub(crate) detect: bool,
    pub(crate) ssh: Option<String>,
    pub(crate) http: Option<String>,
    pub(crate) silent: Option<String>,
    pub(crate) sni_default: Option<String>,
    pub(crate) openvpn: Option<String>,
    pub(crate) xmpp: Option<String>,
    pub(crate) socks: Option<String>,
    pub(crate) postgres: Option<String>,
    pub(crate) rdp: Option<String>,
    #[serde(rename = "match")]
    pub(crate) rules: Option<Vec<RawMatchRule>>,
    pub(crate) detect_timeout: Option<ConfigDuration>,
    pub(crate) tls: Option<RawTls>,
    pub(crate) fast_open: Option<toml::Value>,
    pub(crate) defer_accept: Option<bool>,
    pub(crate) udp: Option<bool>,
    pub(crate) tcp: Option<bool>,
    pub(crate) udp_default: Option<String>,
    pub(crate) quic: Option<String>,
    pub(crate) dtls: Option<String>,
    pub(crate) wireguard: Option<String>,
    pub(crate) dns: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMatchRule {
    pub(crate) regex: String,
    pub(crate) service: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    pub(crate) cert: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) acme: Option<RawAcme>,
    pub(crate) client_ca: Option<String>,
    pub(crate) client_auth: Option<String>,
    pub(crate) certs: Option<Vec<RawCertPair>>,
    pub(crate) client_crl: Option<Vec<String>>,
    pub(crate) tickets: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAcme {
    pub(crate) directory: String,
    pub(crate) email: Option<String>,
    pub(crate) names: Vec<String>,
    pub(crate) storage: Option<String>,
    pub(crate) renew_before: Option<ConfigDuration>,
    pub(crate) directory_ca: Option<String>,
    pub(crate) request_timeout: Option<ConfigDuration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCertPair {
    pub(crate) cert: String,
    pub(crate) key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealthCheck {
    pub(crate) interval: Option<ConfigDuration>,
    pub(crate) timeout: Option<ConfigDuration>,
    pub(crate) rise: Option<u32>,
    pub(crate) fall: Option<u32>,
    pub(crate) send: Option<String>,
    pub(crate) expect: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHandoff {
    #[serde(default)]
    pub(crate) uid: Vec<u32>,
    #[serde(default)]
    pub(crate) gid: Vec<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawImport {
    pub(crate) allow: Vec<Spanned<String>>,
    pub(crate) host: Option<String>,
    pub(crate) file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    /// Strings or tables; read by `listen.rs` so that a table's error (an
    /// unknown key) is reported as such.
    pub(crate) listen: Option<Spanned<ListenList>>,
    pub(crate) import_etc_services: Option<RawImport>,
    pub(crate) handoff_socket: Option<String>,
    pub(crate) upgrade_socket: Option<String>,
    pub(crate) admin_socket: Option<String>,
    pub(crate) admin_uids: Option<Spanned<Vec<toml::Value>>>,
    pub(crate) handoff_max_connections: Option<Spanned<usize>>,
    pub(crate) handoff_max_connections_per_uid: Option<Spanned<usize>>,
    pub(crate) handoff_register_timeout: Option<Spanned<ConfigDuration>>,
    pub(crate) shutdown_grace: Option<Spanned<ConfigDuration>>,
    pub(crate) shutdown_delay: Option<Spanned<ConfigDuration>>,
    pub(crate) user: Option<Spanned<String>>,
    pub(crate) group: Option<Spanned<String>>,
    pub(crate) metrics_listen: Option<Spanned<String>>,
    pub(crate) metrics_hosts: Option<Spanned<Vec<String>>>,
    pub(crate) max_connections: Option<Spanned<usize>>,
    pub(crate) max_connections_per_ip: Option<Spanned<usize>>,
    pub(crate) max_udp_flows: Option<Spanned<usize>>,
    pub(crate) max_udp_flows_per_ip: Option<Spanned<usize>>,
    pub(crate) udp_idle_timeout: Option<Spanned<ConfigDuration>>,
    pub(crate) connection_rate_per_ip: Option<Spanned<f64>>,
    pub(crate) negotiation_timeout: Option<Spanned<ConfigDuration>>,
    pub(crate) close_drain_timeout: Option<Spanned<ConfigDuration>>,
    pub(crate) builtin_services: Option<bool>,
    pub(crate) dns_min_ttl: Option<Spanned<ConfigDuration>>,
    pub(crate) dns_max_ttl: Option<Spanned<ConfigDuration>>,
    pub(crate) resolvers: Option<Spanned<Vec<String>>>,
    pub(crate) include: Option<Spanned<Vec<String>>>,
    pub(crate) cluster: Option<Spanned<super::cluster::RawCluster>>,
}

/// A file's `[service.NAME]` tables in file order, each as toml parsed it.
/// Each is read into a [`RawService`] (1.2 KiB) when its service is made,
/// so that a file of 100,000 never holds them all at once.
pub(crate) type ServiceTables<'i> = Vec<(Spanned<DeString<'i>>, Spanned<DeValue<'i>>)>;

/// Parses `src` into its top-level keys (a `RawConfig` or a `RawDropIn`)
/// and its service tables, apart.
pub(crate) fn read<'i, T: Deserialize<'i>>(
    src: Source<'i>,
) -> Result<(T, ServiceTables<'i>), ConfigError> {
    let mut document = DeTable::parse(src.text).map_err(|e| src.toml(&e))?;
    let tables = match document.get_mut().remove("service") {
        None => Vec::new(),
        Some(value) => {
            let span = value.span();
            match value.into_inner() {
                DeValue::Table(tables) => tables.into_iter().collect(),
                other => {
                    return Err(src.at(
                        span,
                        format!(
                            "service takes [service.NAME] tables, not {} {}",
                            article(other.type_str()),
                            other.type_str()
                        ),
                    ))
                }
            }
        }
    };
    let top = T::deserialize(toml::de::Deserializer::from(document)).map_err(|e| src.toml(&e))?;
    Ok((top, tables))
}

fn article(noun: &str) -> &'static str {
    match noun.as_bytes().first() {
        Some(b'a' | b'e' | b'i' | b'o' | b'u') => "an",
        _ => "a",
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawService {
    pub(crate) builtin: Option<Spanned<String>>,
    pub(crate) proxy: Option<Spanned<toml::Value>>,
    pub(crate) proxy_udp: Option<Spanned<toml::Value>>,
    pub(crate) message: Option<String>,
    pub(crate) enabled: Option<bool>,
    pub(crate) connect_timeout: Option<Spanned<ConfigDuration>>,
    pub(crate) idle_timeout: Option<Spanned<ConfigDuration>>,
    pub(crate) send_proxy: Option<Spanned<String>>,
    pub(crate) relay: Option<Spanned<String>>,
    pub(crate) balance: Option<Spanned<String>>,
    pub(crate) hash_key: Option<Spanned<String>>,
    pub(crate) transparent: Option<Spanned<bool>>,
    // The rare large tables boxed: a `RawService` per `[service.X]` lives
    // until the file is read, 100,000 of them for a large one.
    pub(crate) backend_tls: Option<Box<Spanned<super::backend_tls::RawBackendTls>>>,
    pub(crate) health_check: Option<Box<Spanned<RawHealthCheck>>>,
    pub(crate) udp_health_check: Option<Box<Spanned<RawHealthCheck>>>,
    pub(crate) udp_idle_timeout: Option<Spanned<ConfigDuration>>,
    pub(crate) udp_responses: Option<Spanned<usize>>,
    pub(crate) exec: Option<Spanned<Vec<String>>>,
    pub(crate) handoff: Option<Box<Spanned<RawHandoff>>>,
    pub(crate) reply: Option<Spanned<String>>,
    pub(crate) user: Option<Spanned<String>>,
    pub(crate) group: Option<Spanned<String>>,
    pub(crate) cwd: Option<String>,
    pub(crate) env: Option<BTreeMap<String, String>>,
    pub(crate) max_instances: Option<Spanned<usize>>,
    pub(crate) on_shutdown: Option<Spanned<String>>,
    pub(crate) allow: Option<Spanned<Vec<String>>>,
    pub(crate) deny: Option<Spanned<Vec<String>>>,
    pub(crate) allow_uid: Option<Vec<u32>>,
    pub(crate) allow_gid: Option<Vec<u32>>,
    pub(crate) max_connections: Option<Spanned<usize>>,
    pub(crate) queue_timeout: Option<Spanned<ConfigDuration>>,
    pub(crate) queue_max: Option<Spanned<usize>>,
    pub(crate) sni: Option<Spanned<Vec<String>>>,
    pub(crate) sni_terminate: Option<Spanned<Vec<String>>>,
    pub(crate) http_host: Option<Spanned<Vec<String>>>,
    pub(crate) alpn: Option<Spanned<Vec<String>>>,
    pub(crate) allow_cert_names: Option<Spanned<Vec<String>>>,
}

impl RawService {
    /// Keys present that belong to one kind only: (key, where, kind).
    pub(crate) fn kind_specific_keys(&self) -> Vec<(&'static str, Range<usize>, &'static str)> {
        let spans = [
            (
                "connect_timeout",
                self.connect_timeout.as_ref().map(Spanned::span),
                "proxy",
            ),
            (
                "idle_timeout",
                self.idle_timeout.as_ref().map(Spanned::span),
                "proxy",
            ),
            (
                "send_proxy",
                self.send_proxy.as_ref().map(Spanned::span),
                "proxy",
            ),
            ("relay", self.relay.as_ref().map(Spanned::span), "proxy"),
            ("balance", self.balance.as_ref().map(Spanned::span), "proxy"),
            (
                "backend_tls",
                self.backend_tls.as_deref().map(Spanned::span),
                "proxy",
            ),
            (
                "transparent",
                self.transparent.as_ref().map(Spanned::span),
                "proxy",
            ),
            (
                "hash_key",
                self.hash_key.as_ref().map(Spanned::span),
                "proxy",
            ),
            (
                "health_check",
                self.health_check.as_deref().map(Spanned::span),
                "proxy",
            ),
            (
                "udp_health_check",
                self.udp_health_check.as_deref().map(Spanned::span),
                "proxy_udp",
            ),
            (
                "udp_idle_timeout",
                self.udp_idle_timeout.as_ref().map(Spanned::span),
                "proxy_udp",
            ),
            (
                "udp_responses",
                self.udp_responses.as_ref().map(Spanned::span),
                "proxy_udp",
            ),
            ("reply", self.reply.as_ref().map(Spanned::span), "exec"),
            ("user", self.user.as_ref().map(Spanned::span), "exec"),
            ("group", self.group.as_ref().map(Spanned::span), "exec"),
            (
                "max_instances",
                self.max_instances.as_ref().map(Spanned::span),
                "exec",
            ),
            (
                "on_shutdown",
                self.on_shutdown.as_ref().map(Spanned::span),
                "exec",
            ),
        ];
        spans
            .into_iter()
            .filter_map(|(key, span, kind)| Some((key, span?, kind)))
            .collect()
    }
}

/// `listen`: a list of entries, or one entry alone (`listen = "0.0.0.0:1"`).
/// An entry given alone has no span of its own (empty); `Config::parse` gives
/// it the key's.
pub(crate) struct ListenList(pub(crate) Vec<Spanned<toml::Value>>);

impl<'de> Deserialize<'de> for ListenList {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = ListenList;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an address, a listener table, or a list of them")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ListenList, E> {
                let one = toml::Value::String(text.to_owned());
                Ok(ListenList(vec![Spanned::new(0..0, one)]))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ListenList, A::Error> {
                let table =
                    toml::Table::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(ListenList(vec![Spanned::new(
                    0..0,
                    toml::Value::Table(table),
                )]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ListenList, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = seq.next_element::<Spanned<toml::Value>>()? {
                    entries.push(entry);
                }
                Ok(ListenList(entries))
            }
        }
        deserializer.deserialize_any(Entries)
    }
}

impl RawService {
    /// Reads one of [`ServiceTables`]' tables.
    pub(crate) fn read(src: Source<'_>, table: Spanned<DeValue<'_>>) -> Result<Self, ConfigError> {
        RawService::deserialize(table.into_deserializer()).map_err(|e| src.toml(&e))
    }
}

/// A drop-in file named by `include`: service tables only, read apart
/// ([`read`]); any other key is an error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDropIn {
    /// Read apart; named here so that an unknown key's error lists it.
    #[serde(default, rename = "service")]
    _service: Option<serde::de::IgnoredAny>,
}
