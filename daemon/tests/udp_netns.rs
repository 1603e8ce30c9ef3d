//! UDP listeners with peers in network namespaces the tests create, each
//! joined to the daemon's (the test's own) by a veth pair: two real
//! WireGuard peers (wireguard-go, userspace, so no kernel module is needed)
//! whose tunnel runs through the daemon's `wireguard` probe, and a flood of
//! datagrams from thousands of spoofed source addresses, which the flow
//! limits hold while a real client keeps its flow; and a backend behind a
//! link whose MTU refuses the daemon's GSO sends, which it sends one by one.

use crate::common;

use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{run, Daemon, PATIENCE};

/// A namespace joined to this one by a veth pair: 10.202.N.2 inside,
/// 10.202.N.1 here, its default route back here. Removed on drop.
struct Joined {
    name: String,
    outside: String,
    inside_addr: String,
    outside_addr: String,
}

impl Joined {
    fn new(n: u8) -> Joined {
        // Unique per test process and per test.
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let tag = std::process::id() % 10_000 * 10 + NEXT.fetch_add(1, Ordering::Relaxed) % 10;
        let joined = Joined {
            name: format!("udpns{tag}"),
            outside: format!("vu{tag}o"),
            inside_addr: format!("10.202.{n}.2"),
            outside_addr: format!("10.202.{n}.1"),
        };
        let inside = format!("vu{tag}i");
        run(&["ip", "netns", "add", &joined.name]);
        run(&["ip", "-n", &joined.name, "link", "set", "lo", "up"]);
        run(&[
            "ip",
            "link",
            "add",
            &joined.outside,
            "type",
            "veth",
            "peer",
            "name",
            &inside,
        ]);
        run(&["ip", "link", "set", &inside, "netns", &joined.name]);
        let inside_cidr = format!("{}/24", joined.inside_addr);
        run(&[
            "ip",
            "-n",
            &joined.name,
            "addr",
            "add",
            &inside_cidr,
            "dev",
            &inside,
        ]);
        run(&["ip", "-n", &joined.name, "link", "set", &inside, "up"]);
        let outside_cidr = format!("{}/24", joined.outside_addr);
        run(&["ip", "addr", "add", &outside_cidr, "dev", &joined.outside]);
        run(&["ip", "link", "set", &joined.outside, "up"]);
        run(&[
            "ip",
            "-n",
            &joined.name,
            "route",
            "add",
            "default",
            "via",
            &joined.outside_addr,
        ]);
        joined
    }

    /// `args` run inside the namespace.
    fn exec<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        [&["ip", "netns", "exec", self.name.as_str()][..], args].concat()
    }
}

impl Drop for Joined {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.outside])
            .status();
    }
}

/// A process started by a test, stopped by PID on drop.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(args: &[&str], env: &[(&str, &str)]) -> Started {
    Started(
        Command::new(args[0])
            .args(&args[1..])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{args:?}: {e}")),
    )
}

/// The address the daemon's UDP listener is bound to, from its log.
fn udp_addr(daemon: &mut Daemon) -> SocketAddr {
    let line = daemon
        .wait_for_log(|l| l.contains("listening for datagrams"))
        .expect("the UDP listener's line");
    line.split("udp=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("its address")
}

/// A WireGuard key pair: (private, public), base64.
fn wg_keys() -> (String, String) {
    let private = String::from_utf8(run(&["wg", "genkey"]).stdout).unwrap();
    let mut child = Command::new("wg")
        .arg("pubkey")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("wg pubkey");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), private.as_bytes()).unwrap();
    let public = child.wait_with_output().unwrap().stdout;
    (
        private.trim().to_owned(),
        String::from_utf8(public).unwrap().trim().to_owned(),
    )
}

