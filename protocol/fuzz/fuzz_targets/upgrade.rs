//! Arbitrary bytes in an upgrade frame must never make the successor's frame
//! reader panic, and a frame it accepts must encode back to one that reads
//! the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpmux_proto::upgrade::{encode, parse, FRAME};

fuzz_target!(|data: &[u8]| {
    let _ = parse(data);
    // Most inputs are the wrong size: also try each as a frame's text.
    let mut frame = [b' '; FRAME];
    let len = data.len().min(FRAME - 1);
    frame[..len].copy_from_slice(&data[..len]);
    frame[FRAME - 1] = b'\n';
    if let Ok(read) = parse(&frame) {
        let again = encode(&read).expect("a frame that was read can be written");
        assert_eq!(parse(&again), Ok(read));
    }
});
