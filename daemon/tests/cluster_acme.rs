//! ACME once per fleet, against real peers: a three-member etcd, Debian's
//! pebble (its validation resolving acme.test through dnsmasq to HAProxy,
//! which sends it round-robin to three tcpmuxd instances). One instance
//! orders; all three serve the same certificate; a restart of the whole
//! fleet, and a new instance with nothing stored, order nothing.

mod common;

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
        .map(|(i, b)| format!("  server t{i} 127.0.0.1:{b}\n"))
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

/// An instance `node` with a TLS listener on `port` whose certificate for
/// acme.test comes from `directory`, stored in its own directory.
fn instance(etcd: &Etcd, dir: &Path, ca: &Ca, directory: &str, node: &str, port: u16) -> Daemon {
    let prefix = format!("/acme{}", std::process::id());
    let config = format!(
        "listen = [\"127.0.0.1:0\", {{ address = \"127.0.0.1:{port}\", tls = {{ acme = {{\n\
           directory = \"{directory}\", names = [\"{NAME}\"], storage = \"{}\", directory_ca = \"{}\" }} }} }}]\n{}",
        dir.join(format!("acme-{node}")).display(),
        ca.pem.display(),
        etcd.cluster_line(dir, &prefix, node),
    );
    Daemon::binary(&config)
}

/// Waits until `daemon` serves a certificate from the fleet's order.
fn serving(daemon: &mut Daemon) -> String {
    daemon
        .wait_for_log(|l| {
            l.contains("acme: certificate obtained and served")
                || l.contains("acme: serving the fleet's certificate")
                || l.contains("acme: certificate in hand")
        })
        .unwrap_or_else(|| panic!("no certificate: {:#?}", daemon.logs()))
}

#[test]
#[ignore = "needs etcd, pebble, dnsmasq, haproxy, openssl and curl (CI runs it)"]
fn one_instance_orders_for_the_fleet_and_every_instance_serves_it() {
    common::require_program("openssl", "version", "openssl");
    let etcd = Etcd::cluster();
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "pebble CA");
    let (front, dns_port) = (free_port(), common::dns::free_port());
    let _dns = Dnsmasq::start(&dir, dns_port, &format!("127.0.0.1 {NAME}\n"), &[]);
    let pebble = Pebble::start(&dir, &ca, front, dns_port);
    let ports = [free_port(), free_port(), free_port()];
    let _haproxy = haproxy(&dir, front, &ports);
    let nodes = ["a", "b", "c"];
    let start = |i: usize| instance(&etcd, &dir, &ca, &pebble.directory, nodes[i], ports[i]);
    let mut fleet: Vec<Daemon> = (0..3).map(start).collect();
    for daemon in &mut fleet {
        serving(daemon);
    }
    assert_eq!(pebble.orders(), 1, "one order for three instances");
    let serial = served_serial(ports[0], NAME);
    assert!(serial.starts_with("serial="), "{serial}");
    for port in &ports[1..] {
        assert_eq!(served_serial(*port, NAME), serial, "the same certificate");
    }
    let ordered: usize = fleet
        .iter()
        .map(|d| d.wait_for_lines(0, |l| l.contains("acme: ordering a certificate")))
        .sum();
    assert_eq!(ordered, 1, "one instance ordered");

    // The whole fleet restarted, and a new instance with nothing stored.
    drop(fleet);
    let mut fleet: Vec<Daemon> = (0..3).map(start).collect();
    let d_port = free_port();
    let mut d = instance(&etcd, &dir, &ca, &pebble.directory, "d", d_port);
    for daemon in fleet.iter_mut().chain([&mut d]) {
        serving(daemon);
    }
    assert!(d
        .wait_for_log(|l| l.contains("acme: serving the fleet's certificate"))
        .is_some());
    assert_eq!(served_serial(d_port, NAME), serial);
    assert_eq!(pebble.orders(), 1, "a restart orders nothing");
}
