//! A service's UDP backends (`proxy_udp`) as a pool, as a TCP proxy's:
//! active checks (`udp_health_check`) take a silent or wrong-answering
//! backend out and bring it back, `tcpmux admin` lists them and drains one,
//! the metrics count them, and a name is followed in DNS (Debian's dnsmasq).

use crate::common;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::dns::{free_port, Dnsmasq};
use common::{admin_ok as admin, Daemon, PATIENCE};

/// A UDP backend on `addr` that answers each datagram with `tag` and the
/// datagram while `answering` is set, and says nothing otherwise.
fn udp_backend(addr: SocketAddr, tag: &'static str) -> (SocketAddr, Arc<AtomicBool>) {
    let socket = UdpSocket::bind(addr).unwrap();
    let addr = socket.local_addr().unwrap();
    let answering = Arc::new(AtomicBool::new(true));
    let on = Arc::clone(&answering);
    thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        while let Ok((len, from)) = socket.recv_from(&mut buf) {
            if on.load(Ordering::Acquire) {
                let mut reply = tag.as_bytes().to_vec();
                reply.extend_from_slice(&buf[..len]);
                let _ = socket.send_to(&reply, from);
            }
        }
    });
    (addr, answering)
}

/// A new flow from 127.0.0.`n`: the tag of the backend that answered it.
fn reached(daemon: &Daemon, n: u8) -> String {
    // Each socket is kept open to the end of the tests: closed, its port
    // could be handed to a later one, whose datagram would then join the
    // closed one's flow (still live in the daemon) instead of starting one.
    static KEPT: std::sync::Mutex<Vec<UdpSocket>> = std::sync::Mutex::new(Vec::new());
    let socket = UdpSocket::bind((format!("127.0.0.{n}"), 0)).unwrap();
    socket.set_read_timeout(Some(PATIENCE)).unwrap();
    socket.send_to(b"hello", daemon.addr).unwrap();
    let mut buf = [0u8; 256];
    let len = socket.recv(&mut buf).expect("a reply");
    KEPT.lock().unwrap_or_else(|p| p.into_inner()).push(socket);
    String::from_utf8_lossy(&buf[..len])
        .trim_end_matches("hello")
        .to_owned()
}

/// The row of `backend` in `show backends --json`.
fn row(socket: &Path, service: &str, backend: SocketAddr) -> serde_json::Value {
    let all: serde_json::Value =
        serde_json::from_str(&admin(socket, &format!("--json show backends {service}"))).unwrap();
    let rows = all["backends"].as_array().expect("rows");
    rows.iter()
        .find(|r| r["backend"] == backend.to_string())
        .unwrap_or_else(|| panic!("{backend} not listed: {all}"))
        .clone()
}

