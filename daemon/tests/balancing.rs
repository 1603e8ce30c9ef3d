//! Proxy services with a pool of backends: round-robin by weight,
//! least-connections, passive ejection of backends that refuse or reset,
//! active health checks, and a backend killed under load.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};

use common::{read_all, read_line, Daemon};

/// A backend that answers every connection with `tag`, then waits for the
/// client's close (so a held connection stays held).
fn tagged_backend(tag: &'static str) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let _ = conn.write_all(tag.as_bytes());
                let _ = conn.shutdown(Shutdown::Write);
                let _ = std::io::copy(&mut conn, &mut std::io::sink());
            });
        }
    });
    addr
}

fn tag_of(daemon: &Daemon) -> String {
    String::from_utf8(daemon.exchange(b"pool\r\n")).unwrap()
}

#[test]
fn round_robin_splits_by_weight_and_least_connections_avoids_busy_backends() {
    let (a, b, c) = (
        tagged_backend("A"),
        tagged_backend("B"),
        tagged_backend("C"),
    );
    let daemon = Daemon::with_config(&format!(
        "[service.pool]\nbalance = \"round-robin\"\nproxy = [\"{a}\", \"{b}\", \"{c}\"]\n"
    ));
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..3000 {
        *counts.entry(tag_of(&daemon)).or_insert(0) += 1;
    }
    // Within 1% of a third each (here exact: turns are deterministic).
    for tag in ["+\r\nA", "+\r\nB", "+\r\nC"] {
        let n = counts[tag];
        assert!((990..=1010).contains(&n), "{counts:?}");
    }
    let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
    let line =
        format!("tcpmuxd_backend_connections_total{{service=\"pool\",backend=\"{a}\"}} 1000\n");
    assert!(stats.contains(&line), "{line} in {stats}");
    let line = format!(
        "tcpmuxd_backend_bytes_total{{service=\"pool\",backend=\"{a}\",direction=\"out\"}} 1000\n"
    );
    assert!(stats.contains(&line), "{line} in {stats}");

    let daemon = Daemon::with_config(&format!(
        "[service.pool]\nbalance = \"round-robin\"\n\
         proxy = [{{ address = \"{a}\", weight = 1 }}, {{ address = \"{b}\", weight = 2 }}, {{ address = \"{c}\", weight = 3 }}]\n"
    ));
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..600 {
        *counts.entry(tag_of(&daemon)).or_insert(0) += 1;
    }
    assert_eq!(
        (counts["+\r\nA"], counts["+\r\nB"], counts["+\r\nC"]),
        (100, 200, 300),
        "{counts:?}"
    );

    let daemon = Daemon::with_config(&format!(
        "[service.pool]\nbalance = \"least-connections\"\nproxy = [\"{a}\", \"{b}\"]\n"
    ));
    // One client holds its session with whichever backend it got...
    let mut held = daemon.connect();
    held.write_all(b"pool\r\n").unwrap();
    assert_eq!(read_line(&mut held), b"+\r\n");
    let mut tag = [0u8];
    std::io::Read::read_exact(&mut held, &mut tag).unwrap();
    let busy = format!("+\r\n{}", tag[0] as char);
    let idle = if tag[0] == b'A' { b } else { a };
    // ...and every short one goes to the other. The client sees EOF before
    // the daemon has ended its session with the backend, so each short one
    // waits for the other backend to be idle again: with both at one
    // connection the choice would be a tie.
    let idle_series =
        format!("tcpmuxd_backend_active_connections{{service=\"pool\",backend=\"{idle}\"}}");
    for _ in 0..20 {
        daemon.wait_for_figure(&idle_series, |v| v == 0.0);
        assert_ne!(tag_of(&daemon), busy);
    }
    drop(held);
}

#[test]
fn bad_balance_settings_are_config_errors() {
    for (config, words) in [
        (
            "[service.p]\nproxy = \"127.0.0.1:9\"\nbalance = \"fastest\"\n",
            "expected \"first\" or \"round-robin\"",
        ),
        (
            "[service.p]\nproxy = [{ address = \"127.0.0.1:9\", weight = 0 }]\n",
            "weight must be a whole number from 1 to 1000",
        ),
        (
            "[service.p]\nproxy = [{ address = \"127.0.0.1:9\", wait = 1 }]\n",
            "unknown key `wait`",
        ),
        (
            "[service.p]\nbuiltin = \"echo\"\nbalance = \"first\"\n",
            "only applies to `proxy` services",
        ),
    ] {
        common::assert_config_rejected(config, words);
    }
}

