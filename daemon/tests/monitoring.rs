//! The monitoring kit (contrib/prometheus/, contrib/grafana/) checked against
//! a real daemon: every metric the Grafana dashboard queries is on its
//! /metrics, and Debian's Prometheus, loaded with the alert rules, fires
//! TcpmuxdBackendDown when a backend dies (its /api/v1/alerts says so).
//! The second needs `prometheus`: ignored by a plain `cargo test`, run by
//! `--include-ignored`, as CI does.

use crate::common;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::dns::free_port;
use common::pki::TlsSetup;
use common::{read_all, Daemon};

fn contrib(path: &str) -> String {
    format!("{}/../contrib/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// `GET path` at `addr`: the body of a 200 answer, if one came.
fn get(addr: &str, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(common::PATIENCE)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let answer = String::from_utf8(read_all(&mut stream)).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.contains(" 200 ").then(|| body.to_owned())
}

/// The `tcpmuxd_…` names in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("tcpmuxd_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.insert(name);
    }
    names
}

/// The series names on /metrics (sample lines, not comments).
fn exported(metrics: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_metric_the_grafana_dashboard_queries_is_exported() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(contrib("grafana/tcpmuxd.json")).unwrap())
            .expect("the dashboard is JSON");
    let mut queried = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            queried.extend(metric_names(target["expr"].as_str().expect("an expr")));
        }
    }
    assert!(queried.len() >= 10, "{queried:?}");
    // A daemon that has every family: a TLS listener (certificates,
    // handshakes), a proxy with members and a queue.
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let tls = TlsSetup::new();
    let daemon = tls.daemon(
        "",
        &format!(
            "metrics_listen = \"{metrics}\"\n[service.web]\nproxy = \"{}\"\nmax_connections = 4\nqueue_timeout = \"1s\"\n",
            backend.local_addr().unwrap()
        ),
    );
    // One client that is no TLS client: the connection and refusal
    // counters have a series.
    let mut stranger = TcpStream::connect(daemon.addr).unwrap();
    stranger.write_all(b"not a ClientHello\r\n").unwrap();
    drop(read_all(&mut stranger));
    let deadline = Instant::now() + common::PATIENCE;
    loop {
        let text = get(&metrics, "/metrics").unwrap_or_default();
        let missing: Vec<_> = queried.difference(&exported(&text)).cloned().collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not on /metrics: {missing:?}\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs prometheus"]
fn prometheus_with_the_rules_fires_when_a_backend_dies() {
    common::require_program("prometheus", "--version", "prometheus");
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::with_config(&format!(
        "metrics_listen = \"{metrics}\"\n[service.web]\nproxy = \"{}\"\nhealth_check = {{ interval = \"100ms\", timeout = \"100ms\", fall = 1, rise = 1 }}\n",
        backend.local_addr().unwrap()
    ));
    let dir = common::scratch_dir();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: tcpmuxd\n    static_configs:\n      - targets: [\"{metrics}\"]\n",
            contrib("prometheus/tcpmuxd.rules.yml")
        ),
    )
    .unwrap();
    let web = format!("127.0.0.1:{}", free_port());
    let _prometheus = Prometheus(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );
    // The backend answers: Prometheus scrapes it up, and nothing fires.
    let up = |body: &str| body.contains("\"health\":\"up\"");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !get(&web, "/api/v1/targets").is_some_and(|b| up(&b)) {
        assert!(
            Instant::now() < deadline,
            "prometheus never scraped tcpmuxd"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let alerts = get(&web, "/api/v1/alerts").expect("alerts");
    assert!(!alerts.contains("TcpmuxdBackendDown"), "{alerts}");
    // The backend dies; its health checks fail; the alert fires after its 5 s.
    drop(backend);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let alerts = get(&web, "/api/v1/alerts").unwrap_or_default();
        if alerts.contains("TcpmuxdBackendDown") && alerts.contains("\"state\":\"firing\"") {
            assert!(alerts.contains("\"service\":\"web\""), "{alerts}");
            break;
        }
        assert!(Instant::now() < deadline, "the alert never fired: {alerts}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(daemon);
}
