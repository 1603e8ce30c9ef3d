//! RFC 1078 negotiation against the real daemon: names, case, line ends, HELP,
//! refusals, pipelined bytes and the negotiation timeout.

use crate::common;

use std::io::{Read, Write};
use std::net::Shutdown;

use common::{read_all, read_line, Daemon};

const BUILTINS: &str =
    "chargen\r\ndaytime\r\ndiscard\r\necho\r\nisotime\r\nsometext\r\nstats\r\ntime\r\n";

#[test]
fn help_lists_services_without_a_status_line() {
    let daemon = Daemon::start();
    assert_eq!(daemon.exchange(b"help\r\n"), BUILTINS.as_bytes());
    assert_eq!(daemon.exchange(b"HeLp\n"), BUILTINS.as_bytes());
}

#[test]
fn names_are_case_insensitive_and_bare_lf_is_accepted() {
    let daemon = Daemon::start();
    for request in [&b"ECHO\r\nhi"[..], b"echo\nhi", b"eChO\r\nhi"] {
        let mut stream = daemon.connect();
        stream.write_all(request).unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_all(&mut stream), b"+\r\nhi", "request {request:?}");
    }
}

#[test]
fn unknown_service_is_refused_with_a_reason_then_closed() {
    let daemon = Daemon::start();
    let reply = daemon.exchange(b"no-such-thing\r\n");
    let text = String::from_utf8(reply).unwrap();
    assert!(text.starts_with('-'), "{text:?}");
    assert!(
        text.ends_with("\r\n") && text.matches("\r\n").count() == 1,
        "{text:?}"
    );
    assert!(text.contains("no-such-thing"), "{text:?}");
}

#[test]
fn a_1000_byte_name_gets_a_refusal_that_is_not_lost_to_a_reset() {
    let daemon = Daemon::start();
    let mut request = vec![b'x'; 1000];
    request.extend_from_slice(b"\r\n");
    // The daemon stops reading at byte 257; the rest sits unread in its socket. A
    // plain close would answer with RST and could destroy the '-' line in flight.
    let reply = daemon.exchange(&request);
    let text = String::from_utf8(reply).unwrap();
    assert!(text.starts_with('-') && text.ends_with("\r\n"), "{text:?}");
    assert!(text.contains("longer than 256"), "{text:?}");
}

#[test]
fn name_of_exactly_256_bytes_is_looked_up() {
    let daemon = Daemon::start();
    let mut request = vec![b'y'; 256];
    request.extend_from_slice(b"\r\n");
    let text = String::from_utf8(daemon.exchange(&request)).unwrap();
    assert!(text.starts_with("-unknown service"), "{text:?}");
}

#[test]
fn malformed_requests_are_refused_clearly() {
    let daemon = Daemon::start();
    for (request, words) in [
        (&b"\r\n"[..], "empty service name"),
        (b"echo \r\n", "0x20"),
        (b"\x16\x03\x01\x02\x00", "0x16"),
    ] {
        let text = String::from_utf8_lossy(&daemon.exchange(request)).into_owned();
        assert!(
            text.starts_with('-') && text.contains(words),
            "{request:?} gave {text:?}"
        );
    }
}

#[test]
fn bytes_pipelined_behind_the_name_reach_the_service() {
    let daemon = Daemon::start();
    let payload = common::random_bytes(7, 3000);
    let mut request = b"echo\r\n".to_vec();
    request.extend_from_slice(&payload);
    // One write: the name, CRLF and the payload arrive in the same segment.
    let mut stream = daemon.connect();
    stream.write_all(&request).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let reply = read_all(&mut stream);
    assert_eq!(&reply[..3], b"+\r\n");
    assert_eq!(&reply[3..], &payload[..]);
}

