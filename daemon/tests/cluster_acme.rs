//! ACME once per fleet, against real peers: a three-member etcd, Debian's
//! pebble (its validation resolving acme.test through dnsmasq to HAProxy,
//! which sends it round-robin to three tcpmuxd instances). One instance
//! orders; all three serve the same certificate; a restart of the whole
//! fleet, and a new instance with nothing stored, order nothing.

use crate::common;

use std::path::Path;

use common::dns::Dnsmasq;
use common::etcd::Etcd;
use common::pebble::{served_serial, Pebble};
use common::peers::{free_port, wait_for_port, Peer};
use common::pki::Ca;
use common::Daemon;

const NAME: &str = "acme.test";

/// HAProxy on `port`, round-robin over `backends` (TCP).
fn haproxy(dir: &Path, port: u16, backends: &[u16]) -> Peer {
    let servers: String = backends
        .iter()
        .enumerate()
        .map(|(i, b)| format!("  server t{i} 127.0.0.1:{b} check inter 200 fall 1 rise 1\n"))
        .collect();
    let config = format!(
        "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         frontend front\n  bind 127.0.0.1:{port}\n  default_backend fleet\n\
         backend fleet\n  balance roundrobin\n{servers}"
    );
    let haproxy = common::peers::haproxy(dir, &config);
    wait_for_port(port);
    haproxy
}

/// The peers of a test: etcd, pebble validating acme.test through
/// HAProxy round-robin over three TLS ports.
struct Peers {
    etcd: Etcd,
    ca: Ca,
    pebble: Pebble,
    ports: [u16; 3],
    /// HAProxy's port, where the CA validates.
    front: u16,
    _haproxy: Peer,
    _dns: Dnsmasq,
    dir: common::Scratch,
}

impl Peers {
    fn start() -> Peers {
        common::require_program("openssl", "version", "openssl");
        let etcd = Etcd::cluster();
        let dir = common::scratch_dir();
        let ca = Ca::new(&dir, "pebble CA");
        let (front, dns_port) = (free_port(), common::dns::free_port());
        let dns = Dnsmasq::start(&dir, dns_port, &format!("127.0.0.1 {NAME}\n"), &[]);
        let pebble = Pebble::start(&dir, &ca, front, dns_port);
        let ports = [free_port(), free_port(), free_port()];
        let haproxy = haproxy(&dir, front, &ports);
        Peers {
            etcd,
            ca,
            pebble,
            ports,
            front,
            _haproxy: haproxy,
            _dns: dns,
            dir,
        }
    }

    /// Instance `node` with its TLS listener on `port`, renewing
    /// `renew_before` the end.
    fn instance(&self, node: &str, port: u16, renew_before: &str) -> Daemon {
        let prefix = format!("/acme{}", std::process::id());
        let config = format!(
            "listen = [\"127.0.0.1:0\", {{ address = \"127.0.0.1:{port}\", tls = {{ acme = {{\n\
               directory = \"{}\", names = [\"{NAME}\"], storage = \"{}\", directory_ca = \"{}\",\n\
               renew_before = \"{renew_before}\" }} }} }}]\n{}",
            self.pebble.directory,
            self.dir.join(format!("acme-{node}")).display(),
            self.ca.pem.display(),
            self.etcd.cluster_line(&self.dir, &prefix, node),
        );
        Daemon::binary(&config)
    }

    /// Instances a, b and c on the three ports.
    fn three(&self) -> Vec<Daemon> {
        let nodes = ["a", "b", "c"];
        (0..3)
            .map(|i| self.instance(nodes[i], self.ports[i], "30d"))
            .collect()
    }
}

/// Waits until `daemon` serves a certificate.
fn serving(daemon: &mut Daemon) -> String {
    daemon
        .wait_for_log(|l| {
            l.contains("acme: certificate obtained and served")
                || l.contains("acme: serving the fleet's certificate")
                || l.contains("acme: certificate in hand")
        })
        .unwrap_or_else(|| panic!("no certificate: {:#?}", daemon.logs()))
}

/// How many of `fleet` logged `what`.
fn logged(fleet: &[Daemon], what: &str) -> usize {
    fleet
        .iter()
        .filter(|d| d.logs().iter().any(|l| l.contains(what)))
        .count()
}

