//! The admin socket's wire format: any command line reads to a request that
//! writes back to a line reading to the same request, or to an error; any
//! reply line reads to a reply that writes back to the same reply, or to an
//! error. Never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpmux_proto::admin::{Reply, Request};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(request) = Request::parse(text) {
        let line = request.to_string();
        assert_eq!(Request::parse(&line), Ok(request), "{line:?}");
    }
    if let Ok(reply) = Reply::decode(text) {
        let line = reply.encode();
        let again = std::str::from_utf8(&line).expect("a reply is UTF-8");
        assert_eq!(Reply::decode(again).ok(), Some(reply), "{again:?}");
    }
});