#[test]
fn a_backend_that_keeps_refusing_is_ejected_and_then_refused_at_once() {
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut daemon = Daemon::with_config(&format!("[service.gone]\nproxy = \"{dead}\"\n"));
    for _ in 0..3 {
        let reply = String::from_utf8(daemon.exchange(b"gone\r\n")).unwrap();
        assert_eq!(reply, "-service unavailable: connection refused\r\n");
    }
    daemon
        .wait_for_log(|l| l.contains("backend ejected"))
        .expect("ejected");
    // No connect is tried while it is out: the client hears so at once.
    let reply = String::from_utf8(daemon.exchange(b"gone\r\n")).unwrap();
    assert_eq!(reply, "-service unavailable: no healthy backend\r\n");
    // And the metrics say why.
    let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
    for line in [
        format!("tcpmuxd_backend_up{{service=\"gone\",backend=\"{dead}\"}} 0\n"),
        format!(
            "tcpmuxd_backend_connect_failures_total{{service=\"gone\",backend=\"{dead}\"}} 3\n"
        ),
    ] {
        assert!(stats.contains(&line), "{line} in {stats}");
    }
}

/// Of `clients` asking `app` to echo `ping` (sent with the request line),
/// how many did not get `+` and their ping back.
fn failed_pings(daemon: &Daemon, clients: usize) -> usize {
    let mut failed = 0;
    for _ in 0..clients {
        let mut stream = daemon.connect();
        stream.write_all(b"app\r\nping").unwrap();
        // The client keeps its side open, as one waiting for an answer does.
        let mut reply = [0u8; 7];
        let mut got = 0;
        while got < reply.len() {
            match stream.read(&mut reply[got..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        if reply[..got] != *b"+\r\nping" {
            failed += 1;
        }
    }
    failed
}

#[test]
fn a_backend_that_accepts_and_resets_is_ejected_like_one_that_refuses() {
    let good = common::echo_backend();
    let bad = TcpListener::bind("127.0.0.1:0").unwrap();
    let bad_addr = bad.local_addr().unwrap();
    std::thread::spawn(move || {
        // Accepted, reads the client's first bytes, then resets before
        // sending one (SO_LINGER 0 and close).
        for mut conn in bad.incoming().flatten() {
            let _ = conn.read(&mut [0u8; 4]);
            let _ = socket2::SockRef::from(&conn).set_linger(Some(std::time::Duration::ZERO));
        }
    });
    let mut daemon = Daemon::with_config(&format!(
        "[service.app]\nbalance = \"round-robin\"\nproxy = [\"{good}\", \"{bad_addr}\"]\n"
    ));
    let failed = failed_pings(&daemon, 100);
    // Three in a row eject it for 10 s: no more clients are sent there.
    assert!(
        failed <= 3,
        "{failed} of 100 clients got + and then nothing"
    );
    daemon
        .wait_for_log(|l| l.contains("backend ejected") && l.contains(&bad_addr.to_string()))
        .expect("the backend that resets is ejected");
}

#[test]
fn health_checks_take_a_dead_backend_out_and_bring_it_back() {
    let first = TcpListener::bind("127.0.0.1:0").unwrap();
    let first_addr = first.local_addr().unwrap();
    // The first backend accepts (the check's connect) but is never a target
    // while it is down; the second answers "B".
    std::thread::spawn(move || for _ in first.incoming() {});
    let second = tagged_backend("B");
    let mut daemon = Daemon::with_config(&format!(
        "[service.pool]\nproxy = [\"{first_addr}\", \"{second}\"]\n\
         health_check = {{ interval = \"50ms\", timeout = \"200ms\", rise = 2, fall = 2, expect = \"B\" }}\n"
    ));
    // It never answers: down after two checks, and clients go to B.
    daemon
        .wait_for_log(|l| l.contains("backend down") && l.contains(&first_addr.to_string()))
        .expect("the silent backend goes down");
    for _ in 0..5 {
        assert_eq!(tag_of(&daemon), "+\r\nB");
    }
    // A backend that answers the check comes up.
    let pong = TcpListener::bind("127.0.0.1:0").unwrap();
    let pong_addr = pong.local_addr().unwrap();
    let checks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&checks);
    std::thread::spawn(move || {
        for conn in pong.incoming() {
            let Ok(mut conn) = conn else { return };
            let _ = conn.write_all(b"PONG\n");
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    std::fs::write(
        daemon.config_path(),
        format!(
            "[service.pool]\nproxy = [\"{pong_addr}\"]\n\
             health_check = {{ interval = \"50ms\", timeout = \"200ms\", rise = 1, fall = 1, send = \"PING\\n\", expect = \"PONG\" }}\n"
        ),
    )
    .unwrap();
    daemon.signal("HUP");
    daemon
        .wait_for_log(|l| l.contains("configuration reloaded"))
        .expect("reloaded");
    // Up from the start, and staying up through several checks (fall = 1: a
    // failed one would take it down at once): clients reach it.
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while checks.load(std::sync::atomic::Ordering::Relaxed) < 5 {
        assert!(std::time::Instant::now() < deadline, "the checks run");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!daemon
        .logs()
        .iter()
        .any(|l| l.contains("backend down") && l.contains(&pong_addr.to_string())));
    let reply = daemon.exchange(b"pool\r\n");
    assert!(reply.starts_with(b"+\r\nPONG"), "{reply:?}");
}

/// A child process killed (by PID) when dropped, failed test or not.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tcpmux-bench source`: every connection gets one byte, then EOF; a process
/// the test can kill.
fn source_process() -> (Killed, SocketAddr) {
    let mut child = std::process::Command::new(common::sibling_binary("tcpmux-bench"))
        .args(["source", "--listen", "127.0.0.1:0", "--bytes", "1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start a source");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .unwrap()
        .parse()
        .unwrap();
    (Killed(child), addr)
}

fn failures_of(daemon: &Daemon, backend: SocketAddr) -> String {
    let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
    let prefix = format!(
        "tcpmuxd_backend_connect_failures_total{{service=\"pool\",backend=\"{backend}\"}} "
    );
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
        .unwrap_or_default()
}

#[test]
fn killing_one_of_three_backends_under_load_fails_no_client_it_was_not_serving() {
    let mut backends: Vec<_> = (0..3).map(|_| source_process()).collect();
    let list: Vec<String> = backends.iter().map(|(_, a)| format!("\"{a}\"")).collect();
    let mut daemon = Daemon::with_config(&format!(
        "[service.pool]\nbalance = \"round-robin\"\nproxy = [{}]\n\
         health_check = {{ interval = \"100ms\", timeout = \"300ms\", rise = 2, fall = 2 }}\n",
        list.join(", ")
    ));
    let addr = daemon.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0, 0);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && std::time::Instant::now() < deadline
            {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
                stream.write_all(b"pool\r\n").unwrap();
                if read_all(&mut stream).len() == 4 {
                    ok += 1
                } else {
                    failed += 1
                }
            }
            (ok, failed)
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (killed, killed_addr) = backends.remove(1);
    drop(killed);
    daemon
        .wait_for_log(|l| l.contains("backend down") && l.contains(&killed_addr.to_string()))
        .expect("the checks take it down");
    // Down: no client tries it any more, over the next 30 clients served.
    let before = failures_of(&daemon, killed_addr);
    let served = |l: &str| l.contains("outcome=served");
    let so_far = daemon.logs().iter().filter(|l| served(l)).count();
    assert!(daemon.wait_for_lines(so_far + 30, served) >= so_far + 30);
    assert_eq!(failures_of(&daemon, killed_addr), before);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = load.join().unwrap();
    // The one session the killed backend may have been serving at that moment
    // dies with it (it had its `+`); every other client is served.
    assert!(ok > 50 && failed <= 1, "{ok} ok, {failed} failed");
    drop(backends);
}

#[test]
fn a_backend_that_resets_before_the_clients_early_bytes_is_ejected_after_three() {
    let good = common::echo_backend();
    let bad = TcpListener::bind("127.0.0.1:0").unwrap();
    let bad_addr = bad.local_addr().unwrap();
    std::thread::spawn(move || {
        // Reset at once, before reading: the bytes the client sent with its
        // request line often meet the reset as they are written.
        for conn in bad.incoming().flatten() {
            let _ = socket2::SockRef::from(&conn).set_linger(Some(std::time::Duration::ZERO));
        }
    });
    let mut daemon = Daemon::with_config(&format!(
        "[service.app]\nbalance = \"round-robin\"\nproxy = [\"{good}\", \"{bad_addr}\"]\n"
    ));
    let failed = failed_pings(&daemon, 60);
    assert!(
        failed <= 3,
        "{failed} of 60 clients reached the resetting backend"
    );
    daemon
        .wait_for_log(|l| l.contains("backend ejected") && l.contains(&bad_addr.to_string()))
        .expect("ejected");
}