/// A wireguard-go interface `name` in `ns` with the tunnel address `addr`,
/// once its control socket is up.
fn wireguard(ns: &Joined, name: &str, addr: &str) -> Started {
    let peer = start(
        &ns.exec(&["wireguard-go", name]),
        &[("WG_PROCESS_FOREGROUND", "1")],
    );
    let deadline = Instant::now() + PATIENCE;
    while !std::path::Path::new(&format!("/var/run/wireguard/{name}.sock")).exists() {
        assert!(
            Instant::now() < deadline,
            "wireguard-go {name} never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let cidr = format!("{addr}/24");
    run(&ns.exec(&["ip", "addr", "add", &cidr, "dev", name]));
    run(&ns.exec(&["ip", "link", "set", name, "up"]));
    peer
}

/// `wg set` with the private key given through a file, as wg wants it.
fn wg_set(ns: &Joined, dir: &std::path::Path, args: &[&str], private: &str) {
    let key = dir.join(format!("{}.key", args[0]));
    std::fs::write(&key, private).unwrap();
    let key = key.to_str().unwrap();
    let mut all = vec!["wg", "set", args[0], "private-key", key];
    all.extend(&args[1..]);
    run(&ns.exec(&all));
}

/// Two real WireGuard peers, each in its own namespace; the client's peer
/// endpoint is the daemon's UDP port, whose `wireguard` service sends the
/// flow on to the server. A datagram through the tunnel and back proves
/// the handshake and the data both ways went through the daemon.
#[test]
#[ignore = "needs root, wireguard-go, wg and socat (network namespaces; CI runs it)"]
fn two_wireguard_peers_talk_through_the_daemon() {
    common::require_root();
    common::require_program("wg", "--version", "wireguard-tools");
    common::require_program("wireguard-go", "--version", "wireguard-go");
    common::require_program("socat", "-V", "socat");
    let (client_ns, server_ns) = (Joined::new(11), Joined::new(12));
    let dir = common::scratch_dir();
    let tag = std::process::id() % 100_000;
    let (client_if, server_if) = (format!("wgc{tag}"), format!("wgs{tag}"));
    let _client = wireguard(&client_ns, &client_if, "10.99.11.1");
    let _server = wireguard(&server_ns, &server_if, "10.99.11.2");
    let mut daemon = Daemon::binary(&format!(
        "listen = [\"127.0.0.1:0\", {{ address = \"{}:0\", udp = true, tcp = false, wireguard = \"wg\" }}]\n\
         [service.wg]\nproxy_udp = \"{}:51820\"\n",
        client_ns.outside_addr, server_ns.inside_addr
    ));
    let port = udp_addr(&mut daemon).port();
    let ((client_private, client_public), (server_private, server_public)) = (wg_keys(), wg_keys());
    let endpoint = format!("{}:{port}", client_ns.outside_addr);
    wg_set(
        &server_ns,
        &dir,
        &[
            &server_if,
            "listen-port",
            "51820",
            "peer",
            &client_public,
            "allowed-ips",
            "10.99.11.1/32",
        ],
        &server_private,
    );
    wg_set(
        &client_ns,
        &dir,
        &[
            &client_if,
            "peer",
            &server_public,
            "endpoint",
            &endpoint,
            "allowed-ips",
            "10.99.11.2/32",
        ],
        &client_private,
    );
    let _echo = start(
        &server_ns.exec(&[
            "socat",
            "UDP-RECVFROM:7777,bind=10.99.11.2,fork",
            // Read first: an echo gone before socat writes the datagram
            // to it ends socat without an answer (EPIPE).
            "SYSTEM:read -r _; echo pong",
        ]),
        &[],
    );
    // The first datagram may go before the echo server binds: ask again.
    let deadline = Instant::now() + PATIENCE;
    let answer = loop {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &client_ns.name,
                "socat",
                "-t",
                "2",
                "-",
                "UDP:10.99.11.2:7777",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("socat client");
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"ping\n").unwrap();
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        if said == "pong\n" || Instant::now() > deadline {
            break said;
        }
    };
    assert_eq!(
        answer,
        "pong\n",
        "an answer through the tunnel: {:?}",
        daemon.logs()
    );
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"wg\",routed=\"wireguard\"}",
        |v| v >= 1.0,
    );
}