#[test]
fn a_one_shot_answer_closes_cleanly_over_unread_bytes_and_logs_them() {
    // Bytes behind a one-shot answer's name are never read by the service:
    // the answer must still arrive whole and end in FIN, not RST (which could
    // destroy it), and the log must count every byte the client sent.
    let mut daemon = Daemon::start();
    for (i, request) in [&b"daytime\r\n"[..], b"daytime\r\nand more bytes"]
        .into_iter()
        .enumerate()
    {
        let mut stream = daemon.connect();
        let local = stream.local_addr().unwrap();
        stream.write_all(request).unwrap();
        let reply = read_all(&mut stream);
        assert!(
            reply.starts_with(b"+\r\n") && reply.ends_with(b"\r\n"),
            "{i}: {reply:?}"
        );
        drop(stream);
        let line = daemon
            .wait_for_log(|l| l.contains(&format!("peer={local}")))
            .expect("connection log line");
        let bytes_in = format!("bytes_in={} ", request.len());
        assert!(
            line.contains("outcome=served") && line.contains(&bytes_in),
            "{line}"
        );
    }
}

#[test]
fn the_name_may_arrive_a_byte_at_a_time() {
    let daemon = Daemon::start();
    let mut stream = daemon.connect();
    stream.set_nodelay(true).unwrap();
    for &b in b"EcHo\r\n" {
        stream.write_all(&[b]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(read_line(&mut stream), b"+\r\n");
    stream.write_all(b"ping").unwrap();
    let mut echoed = [0u8; 4];
    stream.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"ping");
}

#[test]
fn a_silent_client_is_timed_out_and_never_stalls_others() {
    let daemon = Daemon::with_config("negotiation_timeout = \"1s\"\n");
    let mut silent = daemon.connect();
    // While the silent client holds its connection, others are served in full.
    for i in 0..20u64 {
        let payload = common::random_bytes(i, 500);
        let mut stream = daemon.connect();
        stream.write_all(b"echo\r\n").unwrap();
        stream.write_all(&payload).unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        let reply = read_all(&mut stream);
        assert_eq!(&reply[3..], &payload[..]);
    }
    // The silent one has still been told nothing...
    silent.set_nonblocking(true).unwrap();
    let mut probe = [0u8; 64];
    assert!(
        matches!(silent.read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    );
    // ...until its timeout, when it is refused and closed.
    silent.set_nonblocking(false).unwrap();
    assert_eq!(read_all(&mut silent), b"-negotiation timeout\r\n");
}

#[test]
fn a_client_that_closes_before_naming_a_service_is_logged() {
    let mut daemon = Daemon::start();
    drop(daemon.connect());
    let line = daemon.wait_for_log(|l| l.contains("outcome=closed before request"));
    assert!(line.is_some(), "log:\n{}", daemon.logs().join("\n"));
}

#[test]
fn a_client_that_half_closes_mid_name_is_told_why() {
    let mut daemon = Daemon::start();
    let mut stream = daemon.connect();
    stream.write_all(b"ech").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let reply = String::from_utf8(read_all(&mut stream)).unwrap();
    assert_eq!(
        reply,
        "-incomplete request line: the connection was closed before its end\r\n"
    );
    let line = daemon.wait_for_log(|l| l.contains("outcome=refused: incomplete request line"));
    assert!(line.is_some(), "log:\n{}", daemon.logs().join("\n"));
}

#[test]
fn every_connection_gets_one_log_line_with_peer_service_outcome_bytes_duration() {
    let mut daemon = Daemon::start();
    let mut stream = daemon.connect();
    let local = stream.local_addr().unwrap();
    stream.write_all(b"echo\r\nabcdef").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut stream), b"+\r\nabcdef");
    let line = daemon
        .wait_for_log(|l| l.contains(&format!("peer={local}")))
        .expect("connection log line");
    for field in [
        "service=echo",
        "outcome=served",
        "bytes_in=12",
        "bytes_out=9",
        "ms=",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    let count = daemon
        .logs()
        .iter()
        .filter(|l| l.contains(&format!("peer={local}")))
        .count();
    assert_eq!(count, 1);
}
