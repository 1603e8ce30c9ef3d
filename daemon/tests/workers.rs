//! What a daemon with several event loops (`--workers N`) does once for all of
//! them (health checks, DNS), and what it reports for each (event-loop lag).

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::pki::TlsSetup;
use common::{Daemon, PATIENCE};

/// `stats` until `pred` holds for it (bounded by PATIENCE).
fn stats_until(daemon: &Daemon, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let stats = String::from_utf8_lossy(&daemon.exchange(b"stats\r\n")).into_owned();
        if pred(&stats) || Instant::now() > deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_event_loop_reports_its_lag() {
    // A `tls` listener's sessions run on the TLS threads: they report as
    // one more loop, once for the daemon.
    let setup = TlsSetup::new();
    let config = format!(
        "listen = [\"127.0.0.1:0\", {{ address = \"127.0.0.1:0\", {} }}]\n",
        setup.tls_table("")
    );
    let daemon = Daemon::start_with(Some(&config), &["--workers", "2"]);
    let series = |w: &str| format!("tcpmuxd_event_loop_lag_seconds_count{{worker=\"{w}\"}} ");
    let stats = stats_until(&daemon, |s| {
        ["0", "1", "tls"].iter().all(|w| s.contains(&series(w)))
    });
    for worker in ["0", "1", "tls"] {
        assert_eq!(
            stats.matches(&series(worker)).count(),
            1,
            "worker {worker}:\n{stats}"
        );
        let bucket =
            format!("tcpmuxd_event_loop_lag_seconds_bucket{{worker=\"{worker}\",le=\"+Inf\"}} ");
        assert!(stats.contains(&bucket), "worker {worker}:\n{stats}");
    }
    assert!(stats.contains("# TYPE tcpmuxd_event_loop_lag_seconds histogram"));
}

#[test]
fn health_checks_run_once_per_daemon_whatever_the_workers() {
    let backend = TcpListener::bind("127.0.0.1:0").expect("bind the backend");
    let addr = backend.local_addr().expect("its address");
    let interval = Duration::from_millis(200);
    let _daemon = Daemon::start_with(
        Some(&format!(
            "[service.app]\nproxy = \"{addr}\"\n\
             health_check = {{ interval = \"{}ms\", timeout = \"1s\", rise = 1, fall = 3 }}\n",
            interval.as_millis()
        )),
        &["--workers", "2"],
    );
    // Every check is one connect. Eleven of them span ten intervals when one
    // set of checks runs (a busy machine only makes it longer); with one set
    // per worker they come twice as fast.
    backend.set_nonblocking(true).expect("non-blocking");
    let deadline = Instant::now() + PATIENCE;
    let mut checks = Vec::new();
    while checks.len() < 11 && Instant::now() < deadline {
        match backend.accept() {
            Ok(_probe) => checks.push(Instant::now()),
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    assert_eq!(checks.len(), 11, "the health checks arrive");
    let span = checks[10] - checks[0];
    assert!(
        span >= interval * 9,
        "11 checks in {span:?}: more than one set of health checks runs"
    );
}

/// The sockets a daemon has one of (metrics endpoint, admin socket) are worker
/// 0's: the other workers leave them out at start and at every reload, which
/// each worker does on SIGHUP, so a reload succeeds on all of them.
#[test]
fn workers_share_one_metrics_endpoint_admin_socket_and_session_table() {
    let dir = common::scratch_dir();
    let socket = dir.join("admin.sock");
    let daemon = Daemon::start_with(
        Some(&format!(
            "metrics_listen = \"127.0.0.1:0\"\nadmin_socket = \"{}\"\n",
            socket.display()
        )),
        &["--workers", "2"],
    );
    daemon.signal("HUP");
    let reloaded = daemon.wait_for_lines(2, |l| {
        l.contains("configuration reloaded") || l.contains("reload failed")
    });
    assert_eq!(reloaded, 2, "{:#?}", daemon.logs());
    let failed: Vec<_> = daemon
        .logs()
        .into_iter()
        .filter(|l| l.contains("reload failed"))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(common::admin_ok(&socket, "show services").contains("daytime"));
    // The session table is the daemon's: sessions on either worker are listed
    // (the kernel spreads eight connections over both; worker 0 answers).
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut stream = daemon.connect();
        stream.write_all(b"echo\r\n").expect("ask for echo");
        let mut plus = [0u8; 3];
        stream.read_exact(&mut plus).expect("the + line");
        held.push(stream);
    }
    let out = common::admin_ok(&socket, "--json show sessions echo");
    let reply: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        reply["sessions"].as_array().map(Vec::len),
        Some(8),
        "{reply}"
    );
}

#[test]
fn workers_with_an_upgrade_socket_fail_the_start_with_advice() {
    let dir = common::scratch_dir();
    let config = dir.join("tcpmuxd.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"127.0.0.1:0\"]\nupgrade_socket = \"{}\"\n",
            dir.join("upgrade.sock").display()
        ),
    )
    .expect("write the configuration");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .arg("--config")
        .arg(&config)
        .args(["--workers", "2"])
        .output()
        .expect("run tcpmuxd");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--workers 1"), "{stderr}");
}
