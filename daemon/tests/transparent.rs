//! `transparent = true` in network namespaces the test creates: a client
//! namespace, the daemon's (with the policy routing docs/deployment.md
//! gives) and a backend's, where socat prints the peer address it sees. The
//! transparent service's backend sees the client's own address, a plain
//! one the daemon's; the daemon runs as `nobody`, keeping CAP_NET_ADMIN only.
//! The same for a UDP listener's flows.

use crate::common;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use common::{run, Daemon, PATIENCE};

const CLIENT: &str = "10.201.1.2";
const DAEMON_SIDE: &str = "10.201.1.1";
const BACKEND: &str = "10.201.2.2";

/// Three namespaces, client - daemon - backend, removed on drop.
struct Namespaces {
    client: String,
    daemon: String,
    backend: String,
}

impl Namespaces {
    fn new() -> Namespaces {
        // Unique per test too: the tests of this file run at once.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = std::process::id() % 10_000 * 10 + next % 10;
        let ns = Namespaces {
            client: format!("tpx-c{tag}"),
            daemon: format!("tpx-d{tag}"),
            backend: format!("tpx-b{tag}"),
        };
        for name in [&ns.client, &ns.daemon, &ns.backend] {
            run(&["ip", "netns", "add", name]);
            run(&["ip", "-n", name, "link", "set", "lo", "up"]);
        }
        ns.link(
            &ns.client,
            "10.201.1.2/24",
            &format!("tc{tag}"),
            "10.201.1.1/24",
        );
        ns.link(
            &ns.backend,
            "10.201.2.2/24",
            &format!("tb{tag}"),
            "10.201.2.1/24",
        );
        for (name, gateway) in [(&ns.client, "10.201.1.1"), (&ns.backend, "10.201.2.1")] {
            run(&["ip", "-n", name, "route", "add", "default", "via", gateway]);
        }
        // What deployment.md tells operators to set up beside the daemon.
        let rules = "table inet tcpmuxd { chain prerouting { \
                     type filter hook prerouting priority mangle; \
                     meta l4proto { tcp, udp } socket transparent 1 meta mark set 1 accept; }; }";
        run(&["ip", "netns", "exec", &ns.daemon, "nft", rules]);
        run(&[
            "ip", "-n", &ns.daemon, "rule", "add", "fwmark", "1", "lookup", "100",
        ]);
        let local = [
            "route",
            "add",
            "local",
            "0.0.0.0/0",
            "dev",
            "lo",
            "table",
            "100",
        ];
        run(&[&["ip", "-n", &ns.daemon][..], &local[..]].concat());
        ns
    }

