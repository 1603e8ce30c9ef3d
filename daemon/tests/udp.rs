//! UDP listeners (`udp = true`): each first datagram's flow reaches its
//! service's UDP backend by probe (WireGuard, OpenVPN, DNS, DTLS by SNI),
//! `match` rule or `udp_default`; replies come back from the listener's
//! address; flows end when idle, stay within `max_udp_flows` and
//! `max_udp_flows_per_ip` under a flood of sources, and hostile datagrams
//! cost nothing but a drop. Real peers (dig and dnsmasq, OpenVPN) are in
//! tests/udp_peers.rs, QUIC's in tests/udp_quic.rs.

use crate::common;

use std::net::{SocketAddr, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use common::{Daemon, PATIENCE};
use tcpmux_proto::sniff::datagram::{build_dns_query, build_dtls_hello};

/// A UDP backend that answers each datagram with `tag`, then the datagram.
pub(crate) fn tagged_udp_echo(tag: &'static str) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        while let Ok((len, from)) = socket.recv_from(&mut buf) {
            let mut reply = tag.as_bytes().to_vec();
            reply.extend_from_slice(&buf[..len]);
            let _ = socket.send_to(&reply, from);
        }
    });
    addr
}

pub(crate) fn client() -> UdpSocket {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    socket
}

/// Sends `datagram` from `socket` to `to` and returns the reply and where
/// it came from.
pub(crate) fn ask(socket: &UdpSocket, to: SocketAddr, datagram: &[u8]) -> (Vec<u8>, SocketAddr) {
    socket.send_to(datagram, to).unwrap();
    let mut buf = vec![0u8; 65_536];
    let (len, from) = socket.recv_from(&mut buf).expect("a reply");
    (buf[..len].to_vec(), from)
}

fn wireguard_initiation(seed: u8) -> Vec<u8> {
    let mut packet = vec![1, 0, 0, 0];
    packet.extend((0..144u32).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    packet
}

/// The clear header of a QUIC v1 client Initial, padded to 1200 bytes.
fn quic_initial() -> Vec<u8> {
    let mut packet = vec![0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0];
    packet.extend_from_slice(&(0x4000u16 | (1200 - 18)).to_be_bytes());
    packet.resize(1200, 0x5a);
    packet
}

const OPENVPN_RESET: &[u8] = b"\x38\x1f\x2e\x3d\x4c\x5b\x6a\x79\x88\x00\x00\x00\x00\x00";

fn config(backends: &[(&str, SocketAddr)], extra: &str, listen_extra: &str) -> String {
    let mut config = format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, wireguard = \"wg\", \
         openvpn = \"vpn\", dns = \"resolver\", quic = \"h3\", udp_default = \"other\", \
         match = [{{ regex = \"^PING\", service = \"ping\" }}] {listen_extra} }}]\n{extra}\n"
    );
    for (name, addr) in backends {
        config.push_str(&format!("[service.{name}]\nproxy_udp = \"{addr}\"\n"));
    }
    config
}

struct Backends {
    all: Vec<(&'static str, SocketAddr)>,
}

fn backends() -> Backends {
    let names = ["wg", "vpn", "resolver", "other", "ping", "h3"];
    Backends {
        all: names.iter().map(|n| (*n, tagged_udp_echo(n))).collect(),
    }
}

#[test]
fn each_first_datagram_reaches_its_service_and_replies_come_back_from_the_port() {
    let backends = backends();
    let tls = tagged_udp_echo("tls");
    let mut text = config(&backends.all, "", "");
    text.push_str(&format!(
        "[service.dtls]\nproxy_udp = \"{tls}\"\nsni = [\"vpn.example\"]\n"
    ));
    let daemon = Daemon::binary(&text);
    let port = daemon.addr;
    let cases: [(Vec<u8>, &str); 7] = [
        (quic_initial(), "h3"),
        (wireguard_initiation(1), "wg"),
        (OPENVPN_RESET.to_vec(), "vpn"),
        (build_dns_query(0x4242, "example.org", true), "resolver"),
        (build_dtls_hello(Some("vpn.example"), &[]), "tls"),
        (b"PING 1".to_vec(), "ping"),
        (b"anything else".to_vec(), "other"),
    ];
    for (datagram, tag) in &cases {
        let socket = client();
        let (reply, from) = ask(&socket, port, datagram);
        assert_eq!(from, port, "the reply leaves from the address asked");
        assert_eq!(&reply[..tag.len()], tag.as_bytes(), "{tag}");
        assert_eq!(&reply[tag.len()..], &datagram[..]);
        // Later datagrams of the flow go to the same backend, whatever
        // they hold.
        let (reply, _) = ask(&socket, port, b"PING but later");
        assert_eq!(&reply[..tag.len()], tag.as_bytes(), "{tag}, later");
    }
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"wg\",routed=\"wireguard\"}",
        |v| v == 1.0,
    );
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"dtls\",routed=\"sni\"}",
        |v| v == 1.0,
    );
    daemon.wait_for_figure("tcpmuxd_udp_datagrams_total{direction=\"out\"}", |v| {
        v == 14.0
    });
    // The TCP side of the same port still speaks TCPMUX; a UDP-only
    // service is not in HELP and is refused by name.
    let help = String::from_utf8(daemon.exchange(b"HELP\r\n")).unwrap();
    assert!(!help.contains("wg"), "{help}");
    let refused = String::from_utf8(daemon.exchange(b"wg\r\n")).unwrap();
    assert_eq!(refused, "-service wg takes UDP datagrams only\r\n");
}

