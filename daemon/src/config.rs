//! The TOML configuration: what the daemon listens on, its timeouts and its
//! services. Every error names the file, line and column it comes from.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use tcpmux_proto::ServiceName;
use toml::Spanned;

use crate::listener::ListenAddr;
use crate::registry::{default_services, Registry, Service};
use crate::services::{Builtin, ServiceKind};

/// RFC 1078's port. Binding it needs root or CAP_NET_BIND_SERVICE.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:1";
pub const DEFAULT_NEGOTIATION_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_CLOSE_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A validated configuration, ready to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: Vec<ListenAddr>,
    /// How long a client may take to send its request line.
    pub negotiation_timeout: Duration,
    /// How long a graceful close waits for the client's FIN after ours.
    pub close_drain_timeout: Duration,
    pub registry: Registry,
}

/// A configuration that cannot be used, located as precisely as we can.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{origin}:{line}:{column}: {message}")]
    Invalid {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
}

impl Default for Config {
    /// No file: every built-in under its own name, on the RFC's port.
    fn default() -> Self {
        Self {
            listen: vec![DEFAULT_LISTEN
                .parse()
                .expect("default listen address parses")],
            negotiation_timeout: DEFAULT_NEGOTIATION_TIMEOUT,
            close_drain_timeout: DEFAULT_CLOSE_DRAIN_TIMEOUT,
            registry: Registry::builtins(),
        }
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Parses and validates `text`; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let at = |span: Option<Range<usize>>, message: String| {
            let (line, column) = line_column(text, span.map_or(0, |s| s.start));
            ConfigError::Invalid {
                origin: origin.to_owned(),
                line,
                column,
                message,
            }
        };
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| at(e.span(), e.message().trim_end().to_owned()))?;

        let listen = match raw.listen {
            None => Config::default().listen,
            Some(list) if list.is_empty() => {
                return Err(at(
                    None,
                    "`listen` is empty: give at least one address".into(),
                ))
            }
            Some(list) => list
                .iter()
                .map(|item| {
                    item.get_ref()
                        .parse::<ListenAddr>()
                        .map_err(|e| at(Some(item.span()), e.to_string()))
                })
                .collect::<Result<_, _>>()?,
        };

        let negotiation_timeout = match raw.negotiation_timeout {
            None => DEFAULT_NEGOTIATION_TIMEOUT,
            Some(t) if t.get_ref().0.is_zero() => {
                return Err(at(
                    Some(t.span()),
                    "negotiation_timeout must be greater than zero".into(),
                ))
            }
            Some(t) => t.into_inner().0,
        };
        let close_drain_timeout = raw
            .close_drain_timeout
            .map_or(DEFAULT_CLOSE_DRAIN_TIMEOUT, |t| t.into_inner().0);

        let mut services = if raw.builtin_services.unwrap_or(true) {
            default_services()
        } else {
            BTreeMap::new()
        };
        let mut seen: BTreeMap<ServiceName, Range<usize>> = BTreeMap::new();
        for (key, table) in raw.service {
            let name = ServiceName::parse(key.get_ref()).map_err(|e| {
                at(
                    Some(key.span()),
                    format!("service {:?}: {e}", key.get_ref()),
                )
            })?;
            if name.is_help() {
                return Err(at(
                    Some(key.span()),
                    "`help` is reserved by RFC 1078 and always lists the services".into(),
                ));
            }
            if let Some(first) = seen.get(&name) {
                let (line, _) = line_column(text, first.start);
                return Err(at(
                    Some(key.span()),
                    format!(
                        "service {name} is defined twice (names ignore case; first on line {line})"
                    ),
                ));
            }
            seen.insert(name.clone(), key.span());

            if table.enabled == Some(false) {
                services.remove(&name);
                continue;
            }
            let kind = match &table.builtin {
                Some(builtin) => Builtin::from_name(builtin.get_ref())
                    .map(ServiceKind::Builtin)
                    .ok_or_else(|| {
                        at(
                            Some(builtin.span()),
                            format!(
                                "unknown builtin {:?}; the builtins are {}",
                                builtin.get_ref(),
                                builtin_list()
                            ),
                        )
                    })?,
                // `[service.echo]` with only a message refines the built-in of that name.
                None => match Builtin::from_name(name.as_str()) {
                    Some(builtin) => ServiceKind::Builtin(builtin),
                    None => {
                        return Err(at(
                            Some(key.span()),
                            format!(
                                "service {name} says nothing to do: set `builtin = \"...\"` ({})",
                                builtin_list()
                            ),
                        ))
                    }
                },
            };
            let message = table.message.unwrap_or_default();
            services.insert(
                name.clone(),
                Service {
                    name,
                    kind,
                    message,
                },
            );
        }

        Ok(Config {
            listen,
            negotiation_timeout,
            close_drain_timeout,
            registry: Registry::new(services),
        })
    }
}

fn builtin_list() -> String {
    Builtin::ALL.map(Builtin::name).join(", ")
}

