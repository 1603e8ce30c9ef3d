//! Checks that many keys share: a count that must be at least 1, and a value
//! that must be one of a few words.

use toml::Spanned;

use super::error::{ConfigError, Source};

/// A count that, when given, must be at least 1 (`max_connections = 0` would
/// refuse everyone, surely not what was meant).
pub(crate) fn at_least_one(
    src: Source<'_>,
    key: &str,
    value: Option<&Spanned<usize>>,
) -> Result<Option<usize>, ConfigError> {
    match value {
        Some(v) if *v.get_ref() == 0 => Err(src.at(v.span(), format!("{key} must be at least 1"))),
        other => Ok(other.map(|v| *v.get_ref())),
    }
}

/// A key whose value is one of a few words: `None` when absent, an error naming
/// the allowed words when it is none of them.
pub(crate) fn choice<T: Copy>(
    src: Source<'_>,
    key: &str,
    value: Option<&Spanned<String>>,
    words: &[(&str, T)],
) -> Result<Option<T>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    match words.iter().find(|(word, _)| *word == value.get_ref()) {
        Some((_, chosen)) => Ok(Some(*chosen)),
        None => {
            let allowed: Vec<String> = words.iter().map(|(w, _)| format!("\"{w}\"")).collect();
            let message = format!(
                "{key} {:?}: expected {}",
                value.get_ref(),
                allowed.join(" or ")
            );
            Err(src.at(value.span(), message))
        }
    }
}

/// A duration key that, when given, must be greater than zero.
pub(crate) fn positive_duration(
    src: Source<'_>,
    key: &str,
    value: Option<&Spanned<super::durations::ConfigDuration>>,
) -> Result<Option<std::time::Duration>, ConfigError> {
    match value {
        Some(t) if t.get_ref().0.is_zero() => {
            Err(src.at(t.span(), format!("{key} must be greater than zero")))
        }
        other => Ok(other.map(|t| t.get_ref().0)),
    }
}
