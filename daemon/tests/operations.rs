//! Operating the daemon: access control, connection limits, stats and the log.

use crate::common;

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;

use common::{read_all, read_line, Daemon};

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

#[test]
fn services_allow_and_deny_by_address() {
    let daemon = Daemon::with_config(
        "[service.lan]\nbuiltin = \"echo\"\nallow = [\"10.0.0.0/8\"]\n\
         [service.blocked]\nbuiltin = \"echo\"\ndeny = [\"127.0.0.1\"]\n\
         [service.open]\nbuiltin = \"echo\"\nallow = [\"127.0.0.0/8\"]\ndeny = [\"127.0.0.2\"]\n",
    );
    assert_eq!(text(daemon.exchange(b"lan\r\n")), "-access denied\r\n");
    assert_eq!(text(daemon.exchange(b"blocked\r\n")), "-access denied\r\n");
    let mut stream = daemon.connect();
    stream.write_all(b"open\r\nok").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(text(read_all(&mut stream)), "+\r\nok");
}

#[test]
fn unix_clients_are_judged_by_uid() {
    let dir = common::scratch_dir();
    let path = dir.join("ops.sock");
    let me = common::my_uid();
    let daemon = Daemon::with_config(&format!(
        "listen = [\"unix:{}\"]\n[service.mine]\nbuiltin = \"echo\"\nallow_uid = [{me}]\n\
         [service.theirs]\nbuiltin = \"echo\"\nallow_uid = [4242]\n",
        path.display()
    ));
    let ask = |name: &str| {
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(format!("{name}\r\nhi").as_bytes()).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        text(read_all(&mut s))
    };
    assert_eq!(ask("mine"), "+\r\nhi");
    assert_eq!(ask("theirs"), "-access denied\r\n");
    drop(daemon);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_service_connection_cap_answers_busy() {
    let daemon = Daemon::with_config("[service.echo]\nmax_connections = 1\n");
    let mut first = daemon.connect();
    first.write_all(b"echo\r\n").unwrap();
    assert_eq!(read_line(&mut first), b"+\r\n");
    assert!(text(daemon.exchange(b"echo\r\n")).starts_with("-service busy"));
    // Other services are not affected.
    assert!(daemon.exchange(b"time\r\n").starts_with(b"+\r\n"));
}

#[test]
fn daemon_and_per_address_caps_refuse_before_the_name() {
    let daemon = Daemon::with_config("max_connections = 2\n");
    let _a = daemon.connect();
    let _b = daemon.connect();
    // Refused at once, without sending a name: a '-' line, not a silent drop.
    let mut third = daemon.connect();
    assert_eq!(
        text(read_all(&mut third)),
        "-server busy: too many connections, try again later\r\n"
    );

    let daemon = Daemon::with_config("max_connections_per_ip = 1\n");
    let _a = daemon.connect();
    let mut second = daemon.connect();
    assert_eq!(
        text(read_all(&mut second)),
        "-too many connections from your address\r\n"
    );
}

#[test]
fn new_connections_per_address_are_rate_limited() {
    let daemon = Daemon::with_config("connection_rate_per_ip = 3\n");
    let replies: Vec<String> = (0..6)
        .map(|_| text(daemon.exchange(b"daytime\r\n")))
        .collect();
    let refused = replies
        .iter()
        .filter(|r| r.starts_with("-too many new connections"))
        .count();
    assert!(refused >= 2, "{replies:?}");
    assert!(replies[0].starts_with('+'), "{replies:?}");
}

#[test]
fn bad_limits_are_config_errors() {
    for (config, words) in [
        ("max_connections = 0\n", "at least 1"),
        ("connection_rate_per_ip = 0.5\n", "at least 1"),
        (
            "[service.echo]\ndeny = [\"10.0.0.0/40\"]\n",
            "invalid address range",
        ),
        ("[service.echo]\nmax_connections = 0\n", "at least 1"),
    ] {
        common::assert_config_rejected(config, words);
    }
}

#[test]
fn stats_counts_connections_and_is_loopback_only_by_default() {
    let mut daemon = Daemon::with_config(
        "metrics_listen = \"127.0.0.1:0\"\n[service.stats]\n[service.remote-stats]\nbuiltin = \"stats\"\nallow = [\"192.0.2.0/24\"]\n",
    );
    for _ in 0..3 {
        let mut s = daemon.connect();
        s.write_all(b"echo\r\nx").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        read_all(&mut s);
    }
    let _ = daemon.exchange(b"nonsense-name\r\n");
    // Wait until those sessions have logged, i.e. been counted.
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while daemon
        .logs()
        .iter()
        .filter(|l| l.contains("tcpmuxd::connection"))
        .count()
        < 4
    {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let stats = text(daemon.exchange(b"stats\r\n"));
    assert!(stats.starts_with("+\r\n# HELP"), "{stats}");
    assert!(
        stats.contains(
            "tcpmuxd_connections_total{service=\"echo\",outcome=\"served\",routed=\"tcpmux\"} 3\n"
        ),
        "{stats}"
    );
    // What a client typed never becomes a label.
    assert!(
        stats.contains(
            "tcpmuxd_connections_total{service=\"-\",outcome=\"unknown\",routed=\"tcpmux\"} 1\n"
        ),
        "{stats}"
    );
    assert!(!stats.contains("nonsense-name"), "{stats}");
    assert!(stats.contains("tcpmuxd_connections_active 1\n"), "{stats}");
    // An allow list that excludes loopback refuses us.
    assert_eq!(
        text(daemon.exchange(b"remote-stats\r\n")),
        "-access denied\r\n"
    );

    // The same counters over HTTP for Prometheus.
    let line = daemon
        .wait_for_log(|l| l.contains("metrics endpoint"))
        .unwrap();
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("address="))
        .unwrap()
        .to_owned();
    let mut http = TcpStream::connect(&addr).unwrap();
    http.set_read_timeout(Some(common::PATIENCE)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let response = text(read_all(&mut http));
    assert!(response.starts_with("HTTP/1.0 200 OK\r\n"), "{response}");
    assert!(
        response.contains(
            "tcpmuxd_connections_total{service=\"echo\",outcome=\"served\",routed=\"tcpmux\"} 3\n"
        ),
        "{response}"
    );
    let mut http = TcpStream::connect(&addr).unwrap();
    http.write_all(b"GET /other HTTP/1.0\r\n\r\n").unwrap();
    assert!(text(read_all(&mut http)).starts_with("HTTP/1.0 404"));
}

#[test]
fn workers_mode_runs_one_event_loop_per_thread_on_one_port() {
    let mut daemon = Daemon::start_with(
        Some("[service.e]\nbuiltin = \"echo\"\n"),
        &["--workers", "3"],
    );
    // The main thread, three event-loop threads and the log writer.
    let names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", daemon.pid()))
        .unwrap()
        .map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).unwrap())
        .map(|name| name.trim().to_owned())
        .collect();
    assert_eq!(names.len(), 5, "{names:?}");
    let workers = names
        .iter()
        .filter(|n| n.starts_with("tcpmuxd-worker"))
        .count();
    assert_eq!(workers, 3, "{names:?}");
    assert!(names.iter().any(|n| n == "tcpmuxd-log"), "{names:?}");
    // The harness waits for the first worker's line; the others follow.
    let listening = || {
        daemon
            .logs()
            .iter()
            .filter(|l| l.contains(" listening "))
            .count()
    };
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while listening() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(listening(), 3, "each worker binds its own socket");
    let addr = daemon.addr;
    let clients: Vec<_> = (0..60u64)
        .map(|i| {
            std::thread::spawn(move || {
                let payload = common::random_bytes(i, 10_000);
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(common::PATIENCE)).unwrap();
                s.write_all(b"e\r\n").unwrap();
                s.write_all(&payload).unwrap();
                s.shutdown(Shutdown::Write).unwrap();
                let reply = read_all(&mut s);
                assert!(reply[3..] == payload[..], "client {i}");
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    // Every worker reloads and stops on the process's signals.
    std::fs::write(daemon.config_path(), "[service.f]\nbuiltin = \"daytime\"\n").unwrap();
    daemon.signal("HUP");
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while daemon
        .logs()
        .iter()
        .filter(|l| l.contains("configuration reloaded"))
        .count()
        < 3
    {
        assert!(
            std::time::Instant::now() < deadline,
            "not every worker reloaded"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for _ in 0..6 {
        assert!(daemon.exchange(b"f\r\n").starts_with(b"+\r\n"));
    }
    daemon.signal("TERM");
    assert!(daemon.wait_exit().is_some_and(|s| s.success()));
}

#[test]
fn handoff_needs_a_single_event_loop() {
    let dir = common::scratch_dir();
    let path = dir.join("t.toml");
    std::fs::write(
        &path,
        format!(
            "handoff_socket = \"{}\"\n[service.a]\nhandoff = {{ uid = [0] }}\n",
            dir.join("h.sock").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .args(["--workers", "2", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--workers 1"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_stuck_log_reader_does_not_stall_the_daemon() {
    use std::io::BufRead;
    // stderr goes to a pipe that is read up to the "listening" line and then
    // left alone: after ~64 KiB of log lines a blocking writer would stop the
    // event loop, and every client after that would wait forever.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
            .args(["--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn tcpmuxd"),
    );
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().expect("stderr"));
    let mut line = String::new();
    let addr: std::net::SocketAddr = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "tcpmuxd exited");
        if let Some(addr) = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("address="))
        {
            break addr.parse().unwrap();
        }
    };
    // ~3 MB of log lines: more than the pipe and the daemon's queue hold.
    const CLIENTS: usize = 20_000;
    for i in 0..CLIENTS {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
        stream.write_all(b"daytime\r\n").unwrap();
        let reply = read_all(&mut stream);
        assert!(reply.starts_with(b"+\r\n"), "client {i}: {reply:?}");
    }
    // Read at last: each connection's line is there or counted as dropped, and
    // the daemon still stops cleanly.
    let pid = child.0.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let rest: Vec<String> = stderr.lines().map_while(Result::ok).collect();
    let served = rest
        .iter()
        .filter(|l| l.contains("tcpmuxd::connection") && l.contains("service=daytime"))
        .count();
    let dropped: usize = rest
        .iter()
        .filter_map(|l| l.strip_prefix("tcpmuxd: "))
        .filter_map(|l| l.strip_suffix(" log lines dropped: stderr was not keeping up"))
        .map(|n| n.parse::<usize>().unwrap())
        .sum();
    assert!(dropped > 0, "the queue cannot hold {CLIENTS} lines");
    // The few lines of the shutdown itself may be among the dropped ones.
    let accounted = served + dropped;
    assert!(
        (CLIENTS..CLIENTS + 5).contains(&accounted),
        "{served} written + {dropped} dropped for {CLIENTS} connections"
    );
    assert!(child.0.wait().unwrap().success());
}

#[test]
fn per_address_limits_behind_a_trusted_upstream_count_the_announced_clients() {
    let daemon = Daemon::with_config(
        "listen = [{ address = \"127.0.0.1:0\", accept_proxy_from = [\"127.0.0.1/32\"] }]\n\
         max_connections_per_ip = 2\nconnection_rate_per_ip = 3\n",
    );
    let from = |client: &str| {
        let mut stream = daemon.connect();
        let header = format!("PROXY TCP4 {client} 198.51.100.1 5000 1\r\necho\r\n");
        stream.write_all(header.as_bytes()).unwrap();
        let reply = read_line(&mut stream);
        (stream, text(reply))
    };
    // Four clients behind one load balancer, one connection each: all served.
    let mut held = Vec::new();
    for client in ["203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4"] {
        let (stream, reply) = from(client);
        assert_eq!(reply, "+\r\n", "{client}");
        held.push(stream);
    }
    // The cap and the rate apply to each announced client.
    let (second, reply) = from("203.0.113.1");
    assert_eq!(reply, "+\r\n");
    held.push(second);
    let (_, reply) = from("203.0.113.1");
    assert!(
        reply.starts_with("-too many connections from your address"),
        "{reply}"
    );
    drop(held);
    // 203.0.113.2 has used one of its 3 per second; two more pass, then no more.
    for _ in 0..2 {
        let (_, reply) = from("203.0.113.2");
        assert_eq!(reply, "+\r\n");
    }
    let (_, reply) = from("203.0.113.2");
    assert!(reply.starts_with("-too many new connections"), "{reply}");
}

#[test]
fn workers_share_the_daemon_wide_limits_and_the_metrics() {
    let daemon = Daemon::start_with(Some("max_connections = 1\n"), &["--workers", "2"]);
    // Connections are spread over both workers by the kernel; the cap is the
    // daemon's all the same.
    let mut held = daemon.connect();
    held.write_all(b"echo\r\n").unwrap();
    assert_eq!(read_line(&mut held), b"+\r\n");
    for _ in 0..12 {
        let reply = text(daemon.exchange(b"daytime\r\n"));
        assert!(reply.starts_with("-server busy"), "{reply}");
    }
    drop(held);

    let daemon = Daemon::start_with(None, &["--workers", "2"]);
    for _ in 0..20 {
        assert!(daemon.exchange(b"daytime\r\n").starts_with(b"+\r\n"));
    }
    // Counted when each session is logged, just after its close.
    let deadline = std::time::Instant::now() + common::PATIENCE;
    loop {
        let stats = text(daemon.exchange(b"stats\r\n"));
        if stats.contains("tcpmuxd_connections_total{service=\"daytime\",outcome=\"served\",routed=\"tcpmux\"} 20\n")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{stats}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
