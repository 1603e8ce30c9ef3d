//! The server's half: reading the client's request line.

use crate::name::{is_name_byte, NameError, ServiceName, MAX_NAME_LEN};

/// What the client asked for, once its request line is complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// `HELP` in any case: list the services, with no status line.
    Help,
    /// Any other well-formed name, case-folded.
    Service(ServiceName),
    /// The line is not a name; the server answers `-` and closes.
    Reject(NameError),
}

/// The result of feeding bytes to a [`RequestParser`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every byte fed so far belongs to the request line; feed more.
    NeedMore,
    /// The request is decided. `consumed` bytes of the *last* input belong to the
    /// request line (its end included); the rest of that input belongs to the service
    /// and must be handed to it, not dropped.
    Decided {
        /// What the request asks for.
        decision: Decision,
        /// Bytes of the last input that belong to the request line.
        consumed: usize,
    },
}

/// Incremental parser for `NAME CRLF` (a bare LF is accepted too).
///
/// It holds at most `MAX_NAME_LEN + 1` bytes, never allocates until a name is
/// complete, and decides as early as it can: a byte that can never be part of a name
/// rejects the request at once instead of waiting for the line end.
#[derive(Clone, Debug)]
pub struct RequestParser {
    line: [u8; MAX_NAME_LEN + 1],
    len: usize,
    decided: Option<Decision>,
}

impl Default for RequestParser {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestParser {
    /// A parser at the start of a request line.
    pub fn new() -> Self {
        Self {
            line: [0; MAX_NAME_LEN + 1],
            len: 0,
            decided: None,
        }
    }

    /// Bytes of the request line buffered so far.
    pub fn buffered(&self) -> usize {
        self.len
    }

    /// Feeds the next bytes read from the client.
    ///
    /// Once decided, the parser is finished: further calls repeat the decision with
    /// `consumed: 0`, so a confused caller cannot swallow service bytes.
    pub fn feed(&mut self, input: &[u8]) -> Progress {
        if let Some(decision) = &self.decided {
            return Progress::Decided {
                decision: decision.clone(),
                consumed: 0,
            };
        }
        for (i, &byte) in input.iter().enumerate() {
            if let Some(decision) = self.step(byte) {
                self.decided = Some(decision.clone());
                return Progress::Decided {
                    decision,
                    consumed: i + 1,
                };
            }
        }
        Progress::NeedMore
    }

