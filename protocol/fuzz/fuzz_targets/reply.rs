//! Arbitrary server bytes must never make the client's status-line parser panic,
//! claim more than it was given, or buffer past its bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpmux_proto::{ReplyParser, ReplyProgress, MAX_REPLY_LINE};

fuzz_target!(|data: &[u8]| {
    let mut parser = ReplyParser::new();
    let mut fed = 0;
    for chunk in data.chunks(7) {
        fed += chunk.len();
        match parser.feed(chunk) {
            ReplyProgress::NeedMore => assert!(fed <= MAX_REPLY_LINE),
            ReplyProgress::Done { reply, consumed } => {
                assert!(consumed <= chunk.len());
                if let Ok(line) = reply {
                    assert!(!line.message.contains('\n'));
                }
                return;
            }
        }
    }
});
