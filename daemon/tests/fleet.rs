//! The fleet of docs/deployment.md, run on loopback exactly as written in
//! contrib/fleet/: HAProxy (PROXY v2, health checks by HELP) in front of two
//! tcpmuxd instances (`accept_proxy_from`), whose `pg` pool comes from DNS SRV
//! records (dnsmasq standing in for Consul's DNS interface). Only addresses
//! are rewritten to loopback ones.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::dns::{free_port, Dnsmasq};
use common::{read_line, tagged_echo, Daemon, PATIENCE};

const CONTRIB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../contrib/fleet");

/// `file` from contrib/fleet with each `(from, to)` replaced; every `from`
/// must be there, so the test breaks if the documented file changes shape.
fn contrib(file: &str, replace: &[(&str, String)]) -> String {
    let mut text = std::fs::read_to_string(format!("{CONTRIB}/{file}")).unwrap();
    for (from, to) in replace {
        assert!(text.contains(from), "{file} no longer has {from}");
        text = text.replace(from, to);
    }
    text
}

struct Haproxy(Child);

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_haproxy(dir: &std::path::Path, config: &str, port: u16) -> Haproxy {
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start haproxy");
    let haproxy = Haproxy(child);
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "haproxy did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    haproxy
}

fn tcpmuxd(dns_port: u16) -> Daemon {
    Daemon::with_config(&contrib(
        "tcpmuxd.toml",
        &[
            ("10.0.1.11:41397", "127.0.0.1:0".into()),
            ("10.0.1.10/32", "127.0.0.1/32".into()),
            ("10.0.1.11:9900", "127.0.0.1:0".into()),
            ("127.0.0.1:8600", format!("127.0.0.1:{dns_port}")),
        ],
    ))
}

/// One client through HAProxy: `pg`, then the backend's tag; `-…` or
/// nothing when refused.
fn through(port: u16) -> String {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return "no connection".into();
    };
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    if stream.write_all(b"pg\r\n").is_err() {
        return "write failed".into();
    }
    let status = read_line(&mut stream);
    if status != b"+\r\n" {
        return format!("refused: {}", String::from_utf8_lossy(&status));
    }
    let mut tag = [0u8; 1];
    match std::io::Read::read_exact(&mut stream, &mut tag) {
        Ok(()) => String::from_utf8_lossy(&tag).into_owned(),
        Err(e) => format!("no tag: {e}"),
    }
}

/// How many `pg` sessions a tcpmuxd served, from its own `stats` (asked
/// with a PROXY header, as from HAProxy: this listener requires one).
fn served(daemon: &Daemon) -> u64 {
    let request = b"PROXY TCP4 127.0.0.1 127.0.0.1 50000 41397\r\nstats\r\n";
    let stats = String::from_utf8(daemon.exchange(request)).unwrap();
    let prefix = "tcpmuxd_connections_total{service=\"pg\",outcome=\"served\",routed=\"tcpmux\"} ";
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
#[ignore = "needs haproxy and dnsmasq"]
fn haproxy_in_front_of_two_tcpmuxd_with_backends_from_srv_records() {
    common::require_program("haproxy", "-v", "haproxy");
    let dir = common::scratch_dir();
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let (x, y, z) = (
        tagged_echo(any, "X"),
        tagged_echo(any, "Y"),
        tagged_echo(any, "Z"),
    );
    let record = |port: u16| format!("_pg._tcp.service.consul,node.service.consul,{port},10,1");
    let hosts = "127.0.0.1 node.service.consul\n";
    let dns_port = free_port();
    let dns = Dnsmasq::start(&dir, dns_port, hosts, &[record(x.port()), record(y.port())]);

    let (a, b) = (tcpmuxd(dns_port), tcpmuxd(dns_port));
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = front.local_addr().unwrap().port();
    drop(front);
    let _haproxy = start_haproxy(
        &dir,
        &contrib(
            "haproxy.cfg",
            &[
                ("203.0.113.10:41397", format!("127.0.0.1:{port}")),
                ("10.0.1.11:41397", a.addr.to_string()),
                ("10.0.1.12:41397", b.addr.to_string()),
            ],
        ),
        port,
    );

    // Every client is served, by both tcpmuxd, over both SRV backends.
    let mut tags = BTreeMap::new();
    for _ in 0..300 {
        *tags.entry(through(port)).or_insert(0) += 1;
    }
    assert_eq!(tags.keys().collect::<Vec<_>>(), ["X", "Y"], "{tags:?}");
    assert!(tags.values().all(|&n| n >= 50), "{tags:?}");
    // A session is counted when it closes, just after its client saw the tag.
    let deadline = Instant::now() + PATIENCE;
    let (served_a, served_b) = loop {
        let (served_a, served_b) = (served(&a), served(&b));
        if served_a + served_b == 300 || Instant::now() > deadline {
            break (served_a, served_b);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(served_a + served_b, 300);
    assert!(served_a >= 50 && served_b >= 50, "{served_a} + {served_b}");
    // Each tcpmuxd logs the real client, not HAProxy: a session's peer is
    // the client's own port, which HAProxy's connection does not share.
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let me = client.local_addr().unwrap();
    client.write_all(b"pg\r\n").unwrap();
    client.set_read_timeout(Some(PATIENCE)).unwrap();
    assert_eq!(read_line(&mut client), b"+\r\n");
    drop(client);
    let peer = format!("peer={me}");
    let deadline = Instant::now() + PATIENCE;
    while !a.logs().iter().chain(&b.logs()).any(|l| l.contains(&peer)) {
        assert!(Instant::now() < deadline, "no log line has {peer}");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The registry replaces Y by Z: both tcpmuxd follow within the TTL.
    drop(dns);
    let _dns = Dnsmasq::start(&dir, dns_port, hosts, &[record(x.port()), record(z.port())]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut recent = Vec::new();
    while Instant::now() < deadline {
        recent.push(through(port));
        if recent.len() > 40 && recent[recent.len() - 40..].iter().all(|t| t != "Y") {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let last: Vec<&String> = recent.iter().rev().take(40).collect();
    assert!(last.iter().all(|t| *t == "X" || *t == "Z"), "{last:?}");
    assert!(last.iter().any(|t| *t == "Z"), "{last:?}");

    // One tcpmuxd goes away: HAProxy retries its refused connections on the
    // other, so no client sees it, but for one HAProxy may have connected
    // just as the daemon died (in its accept queue then, reset with it: no
    // proxy can retry a connection that was established). The clients here
    // come one at a time, so at most one can be caught so.
    drop(a);
    let mut failed = Vec::new();
    for _ in 0..200 {
        let tag = through(port);
        if tag != "X" && tag != "Z" {
            failed.push(tag);
        }
    }
    assert!(failed.len() <= 1, "{failed:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
