//! A service's own ends for its UDP flows: `udp_responses` ends a flow as
//! soon as its backend has answered what its client asked (a DNS query's
//! flow with its answer), never relaying more; `udp_idle_timeout` on a
//! service ends its flows sooner than the daemon's.

use crate::common;
use crate::udp::{ask, client, tagged_udp_echo};

use std::net::{SocketAddr, UdpSocket};
use std::thread;

use common::Daemon;

/// A UDP backend that answers each datagram with `n` replies, `tag` and
/// their number.
fn answers_n_times(tag: &'static str, n: usize) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((_, from)) = socket.recv_from(&mut buf) {
            for i in 0..n {
                let _ = socket.send_to(format!("{tag}{i}").as_bytes(), from);
            }
        }
    });
    addr
}

/// A listener whose datagrams go by their first word: ONE to `one`, THREE
/// to `three`, anything else to `slow`.
fn config(services: &str) -> String {
    format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, udp_default = \"slow\", \
         match = [{{ regex = \"^ONE\", service = \"one\" }}, {{ regex = \"^THREE\", service = \"three\" }}] }}]\n\
         {services}"
    )
}

#[test]
fn a_flow_ends_with_the_replies_its_datagrams_asked_for_and_gets_no_more() {
    let one = tagged_udp_echo("one:");
    let three = answers_n_times("three:", 3);
    let slow = tagged_udp_echo("slow:");
    let mut daemon = Daemon::binary(&config(&format!(
        "[service.one]\nproxy_udp = \"{one}\"\nudp_responses = 1\n\
         [service.three]\nproxy_udp = \"{three}\"\nudp_responses = 1\n\
         [service.slow]\nproxy_udp = \"{slow}\"\n"
    )));
    // A query, its answer, and the flow is over (the daemon's idle timeout
    // is a minute): its line says so and the gauge is back at the slow one.
    let slow_client = client();
    let (reply, _) = ask(&slow_client, daemon.addr, b"HELLO");
    assert_eq!(reply, b"slow:HELLO");
    let socket = client();
    let (reply, _) = ask(&socket, daemon.addr, b"ONE query");
    assert_eq!(reply, b"one:ONE query");
    let line = daemon
        .wait_for_log(|l| l.contains("udp flow ended: answered"))
        .expect("the flow's line");
    assert!(line.contains("service=one"), "{line}");
    assert!(
        line.contains("bytes_in=9") && line.contains("bytes_out=13"),
        "{line}"
    );
    daemon.wait_for_figure("tcpmuxd_udp_flows", |v| v == 1.0);
    // Its next datagram is a new flow, routed afresh.
    let (reply, _) = ask(&socket, daemon.addr, b"ONE more");
    assert_eq!(reply, b"one:ONE more");

    // A backend that answers three times: the client asked for one and
    // gets one. The flow's line is written after its last reply was sent,
    // so whatever the daemon relayed is in the socket by then.
    let socket = client();
    let (reply, _) = ask(&socket, daemon.addr, b"THREE");
    assert_eq!(reply, b"three:0");
    daemon
        .wait_for_log(|l| l.contains("udp flow ended: answered") && l.contains("service=three"))
        .expect("the flow's line");
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let more = socket.recv_from(&mut buf);
    assert!(
        more.as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "a reply the client did not ask for: {more:?}"
    );
    // The slow flow, counted by no `udp_responses`, is still there.
    let (reply, _) = ask(&slow_client, daemon.addr, b"STILL");
    assert_eq!(reply, b"slow:STILL");
    assert!(!daemon
        .logs()
        .iter()
        .any(|l| l.contains("udp flow ended") && l.contains("service=slow")));
}

#[test]
fn a_services_own_idle_timeout_ends_its_flows_before_the_daemons() {
    let one = tagged_udp_echo("one:");
    let slow = tagged_udp_echo("slow:");
    let mut daemon = Daemon::binary(&config(&format!(
        "[service.one]\nproxy_udp = \"{one}\"\nudp_idle_timeout = \"300ms\"\n\
         [service.three]\nproxy_udp = \"{one}\"\n\
         [service.slow]\nproxy_udp = \"{slow}\"\n"
    )));
    let slow_client = client();
    let (reply, _) = ask(&slow_client, daemon.addr, b"HELLO");
    assert_eq!(reply, b"slow:HELLO");
    let socket = client();
    let (reply, _) = ask(&socket, daemon.addr, b"ONE");
    assert_eq!(reply, b"one:ONE");
    let line = daemon
        .wait_for_log(|l| l.contains("udp flow ended: idle timeout"))
        .expect("the flow's line");
    assert!(line.contains("service=one"), "{line}");
    // The other flow has the daemon's minute: it is there, and answers.
    daemon.wait_for_figure("tcpmuxd_udp_flows", |v| v == 1.0);
    let (reply, _) = ask(&slow_client, daemon.addr, b"STILL");
    assert_eq!(reply, b"slow:STILL");
}
