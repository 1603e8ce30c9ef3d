//! The dashboard on `metrics_listen`: `/status.json` as a script reads it,
//! and the page in a real browser (Debian's chromium, headless), which runs
//! its script, shows the services and counters that move with traffic, and
//! asks nothing of any other host.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::dns::free_port;
use common::{read_all, Daemon, PATIENCE};

/// `GET path` on the endpoint: the body of a 200 answer.
fn get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
    let answer = String::from_utf8(read_all(&mut stream)).expect("UTF-8");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    body.to_owned()
}

fn status(addr: &str) -> serde_json::Value {
    serde_json::from_str(&get(addr, "/status.json")).expect("status.json is JSON")
}

/// `status.json` once `pred` holds for it (bounded by PATIENCE).
fn status_until(addr: &str, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let status = status(addr);
        if pred(&status) || Instant::now() > deadline {
            return status;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn served(status: &serde_json::Value, service: &str) -> u64 {
    status["services"]
        .as_array()
        .and_then(|list| list.iter().find(|s| s["name"] == service))
        .and_then(|s| s["totals"]["served"].as_u64())
        .unwrap_or(0)
}

fn daytime(daemon: &Daemon, times: usize) {
    for _ in 0..times {
        let answer = daemon.exchange(b"daytime\r\n");
        assert!(answer.starts_with(b"+"), "{answer:?}");
    }
}

#[test]
fn status_json_has_every_documented_field_and_the_rates() {
    let metrics = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::with_config(&format!("metrics_listen = \"{metrics}\"\n"));
    daytime(&daemon, 5);
    let first = status_until(&metrics, |s| {
        served(s, "daytime") >= 5 && s["event_loops"].as_array().is_some_and(|l| !l.is_empty())
    });
    for key in [
        "version",
        "time",
        "uptime_seconds",
        "active",
        "history_interval_seconds",
        "listeners",
        "services",
        "backends",
        "handoff",
        "sessions",
        "event_loops",
    ] {
        assert!(first.get(key).is_some(), "no {key} in {first}");
    }
    assert_eq!(served(&first, "daytime"), 5, "{first}");
    assert!(first["sessions"]["busiest"].is_array(), "{first}");
    assert!(first["event_loops"][0]["samples"].is_u64(), "{first}");
    let kinds: Vec<&str> = first["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"tcpmux") && kinds.contains(&"metrics"),
        "{kinds:?}"
    );
    // A rate appears once two samples have been taken after traffic.
    daytime(&daemon, 5);
    let rated = status_until(&metrics, |s| {
        s["services"].as_array().is_some_and(|list| {
            list.iter().any(|s| {
                s["name"] == "daytime" && s["history"]["connections_per_second"].is_array()
            })
        })
    });
    let daytime = rated["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "daytime")
        .unwrap();
    let rates = daytime["history"]["connections_per_second"].as_array();
    assert!(rates.is_some_and(|r| !r.is_empty()), "{daytime}");
}

/// A proxy that should never be used: the browser goes through it for any
/// host but loopback, so a connection here is a request leaving the machine.
fn trap() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the trap");
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut head = [0u8; 256];
            let n = conn.read(&mut head).unwrap_or(0);
            log.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&head[..n]).into_owned());
        }
    });
    (port, seen)
}

/// The DOM chromium leaves after running the page's script for a while.
fn dump_dom(url: &str, proxy_port: u16) -> String {
    let profile = common::scratch_dir();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--disable-features=Translate,MediaRouter,OptimizationHints,NetworkTimeServiceQuerying",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--proxy-server=http://127.0.0.1:{proxy_port}"))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(profile);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The number the page shows in the cell with this id.
fn shown(dom: &str, id: &str) -> Option<u64> {
    let start = dom.find(&format!("id=\"{id}\">"))? + id.len() + 6;
    dom[start..].split('<').next()?.parse().ok()
}

