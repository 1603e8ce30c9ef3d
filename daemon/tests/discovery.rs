//! DNS discovery against a real DNS server: Debian's dnsmasq, started by the
//! test on loopback, serving A and SRV records that the test changes while
//! tcpmuxd runs. Backends are real sockets on 127.0.0.0/8.

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::dns::{free_port, Dnsmasq};
use common::{read_all, tagged_echo, Daemon, PATIENCE};

/// Backends tagged A, B, C… on 127.0.0.2, .3, .4… sharing one port, as the
/// addresses of one name are.
fn backends_on_one_port(tags: &[&'static str]) -> u16 {
    'again: loop {
        let first = TcpListener::bind("127.0.0.2:0").unwrap();
        let port = first.local_addr().unwrap().port();
        drop(first);
        let mut bound = Vec::new();
        for (i, _) in tags.iter().enumerate() {
            match TcpListener::bind(SocketAddr::from(([127, 0, 0, 2 + i as u8], port))) {
                Ok(listener) => bound.push(listener),
                Err(_) => continue 'again,
            }
        }
        drop(bound);
        for (i, tag) in tags.iter().enumerate() {
            tagged_echo(SocketAddr::from(([127, 0, 0, 2 + i as u8], port)), tag);
        }
        return port;
    }
}

/// One connection's tag (the backend's first byte after the `+`), the client
/// closing at once; a refusal as `refused: REASON`.
fn tag_of(daemon: &Daemon) -> String {
    let mut stream = daemon.connect();
    stream.write_all(b"pool\r\n").unwrap();
    read_tag(&mut stream)
}

fn read_tag(stream: &mut TcpStream) -> String {
    let status = common::read_line(stream);
    if status != b"+\r\n" {
        return format!("refused: {}", String::from_utf8_lossy(&status));
    }
    let mut tag = [0u8; 1];
    match stream.read_exact(&mut tag) {
        Ok(()) => String::from_utf8_lossy(&tag).into_owned(),
        Err(e) => format!("no tag: {e}"),
    }
}

fn tally(daemon: &Daemon, n: usize) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        *counts.entry(tag_of(daemon)).or_insert(0) += 1;
    }
    counts
}

