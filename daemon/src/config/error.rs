//! Configuration errors, located in the file where the file is to blame.

use std::ops::Range;

/// A configuration that cannot be used, located as precisely as we can.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// `place` is the 1-based line and column of the offending text, or `None`
    /// for an error about the file as a whole (or about another file it names).
    #[error("{origin}:{}{message}", place.map_or(" ".to_owned(), |(l, c)| format!("{l}:{c}: ")))]
    Invalid {
        origin: String,
        place: Option<(usize, usize)>,
        message: String,
    },
}

/// The text being parsed and its name, to turn byte spans into errors.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    pub(crate) text: &'a str,
    pub(crate) origin: &'a str,
}

impl Source<'_> {
    /// An error at the text `span` covers.
    pub(crate) fn at(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            origin: self.origin.to_owned(),
            place: Some(self.line_column(span.start)),
            message: message.into(),
        }
    }

    /// An error with no place in the file: something missing, or another file.
    pub(crate) fn whole(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            origin: self.origin.to_owned(),
            place: None,
            message: message.into(),
        }
    }

    /// 1-based line and column of byte `offset`.
    pub(crate) fn line_column(&self, offset: usize) -> (usize, usize) {
        let before = &self.text.as_bytes()[..offset.min(self.text.len())];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
        (line, column)
    }
}