/// A flood from 4,000 spoofed source addresses (a raw socket in a
/// namespace whose route back swallows the replies) against a listener
/// holding at most 64 flows, 2 per address: the table never passes 64,
/// the flood's one-datagram flows evict each other, and a real client
/// that keeps talking keeps its flow throughout.
#[test]
#[ignore = "needs root and python3 (a raw socket in a network namespace; CI runs it)"]
fn a_spoofed_source_flood_from_a_namespace_stays_within_the_flow_limits() {
    common::require_root();
    let flood_ns = Joined::new(13);
    // Replies to the spoofed sources go back into the namespace, which
    // drops them.
    run(&[
        "ip",
        "route",
        "add",
        "10.203.0.0/16",
        "via",
        &flood_ns.inside_addr,
    ]);
    let _route = RouteGuard("10.203.0.0/16");
    let backend = UdpSocket::bind("127.0.0.1:0").unwrap();
    let backend_addr = backend.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        // Each reply says which of the daemon's flow sockets it came
        // through: a flow evicted and started again would show another.
        while let Ok((n, from)) = backend.recv_from(&mut buf) {
            let mut reply = buf[..n].to_vec();
            reply.extend_from_slice(format!(" via {}", from.port()).as_bytes());
            let _ = backend.send_to(&reply, from);
        }
    });
    let mut daemon = Daemon::binary(&format!(
        "listen = [\"127.0.0.1:0\", {{ address = \"{}:0\", udp = true, tcp = false, udp_default = \"echo\" }}]\n\
         max_udp_flows = 64\nmax_udp_flows_per_ip = 2\n[service.echo]\nproxy_udp = \"{backend_addr}\"\n",
        flood_ns.outside_addr
    ));
    let target = udp_addr(&mut daemon);
    // The real client, in the namespace too, at its own address.
    let target = target.to_string();
    let keeper = flood_ns.exec(&["python3", "-c", KEEPER, &target]);
    let mut keeper = Command::new(keeper[0])
        .args(&keeper[1..])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the keeper");
    // Its flow is established (two datagrams) before the flood starts.
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        keeper.stdout.take().expect("piped"),
    ));
    let first = lines.next().and_then(Result::ok);
    assert_eq!(first.as_deref(), Some("established"));
    let flood = flood_ns.exec(&["python3", "-c", FLOOD, &target]);
    let flooded = run(&flood);
    assert_eq!(String::from_utf8_lossy(&flooded.stdout).trim(), "sent 4000");
    let kept = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = keeper.wait();
    assert_eq!(
        kept.trim(),
        "answered 40 of 40 through 1 flow",
        "the real client kept its flow"
    );
    let flows = daemon.wait_for_figure("tcpmuxd_udp_flows", |v| v <= 64.0);
    assert!(flows >= 1.0);
    let started = daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"echo\",routed=\"udp_default\"}",
        |v| v > 64.0,
    );
    assert!(
        started > 64.0,
        "the flood started flows, and they were evicted: {started}"
    );
}

/// A client's bursts of 1,400-byte datagrams reach a backend in a namespace
/// whose link has an MTU of 1,280: the kernel refuses a GSO message whose
/// segments do not fit (they cannot be fragmented), and the daemon sends the
/// run again one datagram at a time, fragmented as plain UDP is. No burst
/// loses a datagram, the one that found GSO refused included.
#[test]
#[ignore = "needs root and python3 (a network namespace; CI runs it)"]
fn datagrams_too_big_for_gso_on_their_link_go_one_by_one_and_all_arrive() {
    common::require_root();
    let ns = Joined::new(14);
    let inside = run(&["ip", "-n", &ns.name, "-o", "link", "show", "type", "veth"]);
    let inside = String::from_utf8_lossy(&inside.stdout);
    let inside = inside
        .split(['@', ':'])
        .nth(1)
        .expect("the inside veth")
        .trim();
    run(&["ip", "link", "set", &ns.outside, "mtu", "1280"]);
    run(&["ip", "-n", &ns.name, "link", "set", inside, "mtu", "1280"]);
    let echo = ns.exec(&["python3", "-c", ECHO, &ns.inside_addr]);
    let mut echo = Command::new(echo[0])
        .args(&echo[1..])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the echo backend");
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(echo.stdout.take().expect("piped")),
        &mut ready,
    )
    .unwrap();
    let _echo = Started(echo);
    let backend = ready.trim().strip_prefix("ready ").expect("its port");
    let mut daemon = Daemon::binary(&format!(
        "listen = [\"127.0.0.1:0\", {{ address = \"127.0.0.1:0\", udp = true, tcp = false, udp_default = \"big\" }}]\n\
         [service.big]\nproxy_udp = \"{}:{backend}\"\n",
        ns.inside_addr
    ));
    let target = udp_addr(&mut daemon);
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(PATIENCE)).unwrap();
    let refused = |daemon: &Daemon| daemon.logs().iter().any(|l| l.contains("UDP GSO refused"));
    let deadline = Instant::now() + PATIENCE;
    let mut bursts = 0u32;
    // Bursts until one held a run the daemon tried as one GSO message
    // (datagrams sent back to back are read in one batch), then one more.
    while !refused(&daemon) || bursts < 2 {
        assert!(
            Instant::now() < deadline,
            "no run was ever tried with GSO in {bursts} bursts"
        );
        let sent: Vec<Vec<u8>> = (0..8u8)
            .map(|i| {
                let mut datagram = vec![i; 1400];
                datagram[..4].copy_from_slice(&bursts.to_be_bytes());
                datagram
            })
            .collect();
        for datagram in &sent {
            client.send_to(datagram, target).unwrap();
        }
        let mut buf = [0u8; 2048];
        let mut echoed: Vec<Vec<u8>> = (0..8)
            .map(|_| {
                let len = client.recv(&mut buf).expect("every datagram echoed");
                buf[..len].to_vec()
            })
            .collect();
        echoed.sort();
        assert_eq!(echoed, sent, "burst {bursts} came back whole");
        bursts += 1;
    }
}

