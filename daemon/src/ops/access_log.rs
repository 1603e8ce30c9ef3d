//! The access log line, one per connection (target `tcpmuxd::connection`),
//! built straight into a buffer for the default text log, with or without
//! journald's priority prefix: the same bytes tracing's formatter writes,
//! without its per-event machinery on every connection's path. The JSON
//! format and coloured terminals keep going through tracing.

use std::cell::RefCell;
use std::fmt::{self, Display, Write as _};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::log_format::quoted;
use crate::model::clock::Civil;

/// How the daemon's log is written, as far as this line is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Through tracing (JSON, ANSI colours, or logging not set up by main).
    Tracing = 0,
    /// `time  INFO target: message key=value ...`
    Text = 1,
    /// The same, without the time and after `<6>` (journald).
    Journal = 2,
}

static MODE: AtomicU8 = AtomicU8::new(Mode::Tracing as u8);

/// Chooses how lines are written; set once, with the log subscriber.
pub fn set_mode(mode: Mode) {
    MODE.store(mode as u8, Ordering::Relaxed);
}

fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::Text,
        2 => Mode::Journal,
        _ => Mode::Tracing,
    }
}

/// The fields of one connection's line, in their order; `None` is left out.
pub struct Fields<'a> {
    pub peer: &'a dyn Display,
    pub via: Option<&'a str>,
    pub service: &'a str,
    pub routed: &'a str,
    pub backend: Option<&'a dyn Display>,
    pub tls: Option<&'a str>,
    pub cipher: Option<&'a str>,
    pub cert: Option<&'a str>,
    pub outcome: &'a dyn Display,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub elapsed: Duration,
}

/// Logs the line (if RUST_LOG lets it through): by hand in the text modes,
/// else through tracing.
pub fn write(fields: &Fields<'_>) {
    let mode = mode();
    if mode == Mode::Tracing {
        return through_tracing(fields);
    }
    if tracing::enabled!(target: "tcpmuxd::connection", tracing::Level::INFO) {
        // One buffer per thread, reused: the line is copied to the log's.
        thread_local!(static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) });
        LINE.with(|line| {
            let Ok(mut line) = line.try_borrow_mut() else {
                return;
            };
            line.clear();
            if render(&mut line, mode, fields).is_ok() {
                super::logging::queue_line(&line);
            }
        });
    }
}

/// The line as a tracing event, for the formats not written by hand.
fn through_tracing(line: &Fields<'_>) {
    tracing::info!(
        target: "tcpmuxd::connection",
        peer = %line.peer,
        via = line.via.map(tracing::field::display),
        service = %line.service,
        routed = %line.routed,
        backend = line.backend.map(tracing::field::display),
        tls = line.tls.map(tracing::field::display),
        cipher = line.cipher.map(tracing::field::display),
        cert = line.cert.map(tracing::field::display),
        outcome = %line.outcome,
        bytes_in = line.bytes_in,
        bytes_out = line.bytes_out,
        ms = format_args!("{:.3}", line.elapsed.as_secs_f64() * 1e3),
        "connection"
    );
}

/// The line as tracing's text formatter (with [`super::log_format::QuotedFields`])
/// writes it.
fn render(out: &mut Vec<u8>, mode: Mode, fields: &Fields<'_>) -> fmt::Result {
    match mode {
        Mode::Journal => out.extend_from_slice(b"<6> INFO "),
        _ => {
            timestamp(out)?;
            out.extend_from_slice(b"  INFO ");
        }
    }
    out.extend_from_slice(b"tcpmuxd::connection: connection");
    field(out, "peer", fields.peer)?;
    if let Some(via) = fields.via {
        text_field(out, "via", via);
    }
    text_field(out, "service", fields.service);
    text_field(out, "routed", fields.routed);
    if let Some(backend) = fields.backend {
        field(out, "backend", backend)?;
    }
    for (name, value) in [
        ("tls", fields.tls),
        ("cipher", fields.cipher),
        ("cert", fields.cert),
    ] {
        if let Some(value) = value {
            text_field(out, name, value);
        }
    }
    field(out, "outcome", fields.outcome)?;
    out.extend_from_slice(b" bytes_in=");
    decimal(out, fields.bytes_in, 1);
    out.extend_from_slice(b" bytes_out=");
    decimal(out, fields.bytes_out, 1);
    out.extend_from_slice(b" ms=");
    millis(out, fields.elapsed);
    out.push(b'\n');
    Ok(())
}

/// ` name=value` for a value that is text already.
fn text_field(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.push(b'=');
    out.extend_from_slice(quoted(value).as_bytes());
}

/// ` name=value`, the value quoted when it would not read back as one.
fn field(out: &mut Vec<u8>, name: &str, value: &dyn Display) -> fmt::Result {
    thread_local!(static TEXT: RefCell<String> = const { RefCell::new(String::new()) });
    TEXT.with(|text| {
        let mut text = text.try_borrow_mut().map_err(|_| fmt::Error)?;
        text.clear();
        write!(text, "{value}")?;
        text_field(out, name, &text);
        Ok(())
    })
}

