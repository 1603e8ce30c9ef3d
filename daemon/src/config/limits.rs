//! The daemon-wide limits: `max_connections`, `max_connections_per_ip`,
//! `connection_rate_per_ip`.

use super::checks::at_least_one;
use super::checks::positive_duration;
use super::error::{ConfigError, Source};
use super::raw::RawConfig;
use crate::model::{ControlLimits, Limits};

/// Far above what one event loop needs for ordinary loads, low enough that a flood
/// meets a `-` instead of the descriptor limit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;

/// The handoff control socket's limits.
pub(crate) fn control_limits(
    src: Source<'_>,
    raw: &RawConfig,
) -> Result<ControlLimits, ConfigError> {
    let defaults = ControlLimits::default();
    let max = |key, value: Option<&toml::Spanned<usize>>, default| {
        at_least_one(src, key, value).map(|v| v.unwrap_or(default))
    };
    Ok(ControlLimits {
        max_connections: max(
            "handoff_max_connections",
            raw.handoff_max_connections.as_ref(),
            defaults.max_connections,
        )?,
        max_connections_per_uid: max(
            "handoff_max_connections_per_uid",
            raw.handoff_max_connections_per_uid.as_ref(),
            defaults.max_connections_per_uid,
        )?,
        register_timeout: positive_duration(
            src,
            "handoff_register_timeout",
            raw.handoff_register_timeout.as_ref(),
        )?
        .unwrap_or(defaults.register_timeout),
    })
}

pub(crate) fn limits(src: Source<'_>, raw: &RawConfig) -> Result<Limits, ConfigError> {
    let connection_rate_per_ip = match &raw.connection_rate_per_ip {
        Some(rate) if !(*rate.get_ref() >= 1.0 && rate.get_ref().is_finite()) => {
            return Err(src.at(
                rate.span(),
                "connection_rate_per_ip must be at least 1 (new connections per second)",
            ))
        }
        other => other.as_ref().map(|r| *r.get_ref()),
    };
    let max_connections = at_least_one(src, "max_connections", raw.max_connections.as_ref())?;
    Ok(Limits {
        max_connections: Some(max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS)),
        max_connections_per_ip: at_least_one(
            src,
            "max_connections_per_ip",
            raw.max_connections_per_ip.as_ref(),
        )?,
        connection_rate_per_ip,
    })
}