/// Polls until `check` holds or the patience runs out.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn udp_backends_are_checked_listed_drained_and_counted() {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let (a, a_answers) = udp_backend(any, "A");
    let (b, _) = udp_backend(any, "B");
    // Answers, but never with what the check expects.
    let wrong = UdpSocket::bind(any).unwrap();
    let c = wrong.local_addr().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((_, from)) = wrong.recv_from(&mut buf) {
            let _ = wrong.send_to(b"nope", from);
        }
    });
    let dir = common::scratch_dir();
    let socket = dir.join("admin.sock");
    let mut daemon = Daemon::binary(&format!(
        "admin_socket = \"{}\"\n\
         listen = [{{ address = \"127.0.0.1:0\", udp = true, udp_default = \"pair\" }}]\n\
         [service.pair]\nproxy_udp = [\"{a}\", \"{b}\", \"{c}\"]\n\
         udp_health_check = {{ interval = \"100ms\", timeout = \"2s\", rise = 1, fall = 3, \
         send = \"health\", expect = \"health\" }}\n",
        socket.display()
    ))
    .keeping(dir);
    daemon
        .wait_for_log(|l| l.contains("backend down") && l.contains(&c.to_string()))
        .expect("the wrong answers take C down");
    let c_row = row(&socket, "pair", c);
    assert_eq!(c_row["state"], "down", "{c_row}");
    assert_eq!(c_row["udp"], true, "{c_row}");
    assert_eq!(c_row["last_check"], "fail", "{c_row}");
    let table = admin(&socket, "show backends pair");
    assert!(table.contains(&format!("{a} (udp)")), "{table}");

    // Clients from many addresses spread over A and B; C gets none.
    let before: Vec<String> = (2..40).map(|n| reached(&daemon, n)).collect();
    assert!(before.iter().all(|t| t == "A" || t == "B"), "{before:?}");
    assert!(before.contains(&"A".to_owned()) && before.contains(&"B".to_owned()));

    // A falls silent: down after three checks, and its clients' new flows go to B.
    a_answers.store(false, Ordering::Release);
    daemon
        .wait_for_log(|l| l.contains("backend down") && l.contains(&a.to_string()))
        .expect("A down");
    assert!((2..40).all(|n| reached(&daemon, n) == "B"));
    let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
    let a_up = format!("tcpmuxd_udp_backend_up{{service=\"pair\",backend=\"{a}\"}} ");
    assert!(stats.contains(&format!("{a_up}0")), "{stats}");
    assert!(stats.contains("tcpmuxd_udp_backend_flows_total{service=\"pair\""));

    // Back: the same clients reach A again, as before.
    a_answers.store(true, Ordering::Release);
    daemon
        .wait_for_log(|l| l.contains("backend up") && l.contains(&a.to_string()))
        .expect("A up");
    let again: Vec<String> = (2..40).map(|n| reached(&daemon, n)).collect();
    assert_eq!(again, before, "each client's backend is its address's");

    // Drained on the admin socket: a running flow on A goes on, new ones
    // go to B; set ready, A takes new flows again.
    let first_on_a = 2 + before.iter().position(|t| t == "A").unwrap() as u8;
    let held = UdpSocket::bind((format!("127.0.0.{first_on_a}"), 0)).unwrap();
    held.set_read_timeout(Some(PATIENCE)).unwrap();
    let port = daemon.addr;
    let ask = |datagram: &[u8]| {
        held.send_to(datagram, port).unwrap();
        let mut buf = [0u8; 256];
        let len = held.recv(&mut buf).expect("a reply");
        buf[..len].to_vec()
    };
    assert_eq!(ask(b"one"), b"Aone");
    admin(&socket, &format!("set backend pair {a} state drain"));
    assert_eq!(row(&socket, "pair", a)["state"], "drain");
    assert!((2..40).all(|n| reached(&daemon, n) == "B"));
    assert_eq!(ask(b"two"), b"Atwo", "the running flow stays");
    // Its flows so far are still open (idle for less than 60 s); shut down
    // on the admin socket, they end, and the held client's next datagram
    // starts a new flow, on B while A is drained.
    let drained = row(&socket, "pair", a);
    let active = drained["active"].as_u64().unwrap_or(0);
    assert!(active >= 1, "{drained}");
    let shut: serde_json::Value = serde_json::from_str(&admin(
        &socket,
        &format!("--json shutdown sessions backend pair {a}"),
    ))
    .unwrap();
    assert_eq!(shut["killed"].as_u64(), Some(active), "{shut}");
    daemon
        .wait_for_log(|l| l.contains("udp flow ended: killed"))
        .expect("the flows end");
    assert_eq!(ask(b"three"), b"Bthree");
    admin(&socket, &format!("set backend pair {a} state ready"));
    eventually("A takes new flows again", || {
        reached(&daemon, first_on_a) == "A"
    });
}

/// Backends tagged A and B on 127.0.0.2 and .3, one port, as a name's are.
fn two_on_one_port() -> (u16, [Arc<AtomicBool>; 2]) {
    loop {
        let probe = UdpSocket::bind("127.0.0.2:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        let other = SocketAddr::from(([127, 0, 0, 3], port));
        if UdpSocket::bind(other).is_err() {
            continue;
        }
        let (_, a) = udp_backend(SocketAddr::from(([127, 0, 0, 2], port)), "A");
        let (_, b) = udp_backend(other, "B");
        return (port, [a, b]);
    }
}

#[test]
#[ignore = "needs dnsmasq (Debian's dnsmasq-base; CI runs it)"]
fn a_udp_backend_named_in_dns_is_followed() {
    let dir = common::scratch_dir();
    let (port, _answering) = two_on_one_port();
    let dns_port = free_port();
    let dns = Dnsmasq::start(&dir, dns_port, "127.0.0.2 wg.test.internal\n", &[]);
    let socket = dir.join("admin.sock");
    let daemon = Daemon::binary(&format!(
        "resolvers = [\"127.0.0.1:{dns_port}\"]\nadmin_socket = \"{}\"\n\
         listen = [{{ address = \"127.0.0.1:0\", udp = true, udp_default = \"wg\" }}]\n\
         [service.wg]\nproxy_udp = \"wg.test.internal:{port}\"\n",
        socket.display()
    ));
    // The first flows may come before the first answer: dropped, counted.
    eventually("a flow reaches the name's address", || {
        let socket = UdpSocket::bind("127.0.0.5:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        socket.send_to(b"hello", daemon.addr).unwrap();
        let mut buf = [0u8; 64];
        socket.recv(&mut buf).is_ok_and(|n| &buf[..n] == b"Ahello")
    });
    let member = SocketAddr::from(([127, 0, 0, 2], port));
    let listed = row(&socket, "wg", member);
    assert_eq!(listed["source"], "dns", "{listed}");
    assert_eq!(listed["udp"], true, "{listed}");

    // The name moves to .3: new flows follow within its 1 s TTL.
    dns.set_hosts("127.0.0.3 wg.test.internal\n");
    eventually("new flows reach the new address", || {
        reached(&daemon, 6) == "B"
    });
    assert!((7..20).all(|n| reached(&daemon, n) == "B"));
    let rows = admin(&socket, "--json show backends wg");
    assert!(!rows.contains(&member.to_string()), "{rows}");
    let _ = std::fs::remove_dir_all(&dir);
}
