//! The status line: the server's encoding of `+`/`-` and the client's parser for it.

/// The longest status line a client accepts. RFC 1078 sets no bound; ours keeps a
/// misbehaving server from making a client buffer without end.
pub const MAX_REPLY_LINE: usize = 1024;

/// Appends the status line `+message CRLF` or `-message CRLF` to `out`.
///
/// Bytes that would end or corrupt the line (CR, LF, other controls) are replaced by
/// spaces, so a message taken from a config file or an error can never inject a line.
pub fn encode_reply(accepted: bool, message: &str, out: &mut Vec<u8>) {
    out.reserve(message.len() + 3);
    out.push(if accepted { b'+' } else { b'-' });
    out.extend(
        message
            .bytes()
            .map(|b| if b.is_ascii_control() { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// A parsed status line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyLine {
    /// `+` (the service follows) rather than `-` (refused, and the server closes).
    pub accepted: bool,
    /// The text after the `+`/`-`, without the line end (lossily decoded).
    pub message: String,
}

/// Why a status line is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The first byte is neither `+` nor `-`.
    #[error("server reply does not start with '+' or '-' (first byte 0x{0:02x})")]
    NotAStatusLine(u8),
    /// No line end within [`MAX_REPLY_LINE`] bytes.
    #[error("server status line longer than {MAX_REPLY_LINE} bytes")]
    TooLong,
}

/// The result of feeding bytes to a [`ReplyParser`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyProgress {
    /// Every byte fed so far belongs to the status line; feed more.
    NeedMore,
    /// The line is complete: `consumed` bytes of the last input belong to it, and the
    /// rest is the service's first data.
    Done {
        /// The status line, or why it is malformed.
        reply: Result<ReplyLine, ReplyError>,
        /// Bytes of the last input that belong to the line.
        consumed: usize,
    },
}

/// Incremental parser for the server's status line.
#[derive(Clone, Debug, Default)]
pub struct ReplyParser {
    line: Vec<u8>,
}

impl ReplyParser {
    /// A parser at the start of a status line.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes read from the server.
    pub fn feed(&mut self, input: &[u8]) -> ReplyProgress {
        if self.line.is_empty() {
            if let Some(&first) = input.first() {
                if first != b'+' && first != b'-' {
                    return ReplyProgress::Done {
                        reply: Err(ReplyError::NotAStatusLine(first)),
                        consumed: 0,
                    };
                }
            }
        }
        match input.iter().position(|&b| b == b'\n') {
            Some(end) => {
                if self.line.len() + end > MAX_REPLY_LINE {
                    return ReplyProgress::Done {
                        reply: Err(ReplyError::TooLong),
                        consumed: end + 1,
                    };
                }
                self.line.extend_from_slice(&input[..end]);
                if self.line.last() == Some(&b'\r') {
                    self.line.pop();
                }
                let accepted = self.line.first() == Some(&b'+');
                let message = String::from_utf8_lossy(&self.line[1..]).into_owned();
                self.line.clear();
                ReplyProgress::Done {
                    reply: Ok(ReplyLine { accepted, message }),
                    consumed: end + 1,
                }
            }
            None if self.line.len() + input.len() > MAX_REPLY_LINE => ReplyProgress::Done {
                reply: Err(ReplyError::TooLong),
                consumed: input.len(),
            },
            None => {
                self.line.extend_from_slice(input);
                ReplyProgress::NeedMore
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8]) -> ReplyProgress {
        ReplyParser::new().feed(input)
    }

    #[test]
    fn accepted_with_data_behind_it() {
        let input = b"+OK go ahead\r\nservice data";
        assert_eq!(
            parse(input),
            ReplyProgress::Done {
                reply: Ok(ReplyLine {
                    accepted: true,
                    message: "OK go ahead".into()
                }),
                consumed: 14
            }
        );
    }

    #[test]
    fn refused_bare_lf_and_empty_message() {
        assert_eq!(
            parse(b"-\n"),
            ReplyProgress::Done {
                reply: Ok(ReplyLine {
                    accepted: false,
                    message: String::new()
                }),
                consumed: 2
            }
        );
    }

    #[test]
    fn split_anywhere() {
        let input = b"-unknown service\r\n";
        for split in 0..input.len() {
            let mut parser = ReplyParser::new();
            let (a, b) = input.split_at(split);
            assert_eq!(parser.feed(a), ReplyProgress::NeedMore, "split {split}");
            assert_eq!(
                parser.feed(b),
                ReplyProgress::Done {
                    reply: Ok(ReplyLine {
                        accepted: false,
                        message: "unknown service".into()
                    }),
                    consumed: b.len()
                },
                "split {split}"
            );
        }
    }

    #[test]
    fn garbage_and_overlong_lines() {
        assert!(matches!(
            parse(b"HTTP/1.0 400\r\n"),
            ReplyProgress::Done {
                reply: Err(ReplyError::NotAStatusLine(b'H')),
                ..
            }
        ));
        let mut long = vec![b'+'];
        long.extend(std::iter::repeat_n(b'x', MAX_REPLY_LINE + 10));
        assert!(matches!(
            parse(&long),
            ReplyProgress::Done {
                reply: Err(ReplyError::TooLong),
                ..
            }
        ));
    }

    #[test]
    fn encoding_cannot_inject_lines() {
        let mut out = Vec::new();
        encode_reply(false, "bad\r\nname", &mut out);
        assert_eq!(out, b"-bad  name\r\n");
        let mut out = Vec::new();
        encode_reply(true, "", &mut out);
        assert_eq!(out, b"+\r\n");
    }
}
