//! The `tcpmux` client library against the real daemon.

use crate::common;

use std::io::{Read, Write};

use common::{read_all, Daemon};

#[test]
fn connect_returns_the_stream_at_the_services_first_byte() {
    let daemon = Daemon::start();
    let mut stream = tcpmux::connect(daemon.addr, "SomeText").expect("connect");
    // Nothing of the service was read ahead: the first byte is the text's first.
    let body = read_all(&mut stream);
    assert_eq!(body.len(), 1_000_007);
    assert!(body.starts_with(b" !\"#$%"));
}

#[test]
fn a_refusal_is_a_typed_error_with_the_servers_message() {
    let daemon = Daemon::start();
    let error = tcpmux::connect(daemon.addr, "missing").expect_err("refused");
    assert!(matches!(error, tcpmux::Error::Refused { .. }), "{error:?}");
    assert_eq!(
        error.refusal(),
        Some("unknown service missing; send HELP for the list")
    );
    let error = tcpmux::connect(daemon.addr, "").expect_err("invalid");
    assert!(
        matches!(error, tcpmux::Error::InvalidName { .. }),
        "{error:?}"
    );
}

#[test]
fn list_returns_the_names() {
    let daemon = Daemon::start();
    let mut stream = tcpmux::open(daemon.addr, &tcpmux::Options::default()).unwrap();
    let names = tcpmux::list(&mut stream, &tcpmux::Options::default()).unwrap();
    assert_eq!(
        names,
        ["chargen", "daytime", "discard", "echo", "isotime", "sometext", "stats", "time"]
    );
}

#[test]
fn a_server_that_is_not_tcpmux_is_a_protocol_error() {
    // A plain TCP server that answers like HTTP.
    let fake = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = fake.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = fake.accept().unwrap();
        let mut request = [0u8; 6];
        conn.read_exact(&mut request).unwrap();
        conn.write_all(b"HTTP/1.0 400 Bad Request\r\n\r\n").unwrap();
    });
    let error = tcpmux::connect(addr, "echo").expect_err("not tcpmux");
    assert!(matches!(error, tcpmux::Error::Protocol(_)), "{error:?}");
    server.join().unwrap();
}

#[test]
fn a_server_that_never_answers_hits_the_reply_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let options = tcpmux::Options {
        connect_timeout: None,
        reply_timeout: Some(std::time::Duration::from_millis(200)),
        fast_open: false,
    };
    let error = tcpmux::connect_with(addr, "echo", &options).expect_err("timeout");
    assert!(matches!(error, tcpmux::Error::ReplyTimeout), "{error:?}");
    drop(silent);
}