/// An echo backend on the address given, any port: says `ready PORT`.
const ECHO: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 0))
print("ready %d" % s.getsockname()[1], flush=True)
while True:
    data, peer = s.recvfrom(65535)
    s.sendto(data, peer)
"#;

/// Removes a route of this namespace on drop.
struct RouteGuard(&'static str);

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["route", "del", self.0]).status();
    }
}

/// 4,000 datagrams, each from its own spoofed address in 10.203.0.0/16,
/// built whole (IP header included) on a raw socket.
const FLOOD: &str = r#"
import socket, struct, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
payload = b"flood"
for i in range(4000):
    src = socket.inet_aton("10.203.%d.%d" % (i // 250, i % 250 + 1))
    udp = struct.pack("!HHHH", 40000 + i % 1000, int(port), 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i, 0, 64, 17, 0, src, socket.inet_aton(host))
    s.sendto(ip + udp, (host, 0))
    time.sleep(0.0003)  # about 1.5 s in all: the real client talks meanwhile
print("sent 4000")
"#;

/// A real client: two datagrams at once, as a handshake's are, then it
/// says `established`; then 40 more, one every 50 ms (during the flood),
/// each answered (within 2 s), and through how many of the daemon's flows.
const KEEPER: &str = r#"
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
for hello in (b"hello", b"again"):
    s.sendto(hello, (host, int(port)))
    s.recvfrom(100)
print("established", flush=True)
answered, flows = 0, set()
for i in range(40):
    s.sendto(b"keeper %d" % i, (host, int(port)))
    try:
        data, _ = s.recvfrom(100)
        said, _, via = data.partition(b" via ")
        answered += said == b"keeper %d" % i
        flows.add(via)
    except socket.timeout:
        pass
    time.sleep(0.05)
print("answered %d of 40 through %d flow" % (answered, len(flows)))
"#;

/// Holds UDP 127.0.0.1:40001 and says so.
const HOLD_40001: &str = r#"
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 40001))
print("bound", flush=True)
time.sleep(600)
"#;

/// `127.0.0.1:0` with `udp = true`: one port for both sides, though the
/// port the kernel gives the TCP side first is another program's for UDP.
/// In a namespace whose ephemeral range is 40000-40001, with 40001 held
/// for UDP (bind(0) hands out the odd one first).
#[test]
#[ignore = "needs root and python3 (a network namespace; CI runs it)"]
fn a_port_0_listener_finds_a_port_free_for_both_its_sides() {
    use std::io::{BufRead, BufReader};
    let ns = Joined::new(15);
    run(&[
        "ip",
        "netns",
        "exec",
        &ns.name,
        "sysctl",
        "-qw",
        "net.ipv4.ip_local_port_range=40000 40001",
    ]);
    let mut holder = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c", HOLD_40001])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let stdout = holder.stdout.take().expect("piped");
    let holder = Started(holder);
    let mut said = String::new();
    BufReader::new(stdout).read_line(&mut said).unwrap();
    assert_eq!(said.trim(), "bound");
    // One event loop, then two (`--workers`, whose sockets are bound before).
    for args in [&[][..], &["--workers", "2"][..]] {
        let mut daemon = Daemon::start_wrapped(
            &["ip", "netns", "exec", &ns.name],
            Some("listen = [{ address = \"127.0.0.1:0\", udp = true }]\n"),
            args,
            &[],
        );
        assert_eq!(daemon.addr.port(), 40000, "{args:?}");
        daemon
            .wait_for_log(|l| {
                l.contains("listening for datagrams") && l.contains("udp=127.0.0.1:40000")
            })
            .expect("the UDP side on the TCP side's port");
    }
    drop(holder);
}