#[test]
fn a_datagram_nothing_routes_is_dropped_and_counted() {
    let wg = tagged_udp_echo("wg");
    let daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, wireguard = \"wg\" }}]\n\
         [service.wg]\nproxy_udp = \"{wg}\"\n"
    ));
    let socket = client();
    socket.send_to(b"not wireguard", daemon.addr).unwrap();
    daemon.wait_for_figure("tcpmuxd_udp_dropped_total{reason=\"unrouted\"}", |v| {
        v == 1.0
    });
    // The same client's WireGuard datagram then starts its flow.
    let (reply, _) = ask(&socket, daemon.addr, &wireguard_initiation(2));
    assert!(reply.starts_with(b"wg"));
}

#[test]
fn an_idle_flow_ends_and_is_logged_and_the_client_starts_a_new_one() {
    let backends = backends();
    let mut daemon = Daemon::binary(&config(&backends.all, "udp_idle_timeout = \"300ms\"", ""));
    let socket = client();
    let (reply, _) = ask(&socket, daemon.addr, &wireguard_initiation(3));
    assert!(reply.starts_with(b"wg"));
    let line = daemon
        .wait_for_log(|l| l.contains("udp flow ended: idle timeout"))
        .expect("the flow's line");
    assert!(
        line.contains("service=wg") && line.contains("routed=wireguard"),
        "{line}"
    );
    assert!(
        line.contains("bytes_in=148") && line.contains("bytes_out=150"),
        "{line}"
    );
    daemon.wait_for_figure("tcpmuxd_udp_flows", |v| v == 0.0);
    // A new flow: routed afresh by its first datagram.
    let (reply, _) = ask(&socket, daemon.addr, b"PING again");
    assert!(reply.starts_with(b"ping"));
}

