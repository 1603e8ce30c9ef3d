//! Memory against the real daemon: what a wave of clients took is given back
//! once most of the wave has left (glibc alone would keep it for reuse), and
//! the descriptor table is grown before a wave comes.

use crate::common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{read_line, Daemon};

/// A `/proc/PID/status` figure: VmRSS (resident memory, KiB), FDSize (the
/// descriptor table's slots).
fn status_figure(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {status}"))
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    status_figure(pid, "VmRSS:")
}

/// This test process holds one descriptor per client: ask for enough.
fn allow_descriptors(wanted: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum.unwrap_or(u64::MAX);
    assert!(
        hard >= wanted,
        "the hard descriptor limit {hard} is below {wanted}"
    );
    limit.current = Some(limit.current.unwrap_or(0).max(wanted));
    setrlimit(Resource::Nofile, limit).expect("raise the descriptor limit");
}

#[test]
fn memory_a_wave_of_clients_took_is_given_back_after_it_leaves() {
    const CLIENTS: usize = 3000;
    allow_descriptors(CLIENTS as u64 + 200);
    let daemon = Daemon::binary("max_connections = 5000\n");
    let pid = daemon.pid();
    let rest = rss_kib(pid);
    // Established echo sessions: each has named echo and read its `+`.
    let wave: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let mut stream = daemon.connect();
            stream.write_all(b"echo\r\n").unwrap();
            assert_eq!(read_line(&mut stream), b"+\r\n");
            stream
        })
        .collect();
    let held = rss_kib(pid);
    assert!(
        held > rest + 4096,
        "the wave took too little to tell: {rest} -> {held} KiB"
    );
    drop(wave);
    // Checked once a second by the daemon; give it a generous while.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut after = rss_kib(pid);
    while after > rest + (held - rest) / 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        after = rss_kib(pid);
    }
    assert!(
        after <= rest + (held - rest) / 4,
        "at rest {rest} KiB, with {CLIENTS} clients {held} KiB, after they left {after} KiB"
    );
}

/// The soft descriptor limit a process runs under.
fn soft_nofile(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("/proc limits");
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// Growing the table under a burst would make accept4 wait for an RCU grace
/// period on the event loop: it is grown at start to two descriptors per
/// allowed connection plus 1,024, and again at a reload that raises the
/// limit (within the soft limit either way).
#[test]
fn the_descriptor_table_is_grown_at_start_and_at_a_reload_that_raises_the_limit() {
    let mut daemon = Daemon::binary("max_connections = 1000\n");
    let pid = daemon.pid();
    let soft = soft_nofile(pid);
    let table = status_figure(pid, "FDSize:");
    assert!(table >= soft.min(3024), "FDSize {table}, soft limit {soft}");

    std::fs::write(daemon.config_path(), "max_connections = 8000\n").unwrap();
    daemon.signal("HUP");
    daemon
        .wait_for_log(|l| l.contains("configuration reloaded"))
        .expect("the reload's line");
    let table = status_figure(pid, "FDSize:");
    assert!(
        table >= soft.min(17_024),
        "FDSize {table} after the reload, soft limit {soft}"
    );
}
