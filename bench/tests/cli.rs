//! tcpmux-bench against its own `source` backend: the byte check that every run
//! relies on, and the refusal to report a run that moved the wrong amount.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

struct Source {
    child: Child,
    addr: String,
}

impl Drop for Source {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn source(bytes: u64) -> Source {
    backend(&[
        "source",
        "--listen",
        "127.0.0.1:0",
        "--bytes",
        &bytes.to_string(),
    ])
}

/// A backend subcommand (`source`, `lines`) on an ephemeral port.
fn backend(args: &[&str]) -> Source {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tcpmux-bench"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start source");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("address line");
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .expect("listening line")
        .to_owned();
    Source { child, addr }
}

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tcpmux-bench"))
        .args(args)
        .output()
        .expect("run tcpmux-bench")
}

#[test]
fn bulk_reports_a_run_that_received_every_byte() {
    let source = source(3_000_000);
    let out = bench(&[
        "bulk",
        "--connect",
        &source.addr,
        "--connections",
        "3",
        "--expect",
        "3000000",
        "--repeat",
        "2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\"connections\":3") && text.contains("\"bytes_per_connection\":3000000"),
        "{text}"
    );
    assert!(text.contains("\"median_aggregate_mb_s\":"), "{text}");
}

#[test]
fn bulk_fails_when_the_byte_count_is_wrong() {
    let source = source(1000);
    let out = bench(&[
        "bulk",
        "--connect",
        &source.addr,
        "--expect",
        "999",
        "--repeat",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("received 1000 bytes, expected 999"));
}

#[test]
fn a_dead_target_is_an_error_not_a_zero_result() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = bench(&[
        "short",
        "--connect",
        &port.to_string(),
        "--service",
        "daytime",
        "--duration",
        "0.2",
        "--connections",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no exchange succeeded"));
}

#[test]
fn short_without_a_service_reads_a_plain_port_and_with_one_requires_a_plus() {
    let source = source(26);
    let plain = bench(&[
        "short",
        "--connect",
        &source.addr,
        "--duration",
        "0.3",
        "--connections",
        "2",
        "--json",
    ]);
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(
        text.contains("\"service\":null") && text.contains("\"failed\":0"),
        "{text}"
    );
    assert!(
        text.contains("\"p999_us\":") && text.contains("\"max_us\":"),
        "{text}"
    );
    // The source's first byte is 0, not a '+': every exchange counts as failed.
    let negotiated = bench(&[
        "short",
        "--connect",
        &source.addr,
        "--service",
        "daytime",
        "--duration",
        "0.3",
    ]);
    assert_eq!(negotiated.status.code(), Some(1));
}

#[test]
fn nagle_established_reports_each_way_of_writing_over_one_connection() {
    let lines = backend(&["lines", "--listen", "127.0.0.1:0"]);
    let out = bench(&[
        "nagle-established",
        "--connect",
        &lines.addr,
        "--warmup",
        "20",
        "--rounds",
        "5",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(rows[0].starts_with("two writes, Nagle on:"), "{text}");
    assert!(rows[1].starts_with("two writes, TCP_NODELAY:"), "{text}");
    assert!(rows[2].starts_with("one write:"), "{text}");
    // Timings are the benchmark's business (bench/nagle.sh), not a test's.
    assert!(text.contains("of 5 rounds"), "{text}");
}

#[test]
fn relay_answers_plus_then_the_backends_bytes_and_outlives_a_client_that_left_early() {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpStream};
    let source = source(32);
    let relay = backend(&["relay", "--listen", "127.0.0.1:0", "--to", &source.addr]);
    // A client that leaves before its line ends only its own session.
    drop(TcpStream::connect(&relay.addr).expect("connect"));
    for _ in 0..2 {
        let mut client = TcpStream::connect(&relay.addr).expect("connect");
        client.write_all(b"short\r\n").expect("request");
        // Half-closed after the line: the answer still comes, then EOF.
        client.shutdown(Shutdown::Write).expect("half-close");
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).expect("answer");
        assert_eq!(answer.len(), 3 + 32, "{answer:?}");
        assert!(answer.starts_with(b"+\r\n"), "{answer:?}");
    }
}