/// A flow that keeps sending is not idle, however long it lasts: its timer
/// is set again from its last datagram when it fires.
#[test]
fn a_busy_flow_outlives_its_idle_timeout() {
    let backends = backends();
    let mut daemon = Daemon::binary(&config(&backends.all, "udp_idle_timeout = \"1s\"", ""));
    let socket = client();
    // Three seconds of a datagram every 200 ms: three idle timeouts long,
    // each gap a fifth of one.
    for round in 0..15 {
        let (reply, _) = ask(&socket, daemon.addr, b"PING busy");
        assert!(reply.starts_with(b"ping"), "round {round}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let line = daemon
        .wait_for_log(|l| l.contains("udp flow ended: idle timeout"))
        .expect("the flow's line");
    // One flow carried all fifteen.
    assert!(line.contains("bytes_in=135"), "{line}");
}

/// With `--workers 2` each worker has a socket on the port (SO_REUSEPORT):
/// every client is answered, so both serve, and each client's datagrams
/// stay on one worker, so each client is one flow.
#[test]
fn workers_share_the_port_and_keep_each_flow_on_one() {
    let backends = backends();
    let daemon = Daemon::start_with(Some(&config(&backends.all, "", "")), &["--workers", "2"]);
    let clients: Vec<UdpSocket> = (0..40).map(|_| client()).collect();
    for round in 0..5 {
        for (n, socket) in clients.iter().enumerate() {
            let datagram = format!("PING {n} {round}");
            let (reply, from) = ask(socket, daemon.addr, datagram.as_bytes());
            assert_eq!(reply, format!("ping{datagram}").into_bytes());
            assert_eq!(from, daemon.addr);
        }
    }
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"ping\",routed=\"match\"}",
        |v| v == 40.0,
    );
}

/// `max_udp_flows` is the daemon's: flows on one listener count against a
/// new flow on another, which has none of its own to give up.
#[test]
fn max_udp_flows_counts_every_listener() {
    let backend = tagged_udp_echo("ping");
    let second = common::dns::free_port();
    let daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, udp_default = \"ping\" }}, \
         {{ address = \"127.0.0.1:{second}\", udp = true, tcp = false, udp_default = \"ping\" }}]\n\
         max_udp_flows = 4\n[service.ping]\nproxy_udp = \"{backend}\"\n"
    ));
    let first: Vec<UdpSocket> = (0..4).map(|_| client()).collect();
    for socket in &first {
        assert!(ask(socket, daemon.addr, b"one").0.starts_with(b"ping"));
    }
    let other = client();
    other.send_to(b"two", ("127.0.0.1", second)).unwrap();
    daemon.wait_for_figure("tcpmuxd_udp_dropped_total{reason=\"flow_limit\"}", |v| {
        v == 1.0
    });
    // On the first listener a new flow takes the place of an idle one.
    let (reply, _) = ask(&client(), daemon.addr, b"three");
    assert!(reply.starts_with(b"ping"));
    daemon.wait_for_figure("tcpmuxd_udp_flows", |v| v == 4.0);
}

/// On a wildcard address each reply leaves from the address its client
/// sent to (IP_PKTINFO, IPV6_RECVPKTINFO), where the kernel's route alone
/// would pick 127.0.0.1 for every client of the loopback.
#[test]
fn replies_leave_from_the_address_the_client_sent_to_on_a_wildcard_bind() {
    let backend = tagged_udp_echo("ping");
    let port = common::dns::free_port();
    let _daemon = Daemon::binary(&format!(
        "listen = [\"127.0.0.1:0\", \
         {{ address = \"0.0.0.0:{port}\", udp = true, tcp = false, udp_default = \"ping\" }}, \
         {{ address = \"[::]:{port}\", udp = true, tcp = false, udp_default = \"ping\" }}]\n\
         [service.ping]\nproxy_udp = \"{backend}\"\n"
    ));
    for local in ["127.0.0.2", "127.0.0.3", "127.0.0.2"] {
        let to: SocketAddr = format!("{local}:{port}").parse().unwrap();
        let (reply, from) = ask(&client(), to, b"where from");
        assert!(reply.starts_with(b"ping"));
        assert_eq!(from, to, "the reply to a client of {local}");
    }
    let v6 = UdpSocket::bind("[::1]:0").unwrap();
    v6.set_read_timeout(Some(PATIENCE)).unwrap();
    let to: SocketAddr = format!("[::1]:{port}").parse().unwrap();
    let (reply, from) = ask(&v6, to, b"where from");
    assert!(reply.starts_with(b"ping"));
    assert_eq!(from, to);
}

/// A backend that answers with ICMP port unreachable fails its flows; three
/// in a row eject it (as refused connects do a TCP member), and new flows
/// go to the service's other backend.
#[test]
fn an_unreachable_backend_is_passed_over_by_new_flows() {
    let closed = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let open = tagged_udp_echo("open");
    let mut daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, udp_default = \"pair\" }}]\n\
         [service.pair]\nproxy_udp = [\"{closed}\", \"{open}\"]\n"
    ));
    // Clients from many addresses: the hash sends some to the closed port.
    for n in 2..60u8 {
        let socket = UdpSocket::bind((format!("127.0.0.{n}"), 0)).unwrap();
        socket.send_to(b"first", daemon.addr).unwrap();
    }
    daemon
        .wait_for_log(|l| l.contains("backend ejected") && l.contains(&closed.to_string()))
        .expect("the closed backend noticed");
    for n in 2..60u8 {
        let socket = UdpSocket::bind((format!("127.0.0.{n}"), 0)).unwrap();
        socket.set_read_timeout(Some(PATIENCE)).unwrap();
        let (reply, _) = ask(&socket, daemon.addr, b"again");
        assert_eq!(reply, b"openagain", "client 127.0.0.{n}");
    }
}

