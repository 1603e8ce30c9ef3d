//! Detecting listeners: TLS routed by SNI, SSH, HTTP routed by Host, silent
//! clients, and TCPMUX names, all on one port; the chosen service gets the
//! client's bytes untouched and no status line.

use crate::common;

use std::io::Write;
use std::net::Shutdown;
use std::time::Duration;

use common::{read_all, send_and_receive, Daemon};
use tcpmux_proto::sniff::client_hello::build;

fn daemon() -> Daemon {
    let backend = common::echo_backend();
    Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true, ssh = \"echo\", http = \"fallback\", \
         silent = \"daytime\", detect_timeout = \"1s\" }}]\n\
         [service.db]\nproxy = \"{backend}\"\nsni = [\"db.example.com\", \"*.example.org\"]\n\
         [service.app]\nproxy = \"{backend}\"\nhttp_host = [\"app.example.com\"]\n\
         [service.fallback]\nbuiltin = \"isotime\"\n"
    ))
}

#[test]
fn a_client_hello_reaches_its_sni_service_untouched() {
    let mut daemon = daemon();
    for name in ["db.example.com", "Any.Example.org"] {
        let hello = build(Some(name), &["h2"], 0, 16384);
        let mut stream = daemon.connect();
        assert_eq!(
            send_and_receive(&mut stream, hello.clone()),
            hello,
            "{name}"
        );
    }
    let line = daemon
        .wait_for_log(|l| l.contains("routed=sni") && l.contains("service=db"))
        .expect("logged as routed by SNI");
    assert!(line.contains("outcome=served"), "{line}");
}

#[test]
fn a_large_client_hello_in_small_segments_is_routed() {
    let daemon = daemon();
    let hello = build(Some("db.example.com"), &[], 20_000, 16384);
    let mut stream = daemon.connect();
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sent = hello.clone();
    let sender = std::thread::spawn(move || {
        for chunk in sent.chunks(500) {
            writer.write_all(chunk).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        writer.shutdown(Shutdown::Write).unwrap();
    });
    assert_eq!(read_all(&mut stream), hello);
    sender.join().unwrap();
}

#[test]
fn an_unknown_sni_is_closed_and_logged_by_name() {
    let mut daemon = daemon();
    let mut stream = daemon.connect();
    stream
        .write_all(&build(Some("nobody.example.net"), &[], 0, 16384))
        .unwrap();
    assert_eq!(read_all(&mut stream), b"", "a TLS client gets no '-' line");
    daemon
        .wait_for_log(|l| {
            l.contains("no service for SNI nobody.example.net") && l.contains("routed=sni")
        })
        .expect("the SNI is in the log");
}

#[test]
fn ssh_http_silent_and_tcpmux_clients_share_the_port() {
    let mut daemon = daemon();
    // SSH: to the listener's ssh service (echo), banner and all.
    let mut stream = daemon.connect();
    let banner = b"SSH-2.0-OpenSSH_9.2 test\r\nmore".to_vec();
    assert_eq!(send_and_receive(&mut stream, banner.clone()), banner);
    // HTTP by Host, port ignored, case-insensitive: to app's backend.
    let request = b"GET / HTTP/1.1\r\nHost: APP.example.com:8443\r\n\r\n".to_vec();
    let mut stream = daemon.connect();
    assert_eq!(send_and_receive(&mut stream, request.clone()), request);
    // Another Host: the listener's http service, with no status line.
    let mut stream = daemon.connect();
    let answer = send_and_receive(
        &mut stream,
        b"GET / HTTP/1.0\r\nHost: other\r\n\r\n".to_vec(),
    );
    assert!(
        answer.ends_with(b"Z\r\n") && !answer.starts_with(b"+"),
        "{answer:?}"
    );
    // Silent for detect_timeout: the silent service, no status line.
    let answer = read_all(&mut daemon.connect());
    assert!(
        answer.ends_with(b"-UTC\r\n") && !answer.starts_with(b"+"),
        "{answer:?}"
    );
    // A TCPMUX name, as on any listener.
    assert_eq!(daemon.exchange(b"time\r\n")[..3], *b"+\r\n");
    for routed in [
        "routed=ssh",
        "routed=http",
        "routed=silent",
        "routed=tcpmux",
    ] {
        daemon.wait_for_log(|l| l.contains(routed)).expect(routed);
    }
    let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
    assert!(
        stats.contains(
            "tcpmuxd_connections_total{service=\"echo\",outcome=\"served\",routed=\"ssh\"} 1\n"
        ),
        "{stats}"
    );
}

#[test]
fn an_http_request_with_no_service_gets_a_404() {
    let backend = common::echo_backend();
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true }}]\n\
         [service.app]\nproxy = \"{backend}\"\nhttp_host = [\"app.example.com\"]\n"
    ));
    let mut stream = daemon.connect();
    let answer = send_and_receive(
        &mut stream,
        b"GET / HTTP/1.1\r\nHost: x.example\r\n\r\n".to_vec(),
    );
    let answer = String::from_utf8(answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 404 Not Found\r\n")
            && answer.ends_with("no service for HTTP host x.example\n"),
        "{answer}"
    );
    // Without ssh = "...", an SSH client is told so.
    let answer = send_and_receive(&mut daemon.connect(), b"SSH-2.0-x\r\n".to_vec());
    assert_eq!(answer, b"-no ssh service on this listener\r\n");
}

