//! A listener's `match` rules: a regular expression over a client's first
//! bytes, compiled at load into a DFA that is stepped a byte at a time, so a
//! rule can say yes or no before the whole opening has arrived.

use std::fmt;
use std::sync::Arc;

use regex_automata::dfa::{dense, Automaton};
use regex_automata::nfa::thompson;
use regex_automata::util::{start, syntax};
use regex_automata::Anchored;
use regex_syntax::hir::Look;

/// The most bytes a rule looks at. A rule sees the opening up to and
/// including its first line feed (where a TCPMUX name ends), at most this
/// many bytes, or what arrived before the client ended or paused.
pub const MATCH_WINDOW: usize = 512;

/// The most memory one pattern's automaton may take, and the NFA it is
/// made from: a pattern like `(?:(?:a{1000}){1000}){100}` is refused here
/// in milliseconds instead of expanding into gigabytes.
const SIZE_LIMIT: usize = 1 << 20;

/// A compiled pattern. Unanchored, like sslh's and grep's: `jabber` matches
/// anywhere in the window, `^SSH-` only at its start. Matches bytes, not
/// Unicode text: `.` is any byte, `\x00` a NUL.
#[derive(Clone)]
pub struct Pattern {
    source: String,
    dfa: Arc<dense::DFA<Vec<u32>>>,
    /// No assertion looks ahead (`$`, `\b`): a match on some bytes is then a
    /// match on any bytes they begin, and can be told without waiting for one
    /// more byte (a DFA reports a match one byte late, for look-ahead's sake).
    monotone: bool,
}

/// Why a pattern was refused.
#[derive(Debug, thiserror::Error)]
pub enum PatternError {
    #[error("{message} at byte {offset} of the pattern")]
    Syntax { message: String, offset: usize },
    #[error("too complex: its automaton would take over {} KiB", SIZE_LIMIT / 1024)]
    TooLarge,
    #[error("{0}")]
    Unsupported(String),
}

impl Pattern {
    pub fn new(source: &str) -> Result<Pattern, PatternError> {
        let syntax = syntax::Config::new().unicode(false).utf8(false);
        let hir = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .build()
            .parse(source)
            .map_err(syntax_error)?;
        let behind = [Look::Start, Look::StartLF, Look::StartCRLF];
        let monotone = hir
            .properties()
            .look_set()
            .iter()
            .all(|l| behind.contains(&l));
        let dfa = dense::Builder::new()
            .syntax(syntax)
            .thompson(thompson::Config::new().nfa_size_limit(Some(SIZE_LIMIT)))
            .configure(
                dense::Config::new()
                    .dfa_size_limit(Some(SIZE_LIMIT))
                    .determinize_size_limit(Some(SIZE_LIMIT)),
            )
            .build(source)
            .map_err(|e| {
                let nfa_too_large = std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<thompson::BuildError>())
                    .is_some_and(|nfa| nfa.size_limit().is_some());
                match e.is_size_limit_exceeded() || nfa_too_large {
                    true => PatternError::TooLarge,
                    false => PatternError::Unsupported(e.to_string()),
                }
            })?;
        Ok(Pattern {
            source: source.to_owned(),
            dfa: Arc::new(dfa),
            monotone,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The bytes its automaton takes.
    pub fn memory(&self) -> usize {
        self.dfa.memory_usage()
    }

    /// Whether the pattern matches the window of `first` (the bytes received
    /// so far): `None` while it cannot tell. `ended` says no more bytes will
    /// count (the client ended or paused). The answer for some bytes is the
    /// answer for any bytes they begin.
    pub fn decide(&self, first: &[u8], ended: bool) -> Option<bool> {
        let (window, complete) = window(first);
        let dfa = &*self.dfa;
        let start = start::Config::new().anchored(Anchored::No);
        let mut state = dfa.start_state(&start).ok()?;
        for &byte in window {
            state = dfa.next_state(state, byte);
            if dfa.is_match_state(state) {
                return Some(true);
            }
            if dfa.is_dead_state(state) || dfa.is_quit_state(state) {
                return Some(false);
            }
        }
        let matched = dfa.is_match_state(dfa.next_eoi_state(state));
        if matched && self.monotone {
            return Some(true);
        }
        (complete || ended).then_some(matched)
    }
}

/// The part of `first` a rule looks at, and whether it is all there.
fn window(first: &[u8]) -> (&[u8], bool) {
    let capped = &first[..first.len().min(MATCH_WINDOW)];
    match capped.iter().position(|&b| b == b'\n') {
        Some(end) => (&capped[..=end], true),
        None => (capped, capped.len() == MATCH_WINDOW),
    }
}

fn syntax_error(e: regex_syntax::Error) -> PatternError {
    let (message, offset) = match &e {
        regex_syntax::Error::Parse(e) => (e.kind().to_string(), e.span().start.offset),
        regex_syntax::Error::Translate(e) => (e.kind().to_string(), e.span().start.offset),
        _ => (e.to_string(), 0),
    };
    PatternError::Syntax { message, offset }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Pattern").field(&self.source).finish()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source
    }
}

impl Eq for Pattern {}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(pattern: &str, first: &[u8], ended: bool) -> Option<bool> {
        Pattern::new(pattern).unwrap().decide(first, ended)
    }