    /// A veth pair from `outer` (its end `name` with `address`) to the
    /// daemon's namespace (with `daemon_address`).
    fn link(&self, outer: &str, address: &str, name: &str, daemon_address: &str) {
        let inner = format!("{name}d");
        run(&[
            "ip", "link", "add", name, "type", "veth", "peer", "name", &inner,
        ]);
        run(&["ip", "link", "set", name, "netns", outer]);
        run(&["ip", "link", "set", &inner, "netns", &self.daemon]);
        for (ns, dev, addr) in [
            (outer, name, address),
            (&self.daemon, &inner, daemon_address),
        ] {
            run(&["ip", "-n", ns, "addr", "add", addr, "dev", dev]);
            run(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
    }
}

impl Namespaces {
    /// The namespaces, once the peers a test needs are known to be here.
    fn for_test() -> Namespaces {
        common::require_root();
        common::require_program("nft", "--version", "nftables");
        common::require_program("socat", "-V", "socat");
        Namespaces::new()
    }

    /// The daemon in its namespace, as `nobody` with CAP_NET_ADMIN kept.
    fn daemon(&self, config: &str) -> Daemon {
        let mut daemon = Daemon::start_wrapped(
            &["ip", "netns", "exec", &self.daemon],
            Some(config),
            &[],
            &[],
        );
        daemon
            .wait_for_log(|l| l.contains("dropped privileges") && l.contains("CAP_NET_ADMIN"))
            .expect("kept CAP_NET_ADMIN alone");
        daemon
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in [&self.client, &self.daemon, &self.backend] {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// socat in the backend namespace: each connection (TCP port 7000) or
/// datagram (UDP port 7001) gets the address it came from. Stopped by PID
/// on drop.
///
/// The UDP one reads the datagram before it answers: socat writes each
/// datagram to its command, and one that has already exited makes that
/// write fail (EPIPE) and socat end without sending the answer.
struct Backend(Child);

impl Backend {
    fn tcp(ns: &Namespaces) -> Backend {
        let command = "SYSTEM:echo peer=$SOCAT_PEERADDR";
        Backend::start(
            ns,
            ["TCP-LISTEN:7000,reuseaddr,fork", command],
            "-Htln",
            "= :7000",
        )
    }

    fn udp(ns: &Namespaces) -> Backend {
        let command = "SYSTEM:read -r _; echo peer=$SOCAT_PEERADDR";
        Backend::start(
            ns,
            ["UDP-RECVFROM:7001,reuseaddr,fork", command],
            "-Huln",
            "= :7001",
        )
    }

    /// socat with `addresses`, once `ss` with `kind` shows its port bound.
    fn start(ns: &Namespaces, addresses: [&str; 2], kind: &str, port: &str) -> Backend {
        let backend = Backend(
            Command::new("ip")
                .args(["netns", "exec", &ns.backend, "socat"])
                .args(addresses)
                .stdin(Stdio::null())
                .spawn()
                .expect("start socat"),
        );
        let deadline = Instant::now() + PATIENCE;
        let bound = || {
            let ss = [
                "ip",
                "netns",
                "exec",
                &ns.backend,
                "ss",
                kind,
                "sport",
                port,
            ];
            !run(&ss).stdout.is_empty()
        };
        while !bound() {
            assert!(Instant::now() < deadline, "socat never bound {port}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        backend
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What `service` answers a client in the client namespace.
fn ask(ns: &Namespaces, port: u16, service: &str) -> String {
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.client, "socat", "-t", "10", "-"])
        .arg(format!("TCP:{DAEMON_SIDE}:{port}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start socat client");
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{service}\r\n").as_bytes())
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().expect("socat client");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs root, ip, nft and socat (network namespaces; CI runs it)"]
fn the_backend_sees_the_clients_own_address() {
    let ns = Namespaces::for_test();
    let _backend = Backend::tcp(&ns);
    let config = format!(
        "listen = [\"{DAEMON_SIDE}:0\"]\nuser = \"nobody\"\n\
         [service.seen]\nproxy = \"{BACKEND}:7000\"\ntransparent = true\n\
         [service.plain]\nproxy = \"{BACKEND}:7000\"\n"
    );
    let daemon = ns.daemon(&config);
    let port = daemon.addr.port();
    assert_eq!(ask(&ns, port, "seen"), format!("+\r\npeer={CLIENT}\n"));
    assert_eq!(ask(&ns, port, "plain"), "+\r\npeer=10.201.2.1\n");
}

/// One datagram from the client namespace to the daemon's UDP port, and
/// the reply (socat waits up to 5 s for it).
fn ask_udp(ns: &Namespaces, port: u16, datagram: &str) -> String {
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.client, "socat", "-t", "5", "-"])
        .arg(format!("UDP:{DAEMON_SIDE}:{port}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start socat client");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(datagram.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().expect("socat client");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs root, ip, nft and socat (network namespaces; CI runs it)"]
fn a_udp_backend_sees_the_clients_own_address() {
    let ns = Namespaces::for_test();
    let _backend = Backend::udp(&ns);
    let config = format!(
        "listen = [{{ address = \"{DAEMON_SIDE}:0\", udp = true, \
         match = [{{ regex = \"^seen\", service = \"seen\" }}], udp_default = \"plain\" }}]\n\
         user = \"nobody\"\n\
         [service.seen]\nproxy_udp = \"{BACKEND}:7001\"\ntransparent = true\n\
         [service.plain]\nproxy_udp = \"{BACKEND}:7001\"\n"
    );
    let daemon = ns.daemon(&config);
    let port = daemon.addr.port();
    assert_eq!(ask_udp(&ns, port, "seen\n"), format!("peer={CLIENT}\n"));
    assert_eq!(ask_udp(&ns, port, "plain\n"), "peer=10.201.2.1\n");
}

#[test]
#[ignore = "needs root and setpriv (CI runs it)"]
fn check_config_warns_without_cap_net_admin() {
    common::require_root();
    let dir = common::scratch_dir();
    let path = dir.join("t.toml");
    std::fs::write(
        &path,
        "[service.seen]\nproxy = \"127.0.0.1:7000\"\ntransparent = true\n",
    )
    .unwrap();
    let check = |wrapper: &[&str]| {
        let mut args = wrapper.to_vec();
        let binary = env!("CARGO_BIN_EXE_tcpmuxd");
        let path = path.to_str().unwrap();
        args.extend([binary, "--check-config", path]);
        let out = run(&args);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(!check(&[]).contains("CAP_NET_ADMIN"), "root has it");
    let warned = check(&[
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ]);
    assert!(
        warned.contains("warning: transparent = true needs CAP_NET_ADMIN"),
        "{warned}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs root and setpriv (CI runs it)"]
fn a_running_daemon_without_cap_net_admin_says_so_once_whatever_its_workers() {
    common::require_root();
    let as_nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let config = "[service.seen]\nproxy = \"127.0.0.1:7000\"\ntransparent = true\n";
    for workers in ["1", "2"] {
        let mut daemon =
            common::Daemon::start_wrapped(&as_nobody, Some(config), &["--workers", workers], &[]);
        daemon
            .wait_for_log(|l| l.contains("transparent = true needs CAP_NET_ADMIN"))
            .unwrap_or_else(|| panic!("no warning with --workers {workers}: {:?}", daemon.logs()));
        // Serving by now: every worker is past the point of saying it.
        assert!(daemon.exchange(b"daytime\r\n").starts_with(b"+"));
        let said = daemon.wait_for_lines(1, |l| l.contains("needs CAP_NET_ADMIN"));
        assert_eq!(said, 1, "--workers {workers}: {:?}", daemon.logs());
    }
}

#[test]
fn transparent_needs_tcp_backends() {
    common::assert_config_rejected(
        "[service.s]\nproxy = \"unix:/run/s.sock\"\ntransparent = true\n",
        "transparent = true needs TCP backends",
    );
    common::assert_config_rejected(
        "[service.s]\nbuiltin = \"echo\"\ntransparent = true\n",
        "only applies to `proxy` services",
    );
}
