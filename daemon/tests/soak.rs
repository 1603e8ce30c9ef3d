//! A bounded soak: 1,000 concurrent clients on random services with random
//! payloads, three reloads in the middle, every byte checked, and no descriptor
//! left behind. Also: the accept loop under descriptor exhaustion.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::Daemon;

const CLIENTS: u64 = 1000;

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(Iterator::count)
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn config(backend: std::net::SocketAddr, generation: u32) -> String {
    format!(
        "negotiation_timeout = \"20s\"\n\
         [service.relay]\nproxy = \"{backend}\"\n\
         [service.cat]\nexec = [\"/bin/cat\"]\nmax_instances = 200\n\
         [service.generation-{generation}]\nbuiltin = \"daytime\"\n"
    )
}

/// One client: a service chosen by `seed`, a payload, and the check of the reply.
fn client(addr: std::net::SocketAddr, seed: u64) -> Result<(), String> {
    let services = ["echo", "echo", "relay", "relay", "sometext", "cat"];
    let service = services[(seed % services.len() as u64) as usize];
    let len = 1 + (seed * 7919 % 60_000) as usize;
    let payload = common::random_bytes(seed, len);
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut request = format!("{service}\r\n").into_bytes();
    if service != "sometext" {
        request.extend_from_slice(&payload);
    }
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(&request);
        let _ = writer.shutdown(Shutdown::Write);
    });
    let mut reply = Vec::new();
    stream
        .read_to_end(&mut reply)
        .map_err(|e| format!("{service}: read: {e}"))?;
    let _ = sender.join();
    let body = reply.strip_prefix(b"+\r\n").ok_or_else(|| {
        format!(
            "{service}: no '+': {:?}",
            String::from_utf8_lossy(&reply[..reply.len().min(80)])
        )
    })?;
    let ok = match service {
        "sometext" => body.len() == 1_000_007,
        _ => body == payload.as_slice(),
    };
    ok.then_some(())
        .ok_or_else(|| format!("{service}: {} bytes back for {len}", body.len()))
}

#[test]
fn a_thousand_clients_three_reloads_no_byte_lost_no_descriptor_leaked() {
    let backend = common::echo_backend();
    let daemon = Daemon::binary(&config(backend, 0));
    let addr = daemon.addr;
    let fds_before = open_fds(daemon.pid());

    let started = Instant::now();
    // 1,000 clients at once (threads, each blocking on its own socket).
    let workers: Vec<_> = (0..CLIENTS)
        .map(|seed| std::thread::spawn(move || client(addr, seed)))
        .collect();
    // Each reload is waited for before the next: SIGHUPs that arrive
    // together are coalesced, as in every daemon.
    let reloaded = |l: &str| l.contains("configuration reloaded");
    for generation in 1..=3 {
        std::thread::sleep(Duration::from_millis(150));
        std::fs::write(daemon.config_path(), config(backend, generation)).unwrap();
        daemon.signal("HUP");
        let want = generation as usize;
        assert_eq!(daemon.wait_for_lines(want, reloaded), want);
    }
    let peak_rss = rss_kib(daemon.pid());
    let mut failures = Vec::new();
    for worker in workers {
        if let Err(e) = worker.join().unwrap() {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        failures.first()
    );

    // Every session closed: the descriptor count is back where it started.
    let deadline = Instant::now() + common::PATIENCE;
    while open_fds(daemon.pid()) > fds_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let fds_after = open_fds(daemon.pid());
    eprintln!(
        "soak: {CLIENTS} clients in {:.2} s, daemon RSS {} KiB at peak, fds {fds_before} before / {fds_after} after",
        started.elapsed().as_secs_f64(),
        peak_rss
    );
    assert_eq!(fds_after, fds_before, "descriptors leaked");
}

#[test]
fn out_of_descriptors_the_daemon_backs_off_and_recovers() {
    // A daemon limited to 48 descriptors, flooded with idle connections.
    let dir = common::scratch_dir();
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 48 && exec \"$0\" --listen 127.0.0.1:0")
        .arg(env!("CARGO_BIN_EXE_tcpmuxd"))
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let logs = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = std::sync::Arc::clone(&logs);
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().unwrap().push(line);
        }
    });
    let deadline = Instant::now() + common::PATIENCE;
    let addr = loop {
        let found = logs.lock().unwrap().iter().find_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("address="))
                .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
        });
        if let Some(addr) = found {
            break addr;
        }
        assert!(Instant::now() < deadline, "daemon did not start");
        std::thread::sleep(Duration::from_millis(10));
    };
    let idle: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    // Let the daemon hit EMFILE for a while.
    std::thread::sleep(Duration::from_millis(1000));
    let warnings = logs
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("accept failed"))
        .count();
    assert!(warnings >= 1, "never ran out of descriptors?");
    // A busy loop would log thousands of these per second; the backoff allows ~10.
    assert!(
        warnings < 100,
        "{warnings} accept failures logged in one second"
    );
    assert!(child.try_wait().unwrap().is_none(), "daemon died");
    // Free the descriptors: the daemon serves again.
    drop(idle);
    let deadline = Instant::now() + common::PATIENCE;
    loop {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
        stream.write_all(b"echo\r\nback").unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        if reply == b"+\r\nback" {
            break;
        }
        assert!(Instant::now() < deadline, "never recovered: {reply:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(dir);
}
