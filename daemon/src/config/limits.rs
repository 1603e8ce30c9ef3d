//! The daemon-wide limits: `max_connections`, `max_connections_per_ip`,
//! `connection_rate_per_ip`.

use super::checks::at_least_one;
use super::error::{ConfigError, Source};
use super::raw::RawConfig;
use crate::model::Limits;

/// Far above what one event loop needs for ordinary loads, low enough that a flood
/// meets a `-` instead of the descriptor limit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;

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