/// Many source addresses (127.0.0.2 up), as a spoofed-source flood has.
#[test]
fn a_flood_of_sources_evicts_idle_flows_and_never_passes_the_limits() {
    let backends = backends();
    let daemon = Daemon::binary(&config(
        &backends.all,
        "max_udp_flows = 8\nmax_udp_flows_per_ip = 2",
        "",
    ));
    let port = daemon.addr;
    // A flow that stays active through the flood.
    let keeper = client();
    ask(&keeper, port, b"PING keeper");
    let mut sockets = Vec::new();
    for n in 0..60u8 {
        let socket = UdpSocket::bind((format!("127.0.0.{}", 2 + n / 3), 0)).unwrap();
        socket.set_read_timeout(Some(PATIENCE)).unwrap();
        socket.send_to(b"flood", port).unwrap();
        sockets.push(socket);
        if n % 3 == 0 {
            let (reply, _) = ask(&keeper, port, b"still here");
            assert!(
                reply.starts_with(b"ping"),
                "the active flow keeps its backend: {:?} at {n}",
                String::from_utf8_lossy(&reply)
            );
        }
    }
    // Every third source address was over its share of two.
    daemon.wait_for_figure("tcpmuxd_udp_dropped_total{reason=\"per_ip_limit\"}", |v| {
        v == 20.0
    });
    let flows = daemon.wait_for_figure("tcpmuxd_udp_flows", |v| v <= 8.0);
    assert!(flows >= 1.0);
    let evicted = daemon.wait_for_lines(32, |l| l.contains("evicted for a new flow"));
    assert!(evicted >= 32, "{evicted} flows evicted");
    let (reply, _) = ask(&keeper, port, b"after the flood");
    assert!(reply.starts_with(b"ping"));
}

#[test]
fn hostile_datagrams_cost_a_drop_and_nothing_else() {
    let wg = tagged_udp_echo("wg");
    let daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, wireguard = \"wg\", dns = \"wg\" }}]\n\
         [service.wg]\nproxy_udp = \"{wg}\"\n"
    ));
    let socket = client();
    let mut hostile: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![1],
        vec![0xff; 65_507],
        wireguard_initiation(4)[..147].to_vec(),
        build_dns_query(1, "example.org", false)[..20].to_vec(),
        vec![0x16, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff],
    ];
    hostile.extend((0..200).map(|i| common::random_bytes(i, (i as usize * 37) % 1500)));
    let valid = client();
    for (i, datagram) in hostile.iter().enumerate() {
        socket.send_to(datagram, daemon.addr).unwrap();
        // Paced by a flow's answer, so no burst outruns the socket's buffer.
        if i % 10 == 0 {
            let (reply, _) = ask(&valid, daemon.addr, &wireguard_initiation(5));
            assert!(reply.starts_with(b"wg"));
        }
    }
    let dropped = hostile.len() as f64;
    daemon.wait_for_figure("tcpmuxd_udp_dropped_total{reason=\"unrouted\"}", |v| {
        v == dropped
    });
    let fresh = client();
    let (reply, _) = ask(&fresh, daemon.addr, &wireguard_initiation(5));
    assert!(reply.starts_with(b"wg"));
    assert!(daemon.exchange(b"daytime\r\n").starts_with(b"+"));
}

#[test]
fn a_flow_whose_backend_is_gone_ends_and_says_so() {
    // A port nobody listens on: the kernel answers with ICMP port
    // unreachable, which the flow's connected socket reports.
    let gone = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, udp_default = \"gone\" }}]\n\
         [service.gone]\nproxy_udp = \"{gone}\"\n"
    ));
    let socket = client();
    socket.send_to(b"hello", daemon.addr).unwrap();
    let line = daemon
        .wait_for_log(|l| l.contains("udp flow ended: backend error"))
        .expect("the flow's line");
    assert!(line.contains("service=gone"), "{line}");
}

