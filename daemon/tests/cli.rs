//! The `tcpmux` command against the real daemon: relay, half-close, listing, stats
//! and exit codes.

use crate::common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::Daemon;

fn tcpmux(daemon: &Daemon, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(common::sibling_binary("tcpmux"))
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &daemon.addr.port().to_string(),
        ])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcpmux");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let output = child.wait_with_output().expect("tcpmux runs");
    feeder.join().unwrap();
    output
}

#[test]
fn relays_stdin_to_the_service_and_the_service_to_stdout() {
    let daemon = Daemon::start();
    let payload = common::random_bytes(11, 300_000);
    let out = tcpmux(&daemon, &["echo"], &payload);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // stdin's EOF became a half-close, so echo finished and closed: all bytes back.
    assert!(
        out.stdout == payload,
        "echoed {} of {} bytes",
        out.stdout.len(),
        payload.len()
    );
}

#[test]
fn output_only_services_work_with_empty_stdin() {
    let daemon = Daemon::start();
    let out = tcpmux(&daemon, &["SOMETEXT"], b"");
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), 1_000_007);
}

#[test]
fn a_refusal_prints_the_servers_message_and_exits_1() {
    let daemon = Daemon::start();
    let out = tcpmux(&daemon, &["nonexistent"], b"");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown service nonexistent"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn list_prints_help() {
    let daemon = Daemon::start();
    let out = tcpmux(&daemon, &["--list"], b"");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "chargen\ndaytime\ndiscard\necho\nisotime\nsometext\nstats\ntime\n"
    );
}

#[test]
fn stats_report_times_bytes_and_rate() {
    let daemon = Daemon::start();
    let out = tcpmux(&daemon, &["--stats", "sometext"], b"");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for words in [
        "connect ",
        "negotiate ",
        "received 1000007 bytes",
        "sent 0 bytes",
        "MB/s",
    ] {
        assert!(stderr.contains(words), "{words} missing: {stderr}");
    }
}

#[test]
fn bad_names_and_dead_servers_have_their_own_exit_codes() {
    let daemon = Daemon::start();
    let out = tcpmux(&daemon, &["two words"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid service name"));

    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(common::sibling_binary("tcpmux"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "echo"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}")) && stderr.contains("cannot connect"),
        "{stderr}"
    );
}

#[test]
fn mistakes_get_a_hint_at_what_to_do() {
    let daemon = Daemon::start();
    let out = tcpmux(&daemon, &["help"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcpmux --list"));

    let out = tcpmux(&daemon, &["no-such-service"], b"");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown service") && stderr.contains("`tcpmux --list` shows the names"),
        "{stderr}"
    );

    // The default port is RFC 1078's 1, where nothing listens here.
    let out = Command::new(common::sibling_binary("tcpmux"))
        .args(["--host", "127.0.0.1", "daytime"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--port"));

    let help = Command::new(common::sibling_binary("tcpmux"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Exit status: 0 done, 1 the server refused"),
        "{help}"
    );
}
