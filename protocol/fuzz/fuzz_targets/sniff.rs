//! Detection from arbitrary first bytes: never a panic; a complete ClientHello
//! or request head claims no more than it was given and decides the same on
//! those bytes alone; every strict prefix of what decided is "need more".
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpmux_proto::sniff::{classify, client_hello, http};

fuzz_target!(|data: &[u8]| {
    let _ = classify(data);
    if let Ok(Some(hello)) = client_hello::parse(data, 64 * 1024) {
        assert!(hello.length <= data.len());
        assert_eq!(client_hello::parse(&data[..hello.length], 64 * 1024), Ok(Some(hello.clone())));
        for cut in (0..hello.length).step_by(7) {
            assert_eq!(client_hello::parse(&data[..cut], 64 * 1024), Ok(None));
        }
    }
    if let Ok(Some(head)) = http::parse(data, 8192) {
        assert!(head.length <= data.len());
        assert_eq!(http::parse(&data[..head.length], 8192), Ok(Some(head.clone())));
        for cut in 0..head.length {
            assert_eq!(http::parse(&data[..cut], 8192), Ok(None));
        }
    }
});
