//! `/healthz` and `/readyz` on `metrics_listen`, and `shutdown_delay`: what a
//! load balancer or an orchestrator asks a front door, and a stop that lets
//! it stop sending first. The last test puts two daemons behind a real
//! HAProxy that checks `/readyz` and stops one under load: no client may be
//! refused (needs `haproxy`: ignored by a plain `cargo test`, run by
//! `--include-ignored`, as CI does).

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::dns::free_port;
use common::{read_all, Daemon, PATIENCE};

/// `GET path`: the status code and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
    let answer = String::from_utf8(read_all(&mut stream)).expect("UTF-8");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head}"));
    (code, body.to_owned())
}

/// `GET path` until its status is `code` (bounded by PATIENCE).
fn until(addr: &str, path: &str, code: u16) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (got, body) = get(addr, path);
        if got == code {
            return body;
        }
        assert!(Instant::now() < deadline, "{path} stayed {got}: {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One TCPMUX `daytime` exchange through `port`: whether a `+` answer came.
fn daytime(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(PATIENCE));
    if stream.write_all(b"daytime\r\n").is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer.starts_with(b"+")
}

#[test]
fn a_stop_turns_readiness_off_at_once_while_the_listeners_still_serve() {
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut daemon = Daemon::binary(&format!(
        "metrics_listen = \"{metrics}\"\nshutdown_delay = \"30s\"\nlisten = [\"127.0.0.1:0\"]\n"
    ));
    assert_eq!(get(&metrics, "/healthz"), (200, "ok\n".to_owned()));
    assert_eq!(until(&metrics, "/readyz", 200), "ok\n");
    daemon.signal("TERM");
    // Not ready from the moment it is told to stop ...
    assert_eq!(
        until(&metrics, "/readyz", 503),
        "not ready: shutting down\n"
    );
    daemon
        .wait_for_log(|l| l.contains("still accepting for shutdown_delay"))
        .expect("the delay is logged");
    // ... yet alive, and its clients are still served during the delay.
    assert_eq!(get(&metrics, "/healthz").0, 200);
    for _ in 0..5 {
        assert!(
            daytime(daemon.addr.port()),
            "a client refused during the delay"
        );
    }
    // A second signal ends the wait, as it always ends a stop.
    daemon.signal("TERM");
    assert!(daemon.wait_exit().is_some(), "the second signal ends it");
}

#[test]
fn without_a_delay_a_stop_closes_the_listeners_at_once() {
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut daemon = Daemon::binary(&format!(
        "metrics_listen = \"{metrics}\"\nlisten = [\"127.0.0.1:0\"]\n"
    ));
    until(&metrics, "/readyz", 200);
    daemon.signal("TERM");
    let status = daemon.wait_exit().expect("exits");
    assert!(status.success(), "{status:?}");
    assert!(
        !daemon
            .logs()
            .iter()
            .any(|l| l.contains("still accepting for shutdown_delay")),
        "shutdown_delay defaults to 0"
    );
}

/// HAProxy on `port`, balancing over `servers` (listen port, metrics port),
/// each checked with `GET /readyz` every 100 ms and out at its first 503;
/// no retry, so a refused connection reaches the client.
fn haproxy(dir: &std::path::Path, port: u16, servers: &[(u16, u16)]) -> common::peers::Peer {
    let mut config = format!(
        "global\n  maxconn 2000\ndefaults\n  mode tcp\n  retries 0\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
         frontend fe\n  bind 127.0.0.1:{port}\n  default_backend be\n\
         backend be\n  balance roundrobin\n  option httpchk GET /readyz\n  http-check expect status 200\n"
    );
    for (i, (listen, metrics)) in servers.iter().enumerate() {
        config.push_str(&format!(
            "  server d{i} 127.0.0.1:{listen} check port {metrics} inter 100 fall 1 rise 1\n"
        ));
    }
    common::peers::haproxy(dir, &config)
}

#[test]
#[ignore = "needs haproxy"]
fn a_stop_behind_haproxy_checking_readyz_refuses_no_client() {
    common::require_program("haproxy", "-v", "haproxy");
    let start = |metrics: u16| {
        Daemon::binary(&format!(
            "metrics_listen = \"127.0.0.1:{metrics}\"\nshutdown_delay = \"2s\"\nlisten = [\"127.0.0.1:0\"]\n"
        ))
    };
    let (metrics_a, metrics_b) = (free_port(), free_port());
    let mut a = start(metrics_a);
    let b = start(metrics_b);
    let front = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let servers = [(a.addr.port(), metrics_a), (b.addr.port(), metrics_b)];
    let _haproxy = haproxy(&a.dir, front, &servers);
    // Both in service: a run of answers in a row through the front.
    let deadline = Instant::now() + PATIENCE;
    let mut in_a_row = 0;
    while in_a_row < 20 {
        assert!(Instant::now() < deadline, "haproxy never served");
        in_a_row = if daytime(front) { in_a_row + 1 } else { 0 };
    }
    // Load: four clients, one exchange after another, until told to stop
    // (bounded by PATIENCE as well).
    let (stop, served, refused) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, served, refused) = (stop.clone(), served.clone(), refused.clone());
            std::thread::spawn(move || {
                let until = Instant::now() + PATIENCE;
                while !stop.load(Ordering::Acquire) && Instant::now() < until {
                    let counter = if daytime(front) { &served } else { &refused };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Some load first, then stop one daemon in the middle of it.
    while served.load(Ordering::Relaxed) < 200 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = served.load(Ordering::Relaxed);
    a.signal("TERM");
    let status = a.wait_exit().expect("the stopped daemon exits");
    assert!(status.success(), "{status:?}");
    // And more after it is gone, all through the other one.
    let after = served.load(Ordering::Relaxed);
    while served.load(Ordering::Relaxed) < after + 200 {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Release);
    for client in clients {
        client.join().unwrap();
    }
    let (served, refused) = (
        served.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    eprintln!("behind haproxy: {served} served ({before} before the stop), {refused} refused");
    assert_eq!(
        refused, 0,
        "clients refused while a daemon stopped behind haproxy"
    );
    drop(b);
}