#[test]
#[ignore = "needs etcd, pebble, dnsmasq, haproxy, openssl and curl (CI runs it)"]
fn one_instance_orders_for_the_fleet_and_every_instance_serves_it() {
    let peers = Peers::start();
    let ports = peers.ports;
    let mut fleet = peers.three();
    for daemon in &mut fleet {
        serving(daemon);
    }
    assert_eq!(peers.pebble.orders(), 1, "one order for three instances");
    assert_eq!(logged(&fleet, "acme: ordering a certificate"), 1);
    let serial = served_serial(ports[0], NAME);
    assert!(serial.starts_with("serial="), "{serial}");
    for port in &ports[1..] {
        assert_eq!(served_serial(*port, NAME), serial, "the same certificate");
    }
    for _ in 0..3 {
        assert_eq!(served_serial(peers.front, NAME), serial, "through HAProxy");
    }
    // etcd holds the certificate and its key sealed: no PEM in the clear.
    let held = peers.etcd.dump(&format!("/acme{}", std::process::id()));
    assert!(held.contains("/acme/cert/acme.test.pem"), "{held}");
    assert!(!held.contains("-----BEGIN"), "{held}");
    // So is the one account the fleet orders with.
    assert!(held.contains("/acme/account/account-https"), "{held}");
    assert!(!held.contains("pkcs8"), "{held}");
    assert_eq!(logged(&fleet, "acme: account created"), 1);

    // The whole fleet restarted, and a new instance with nothing stored.
    drop(fleet);
    let mut fleet = peers.three();
    let d_port = free_port();
    fleet.push(peers.instance("d", d_port, "30d"));
    for daemon in &mut fleet {
        serving(daemon);
    }
    assert!(fleet[3]
        .wait_for_log(|l| l.contains("acme: serving the fleet's certificate"))
        .is_some());
    assert_eq!(served_serial(d_port, NAME), serial);
    assert_eq!(peers.pebble.orders(), 1, "a restart orders nothing");

    // Renewal: a restarted with a renew_before longer than the
    // certificate's life renews it once; b, c and d take the new one.
    let a = fleet.remove(0);
    drop(a);
    let mut a = peers.instance("a", ports[0], "3650d");
    a.wait_for_log(|l| l.contains("acme: certificate obtained and served"))
        .unwrap_or_else(|| panic!("{:#?}", a.logs()));
    assert_eq!(peers.pebble.orders(), 2, "one renewal");
    let renewed = served_serial(ports[0], NAME);
    assert_ne!(renewed, serial);
    for daemon in &fleet {
        assert!(
            daemon.wait_for_lines(2, |l| l.contains("acme: serving the fleet's certificate")) >= 1
        );
    }
    for port in [ports[1], ports[2], d_port] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while served_serial(port, NAME) != renewed {
            assert!(
                std::time::Instant::now() < deadline,
                "{port} serves the old one"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    // No quorum: b restarted serves the renewed certificate from its own
    // storage, and orders nothing.
    let mut peers = peers;
    peers.etcd.stop(1);
    peers.etcd.stop(2);
    let b = fleet.remove(0);
    drop(b);
    let mut b = peers.instance("b", ports[1], "30d");
    b.wait_for_log(|l| l.contains("acme: certificate in hand"))
        .unwrap_or_else(|| panic!("{:#?}", b.logs()));
    assert_eq!(served_serial(ports[1], NAME), renewed);
    assert_eq!(peers.pebble.orders(), 2);
}

/// The instance ordering for the fleet is killed mid-order (while it waits
/// for a fourth instance that never answers the challenge): when its lease
/// runs out another takes the lock and completes the order.
#[test]
#[ignore = "needs etcd, pebble, dnsmasq, haproxy, openssl and curl (CI runs it)"]
fn when_the_ordering_instance_dies_mid_order_another_completes_it() {
    let peers = Peers::start();
    let prefix = format!("/acme{}", std::process::id());
    // In the fleet without the name: it never answers the challenge.
    let _silent = Daemon::binary(&format!(
        "listen = [\"127.0.0.1:0\"]\n{}",
        peers.etcd.cluster_line(&peers.dir, &prefix, "silent")
    ));
    let fleet = peers.three();
    let deadline = std::time::Instant::now() + common::PATIENCE;
    let orderer = loop {
        let found = fleet.iter().position(|d| {
            d.logs()
                .iter()
                .any(|l| l.contains("acme: this instance orders for the fleet"))
        });
        if let Some(found) = found {
            break found;
        }
        assert!(std::time::Instant::now() < deadline, "nobody ordered");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    fleet[orderer].signal("KILL");
    let mut survivors: Vec<Daemon> = fleet
        .into_iter()
        .enumerate()
        .filter_map(|(i, d)| (i != orderer).then_some(d))
        .collect();
    // Its lease (10 s), then another order that waits 10 s for `silent`.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while logged(&survivors, "acme: certificate obtained and served") == 0 {
        let lines: Vec<String> = survivors
            .iter()
            .flat_map(|d| d.logs())
            .filter(|l| l.contains("acme") || l.contains("fleet"))
            .collect();
        assert!(
            std::time::Instant::now() < deadline,
            "nobody completed the order: {lines:#?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for daemon in &mut survivors {
        serving(daemon);
    }
    assert_eq!(
        logged(&survivors, "acme: this instance orders for the fleet"),
        1
    );
}
