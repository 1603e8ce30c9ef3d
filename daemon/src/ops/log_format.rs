//! What a log line looks like: `--log-format text` (key=value, values quoted
//! when they hold spaces, quotes or `=`) or `json` (one object per line, the
//! same fields), and under journald each line prefixed with its syslog
//! priority (`<3>` for errors, sd-daemon(3)) so `journalctl -p err` finds them.

use std::fmt::{self, Write as _};
use std::os::fd::AsFd;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `time LEVEL target: message key=value ...`
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Whether stderr is the journal: systemd sets JOURNAL_STREAM to the
/// `device:inode` of the stream it connected to stderr.
pub fn stderr_is_journal() -> bool {
    let Ok(expected) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(std::io::stderr().as_fd()) else {
        return false;
    };
    expected == format!("{}:{}", stat.st_dev, stat.st_ino)
}

/// The syslog priority of a level, as journald reads it.
pub fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// Puts `<N>` before every line that `inner` formats.
pub struct Prioritized<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for Prioritized<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// Text fields: the message first, then `key=value`, a value quoted (with
/// `"` and `\` escaped) when it has a space, a quote, `=` or nothing at all.
#[derive(Clone, Copy, Debug, Default)]
pub struct QuotedFields;

impl<'writer> FormatFields<'writer> for QuotedFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = Quoting {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Quoting<'a> {
    writer: Writer<'a>,
    first: bool,
    result: fmt::Result,
}

impl Quoting<'_> {
    fn field(&mut self, name: &str, value: &str) {
        if self.result.is_err() {
            return;
        }
        let space = if self.first { "" } else { " " };
        self.first = false;
        self.result = if name == "message" {
            write!(self.writer, "{space}{value}")
        } else {
            write!(self.writer, "{space}{name}={}", quoted(value))
        };
    }
}

impl Visit for Quoting<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field.name(), value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        self.field(field.name(), &text);
    }
}

/// The most bytes of one client-supplied value (an SNI, a Host, a name) that
/// a log line carries: a client must not make every line it causes 60 KB.
pub const MAX_CLIENT_VALUE: usize = 256;

/// A client-supplied `value` for a log line: whole when it is at most
/// [`MAX_CLIENT_VALUE`] bytes, else cut there (on a character boundary) and
/// marked with `...`. The formatter escapes what it holds.
pub fn clipped(value: &str) -> std::borrow::Cow<'_, str> {
    if value.len() <= MAX_CLIENT_VALUE {
        return value.into();
    }
    let mut end = MAX_CLIENT_VALUE;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &value[..end]).into()
}

/// `value` as is, or in quotes when it would not read back as one value.
pub fn quoted(value: &str) -> std::borrow::Cow<'_, str> {
    // Byte by byte for ASCII, the common case (every connection's line).
    let plain = !value.is_empty()
        && if value.is_ascii() {
            value
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'=')
        } else {
            !value
                .chars()
                .any(|c| c.is_whitespace() || c == '"' || c == '=' || c.is_control())
        };
    if plain {
        return value.into();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_with_spaces_quotes_or_equals_are_quoted() {
        assert_eq!(quoted("served"), "served");
        assert_eq!(quoted("127.0.0.1:5000"), "127.0.0.1:5000");
        assert_eq!(
            quoted("refused: unknown service"),
            "\"refused: unknown service\""
        );
        assert_eq!(quoted("a\"b"), "\"a\\\"b\"");
        assert_eq!(quoted("k=v"), "\"k=v\"");
        assert_eq!(quoted(""), "\"\"");
        assert_eq!(quoted("line\nbreak"), "\"line\\nbreak\"");
    }

    #[test]
    fn client_values_are_cut_on_a_character_boundary() {
        assert_eq!(clipped("app.example.com"), "app.example.com");
        let long = "é".repeat(200);
        let cut = clipped(&long);
        assert!(
            cut.ends_with("...") && cut.len() <= MAX_CLIENT_VALUE + 3,
            "{cut}"
        );
        assert!(long.starts_with(cut.trim_end_matches("...")));
    }

    #[test]
    fn syslog_priorities() {
        assert_eq!(priority(&Level::ERROR), 3);
        assert_eq!(priority(&Level::WARN), 4);
        assert_eq!(priority(&Level::INFO), 6);
    }
}
