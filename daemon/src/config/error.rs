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
        /// The offending line with a caret under the place, for
        /// `--check-config` (the one-line form leaves it out).
        snippet: Option<String>,
    },
}

impl ConfigError {
    /// The source line and a caret under the error, if it has a place.
    pub fn snippet(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { snippet, .. } => snippet.as_deref(),
            ConfigError::Read { .. } => None,
        }
    }
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
        let (line, column) = self.line_column(span.start);
        ConfigError::Invalid {
            origin: self.origin.to_owned(),
            place: Some((line, column)),
            message: humanize(&message.into()),
            snippet: self.snippet(span, line, column),
        }
    }

    /// An error with no place in the file: something missing, or another file.
    pub(crate) fn whole(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            origin: self.origin.to_owned(),
            place: None,
            message: humanize(&message.into()),
            snippet: None,
        }
    }

    /// A toml/serde error, at its place when it has one.
    pub(crate) fn toml(&self, e: &toml::de::Error) -> ConfigError {
        let message = e.message().trim_end().to_owned();
        match e.span() {
            Some(span) => self.at(span, message),
            None => self.whole(message),
        }
    }

    /// `line` of the text, and carets under the span's part of it.
    fn snippet(&self, span: Range<usize>, line: usize, column: usize) -> Option<String> {
        let text = self.text.lines().nth(line - 1)?;
        // A long line (a pattern of kilobytes) is shown around the place:
        // 40 bytes before it, at most 200 in all.
        let start = (column - 1).min(text.len());
        let from = floor_boundary(text, start.saturating_sub(40));
        let to = floor_boundary(text, (from + 200).min(text.len())).max(start);
        let lead = if from > 0 { "..." } else { "" };
        let tail = if to < text.len() { "..." } else { "" };
        let width = span.len().clamp(1, (to - start).max(1));
        let gutter = line.to_string().len();
        Some(format!(
            "{:gutter$} |\n{line} | {lead}{}{tail}\n{:gutter$} | {}{}",
            "",
            &text[from..to],
            "",
            " ".repeat(lead.len() + start - from),
            "^".repeat(width)
        ))
    }

    /// 1-based line and column of byte `offset`.
    pub(crate) fn line_column(&self, offset: usize) -> (usize, usize) {
        let before = &self.text.as_bytes()[..offset.min(self.text.len())];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
        (line, column)
    }
}

/// The largest char boundary of `text` at or before `at`.
fn floor_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// serde's and toml's messages in the words of the file: "did you mean" for a
/// misspelt key, plain types ("a whole number", not "usize").
pub(crate) fn humanize(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((key, expected)) = rest.split_once('`') {
            return unknown_key(key, &quoted_words(expected));
        }
    }
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            return format!(
                "expected {}, found {}",
                plain_expected(expected),
                plain_found(found)
            );
        }
    }
    message.to_owned()
}

fn quoted_words(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

fn unknown_key(key: &str, known: &[&str]) -> String {
    let closest = known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .min()
        .filter(|(d, k)| *d <= 2.max(k.len() / 4));
    match closest {
        Some((_, k)) => format!("unknown key `{key}`; did you mean `{k}`?"),
        None if known.is_empty() => format!("unknown key `{key}`"),
        None => format!(
            "unknown key `{key}`; the keys here are {}",
            known.join(", ")
        ),
    }
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

fn plain_expected(expected: &str) -> String {
    match expected.trim() {
        "usize" | "u64" | "u32" | "u16" | "u8" | "i64" | "i32" => "a whole number".into(),
        "f64" | "f32" => "a number".into(),
        "a boolean" | "bool" => "true or false".into(),
        "a string" => "text in quotes".into(),
        "a sequence" => "a list [...]".into(),
        // serde names the Rust type a table is read into (`struct RawService`).
        "a map" => "a table".into(),
        other if other.starts_with("struct ") => "a table".into(),
        other => other.to_owned(),
    }
}

fn plain_found(found: &str) -> String {
    let inner = |prefix: &str| found.strip_prefix(prefix).map(|v| v.trim_matches('`'));
    if let Some(text) = found.strip_prefix("string ") {
        return format!("text {text}");
    }
    if let Some(n) = inner("integer ").or_else(|| inner("floating point ")) {
        return format!("the number {n}");
    }
    if let Some(b) = inner("boolean ") {
        return b.to_owned();
    }
    match found {
        "sequence" => "a list".into(),
        "map" => "a table".into(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_in_plain_words() {
        assert_eq!(
            humanize("unknown field `max_conections`, expected one of `listen`, `max_connections`"),
            "unknown key `max_conections`; did you mean `max_connections`?"
        );
        assert_eq!(
            humanize("unknown field `zzz`, expected `address` or `weight`"),
            "unknown key `zzz`; the keys here are address, weight"
        );
        assert_eq!(
            humanize("invalid type: string \"100\", expected usize"),
            "expected a whole number, found text \"100\""
        );
        assert_eq!(
            humanize("invalid type: integer `1`, expected a boolean"),
            "expected true or false, found the number 1"
        );
        assert_eq!(
            humanize("invalid type: integer `5`, expected struct RawService"),
            "expected a table, found the number 5"
        );
        assert_eq!(humanize("something else"), "something else");
    }

    #[test]
    fn a_snippet_points_at_the_place() {
        let src = Source {
            text: "a = 1\nmax_conections = 5\n",
            origin: "f.toml",
        };
        let error = src.at(
            6..20,
            "unknown field `max_conections`, expected `max_connections`",
        );
        assert_eq!(
            error.to_string(),
            "f.toml:2:1: unknown key `max_conections`; did you mean `max_connections`?"
        );
        assert_eq!(
            error.snippet().unwrap(),
            "  |\n2 | max_conections = 5\n  | ^^^^^^^^^^^^^^"
        );
    }
}