#[test]
fn reload_adds_and_removes_a_udp_side_and_changes_its_routes() {
    let backends = backends();
    // One port for the file before and after: a free one, found here.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let plain = format!(
        "listen = [\"{address}\"]\n[service.wg]\nproxy_udp = \"{}\"\n",
        backends.all[0].1
    );
    let mut daemon = Daemon::binary(&plain);
    let with_udp = config(&backends.all, "", "").replace("127.0.0.1:0", &address);
    std::fs::write(daemon.config_path(), &with_udp).unwrap();
    daemon.signal("HUP");
    daemon
        .wait_for_log(|l| l.contains("listening for datagrams"))
        .expect("the UDP side bound by the reload");
    let socket = client();
    let (reply, _) = ask(&socket, daemon.addr, &wireguard_initiation(6));
    assert!(reply.starts_with(b"wg"));
    // Routes change with the file: WireGuard now goes to `other`.
    let rerouted = with_udp.replace("wireguard = \"wg\"", "wireguard = \"other\"");
    std::fs::write(daemon.config_path(), &rerouted).unwrap();
    daemon.signal("HUP");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (reply, _) = ask(&client(), daemon.addr, &wireguard_initiation(7));
        if reply.starts_with(b"other") {
            break;
        }
        assert!(Instant::now() < deadline, "the new routes never applied");
        thread::sleep(Duration::from_millis(20));
    }
    // Removing `udp = true` closes the socket and ends its flows.
    std::fs::write(daemon.config_path(), &plain).unwrap();
    daemon.signal("HUP");
    daemon
        .wait_for_log(|l| l.contains("udp flow ended: listener closed"))
        .expect("the flows end with their listener");
    assert!(daemon
        .wait_for_log(|l| l.contains("UDP listener closed"))
        .is_some());
}

#[test]
fn an_upgrade_hands_the_udp_socket_over_and_the_new_daemon_serves_it() {
    let dir = common::scratch_dir();
    let other = tagged_udp_echo("other");
    let addr = common::successor::free_address(103);
    let mut old = Daemon::binary(&format!(
        "listen = [{{ address = \"{addr}\", udp = true, udp_default = \"other\" }}]\n\
         upgrade_socket = \"{}\"\n[service.other]\nproxy_udp = \"{other}\"\n",
        dir.join("upgrade.sock").display()
    ));
    let port: SocketAddr = addr.parse().unwrap();
    let (reply, _) = ask(&client(), port, b"before");
    assert_eq!(reply, b"otherbefore");
    let successor = common::successor::Successor::start(&old.config_path());
    successor.wait_for_log("took over from the running daemon");
    successor.wait_for_log("listening for datagrams");
    let status = old.wait_exit().expect("the old daemon exits");
    assert!(status.success(), "{status:?}");
    // Only the new daemon holds the port now: a datagram reaching it was
    // served by the socket it took over, not a second bind.
    let (reply, from) = ask(&client(), port, b"after");
    assert_eq!((reply.as_slice(), from), (&b"otherafter"[..], port));
    // Its counters start at zero: the flow is the new daemon's.
    let mut stats = std::net::TcpStream::connect(port).unwrap();
    std::io::Write::write_all(&mut stats, b"stats\r\n").unwrap();
    let stats = String::from_utf8(common::read_all(&mut stats)).unwrap();
    let flows = "tcpmuxd_udp_flows_total{service=\"other\",routed=\"udp_default\"} 1\n";
    assert!(stats.contains(flows), "{stats}");
}

#[test]
fn a_flow_is_a_session_on_the_admin_socket_and_kill_ends_it() {
    let dir = common::scratch_dir();
    let socket = dir.join("admin.sock");
    let wg = tagged_udp_echo("wg");
    let mut daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, wireguard = \"wg\" }}]\n\
         admin_socket = \"{}\"\n[service.wg]\nproxy_udp = \"{wg}\"\n",
        socket.display()
    ));
    let admin = |words: &str| common::admin_ok(&socket, words);
    let flow = client();
    ask(&flow, daemon.addr, &wireguard_initiation(8));
    let reply: serde_json::Value =
        serde_json::from_str(&admin("--json show sessions")).expect("JSON");
    let rows = reply["sessions"].as_array().expect("a list");
    assert_eq!(rows.len(), 1, "{reply}");
    let row = &rows[0];
    assert_eq!(row["udp"], true, "{row}");
    assert_eq!(row["client"], flow.local_addr().unwrap().to_string());
    assert_eq!(row["service"], "wg");
    assert_eq!(row["routed"], "wireguard");
    assert_eq!(row["backend"], wg.to_string());
    assert_eq!(
        (row["bytes_in"].as_u64(), row["bytes_out"].as_u64()),
        (Some(148), Some(150))
    );
    let table = admin("show sessions");
    assert!(table.contains(&format!("udp:{}", daemon.addr)), "{table}");
    let id = row["id"].as_u64().expect("an id");
    assert!(admin(&format!("kill session {id}")).contains("ended 1 session"));
    let line = daemon
        .wait_for_log(|l| l.contains("udp flow ended: killed"))
        .expect("the flow's line");
    assert!(line.contains("service=wg"), "{line}");
    daemon.wait_for_figure("tcpmuxd_udp_flows", |v| v == 0.0);
    // The client's next datagram starts a new flow, routed afresh.
    let (reply, _) = ask(&flow, daemon.addr, &wireguard_initiation(9));
    assert!(reply.starts_with(b"wg"));
}

