//! Every built-in service, over real sockets, checked against its RFC.

use crate::common;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::{SystemTime, UNIX_EPOCH};

use common::{read_all, read_line, Daemon};

fn strip_status(reply: &[u8]) -> &[u8] {
    assert!(
        reply.starts_with(b"+\r\n"),
        "no '+' line: {:?}",
        String::from_utf8_lossy(&reply[..reply.len().min(80)])
    );
    &reply[3..]
}

#[test]
fn echo_returns_every_byte_in_order() {
    let daemon = Daemon::start();
    let payload = common::random_bytes(1, 200_000);
    let mut request = b"echo\r\n".to_vec();
    request.extend_from_slice(&payload);
    let reply = common::send_and_receive(&mut daemon.connect(), request);
    assert_eq!(strip_status(&reply), &payload[..]);
}

#[test]
fn discard_reads_everything_and_answers_nothing() {
    let mut daemon = Daemon::start();
    let mut stream = daemon.connect();
    stream.write_all(b"discard\r\n").unwrap();
    stream.write_all(&common::random_bytes(2, 100_000)).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut stream), b"+\r\n");
    let line = daemon
        .wait_for_log(|l| l.contains("service=discard"))
        .expect("log line");
    assert!(line.contains("bytes_in=100009"), "{line}");
}

const PRINTABLE: &[u8] = b" !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";

/// Line `i` of the RFC 864 pattern: 72 characters from `i` places in, then CRLF.
fn pattern_line(i: usize) -> Vec<u8> {
    let mut line: Vec<u8> = (0..72).map(|k| PRINTABLE[(i + k) % 95]).collect();
    line.extend_from_slice(b"\r\n");
    line
}

/// The first `len` bytes of the endless pattern.
fn pattern(len: usize) -> Vec<u8> {
    (0..).flat_map(pattern_line).take(len).collect()
}

#[test]
fn chargen_streams_the_rfc864_pattern_until_the_client_leaves() {
    let daemon = Daemon::start();
    let mut stream = daemon.connect();
    stream.write_all(b"chargen\r\n").unwrap();
    // Half-closing does not stop chargen: only the client going away does.
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_line(&mut stream), b"+\r\n");
    // Far more than the daemon sends in one pass of its buffer, so the stream
    // must stay continuous across passes and partial sends.
    let mut body = vec![0u8; 3_000_000];
    stream.read_exact(&mut body).unwrap();
    let expected = pattern(body.len());
    let first_bad = body.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(first_bad, None, "pattern broken at byte {first_bad:?}");
    drop(stream);
}

#[test]
fn daytime_is_one_line_of_the_current_utc_time() {
    let daemon = Daemon::start();
    let reply = daemon.exchange(b"daytime\r\n");
    let text = String::from_utf8(strip_status(&reply).to_vec()).unwrap();
    assert!(
        text.ends_with("-UTC\r\n") && text.matches("\r\n").count() == 1,
        "{text:?}"
    );
    let weekday = text.split(',').next().unwrap();
    assert!(
        [
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
            "Sunday"
        ]
        .contains(&weekday),
        "{text:?}"
    );
}

#[test]
fn time_is_four_bytes_of_seconds_since_1900() {
    let daemon = Daemon::start();
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let reply = daemon.exchange(b"time\r\n");
    let after = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let body = strip_status(&reply);
    assert_eq!(body.len(), 4);
    let since_1900 = u32::from_be_bytes(body.try_into().unwrap()) as u64;
    let unix = since_1900 - 2_208_988_800;
    assert!(
        before <= unix && unix <= after,
        "{before} <= {unix} <= {after}"
    );
}

#[test]
fn isotime_is_iso8601_utc() {
    let daemon = Daemon::start();
    let reply = daemon.exchange(b"isotime\r\n");
    let text = std::str::from_utf8(strip_status(&reply)).unwrap();
    let stamp = text.strip_suffix("\r\n").expect("CRLF");
    let bytes = stamp.as_bytes();
    assert_eq!(bytes.len(), 20, "{stamp}");
    for (i, &b) in bytes.iter().enumerate() {
        let expected_digit = !matches!(i, 4 | 7 | 10 | 13 | 16 | 19);
        assert_eq!(b.is_ascii_digit(), expected_digit, "{stamp}");
    }
    assert_eq!(
        (bytes[4], bytes[7], bytes[10], bytes[13], bytes[16], bytes[19]),
        (b'-', b'-', b'T', b':', b':', b'Z')
    );
}

