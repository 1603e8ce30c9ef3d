//! The hostile-client matrix: every listener kind against every way a client
//! can misbehave at the start of a connection (silence, each kind of opening
//! cut short and then FIN, RST or a stall, one byte at a time, oversize,
//! garbage). Throughout, a `daytime` probe on another listener must keep
//! answering; afterwards every hostile connection has ended, the daemon's CPU
//! time is bounded, its descriptors are back to the baseline, and SIGTERM
//! stops it within `shutdown_grace`. One client that sent `G` and half-closed
//! once froze the whole daemon; this is the test that would have caught it.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::pki::Ca;
use common::{random_bytes, Daemon, PATIENCE};
use tcpmux_proto::proxy_header::{self, Version};
use tcpmux_proto::sniff::client_hello::build;

/// Short, so the stalls end quickly; each stalled connection must end by it.
const NEGOTIATION_TIMEOUT: Duration = Duration::from_secs(1);
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// The slowest answer the probe may get while the matrix runs.
const PROBE_LIMIT: Duration = Duration::from_millis(500);
/// The daemon's CPU time over the whole matrix, 10x what it measured once
/// fixed (0.22 to 0.23 s for its 675 hostile connections, debug build).
const CPU_LIMIT: Duration = Duration::from_millis(2300);

/// The listener kinds under test, each on an address of its own.
const KINDS: [(&str, &str); 5] = [
    ("plain", "127.0.0.2"),
    ("detect", "127.0.0.3"),
    ("tls", "127.0.0.4"),
    ("proxy", "127.0.0.5"),
    ("tls+detect", "127.0.0.6"),
];

fn config(ca: &Ca) -> String {
    let leaf = ca.server("server", 2);
    let backend = common::echo_backend();
    format!(
        "negotiation_timeout = \"{}ms\"\nshutdown_grace = \"{}ms\"\n\
         listen = [\"127.0.0.1:0\", \"127.0.0.2:0\",\n\
         {{ address = \"127.0.0.3:0\", detect = true, ssh = \"daytime\", http = \"web\",\n\
            openvpn = \"relay\", xmpp = \"relay\", socks = \"relay\", postgres = \"relay\",\n\
            rdp = \"relay\", match = [{{ regex = 'anywhere', service = \"relay\" }}] }},\n\
         {{ address = \"127.0.0.4:0\", tls = {{ cert = \"{}\", key = \"{}\" }} }},\n\
         {{ address = \"127.0.0.5:0\", accept_proxy_from = [\"127.0.0.0/8\"] }},\n\
         {{ address = \"127.0.0.6:0\", detect = true, ssh = \"daytime\", http = \"web\",\n\
            tls = {{ cert = \"{}\", key = \"{}\" }} }}]\n\
         [service.web]\nproxy = \"{backend}\"\nsni = [\"db.example.com\"]\n\
         http_host = [\"app.example.com\"]\n\
         # The probes route on a few bytes: a client that stalls after them is\n\
         # a relayed one, ended by the idle timeout as an operator would set.\n\
         [service.relay]\nproxy = \"{backend}\"\nidle_timeout = \"2s\"\n",
        NEGOTIATION_TIMEOUT.as_millis(),
        SHUTDOWN_GRACE.as_millis(),
        leaf.cert.display(),
        leaf.key.display(),
        leaf.cert.display(),
        leaf.key.display()
    )
}