/// `n` in decimal, zero-padded to `width` digits.
fn decimal(out: &mut Vec<u8>, mut n: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut at = digits.len();
    while n > 0 || digits.len() - at < width {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&digits[at..]);
}

/// Milliseconds to the microsecond, rounded as `{:.3}` of the float would be.
fn millis(out: &mut Vec<u8>, elapsed: Duration) {
    let micros = u64::try_from((elapsed.as_nanos() + 500) / 1000).unwrap_or(u64::MAX);
    decimal(out, micros / 1000, 1);
    out.push(b'.');
    decimal(out, micros % 1000, 3);
}

/// The time as tracing-subscriber's `SystemTime` writes it (RFC 3339, UTC,
/// microseconds), the part to the second formatted once a second per thread.
fn timestamp(out: &mut Vec<u8>) -> fmt::Result {
    thread_local!(static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) });
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let (secs, micros) = (now.as_secs(), now.subsec_micros());
    SECOND.with(|second| {
        let mut second = second.try_borrow_mut().map_err(|_| fmt::Error)?;
        if second.0 != secs {
            let civil = Civil::from_unix(i64::try_from(secs).map_err(|_| fmt::Error)?);
            second.1.clear();
            write!(second.1, "{}", civil.iso8601())?;
            // The fraction goes before the zone: `…:SS.ffffffZ`.
            second.1.pop();
            second.0 = secs;
        }
        out.extend_from_slice(second.1.as_bytes());
        out.push(b'.');
        decimal(out, u64::from(micros), 6);
        out.push(b'Z');
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What tracing's formatter, set up as main sets it up, writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn by_tracing(fields: &Fields<'_>, journal: bool) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let format = tracing_subscriber::fmt::format().with_ansi(false);
        let builder = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .fmt_fields(super::super::log_format::QuotedFields);
        let emit = || through_tracing(fields);
        if journal {
            let subscriber = builder
                .event_format(super::super::log_format::Prioritized(format.without_time()))
                .finish();
            tracing::subscriber::with_default(subscriber, emit);
        } else {
            let subscriber = builder.event_format(format).finish();
            tracing::subscriber::with_default(subscriber, emit);
        }
        let bytes = captured.0.lock().expect("lock").clone();
        String::from_utf8(bytes).expect("UTF-8")
    }

    fn by_hand(fields: &Fields<'_>, mode: Mode) -> String {
        let mut line = Vec::new();
        render(&mut line, mode, fields).expect("renders");
        String::from_utf8(line).expect("UTF-8")
    }

    /// From the level on: the times differ.
    fn after_time(line: &str) -> &str {
        line.split_once("  INFO").map_or(line, |(_, rest)| rest)
    }

    #[test]
    fn the_line_is_the_one_tracing_writes() {
        let outcome = "refused: no service for SNI \"x y\"";
        let backend = "127.0.0.1:8080";
        let full = Fields {
            peer: &"127.0.0.1:40000",
            via: Some("10.0.0.1:5555"),
            service: "web",
            routed: "sni_terminate",
            backend: Some(&backend),
            tls: Some("TLSv1.3"),
            cipher: Some("TLS_AES_128_GCM_SHA256"),
            cert: Some("client one"),
            outcome: &outcome,
            bytes_in: 12,
            bytes_out: 34_567,
            elapsed: Duration::from_nanos(1_234_567),
        };
        let bare = Fields {
            via: None,
            backend: None,
            tls: None,
            cipher: None,
            cert: None,
            outcome: &"served",
            elapsed: Duration::from_micros(501),
            ..full
        };
        for fields in [&full, &bare] {
            let (tracing, hand) = (by_tracing(fields, false), by_hand(fields, Mode::Text));
            assert_eq!(after_time(&hand), after_time(&tracing));
            assert_eq!(
                hand.find("  INFO"),
                tracing.find("  INFO"),
                "{hand} / {tracing}"
            );
            // The same date and time to the second (unless a second turned
            // between the two: then once more).
            let second = |line: &str| line.get(..19).map(str::to_owned);
            let same = (0..3).any(|_| {
                let (t, h) = (by_tracing(fields, false), by_hand(fields, Mode::Text));
                second(&t) == second(&h)
            });
            assert!(same, "{hand} / {tracing}");
            assert_eq!(by_hand(fields, Mode::Journal), by_tracing(fields, true));
        }
    }

    #[test]
    fn milliseconds_round_as_the_float_did() {
        for nanos in [0, 499, 500, 1_234_567, 999_999, 12_345_678_901] {
            let float = format!("{:.3}", Duration::from_nanos(nanos).as_secs_f64() * 1e3);
            let mut line = Vec::new();
            millis(&mut line, Duration::from_nanos(nanos));
            assert_eq!(String::from_utf8(line).expect("ASCII"), float, "{nanos}");
        }
    }
}