#[test]
fn an_opening_cut_short_by_fin_is_answered_like_a_cut_name() {
    let daemon = daemon();
    let hello = build(Some("db.example.com"), &[], 0, 16384);
    for (sent, answer) in [
        (&b"G"[..], "-incomplete request line"),
        (b"GET / HTTP/1.1\r\nHo", "-incomplete HTTP request head"),
        (&hello[..hello.len() - 1], "-incomplete TLS ClientHello"),
    ] {
        let mut stream = daemon.connect();
        stream.write_all(sent).unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        let got = String::from_utf8(read_all(&mut stream)).unwrap();
        assert!(got.starts_with(answer), "{sent:?}: {got}");
    }
    // Counted under the protocol they began.
    for routed in ["routed=sni", "routed=http"] {
        let refused = |l: &str| l.contains(routed) && l.contains("refused: incomplete");
        assert_eq!(daemon.wait_for_lines(1, refused), 1, "{routed}");
    }
    // The daemon still answers: nothing spun on the half-closed sockets.
    assert_eq!(daemon.exchange(b"time\r\n")[..3], *b"+\r\n");
}

#[test]
fn client_supplied_names_are_cut_in_the_log() {
    let mut daemon = Daemon::with_config(
        "listen = [{ address = \"127.0.0.1:0\", detect = true }]\n\
         [service.app]\nbuiltin = \"echo\"\nhttp_host = [\"app.example.com\"]\n",
    );
    // A 60 KB server name is no host name: refused as malformed, not logged.
    let sni = format!("{}.example", "s".repeat(60_000));
    let answer = send_and_receive(&mut daemon.connect(), build(Some(&sni), &[], 0, 16384));
    assert_eq!(answer, b"");
    let line = daemon
        .wait_for_log(|l| l.contains("server name longer than 255 bytes"))
        .expect("refused as malformed");
    assert!(!line.contains("sssss"), "{line}");
    // A 4,000-byte Host is cut to 256 bytes in the line (and the 404).
    let host = format!("{}.example", "h".repeat(4_000));
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
    send_and_receive(&mut daemon.connect(), request.into_bytes());
    let line = daemon
        .wait_for_log(|l| l.contains("no service for HTTP host"))
        .expect("logged");
    assert!(line.contains(&format!("{}...", "h".repeat(256))), "{line}");
    assert!(!line.contains(&"h".repeat(257)), "{line}");
}

#[test]
fn an_absolute_form_target_routes_over_host_and_a_space_before_the_colon_is_refused() {
    let backend = common::echo_backend();
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true }}]\n\
         [service.app]\nproxy = \"{backend}\"\nhttp_host = [\"app.example.com\"]\n"
    ));
    // RFC 9112 §3.2.2: the target's host wins; a Host naming nothing here
    // would have been refused.
    let request = b"GET http://app.example.com/x HTTP/1.1\r\nHost: x.example\r\n\r\n".to_vec();
    assert_eq!(
        send_and_receive(&mut daemon.connect(), request.clone()),
        request
    );
    let request = b"GET http://x.example/ HTTP/1.1\r\nHost: app.example.com\r\n\r\n".to_vec();
    let answer = String::from_utf8(send_and_receive(&mut daemon.connect(), request)).unwrap();
    assert!(
        answer.contains("no service for HTTP host x.example"),
        "{answer}"
    );
    // `Host :` is read as Host by some and not by others: malformed.
    let request = b"GET / HTTP/1.1\r\nHost : app.example.com\r\n\r\n".to_vec();
    let answer = String::from_utf8(send_and_receive(&mut daemon.connect(), request)).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 4") && answer.contains("whitespace before a header's colon"),
        "{answer}"
    );
}

#[test]
fn a_client_hello_with_two_server_names_is_refused_as_malformed() {
    let mut daemon = daemon();
    // The last name was the one routed by; the first is the one a TLS
    // server behind might serve.
    let hello = tcpmux_proto::sniff::client_hello::build_with_names(
        &["other.example.net", "db.example.com"],
        &[],
        0,
        16384,
    );
    let mut stream = daemon.connect();
    stream.write_all(&hello).unwrap();
    assert_eq!(read_all(&mut stream), b"", "closed, not relayed");
    daemon
        .wait_for_log(|l| l.contains("an extension given twice") && l.contains("routed=sni"))
        .expect("the fault is in the log");
}