/// Connects until `tag` answers (true) or `within` passes (false).
fn reached_within(daemon: &Daemon, tag: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if tag_of(daemon) == tag {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
#[ignore = "needs dnsmasq (Debian's dnsmasq-base)"]
fn a_names_addresses_are_followed_as_dns_changes() {
    let dir = common::scratch_dir();
    let port = backends_on_one_port(&["A", "B", "C"]);
    let dns_port = free_port();
    let dns = Dnsmasq::start(
        &dir,
        dns_port,
        "127.0.0.2 app.test.internal\n127.0.0.3 app.test.internal\n",
        &[],
    );
    let daemon = Daemon::with_config(&format!(
        "resolvers = [\"127.0.0.1:{dns_port}\"]\n\
         [service.pool]\nbalance = \"round-robin\"\nproxy = \"app.test.internal:{port}\"\n"
    ));
    // Both addresses are members, in turn.
    let counts = tally(&daemon, 200);
    assert_eq!(counts.get("A"), Some(&100), "{counts:?}");
    assert_eq!(counts.get("B"), Some(&100), "{counts:?}");

    // A session on A, held open while A leaves DNS and C joins.
    let mut held = loop {
        let mut stream = daemon.connect();
        stream.write_all(b"pool\r\n").unwrap();
        if read_tag(&mut stream) == "A" {
            break stream;
        }
    };
    dns.set_hosts("127.0.0.3 app.test.internal\n127.0.0.4 app.test.internal\n");
    // TTL 1 s (dns_min_ttl's default): C within a few seconds, not a reload.
    assert!(
        reached_within(&daemon, "C", Duration::from_secs(5)),
        "the new address got no client"
    );
    let counts = tally(&daemon, 200);
    assert_eq!(
        counts.get("A"),
        None,
        "a removed address got clients: {counts:?}"
    );
    assert_eq!(counts.get("B"), Some(&100), "{counts:?}");
    assert_eq!(counts.get("C"), Some(&100), "{counts:?}");
    // The removed backend's session goes on to its natural end.
    held.write_all(b"still here").unwrap();
    held.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut held), b"still here");

    // Members are labelled by address in the metrics.
    let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
    let c = format!("tcpmuxd_backend_up{{service=\"pool\",backend=\"127.0.0.4:{port}\"}} 1");
    assert!(stats.contains(&c), "{stats}");
    assert!(!stats.contains(&format!("127.0.0.2:{port}")), "{stats}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs dnsmasq (Debian's dnsmasq-base)"]
fn srv_records_give_ports_weights_and_priorities_and_are_followed() {
    let dir = common::scratch_dir();
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let (a, b, c) = (
        tagged_echo(any, "A"),
        tagged_echo(any, "B"),
        tagged_echo(any, "C"),
    );
    let hosts = "127.0.0.1 node.test.internal\n";
    let record = |port: u16, priority: u16, weight: u16| {
        format!("_pool._tcp.test.internal,node.test.internal,{port},{priority},{weight}")
    };
    let dns_port = free_port();
    let dns = Dnsmasq::start(
        &dir,
        dns_port,
        hosts,
        &[
            record(a.port(), 10, 1),
            record(b.port(), 10, 3),
            record(c.port(), 20, 1),
        ],
    );
    let mut daemon = Daemon::with_config(&format!(
        "resolvers = [\"127.0.0.1:{dns_port}\"]\n\
         [service.pool]\nbalance = \"round-robin\"\nproxy = \"srv:_pool._tcp.test.internal\"\n"
    ));
    // Priority 10 takes every client, 1:3 by weight; C (priority 20) none.
    let counts = tally(&daemon, 400);
    assert_eq!(counts.get("A"), Some(&100), "{counts:?}");
    assert_eq!(counts.get("B"), Some(&300), "{counts:?}");
    assert_eq!(counts.get("C"), None, "{counts:?}");

    // The registry drops A and B: C, though of a worse priority, takes over.
    // (dnsmasq reads SRV records only at start: a new one on the same port.)
    drop(dns);
    let dns = Dnsmasq::start(&dir, dns_port, hosts, &[record(c.port(), 20, 1)]);
    assert!(
        reached_within(&daemon, "C", Duration::from_secs(5)),
        "the SRV change was not followed"
    );
    let counts = tally(&daemon, 50);
    assert_eq!(counts.get("C"), Some(&50), "{counts:?}");

    // DNS down: the last answer stands, one warning says so, clients are served.
    let failures = |daemon: &Daemon| {
        let logs = daemon.logs();
        let failed = logs.iter().filter(|l| l.contains("DNS lookup failed"));
        failed.count()
    };
    let before = failures(&daemon);
    drop(dns);
    let counts = tally(&daemon, 100);
    assert_eq!(counts.get("C"), Some(&100), "{counts:?}");
    daemon
        .wait_for_log(|l| l.contains("DNS lookup failed"))
        .expect("the failed lookup is logged");
    // Three TTLs later, lookups have failed again and again.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(failures(&daemon), before + 1, "one line per failing run");
    let counts = tally(&daemon, 20);
    assert_eq!(counts.get("C"), Some(&20), "{counts:?}");
    let _dns = Dnsmasq::start(&dir, dns_port, hosts, &[record(a.port(), 10, 1)]);
    daemon
        .wait_for_log(|l| l.contains("DNS answer") && l.contains(&a.to_string()))
        .expect("lookups resume when DNS is back");
    assert!(reached_within(&daemon, "A", Duration::from_secs(5)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs dnsmasq (Debian's dnsmasq-base)"]
fn an_srv_target_without_an_address_is_left_out_not_fatal() {
    let record = |target: &str, port: u16| format!("_pool._tcp.test.internal,{target},{port},10,1");
    // NXDOMAIN for the bad target (a server authoritative for the zone), then
    // REFUSED (one that knows nothing else).
    for extra in [&["--local=/test.internal/"][..], &[]] {
        let dir = common::scratch_dir();
        let a = tagged_echo(SocketAddr::from(([127, 0, 0, 1], 0)), "A");
        let dns_port = free_port();
        let records = [
            record("node.test.internal", a.port()),
            record("gone.test.internal", a.port()),
        ];
        let hosts = "127.0.0.1 node.test.internal\n";
        let _dns = Dnsmasq::start_with(&dir, dns_port, hosts, &records, extra);
        let mut daemon = Daemon::with_config(&format!(
            "resolvers = [\"127.0.0.1:{dns_port}\"]\n\
             [service.pool]\nproxy = \"srv:_pool._tcp.test.internal\"\n"
        ));
        let counts = tally(&daemon, 20);
        assert_eq!(counts.get("A"), Some(&20), "{extra:?}: {counts:?}");
        let warning = daemon
            .wait_for_log(|l| l.contains("SRV target does not resolve"))
            .expect("the bad target is named");
        assert!(warning.contains("gone.test.internal"), "{warning}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
#[ignore = "needs dnsmasq (Debian's dnsmasq-base)"]
fn an_srv_answer_too_large_for_udp_is_read_over_tcp() {
    let dir = common::scratch_dir();
    let a = tagged_echo(SocketAddr::from(([127, 0, 0, 1], 0)), "A");
    // 1,000 records, one target (dnsmasq 2.90 writes a bad compression
    // pointer past 16 KiB when it adds a thousand targets' addresses): the
    // real backend first by priority, 999 more ports behind it.
    let records: Vec<String> = (0..1000u16)
        .map(|i| match i {
            0 => format!(
                "_pool._tcp.test.internal,node.test.internal,{},5,1",
                a.port()
            ),
            i => format!(
                "_pool._tcp.test.internal,node.test.internal,{},10,1",
                20_000 + i
            ),
        })
        .collect();
    let dns_port = free_port();
    let hosts = "127.0.0.1 node.test.internal\n";
    let _dns = Dnsmasq::start(&dir, dns_port, hosts, &records);
    let mut daemon = Daemon::with_config(&format!(
        "resolvers = [\"127.0.0.1:{dns_port}\"]\n\
         [service.pool]\nproxy = \"srv:_pool._tcp.test.internal\"\n"
    ));
    let answer = daemon
        .wait_for_log(|l| l.contains("DNS answer"))
        .unwrap_or_else(|| panic!("no answer logged: {:?}", daemon.logs()));
    assert_eq!(
        answer.matches("127.0.0.1:").count(),
        1000,
        "every record is a member"
    );
    assert_eq!(tag_of(&daemon), "A");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn localhost_resolves_from_etc_hosts_without_a_dns_server() {
    let backend = tagged_echo(SocketAddr::from(([127, 0, 0, 1], 0)), "L");
    // A name server that never answers: /etc/hosts alone must do.
    let daemon = Daemon::with_config(&format!(
        "resolvers = [\"127.0.0.1:9\"]\n[service.pool]\nproxy = \"localhost:{}\"\n",
        backend.port()
    ));
    assert_eq!(tag_of(&daemon), "L");
}

#[test]
fn a_name_that_does_not_resolve_is_refused_with_a_reason() {
    let daemon = Daemon::with_config(
        "resolvers = [\"127.0.0.1:9\"]\ndns_min_ttl = \"100ms\"\n\
         [service.pool]\nproxy = \"nowhere.test.internal:80\"\nconnect_timeout = \"3s\"\n",
    );
    let started = Instant::now();
    let reply = String::from_utf8(daemon.exchange(b"pool\r\n")).unwrap();
    assert!(
        reply.starts_with("-service unavailable: no backend found")
            || reply.starts_with("-service unavailable: backends not resolved yet"),
        "{reply:?}"
    );
    assert!(started.elapsed() < PATIENCE);
}

#[test]
fn dns_settings_are_checked() {
    common::assert_config_rejected(
        "dns_min_ttl = \"10s\"\ndns_max_ttl = \"5s\"\n",
        "dns_min_ttl (10s) is longer than dns_max_ttl (5s)",
    );
    common::assert_config_rejected(
        "resolvers = [\"dns.example\"]\n",
        "resolvers: \"dns.example\" is not an IP address or IP:port",
    );
    common::assert_config_rejected("resolvers = []\n", "`resolvers` lists no name server");
    common::assert_config_rejected(
        "[service.p]\nproxy = [{ address = \"srv:_p._tcp.example\", weight = 2 }]\n",
        "takes its weights from its SRV records",
    );
    common::assert_config_rejected(
        "[service.p]\nproxy = \"srv:\"\n",
        "expected host:port, [IPv6]:port, srv:_service._tcp.domain or unix:/path",
    );
}
