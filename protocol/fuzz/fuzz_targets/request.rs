//! Feeds arbitrary bytes, split at an arbitrary point, to the request parser and
//! checks the properties the daemon relies on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpmux_proto::{Decision, Progress, RequestParser, MAX_NAME_LEN};

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let split = (split as usize).min(input.len());
    let whole = RequestParser::new().feed(input);

    // Feeding in two pieces decides the same way, at the same offset.
    let mut parser = RequestParser::new();
    let (first, second) = input.split_at(split);
    let pieces = match parser.feed(first) {
        Progress::Decided { decision, consumed } => Progress::Decided { decision, consumed },
        Progress::NeedMore => match parser.feed(second) {
            Progress::Decided { decision, consumed } => Progress::Decided {
                decision,
                consumed: split + consumed,
            },
            Progress::NeedMore => Progress::NeedMore,
        },
    };
    assert_eq!(whole, pieces);

    match whole {
        Progress::NeedMore => {
            // Undecided only while the line could still become a valid name.
            assert!(input.len() <= MAX_NAME_LEN + 1);
            assert!(!input.contains(&b'\n'));
        }
        Progress::Decided { decision, consumed } => {
            assert!(consumed >= 1 && consumed <= input.len());
            assert!(consumed <= MAX_NAME_LEN + 2);
            if let Decision::Service(name) = &decision {
                assert_eq!(input[consumed - 1], b'\n');
                assert!(!name.as_str().is_empty() && name.as_str().len() <= MAX_NAME_LEN);
                assert!(name.as_str().bytes().all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()));
                assert!(!name.is_help());
            }
            if decision == Decision::Help {
                assert_eq!(input[consumed - 1], b'\n');
            }
        }
    }
});
