//! Detection from arbitrary first bytes: never a panic; a protocol told from
//! some bytes is told the same from any bytes they begin (the first input
//! byte picks the optional probes); a complete ClientHello or request head
//! claims no more than it was given and decides the same on those bytes
//! alone; every strict prefix of what decided is "need more". A datagram
//! is classified without a panic, and only as what some probe alone takes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcpmux_proto::sniff::{classify_with, client_hello, datagram, http, quic, Probes, Protocol};

fuzz_target!(|data: &[u8]| {
    if let Some(found) = datagram::classify(data, &datagram::Datagram::ALL) {
        assert_eq!(datagram::classify(data, &[found]), Some(found));
    }
    let _ = datagram::dtls_record(data);
    let _ = datagram::long_header(data);
    let _ = datagram::short_header_dcid(data, 8);
    let _ = client_hello::parse_message(data);
    let mut crypto = quic::CryptoStream::default();
    if crypto.add(data).is_ok() {
        let _ = crypto.hello();
    }
    if let Some((&pick, first)) = data.split_first() {
        let probes = Protocol::OPTIONAL
            .into_iter()
            .enumerate()
            .filter(|(i, _)| pick & 1 << i != 0)
            .fold(Probes::NONE, |set, (_, p)| set.with(p));
        let whole = classify_with(first, probes);
        for cut in 0..first.len().min(600) {
            if let Some(early) = classify_with(&first[..cut], probes) {
                assert_eq!(Some(early), whole);
            }
        }
    }
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