/// A backend that answers one datagram with 40 (more than one batch of the
/// daemon's reply path, which reads up to 16 and sends them in one
/// sendmmsg): every one reaches the client, in order.
#[test]
fn a_burst_of_replies_reaches_the_client_whole_and_in_order() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let backend = socket.local_addr().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((_, from)) = socket.recv_from(&mut buf) {
            for n in 0..40u32 {
                let reply = format!("reply {n:02} {}", "x".repeat(1000));
                let _ = socket.send_to(reply.as_bytes(), from);
            }
        }
    });
    let daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, udp_default = \"burst\" }}]\n\
         [service.burst]\nproxy_udp = \"{backend}\"\n"
    ));
    let client = client();
    client.send_to(b"go", daemon.addr).unwrap();
    let mut buf = [0u8; 2048];
    for n in 0..40 {
        let (len, from) = client.recv_from(&mut buf).expect("every reply");
        assert_eq!(from, daemon.addr);
        let reply = String::from_utf8_lossy(&buf[..len]);
        assert!(reply.starts_with(&format!("reply {n:02} ")), "{n}: {reply}");
        assert_eq!(len, 1009);
    }
}

/// A client that sends 40 datagrams without waiting (more than one of the
/// listener's receive batches, whose datagrams from one client go to its
/// backend in one sendmmsg): the backend sees every one, in order, and
/// its echoes come back the same way.
#[test]
fn a_burst_from_a_client_reaches_the_backend_whole_and_in_order() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let backend = socket.local_addr().unwrap();
    let (seen_tx, seen) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((len, from)) = socket.recv_from(&mut buf) {
            let _ = seen_tx.send(buf[..len].to_vec());
            let _ = socket.send_to(&buf[..len], from);
        }
    });
    let daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, udp_default = \"burst\" }}]\n\
         [service.burst]\nproxy_udp = \"{backend}\"\n"
    ));
    let client = client();
    let sent: Vec<Vec<u8>> = (0..40u32)
        .map(|n| format!("datagram {n:02} {}", "y".repeat(1000)).into_bytes())
        .collect();
    for datagram in &sent {
        client.send_to(datagram, daemon.addr).unwrap();
    }
    for (n, datagram) in sent.iter().enumerate() {
        let got = seen
            .recv_timeout(PATIENCE)
            .expect("every datagram at the backend");
        assert_eq!(&got, datagram, "datagram {n} at the backend");
    }
    let mut buf = [0u8; 2048];
    for (n, datagram) in sent.iter().enumerate() {
        let (len, from) = client.recv_from(&mut buf).expect("every echo");
        assert_eq!(from, daemon.addr);
        assert_eq!(&buf[..len], &datagram[..], "echo {n}");
    }
}

/// A wave of flows, ended idle, and a second wave from other clients on
/// the slots they left in the listener's epoll set: every reply reaches
/// the client that asked, none another's.
#[test]
fn flows_that_reuse_ended_flows_places_get_their_own_replies() {
    let backends = backends();
    let daemon = Daemon::binary(&config(&backends.all, "udp_idle_timeout = \"300ms\"", ""));
    let wave = |round: u32| {
        let sockets: Vec<UdpSocket> = (0..60).map(|_| client()).collect();
        for (n, socket) in sockets.iter().enumerate() {
            let asked = format!("PING {round} {n}");
            socket.send_to(asked.as_bytes(), daemon.addr).unwrap();
        }
        let mut buf = [0u8; 256];
        for (n, socket) in sockets.iter().enumerate() {
            let len = socket.recv(&mut buf).expect("a reply");
            assert_eq!(&buf[..len], format!("pingPING {round} {n}").as_bytes());
        }
    };
    wave(1);
    daemon.wait_for_figure("tcpmuxd_udp_flows", |v| v == 0.0);
    wave(2);
}