    #[test]
    fn answers_as_soon_as_the_bytes_allow() {
        assert_eq!(decide("^SSH-", b"SS", false), None);
        assert_eq!(decide("^SSH-", b"SSH-", false), Some(true));
        assert_eq!(decide("^SSH-", b"SX", false), Some(false));
        // Unanchored: undecided until the window is complete.
        assert_eq!(decide("jabber", b"<stream xmlns=", false), None);
        assert_eq!(
            decide("jabber", b"<stream xmlns='jabber", false),
            Some(true)
        );
        assert_eq!(decide("jabber", b"echo\r\n", false), Some(false));
        assert_eq!(decide("jabber", b"echo", true), Some(false));
        // `$` is the window's end: the line feed, or where the client stopped.
        assert_eq!(decide("^ping\\r\\n$", b"ping\r\n", false), Some(true));
        assert_eq!(decide("^ping$", b"ping", false), None);
        assert_eq!(decide("^ping$", b"ping", true), Some(true));
        // Bytes, not text.
        assert_eq!(
            decide("^\\x00\\x0e\\x38", b"\x00\x0e\x38\xff", false),
            Some(true)
        );
        assert_eq!(decide("^.{3}\\xff", b"\x00\x0e\x38\xff", false), Some(true));
        let long = vec![b'a'; MATCH_WINDOW + 10];
        assert_eq!(decide("b", &long, false), Some(false));
    }

    #[test]
    fn bad_patterns_say_what_and_where() {
        let e = Pattern::new("^(abc").unwrap_err().to_string();
        assert_eq!(e, "unclosed group at byte 1 of the pattern");
        let e = Pattern::new("ab{5,2}").unwrap_err().to_string();
        assert!(e.ends_with("at byte 2 of the pattern"), "{e}");
        // The last one is the NFA's: it took 2.2 GB and an abort before.
        for large in ["a{99999}", "[01]*1[01]{20}", "(?:(?:a{1000}){1000}){100}"] {
            let e = Pattern::new(large).unwrap_err().to_string();
            assert!(e.starts_with("too complex"), "{e}");
        }
    }

    #[test]
    fn a_decision_on_some_bytes_holds_for_any_bytes_they_begin() {
        let patterns = [
            "jabber", "^a.b$", "b\\n", "^(ab)+$", "\\bab\\b", "a{3}", "(?m)^b", "a$|b",
        ]
        .map(|p| Pattern::new(p).unwrap());
        let alphabet = b"ab \n";
        // Every string of up to 7 bytes over the alphabet.
        for len in 0..=7u32 {
            for code in 0..4usize.pow(len) {
                let bytes: Vec<u8> = (0..len)
                    .map(|i| alphabet[code / 4usize.pow(i) % 4])
                    .collect();
                for pattern in &patterns {
                    let whole = pattern.decide(&bytes, true);
                    for cut in 0..bytes.len() {
                        if let Some(early) = pattern.decide(&bytes[..cut], false) {
                            assert_eq!(Some(early), whole, "{pattern:?} on {bytes:?} at {cut}");
                        }
                    }
                }
            }
        }
    }
}