    fn step(&mut self, byte: u8) -> Option<Decision> {
        let pending_cr = self.len > 0 && self.line[self.len - 1] == b'\r';
        if byte == b'\n' {
            let end = if pending_cr { self.len - 1 } else { self.len };
            return Some(match ServiceName::from_bytes(&self.line[..end]) {
                Ok(name) if name.is_help() => Decision::Help,
                Ok(name) => Decision::Service(name),
                Err(error) => Decision::Reject(error),
            });
        }
        if pending_cr {
            // CR is only legal as the first half of CRLF.
            return Some(Decision::Reject(NameError::InvalidByte(b'\r')));
        }
        if byte != b'\r' && !is_name_byte(byte) {
            return Some(Decision::Reject(NameError::InvalidByte(byte)));
        }
        if byte != b'\r' && self.len == MAX_NAME_LEN {
            return Some(Decision::Reject(NameError::TooLong));
        }
        self.line[self.len] = byte;
        self.len += 1;
        None
    }
}

/// The bytes a client sends to ask for `name`: the name and CRLF, to go out in one
/// write so Nagle's algorithm never holds the CRLF back waiting for an ACK.
pub fn encode_request(name: &ServiceName) -> Vec<u8> {
    let mut line = Vec::with_capacity(name.as_str().len() + 2);
    line.extend_from_slice(name.as_str().as_bytes());
    line.extend_from_slice(b"\r\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(input: &[u8]) -> Progress {
        RequestParser::new().feed(input)
    }

    fn service(name: &str) -> Decision {
        Decision::Service(ServiceName::parse(name).unwrap())
    }

    #[test]
    fn crlf_and_bare_lf() {
        assert_eq!(
            decide(b"echo\r\n"),
            Progress::Decided {
                decision: service("echo"),
                consumed: 6
            }
        );
        assert_eq!(
            decide(b"echo\n"),
            Progress::Decided {
                decision: service("echo"),
                consumed: 5
            }
        );
    }

    #[test]
    fn case_insensitive_and_help() {
        assert_eq!(
            decide(b"EcHo\r\n"),
            Progress::Decided {
                decision: service("echo"),
                consumed: 6
            }
        );
        assert_eq!(
            decide(b"HeLp\r\n"),
            Progress::Decided {
                decision: Decision::Help,
                consumed: 6
            }
        );
    }

    #[test]
    fn pipelined_bytes_are_not_consumed() {
        let input = b"echo\r\nhello\r\nworld";
        match decide(input) {
            Progress::Decided { consumed, .. } => assert_eq!(&input[consumed..], b"hello\r\nworld"),
            other => panic!("not decided: {other:?}"),
        }
    }

    #[test]
    fn every_split_gives_the_same_answer() {
        let input = b"Sometext\r\npayload";
        for split in 0..=input.len() {
            let mut parser = RequestParser::new();
            let (a, b) = input.split_at(split);
            let (decision, offset) = match parser.feed(a) {
                Progress::Decided { decision, consumed } => (decision, consumed),
                Progress::NeedMore => match parser.feed(b) {
                    Progress::Decided { decision, consumed } => (decision, split + consumed),
                    Progress::NeedMore => panic!("split {split}: never decided"),
                },
            };
            assert_eq!(decision, service("sometext"), "split {split}");
            assert_eq!(&input[offset..], b"payload", "split {split}");
        }
    }

    #[test]
    fn byte_at_a_time() {
        let mut parser = RequestParser::new();
        for &b in b"time\r" {
            assert_eq!(parser.feed(&[b]), Progress::NeedMore);
        }
        assert_eq!(
            parser.feed(b"\n"),
            Progress::Decided {
                decision: service("time"),
                consumed: 1
            }
        );
        // Finished: later input is never claimed by the request line.
        assert!(matches!(
            parser.feed(b"more"),
            Progress::Decided { consumed: 0, .. }
        ));
    }

    #[test]
    fn longest_name_is_accepted_one_more_is_not() {
        let mut ok = vec![b'a'; MAX_NAME_LEN];
        ok.extend_from_slice(b"\r\n");
        assert!(matches!(
            decide(&ok),
            Progress::Decided {
                decision: Decision::Service(_),
                ..
            }
        ));
        let long = vec![b'a'; 1000];
        assert_eq!(
            decide(&long),
            Progress::Decided {
                decision: Decision::Reject(NameError::TooLong),
                consumed: MAX_NAME_LEN + 1
            }
        );
    }

    #[test]
    fn rejects_early_and_clearly() {
        assert_eq!(
            decide(b"\r\n"),
            Progress::Decided {
                decision: Decision::Reject(NameError::Empty),
                consumed: 2
            }
        );
        assert_eq!(
            decide(b"ec ho"),
            Progress::Decided {
                decision: Decision::Reject(NameError::InvalidByte(b' ')),
                consumed: 3
            }
        );
        assert_eq!(
            decide(b"ec\rho"),
            Progress::Decided {
                decision: Decision::Reject(NameError::InvalidByte(b'\r')),
                consumed: 4
            }
        );
        // A TLS ClientHello is refused at its first byte, not after a timeout.
        assert_eq!(
            decide(&[0x16, 0x03, 0x01]),
            Progress::Decided {
                decision: Decision::Reject(NameError::InvalidByte(0x16)),
                consumed: 1
            }
        );
    }

    #[test]
    fn encode_round_trips() {
        let name = ServiceName::parse("Daytime").unwrap();
        let line = encode_request(&name);
        assert_eq!(line, b"daytime\r\n");
        assert_eq!(
            decide(&line),
            Progress::Decided {
                decision: service("daytime"),
                consumed: line.len()
            }
        );
    }
}

/// The fuzz target's central property, checked on every `cargo test` run with a
/// deterministic generator: how the input is cut into reads never changes the
/// decision or where it falls.
#[cfg(test)]
mod properties {
    use super::*;

    use crate::test_rng::Rng;

    /// Inputs near the interesting edges: names of many lengths, CR and LF in and
    /// out of place, case, other bytes.
    fn input(rng: &mut Rng) -> Vec<u8> {
        const ALPHABET: &[u8] = b"aZ.-9\r\n \x00\xff";
        let len = match rng.below(4) {
            0 => rng.below(8),
            1 => 250 + rng.below(12),
            _ => rng.below(300),
        };
        (0..len)
            .map(|_| {
                if rng.below(4) == 0 {
                    ALPHABET[rng.below(ALPHABET.len())]
                } else {
                    b'a' + rng.below(26) as u8
                }
            })
            .collect()
    }

    fn feed_in_pieces(input: &[u8], cuts: &[usize]) -> Progress {
        let mut parser = RequestParser::new();
        let mut start = 0;
        for &end in cuts.iter().chain(std::iter::once(&input.len())) {
            if let Progress::Decided { decision, consumed } = parser.feed(&input[start..end]) {
                return Progress::Decided {
                    decision,
                    consumed: start + consumed,
                };
            }
            start = end;
        }
        Progress::NeedMore
    }

    #[test]
    fn any_cutting_decides_like_the_whole() {
        let mut rng = Rng(0x5eed_1078);
        for case in 0..20_000 {
            let input = input(&mut rng);
            let whole = RequestParser::new().feed(&input);
            let mut cuts: Vec<usize> = (0..rng.below(5))
                .map(|_| rng.below(input.len() + 1))
                .collect();
            cuts.sort_unstable();
            assert_eq!(
                feed_in_pieces(&input, &cuts),
                whole,
                "case {case}: {input:?} cut at {cuts:?}"
            );
            if let Progress::Decided {
                decision: Decision::Service(name),
                consumed,
            } = &whole
            {
                assert_eq!(input[consumed - 1], b'\n');
                let line = &input[..consumed - 1];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                assert_eq!(
                    name.as_str().as_bytes(),
                    line.to_ascii_lowercase().as_slice()
                );
            }
        }
    }
}
