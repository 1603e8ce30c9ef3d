//! Durations as the configuration writes them: seconds as a number (`10`,
//! `0.5`) or a string of numbers with units (`"250us"`, `"250ms"`, `"10s"`,
//! `"5m"`, `"1h"`, `"30d"`, `"1m30s"`).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A duration written as seconds (`10`, `0.5`) or with a unit (`"250ms"`, `"10s"`,
/// `"5m"`, `"1h"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

impl std::str::FromStr for ConfigDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        // A bare number is seconds.
        if let Ok(value) = text.parse::<f64>() {
            return seconds(value).map(ConfigDuration);
        }
        let invalid =
            || format!("invalid duration {text:?}: expected e.g. \"10s\", \"250ms\" or \"1m30s\"");
        let mut total = 0.0;
        let mut rest = text;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            let value: f64 = rest[..digits].parse().map_err(|_| invalid())?;
            rest = &rest[digits..];
            let letters = rest
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(rest.len());
            let scale = match rest[..letters].trim() {
                "us" | "µs" => 1e-6,
                "ms" => 1e-3,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                "d" => 86400.0,
                "" => return Err(invalid()),
                other => {
                    return Err(format!(
                        "invalid duration unit {other:?} in {text:?} (use us, ms, s, m, h or d)"
                    ))
                }
            };
            total += value * scale;
            rest = rest[letters..].trim_start();
        }
        if text.is_empty() {
            return Err(invalid());
        }
        seconds(total).map(ConfigDuration)
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

    #[test]
    fn durations() {
        for (text, ms) in [
            ("250ms", 250),
            ("10s", 10_000),
            ("1.5", 1500),
            ("2m", 120_000),
            ("1m30s", 90_000),
            ("1h 2m", 3_720_000),
            ("1s500ms", 1500),
        ] {
            assert_eq!(
                text.parse::<ConfigDuration>().unwrap().0,
                Duration::from_millis(ms)
            );
        }
        assert!("-1s".parse::<ConfigDuration>().is_err());
        assert!("s".parse::<ConfigDuration>().is_err());
        assert!("10".parse::<ConfigDuration>().is_ok());
        assert!("".parse::<ConfigDuration>().is_err());
        assert!("5 parsecs".parse::<ConfigDuration>().is_err());
        assert!(
            "1m30".parse::<ConfigDuration>().is_err(),
            "a number needs a unit after another"
        );
        assert_eq!(
            "250us".parse::<ConfigDuration>().unwrap().0,
            Duration::from_micros(250)
        );
    }
}