/// Valid openings of every protocol a listener may read first.
fn openings() -> Vec<(&'static str, Vec<u8>)> {
    let source = SocketAddr::from(([10, 1, 2, 3], 4000));
    let destination = SocketAddr::from(([127, 0, 0, 5], 1));
    vec![
        ("tcpmux", b"echo\r\n".to_vec()),
        (
            "proxy-v1",
            proxy_header::encode(Version::V1, Some(source), Some(destination)),
        ),
        (
            "proxy-v2",
            proxy_header::encode(Version::V2, Some(source), Some(destination)),
        ),
        (
            "client-hello",
            build(Some("db.example.com"), &["h2"], 600, 16384),
        ),
        (
            "http",
            b"GET / HTTP/1.1\r\nHost: app.example.com\r\n\r\n".to_vec(),
        ),
        ("ssh", b"SSH-2.0-OpenSSH_9.2p1\r\n".to_vec()),
        (
            "openvpn",
            b"\x00\x0e\x38\x1f\x2e\x3d\x4c\x5b\x6a\x79\x88\x00\x00\x00\x00\x00".to_vec(),
        ),
        (
            "xmpp",
            b"<?xml version='1.0'?><stream:stream to='example.com' xmlns='jabber:client'>".to_vec(),
        ),
        ("socks5", b"\x05\x02\x00\x01".to_vec()),
        ("postgres", b"\x00\x00\x00\x08\x04\xd2\x16\x2f".to_vec()),
        (
            "rdp",
            b"\x03\x00\x00\x0b\x06\xe0\x00\x00\x00\x00\x00".to_vec(),
        ),
        ("match", b"\x01 what goes anywhere".to_vec()),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Fin,
    Rst,
    Stall,
}

/// One hostile client: what it sends, and how it stops.
#[derive(Clone, Debug)]
struct Hostile {
    what: String,
    bytes: Vec<u8>,
    ending: Ending,
    byte_at_a_time: bool,
}

fn behaviours() -> Vec<Hostile> {
    let hostile = |what: String, bytes: Vec<u8>, ending| Hostile {
        what,
        bytes,
        ending,
        byte_at_a_time: false,
    };
    let mut all = vec![hostile("nothing".into(), Vec::new(), Ending::Stall)];
    for (name, opening) in openings() {
        // Every class of proper prefix: its first byte, its middle, all but
        // its last byte.
        let mut cuts = vec![1, opening.len() / 2, opening.len() - 1];
        cuts.dedup();
        for cut in cuts {
            for ending in [Ending::Fin, Ending::Rst, Ending::Stall] {
                let what = format!("{name}[..{cut}] then {ending:?}");
                all.push(hostile(what, opening[..cut].to_vec(), ending));
            }
        }
        all.push(Hostile {
            what: format!("{name} one byte at a time"),
            bytes: opening,
            ending: Ending::Fin,
            byte_at_a_time: true,
        });
    }
    let mut huge_head = b"GET / HTTP/1.1\r\nHost: app.example.com\r\nX: ".to_vec();
    huge_head.resize(20_000, b'a');
    let mut huge_v2 = proxy_header::encode(Version::V2, None, None);
    huge_v2[14..16].copy_from_slice(&60_000u16.to_be_bytes());
    let oversize = [
        ("oversize name", vec![b'a'; 100_000]),
        (
            "oversize ClientHello",
            build(Some("a.example"), &[], 70_000, 16384),
        ),
        (
            "oversize SNI",
            build(Some(&"a".repeat(60_000)), &[], 0, 16384),
        ),
        ("oversize HTTP head", huge_head),
        ("oversize PROXY v2", huge_v2),
    ];
    for (what, bytes) in oversize {
        all.push(hostile(what.into(), bytes.clone(), Ending::Fin));
        all.push(hostile(format!("{what} then stall"), bytes, Ending::Stall));
    }
    for seed in 1..=4 {
        let bytes = random_bytes(seed, 4096);
        all.push(hostile(format!("garbage {seed}"), bytes, Ending::Fin));
    }
    all
}

/// How one hostile connection went, from the client's side.
struct Run {
    label: String,
    client: SocketAddr,
    ending: Ending,
    /// Whether the daemon ended the connection (EOF or reset) within PATIENCE.
    ended: bool,
    /// What the daemon sent.
    reply: Vec<u8>,
}

fn run_one(kind: &str, target: SocketAddr, hostile: &Hostile) -> Run {
    let label = format!("{kind}: {}", hostile.what);
    let mut stream = TcpStream::connect(target).unwrap_or_else(|e| panic!("{label}: {e}"));
    let client = stream.local_addr().expect("local address");
    stream.set_nodelay(true).expect("nodelay");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    stream.set_write_timeout(Some(PATIENCE)).expect("timeout");
    // The daemon may refuse and close before everything is sent: fine.
    let _ = if hostile.byte_at_a_time {
        hostile.bytes.chunks(1).try_for_each(|b| {
            stream.write_all(b)?;
            std::thread::sleep(Duration::from_millis(1));
            Ok::<_, std::io::Error>(())
        })
    } else {
        stream.write_all(&hostile.bytes)
    };
    let mut reply = Vec::new();
    let ended = match hostile.ending {
        Ending::Rst => {
            socket2::SockRef::from(&stream)
                .set_linger(Some(Duration::ZERO))
                .expect("linger 0");
            drop(stream);
            true
        }
        Ending::Fin | Ending::Stall => {
            if hostile.ending == Ending::Fin {
                let _ = stream.shutdown(Shutdown::Write);
            }
            read_to_end(&mut stream, &mut reply)
        }
    };
    Run {
        label,
        client,
        ending: hostile.ending,
        ended,
        reply,
    }
}

/// Reads until the daemon closes (true) or PATIENCE runs out (false).
fn read_to_end(stream: &mut TcpStream, reply: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }
}

