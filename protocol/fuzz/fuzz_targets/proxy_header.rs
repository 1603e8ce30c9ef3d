//! PROXY headers from arbitrary bytes: never a panic, a claimed length within the
//! input, the same answer for the claimed bytes alone, and errors that stay
//! errors however the input goes on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpmux_proto::proxy_header::decode;

const LIMIT: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let whole = decode(data, LIMIT);
    match &whole {
        Ok(Some((announced, length))) => {
            assert!(*length <= data.len());
            assert_eq!(decode(&data[..*length], LIMIT), Ok(Some((*announced, *length))));
            // Every shorter prefix of a header is "need more", never an error.
            for cut in 0..*length {
                assert_eq!(decode(&data[..cut], LIMIT), Ok(None), "cut at {cut}");
            }
        }
        Ok(None) => assert!(data.len() < LIMIT.max(tcpmux_proto::proxy_header::V1_MAX_LEN) + 16),
        Err(_) => {
            // An error is final: no input that goes on from here decodes.
            for cut in 0..data.len() {
                if decode(&data[..cut], LIMIT).is_err() {
                    return;
                }
            }
        }
    }
});