/// 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, column)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<Vec<Spanned<String>>>,
    negotiation_timeout: Option<Spanned<ConfigDuration>>,
    close_drain_timeout: Option<Spanned<ConfigDuration>>,
    builtin_services: Option<bool>,
    #[serde(default)]
    service: BTreeMap<Spanned<String>, RawService>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    builtin: Option<Spanned<String>>,
    message: Option<String>,
    enabled: Option<bool>,
}

/// A duration written as seconds (`10`, `0.5`) or with a unit (`"250ms"`, `"10s"`,
/// `"5m"`, `"1h"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

impl std::str::FromStr for ConfigDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let value: f64 = number.parse().map_err(|_| {
            format!("invalid duration {text:?}: expected e.g. \"10s\" or \"250ms\"")
        })?;
        let scale = match unit.trim() {
            "ms" => 1e-3,
            "" | "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => {
                return Err(format!(
                    "invalid duration unit {other:?} (use ms, s, m or h)"
                ))
            }
        };
        seconds(value * scale).map(ConfigDuration)
    }
}

fn seconds(value: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("duration {value} s is negative or too large"))
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = ConfigDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration: seconds as a number, or a string such as \"250ms\" or \"10s\"",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                seconds(v as f64).map(ConfigDuration).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                seconds(v as f64).map(ConfigDuration).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                seconds(v).map(ConfigDuration).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_any(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, "test.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn empty_file_is_the_default() {
        let config = parse("").unwrap();
        assert_eq!(config.listen, Config::default().listen);
        assert_eq!(config.negotiation_timeout, DEFAULT_NEGOTIATION_TIMEOUT);
        assert_eq!(config.registry.len(), Builtin::ALL.len());
    }

    #[test]
    fn full_file() {
        let config = parse(
            r#"
listen = ["127.0.0.1:41397", "[::1]:41397", "unix:/tmp/tcpmux.sock"]
negotiation_timeout = "1500ms"
close_drain_timeout = 0.25
builtin_services = false

[service.Clock]
builtin = "isotime"
message = "the time follows"

[service.echo]
"#,
        )
        .unwrap();
        assert_eq!(config.listen.len(), 3);
        assert_eq!(config.negotiation_timeout, Duration::from_millis(1500));
        assert_eq!(config.close_drain_timeout, Duration::from_millis(250));
        assert_eq!(
            config.registry.names().collect::<Vec<_>>(),
            ["clock", "echo"]
        );
        let clock = config
            .registry
            .lookup(&ServiceName::parse("CLOCK").unwrap())
            .unwrap();
        assert_eq!(clock.kind, ServiceKind::Builtin(Builtin::Isotime));
        assert_eq!(clock.message, "the time follows");
    }

    #[test]
    fn disabling_a_builtin_removes_it() {
        let config = parse("[service.chargen]\nenabled = false\n").unwrap();
        assert!(!config.registry.names().any(|n| n == "chargen"));
        assert!(config.registry.names().any(|n| n == "echo"));
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            (
                "listen = [\"nowhere\"]\n",
                "test.toml:1:",
                "invalid listen address",
            ),
            (
                "\n\n[service.x]\nbuiltin = \"ech\"\n",
                "test.toml:4:",
                "unknown builtin \"ech\"",
            ),
            (
                "[service.help]\nbuiltin = \"echo\"\n",
                "test.toml:1:",
                "reserved",
            ),
            (
                "[service.\"a b\"]\nbuiltin = \"echo\"\n",
                "test.toml:1:",
                "0x20",
            ),
            ("[service.mine]\n", "test.toml:1:", "says nothing to do"),
            (
                "negotiation_timeout = \"10 parsecs\"\n",
                "test.toml:1:",
                "unit",
            ),
            (
                "negotiation_timeout = 0\n",
                "test.toml:1:",
                "greater than zero",
            ),
            ("\nlisten = 5\n", "test.toml:2:", "invalid type"),
            ("colour = \"blue\"\n", "test.toml:1:", "unknown field"),
            (
                "[service.echo]\nbuiltn = \"echo\"\n",
                "test.toml:2:",
                "unknown field",
            ),
            (
                "[service.Echo]\n[service.echo]\n",
                "test.toml:2:",
                "defined twice",
            ),
            ("listen = [\n", "test.toml:", ""),
        ];
        for (text, location, words) in cases {
            let error = parse(text).expect_err(text);
            assert!(error.starts_with(location), "{text:?} gave {error}");
            assert!(error.contains(words), "{text:?} gave {error}");
        }
    }

    #[test]
    fn durations() {
        for (text, ms) in [
            ("250ms", 250),
            ("10s", 10_000),
            ("1.5", 1500),
            ("2m", 120_000),
        ] {
            assert_eq!(
                text.parse::<ConfigDuration>().unwrap().0,
                Duration::from_millis(ms)
            );
        }
        assert!("-1s".parse::<ConfigDuration>().is_err());
        assert!("s".parse::<ConfigDuration>().is_err());
    }
}
