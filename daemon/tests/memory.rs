//! Memory against the real daemon: what a wave of clients took is given back
//! once most of the wave has left (glibc alone would keep it for reuse).

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{read_line, Daemon};

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
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
