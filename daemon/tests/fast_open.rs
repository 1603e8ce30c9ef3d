//! Listener options for the first packets: TCP Fast Open (the name rides in
//! the SYN) and TCP_DEFER_ACCEPT, with the client library's Fast Open. The
//! kernel's Fast Open counters tell whether a SYN carried the name.

use crate::common;

use std::io::{Read, Write};
use std::time::Duration;

use common::Daemon;

/// TcpExt's counter `name` from /proc/net/netstat (namespace-wide).
fn tcp_ext(name: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next().unwrap(), lines.next().unwrap());
    let at = names.split_whitespace().position(|n| n == name).unwrap();
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

fn ask(daemon: &Daemon, fast_open: bool) -> Vec<u8> {
    let options = tcpmux::Options {
        fast_open,
        reply_timeout: Some(common::PATIENCE),
        ..Default::default()
    };
    let name = tcpmux::ServiceName::parse("daytime").unwrap();
    let mut stream = tcpmux::open(daemon.addr, &options).unwrap();
    tcpmux::negotiate(&mut stream, &name, &options).unwrap();
    let mut text = Vec::new();
    stream.read_to_end(&mut text).unwrap();
    text
}

/// Sets net.ipv4.tcp_fastopen for the test's life, then puts it back.
struct Sysctl(String);

impl Sysctl {
    fn fast_open(value: &str) -> Sysctl {
        let path = "/proc/sys/net/ipv4/tcp_fastopen";
        let old = std::fs::read_to_string(path).unwrap().trim().to_owned();
        std::fs::write(path, value).unwrap();
        Sysctl(old)
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/net/ipv4/tcp_fastopen", &self.0);
    }
}

#[test]
#[ignore = "needs root (sets net.ipv4.tcp_fastopen = 3 for its life)"]
fn with_fast_open_the_name_rides_in_the_syn() {
    common::require_root();
    let _sysctl = Sysctl::fast_open("3");
    let daemon =
        Daemon::with_config("listen = [{ address = \"127.0.0.1:0\", fast_open = true }]\n");
    // The first connections fetch the server's cookie; the next carry data.
    for _ in 0..2 {
        assert!(!ask(&daemon, true).is_empty());
    }
    let before = tcp_ext("TCPFastOpenPassive");
    for _ in 0..5 {
        assert!(!ask(&daemon, true).is_empty());
    }
    let after = tcp_ext("TCPFastOpenPassive");
    // Counted by the kernel as SYNs whose data the listener took (all but
    // the odd one that raced its cookie).
    assert!(
        after >= before + 3,
        "{before} -> {after}: SYNs carried no data"
    );
}

#[test]
fn fast_open_falls_back_to_a_normal_handshake() {
    // A listener without fast_open (and whatever the sysctl says): the
    // client's TCP_FASTOPEN_CONNECT costs nothing but the option.
    let daemon = Daemon::start();
    for _ in 0..3 {
        assert!(ask(&daemon, true).ends_with(b"\r\n"));
    }
    // And a listener with it serves clients that do not use it.
    let daemon = Daemon::with_config(
        "listen = [{ address = \"127.0.0.1:0\", fast_open = 16, defer_accept = true }]\n",
    );
    assert!(ask(&daemon, false).ends_with(b"\r\n"));
}

#[test]
fn defer_accept_still_serves_and_times_out_silent_clients() {
    let daemon = Daemon::with_config(
        "negotiation_timeout = \"1s\"\nlisten = [{ address = \"127.0.0.1:0\", defer_accept = true }]\n",
    );
    assert!(ask(&daemon, false).ends_with(b"\r\n"));
    // A client that connects and says nothing waits in the kernel, then is
    // handed over (once the deferral ends) and closed by the negotiation
    // timeout: never held for ever.
    let mut silent = daemon.connect();
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = silent.read_to_end(&mut answer);
    let _ = silent.write_all(b"late\r\n");
    assert!(
        answer.is_empty() || answer.starts_with(b"-negotiation timeout"),
        "{answer:?}"
    );
}

#[test]
fn bad_first_packet_options_are_config_errors() {
    common::assert_config_rejected(
        "listen = [{ address = \"127.0.0.1:0\", fast_open = 0 }]\n",
        "fast_open is true, false or a queue length from 1 to 65535",
    );
    common::assert_config_rejected(
        "listen = [{ address = \"unix:/tmp/x.sock\", defer_accept = true }]\n",
        "fast_open and defer_accept are TCP options",
    );
}