/// The seed's sometext: the chargen pattern for 1,000,007 bytes, its last line
/// cut short (1,000,007 = 13,513 lines of 74 + 45) and still ended by CRLF.
fn sometext() -> Vec<u8> {
    let mut text = pattern(1_000_007 - 2);
    text.extend_from_slice(b"\r\n");
    text
}

#[test]
fn sometext_is_exactly_1000007_bytes_of_printable_lines() {
    let daemon = Daemon::start();
    let reply = daemon.exchange(b"sometext\r\n");
    let body = strip_status(&reply);
    assert_eq!(body.len(), 1_000_007);
    assert!(body == &sometext()[..], "sometext differs from the pattern");
    for line in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let text = line.strip_suffix(b"\r").expect("CRLF");
        assert!(text.iter().all(|b| (0x20..0x7f).contains(b)));
    }
}

#[test]
fn sometext_and_chargen_reach_unix_socket_clients_intact() {
    let dir = common::scratch_dir();
    let path = dir.join("bulk.sock");
    let listen = format!("unix:{}", path.display());
    let mut daemon = Daemon::start_with(None, &["--listen", &listen]);
    daemon
        .wait_for_log(|l| l.contains(&format!("address={listen}")))
        .expect("unix listener up");
    let mut stream = std::os::unix::net::UnixStream::connect(&path).unwrap();
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    stream.write_all(b"sometext\r\n").unwrap();
    let reply = read_all(&mut stream);
    assert!(strip_status(&reply) == &sometext()[..]);

    let mut stream = std::os::unix::net::UnixStream::connect(&path).unwrap();
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    stream.write_all(b"chargen\r\n").unwrap();
    let mut reply = vec![0u8; 3 + 500_000];
    stream.read_exact(&mut reply).unwrap();
    assert!(strip_status(&reply) == &pattern(500_000)[..]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn many_simultaneous_sometext_clients_each_get_the_whole_text() {
    let daemon = Daemon::start();
    let expected = std::sync::Arc::new(sometext());
    let clients: Vec<_> = (0..40)
        .map(|_| {
            let mut stream = daemon.connect();
            let expected = std::sync::Arc::clone(&expected);
            std::thread::spawn(move || {
                stream.write_all(b"sometext\r\n").unwrap();
                let reply = read_all(&mut stream);
                strip_status(&reply) == &expected[..]
            })
        })
        .collect();
    for (i, client) in clients.into_iter().enumerate() {
        assert!(client.join().unwrap(), "client {i} got a different text");
    }
}

#[test]
fn replies_survive_unread_client_bytes_at_close() {
    // The client sends a lot that daytime never reads, then waits for the answer.
    // Closing with that input unread would send RST and could lose the reply.
    let daemon = Daemon::start();
    for _ in 0..10 {
        let mut stream = daemon.connect();
        let mut request = b"daytime\r\n".to_vec();
        request.extend(common::random_bytes(3, 64 * 1024));
        let mut writer = stream.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let _ = writer.write_all(&request);
            let _ = writer.shutdown(Shutdown::Write);
        });
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).expect("no reset");
        sender.join().unwrap();
        let text = String::from_utf8(reply).unwrap();
        assert!(
            text.starts_with("+\r\n") && text.ends_with("-UTC\r\n"),
            "{text:?}"
        );
    }
}

#[test]
fn a_slow_reader_gets_all_of_sometext_despite_unread_input() {
    // The reply is still queued in the daemon's send buffer when sometext finishes.
    // Closing then, with the client's extra bytes unread, would make the kernel drop
    // that queue and send RST; the graceful close must deliver every byte instead.
    let daemon = Daemon::start();
    for round in 0..3 {
        let mut stream = daemon.connect();
        let mut request = b"sometext\r\n".to_vec();
        request.extend(common::random_bytes(round, 32 * 1024));
        stream.write_all(&request).unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let reply = read_all(&mut stream);
        assert_eq!(reply.len(), 3 + 1_000_007, "round {round}");
    }
}