/// Asks for `daytime` on `addr` every 50 ms until `stop`; the slowest answer
/// and any failure.
fn probe(addr: SocketAddr, stop: Arc<AtomicBool>) -> (Duration, u32, Vec<String>) {
    let (mut slowest, mut count, mut failures) = (Duration::ZERO, 0, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let answer = TcpStream::connect(addr).and_then(|mut stream| {
            stream.set_read_timeout(Some(PATIENCE))?;
            stream.write_all(b"daytime\r\n")?;
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer)?;
            Ok(answer)
        });
        let took = started.elapsed();
        match answer {
            Ok(answer) if answer.starts_with(b"+") => {}
            other => failures.push(format!("{other:?} after {took:?}")),
        }
        slowest = slowest.max(took);
        count += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    (slowest, count, failures)
}

fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the parenthesized command: utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse().expect("number"))
        .collect();
    let ticks = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100u64);
    Duration::from_secs_f64((fields[0] + fields[1]) as f64 / ticks as f64)
}

fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The address each listener logged, by its IP.
fn listeners(daemon: &mut Daemon) -> Vec<SocketAddr> {
    let mut addrs = Vec::new();
    for ip in ["127.0.0.1"].iter().chain(KINDS.iter().map(|(_, ip)| ip)) {
        let line = daemon
            .wait_for_log(|l| l.contains(" listening ") && l.contains(&format!("address={ip}:")))
            .unwrap_or_else(|| panic!("no listener on {ip}: {:?}", daemon.logs()));
        let addr = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("address="))
            .and_then(|a| a.parse().ok())
            .expect("an address");
        addrs.push(addr);
    }
    addrs
}

#[test]
fn no_hostile_client_stops_the_daemon_or_outlives_its_timeout() {
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "hostile CA");
    let mut daemon = Daemon::binary(&config(&ca));
    let addrs = listeners(&mut daemon);
    let pid = daemon.pid();
    let (fds_before, cpu_before) = (descriptors(pid), cpu_time(pid));

    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let (addr, stop) = (addrs[0], Arc::clone(&stop));
        std::thread::spawn(move || probe(addr, stop))
    };
    let runs = Arc::new(Mutex::new(Vec::new()));
    let all = behaviours();
    // Every client of every listener at once.
    let mut clients = Vec::new();
    for ((kind, _), target) in KINDS.iter().zip(&addrs[1..]) {
        for hostile in all.clone() {
            let (runs, target, kind) = (Arc::clone(&runs), *target, *kind);
            clients.push(std::thread::spawn(move || {
                let run = run_one(kind, target, &hostile);
                runs.lock().expect("runs").push(run);
            }));
        }
    }
    for client in clients {
        client.join().expect("a client thread");
    }
    stop.store(true, Ordering::Relaxed);
    let (slowest, probes, failures) = prober.join().expect("the probe");
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    eprintln!(
        "{} hostile connections; probe: {probes} answers, slowest {slowest:?}; daemon CPU {cpu:?}",
        runs.lock().expect("runs").len()
    );
    assert!(failures.is_empty(), "the probe failed: {failures:?}");
    assert!(slowest < PROBE_LIMIT, "a probe answer took {slowest:?}");
    assert!(cpu < CPU_LIMIT, "the daemon used {cpu:?} of CPU");

    let runs = std::mem::take(&mut *runs.lock().expect("runs"));
    for run in &runs {
        assert!(run.ended, "{}: the daemon never closed it", run.label);
        // A client that ended its side is answered at once, never after the
        // negotiation timeout (which only a stall may reach).
        let reply = String::from_utf8_lossy(&run.reply);
        if run.ending == Ending::Fin {
            assert!(!reply.contains("timeout"), "{}: {reply}", run.label);
        }
    }
    for run in runs.iter().filter(|r| r.ending != Ending::Stall) {
        let client = run.client.to_string();
        let line = daemon
            .wait_for_log(|l| {
                l.contains("connection")
                    && (l.contains(&format!("peer={client} "))
                        || l.contains(&format!("via={client} ")))
            })
            .unwrap_or_else(|| panic!("{}: no log line", run.label));
        assert!(
            !line.contains("negotiation timeout"),
            "{}: {line}",
            run.label
        );
    }

    let deadline = Instant::now() + PATIENCE;
    while descriptors(pid) > fds_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        descriptors(pid),
        fds_before,
        "descriptors back to the baseline"
    );

    let signalled = Instant::now();
    daemon.signal("TERM");
    let status = daemon.wait_exit().expect("exits after SIGTERM");
    assert!(status.success(), "{status:?}");
    let took = signalled.elapsed();
    assert!(took < SHUTDOWN_GRACE, "SIGTERM took {took:?}");
}