#[test]
#[ignore = "needs chromium (Debian's chromium package); CI installs it"]
fn the_page_in_a_browser_shows_the_services_and_moving_counters() {
    common::require_program("chromium", "--version", "chromium");
    let metrics = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::with_config(&format!(
        "metrics_listen = \"{metrics}\"\n[service.web]\nproxy = \"127.0.0.1:9\"\n"
    ));
    let (proxy, requests) = trap();
    let url = format!("http://{metrics}/");
    daytime(&daemon, 3);
    status_until(&metrics, |s| served(s, "daytime") >= 3);
    let before = dump_dom(&url, proxy);
    for name in ["daytime", "echo", "web", "127.0.0.1:9"] {
        assert!(
            before.contains(&format!(">{name}<")),
            "no {name} in {before}"
        );
    }
    let first = shown(&before, "svc-daytime-served").expect("the served cell");
    assert!(first >= 3, "{first}");
    daytime(&daemon, 7);
    status_until(&metrics, |s| served(s, "daytime") >= first + 7);
    let after = dump_dom(&url, proxy);
    let second = shown(&after, "svc-daytime-served").expect("the served cell");
    assert!(second >= first + 7, "{first} then {second}");
    // Both browsers have exited: every request they made is in. Chromium
    // itself asks its update, clock and account services even when told
    // not to (the trap answers nothing, so nothing left); the page's text
    // names no host at all (a unit test checks that), and nothing else may
    // appear here.
    let own = [
        "update.googleapis.com",
        "accounts.google.com",
        "clients2.google.com",
    ];
    let left: Vec<String> = requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| !own.iter().any(|host| r.contains(&format!("Host: {host}"))))
        .cloned()
        .collect();
    assert!(
        left.is_empty(),
        "requests would have left the machine: {left:?}"
    );
}

/// The whole answer to `request`, sent as it is.
fn ask(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    String::from_utf8_lossy(&read_all(&mut stream)).into_owned()
}

#[test]
fn a_rebinding_page_is_refused_and_head_is_answered() {
    let metrics = format!("127.0.0.1:{}", free_port());
    let _daemon = Daemon::with_config(&format!(
        "metrics_listen = \"{metrics}\"\nmetrics_hosts = [\"metrics.example\"]\n"
    ));
    let port = metrics.rsplit(':').next().unwrap();
    let get = |host: &str| {
        ask(
            &metrics,
            &format!("GET /status.json HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        )
    };
    // A page on another site whose name now points here sends its own name.
    for host in [format!("attacker.example:{port}"), "localhost".to_owned()] {
        let answer = get(&host);
        assert!(answer.starts_with("HTTP/1.0 421"), "{host}: {answer}");
        assert!(!answer.contains("\"services\""), "{answer}");
    }
    for host in [
        format!("metrics.example:{port}"),
        metrics.clone(),
        format!("[::1]:{port}"),
    ] {
        assert!(get(&host).starts_with("HTTP/1.0 200"), "{host}");
    }
    let head = ask(&metrics, "HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "a body after HEAD: {head}");
    assert!(head.contains("Content-Length: ") && !head.contains("Content-Length: 0\r"));
    assert!(
        head.contains("script-src 'self'") && !head.contains("unsafe-inline"),
        "{head}"
    );
    // The page's script and style come from the endpoint itself.
    assert!(ask(&metrics, "GET /dashboard.js HTTP/1.0\r\n\r\n").contains("/status.json"));
    assert!(ask(&metrics, "GET /dashboard.css HTTP/1.0\r\n\r\n").contains("text/css"));
}

#[test]
fn idle_connections_to_the_endpoint_are_capped_and_a_scrape_still_gets_through() {
    const CAP: usize = 64;
    let metrics = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::binary(&format!("metrics_listen = \"{metrics}\"\n"));
    let descriptors = || {
        std::fs::read_dir(format!("/proc/{}/fd", daemon.pid()))
            .expect("the daemon's descriptors")
            .count()
    };
    let baseline = descriptors();
    // 300 clients that send nothing. Each newcomer past the cap ends the
    // oldest of them still sending its head: the daemon holds at most CAP.
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(&metrics).expect("connect"))
        .collect();
    // Accepted after all 300 (the queue is first in, first out), and served.
    assert!(get(&metrics, "/metrics").contains("tcpmuxd_"));
    let held = descriptors().saturating_sub(baseline);
    assert!(held <= CAP + 4, "{held} descriptors for 300 idle clients");
    // The daemon's own clients never noticed.
    daytime(&daemon, 1);
    drop(idle);
}
