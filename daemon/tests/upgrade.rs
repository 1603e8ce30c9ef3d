//! Binary upgrades: `tcpmuxd --upgrade` takes the running daemon's sockets,
//! serves on them, and the old one drains and exits; no client is refused in
//! between, and a session running on the old daemon finishes there.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::successor::{free_address, Successor};
use common::{read_all, read_line, Daemon};

#[test]
fn upgrades_refuse_no_client_and_let_running_sessions_finish() {
    let dir = common::scratch_dir();
    let addr = free_address(101);
    let mut old = Daemon::binary(&format!(
        "listen = [\"{addr}\"]\nupgrade_socket = \"{}\"\nshutdown_grace = \"20s\"\n",
        dir.join("upgrade.sock").display()
    ));
    let config = old.config_path();

    // Clients connect all along; each must be served by one daemon or the other.
    let stop = Arc::new(AtomicBool::new(false));
    let (served, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = {
        let (stop, served, failed, addr) =
            (stop.clone(), served.clone(), failed.clone(), addr.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let ok = TcpStream::connect(&addr).is_ok_and(|mut s| {
                    s.set_read_timeout(Some(common::PATIENCE)).unwrap();
                    s.write_all(b"daytime\r\n").is_ok() && read_all(&mut s).starts_with(b"+\r\n")
                });
                let counter = if ok { &served } else { &failed };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    // A session on the old daemon, open across the upgrade.
    let mut running = old.connect();
    running.write_all(b"echo\r\n").unwrap();
    assert_eq!(read_line(&mut running), b"+\r\n");

    let first = Successor::start(&config);
    first.wait_for_log("took over from the running daemon");
    old.wait_for_log(|l| l.contains("the new daemon serves"))
        .expect("the old daemon hands over");
    // The old daemon still serves its session, then exits by itself.
    running.write_all(b"finished on the old one").unwrap();
    running.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut running), b"finished on the old one");
    let status = old.wait_exit().expect("the old daemon exits");
    assert!(status.success(), "{status:?}");

    // And again: the successor handed its upgrade socket on too.
    let second = Successor::start(&config);
    second.wait_for_log("took over from the running daemon");
    first.wait_for_log("the new daemon serves");
    let mut first = first;
    let deadline = Instant::now() + common::PATIENCE;
    while first.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the first successor did not exit"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    let (served, failed) = (
        served.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    assert!(
        served > 0 && failed == 0,
        "{served} served, {failed} failed"
    );
    assert!(TcpStream::connect(&addr).is_ok(), "the last daemon serves");
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_upgrade_with_nobody_to_take_over_from_says_so() {
    let dir = common::scratch_dir();
    let config = dir.join("c.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"127.0.0.1:0\"]\nupgrade_socket = \"{}\"\n",
            dir.join("none.sock").display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .arg("--config")
        .arg(&config)
        .arg("--upgrade")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no running tcpmuxd at") && stderr.contains("none.sock"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn handoff_backends_keep_their_registrations_across_an_upgrade() {
    let dir = common::scratch_dir();
    let control = dir.join("handoff.sock");
    let mut old = Daemon::binary(&format!(
        "upgrade_socket = \"{}\"\nhandoff_socket = \"{}\"\n[service.app]\nhandoff = {{ uid = [{}] }}\n",
        dir.join("upgrade.sock").display(),
        control.display(),
        common::my_uid()
    ));
    // Registered once, with the old daemon.
    let mut backend = Command::new(common::example_binary("handoff_backend"))
        .arg(&control)
        .arg("app")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut registered = String::new();
    BufReader::new(backend.stdout.take().unwrap())
        .read_line(&mut registered)
        .unwrap();
    assert_eq!(registered.trim(), "registered app");

    // The harness passed --listen to the old daemon; the successor reads the
    // file, whose default listen differs: give it the same address.
    let config = old.config_path();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("listen = [\"{}\"]\n{text}", old.addr)).unwrap();
    let successor = Successor::start(&config);
    successor.wait_for_log("took over from the running daemon");
    assert!(old.wait_exit().is_some_and(|s| s.success()));

    // Served by the same backend process, through the new daemon.
    let mut stream = TcpStream::connect(old.addr).unwrap();
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    stream.write_all(b"app\r\n").unwrap();
    assert_eq!(read_line(&mut stream), b"+\r\n");
    let greeting = String::from_utf8(read_line(&mut stream)).unwrap();
    assert!(
        greeting.starts_with(&format!("hello from pid {}:", backend.id())),
        "{greeting}"
    );
    drop(successor);
    let _ = backend.kill();
    let _ = backend.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Counts of a load run: exchanges that went right and ones that did not.
#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    failed: AtomicUsize,
    first_failure: Mutex<Option<String>>,
}

impl Tally {
    fn record(&self, result: Result<(), String>) {
        match result {
            Ok(()) => drop(self.ok.fetch_add(1, Ordering::Relaxed)),
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.first_failure.lock().unwrap().get_or_insert(e);
            }
        }
    }
}

#[test]
fn a_changed_upgrade_socket_is_applied_on_reload() {
    let dir = common::scratch_dir();
    let (first, second) = (dir.join("first.sock"), dir.join("second.sock"));
    let config = |socket: &std::path::Path| {
        format!(
            "listen = [\"127.0.0.1:0\"]\nupgrade_socket = \"{}\"\n",
            socket.display()
        )
    };
    let mut old = Daemon::binary(&config(&first));
    std::fs::write(old.config_path(), config(&second)).unwrap();
    old.signal("HUP");
    old.wait_for_log(|l| l.contains("upgrade socket") && l.contains("second.sock"))
        .expect("the new upgrade socket is served");
    old.wait_for_log(|l| l.contains("upgrade socket closed") && l.contains("first.sock"))
        .expect("the old one is closed");
    assert!(!first.exists(), "the old socket file is removed");
    // A successor finds the daemon at the new path and takes over.
    let successor = Successor::start(&old.config_path());
    successor.wait_for_log("took over from the running daemon");
    assert!(
        old.wait_exit().is_some_and(|s| s.success()),
        "the old daemon exits"
    );
}

#[test]
fn the_successor_tells_systemd_it_is_the_main_process() {
    use std::os::unix::net::UnixDatagram;
    let dir = common::scratch_dir();
    let path = dir.join("notify.sock");
    let notify = UnixDatagram::bind(&path).unwrap();
    notify.set_read_timeout(Some(common::PATIENCE)).unwrap();
    let notices = || -> Vec<String> {
        let mut all = Vec::new();
        let mut buf = [0u8; 512];
        notify.set_nonblocking(true).unwrap();
        while let Ok(n) = notify.recv(&mut buf) {
            all.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        notify.set_nonblocking(false).unwrap();
        all
    };
    let envs = [("NOTIFY_SOCKET", path.to_str().unwrap())];
    let socket = dir.join("upgrade.sock");
    let mut old = Daemon::start_full(
        Some(&format!(
            "listen = [\"127.0.0.1:0\"]\nupgrade_socket = \"{}\"\n",
            socket.display()
        )),
        &[],
        &envs,
    );
    let successor = Successor::start_with_env(&old.config_path(), &envs);
    successor.wait_for_log("took over from the running daemon");
    assert!(
        old.wait_exit().is_some_and(|s| s.success()),
        "the old daemon exits"
    );
    // Every notice of the old daemon is queued by now (it has exited); the
    // successor's READY comes once it serves.
    let main_pid = format!("MAINPID={}\nREADY=1", successor.child.id());
    let deadline = Instant::now() + common::PATIENCE;
    let mut seen = Vec::new();
    while !seen.contains(&main_pid) && Instant::now() < deadline {
        seen.extend(notices());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(seen.contains(&main_pid), "{seen:?}");
    // The service goes on in the successor: the old one must not say STOPPING.
    assert!(!seen.iter().any(|n| n.contains("STOPPING=1")), "{seen:?}");
}

#[test]
fn a_stalled_upgrade_peer_holds_up_no_signal() {
    let dir = common::scratch_dir();
    let socket = dir.join("upgrade.sock");
    let mut daemon = Daemon::binary(&format!(
        "upgrade_socket = \"{}\"\nshutdown_grace = \"3s\"\n",
        socket.display()
    ));
    // A peer that connects and says nothing: the exchange waits for it, the
    // daemon does not. A reload is applied at once.
    let _silent = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    daemon
        .wait_for_log(|l| l.contains("a successor connected"))
        .expect("the exchange started");
    let asked = Instant::now();
    daemon.signal("HUP");
    daemon
        .wait_for_log(|l| l.contains("configuration reloaded"))
        .expect("reloaded while the peer is silent");
    let reload = asked.elapsed();
    // Until the request times out and the next peer is served: it asks for
    // the sockets and never says READY. SIGTERM still stops the daemon.
    let mut stalled = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    stalled.write_all(b"UPGRADE\n").unwrap();
    let mut frame = [0u8; 512];
    std::io::Read::read_exact(&mut stalled, &mut frame).expect("the first frame comes");
    let asked = Instant::now();
    daemon.signal("TERM");
    let status = daemon.wait_exit().expect("exits");
    let stop = asked.elapsed();
    assert!(status.success(), "{status:?}");
    // Before, each waited for the exchange: up to 30 s. The bound is loose for
    // a busy machine; what matters is that neither waits for the peer.
    assert!(
        reload < Duration::from_secs(2),
        "the reload took {reload:?}"
    );
    assert!(stop < Duration::from_secs(2), "SIGTERM took {stop:?}");
}

fn echo_once(addr: &str, seed: u64) -> Result<(), String> {
    let payload = common::random_bytes(seed, 2000);
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    let mut request = b"echo\r\n".to_vec();
    request.extend_from_slice(&payload);
    let reply = common::send_and_receive(&mut stream, request);
    (reply.len() == payload.len() + 3 && reply[3..] == payload[..])
        .then_some(())
        .ok_or_else(|| format!("echo: {} bytes back for {}", reply.len(), payload.len()))
}

fn relay_once(addr: &str, seed: u64) -> Result<(), String> {
    let payload = common::random_bytes(seed, 1 << 20);
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    let mut request = b"relay\r\n".to_vec();
    request.extend_from_slice(&payload);
    let reply = common::send_and_receive(&mut stream, request);
    (reply.len() == payload.len() + 3 && reply[3..] == payload[..])
        .then_some(())
        .ok_or_else(|| format!("relay: {} bytes back for {}", reply.len(), payload.len()))
}

fn sometext_once(addr: &str) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    stream
        .write_all(b"sometext\r\n")
        .map_err(|e| e.to_string())?;
    let reply = read_all(&mut stream);
    (reply.len() == 3 + 1_000_007)
        .then_some(())
        .ok_or_else(|| format!("sometext: {} bytes", reply.len()))
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

fn hup(pid: u32) {
    let status = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn five_upgrades_and_five_reloads_under_load_lose_nothing() {
    let dir = common::scratch_dir();
    let (main, extra) = (free_address(102), free_address(103));
    let backend = common::echo_backend();
    let config = |with_extra: bool| {
        let listen = if with_extra {
            format!("\"{main}\", \"{extra}\"")
        } else {
            format!("\"{main}\"")
        };
        format!(
            "listen = [{listen}]\nupgrade_socket = \"{}\"\nshutdown_grace = \"20s\"\n\
             [service.relay]\nproxy = \"{backend}\"\n",
            dir.join("upgrade.sock").display()
        )
    };
    let mut first = Daemon::binary(&config(false));
    let path = first.config_path();
    let baseline = open_fds(first.pid());

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut load = Vec::new();
    // Short echo exchanges at a steady rate, and long relayed and sometext
    // transfers all along; each checked byte for byte.
    for kind in 0..4u64 {
        let (stop, tally, main) = (stop.clone(), tally.clone(), main.clone());
        load.push(std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(90);
            let mut seed = kind << 32;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                seed += 1;
                tally.record(match kind {
                    0 | 1 => echo_once(&main, seed),
                    2 => relay_once(&main, seed),
                    _ => sometext_once(&main),
                });
                if kind < 2 {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }));
    }

    let mut old_pid = first.pid();
    let mut previous: Option<Successor> = None;
    for round in 1..=5 {
        // A reload that adds the extra address (odd rounds) or removes it.
        std::fs::write(&path, config(round % 2 == 1)).unwrap();
        hup(old_pid);
        let deadline = Instant::now() + common::PATIENCE;
        let expect_open = round % 2 == 1;
        while TcpStream::connect(&extra).is_ok() != expect_open {
            assert!(
                Instant::now() < deadline,
                "round {round}: the reload did not apply"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // An upgrade: the successor takes over, the old daemon drains and exits.
        let next = Successor::start(&path);
        next.wait_for_log("took over from the running daemon");
        let exited = match previous.take() {
            None => first.wait_exit().is_some_and(|s| s.success()),
            Some(mut old) => {
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    if let Some(status) = old.child.try_wait().unwrap() {
                        break status.success();
                    }
                    if Instant::now() > deadline {
                        break false;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        assert!(exited, "round {round}: the old daemon did not exit 0");
        old_pid = next.child.id();
        previous = Some(next);
    }
    stop.store(true, Ordering::Relaxed);
    for thread in load {
        thread.join().unwrap();
    }
    let (ok, failed) = (
        tally.ok.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
    );
    eprintln!(
        "upgrade load: {ok} exchanges checked, {failed} failed, across 5 upgrades and 5 reloads"
    );
    assert!(
        failed == 0 && ok > 100,
        "{ok} ok, {failed} failed, first: {:?}",
        tally.first_failure.lock().unwrap()
    );
    // The last daemon, idle again, holds what the first one held at start,
    // plus the extra address's listener, the duplicate it keeps of it for a
    // successor and its accept loop's set of answered clients (net/lingering.rs):
    // nothing leaked across the upgrades and sessions.
    let last = previous.expect("a successor");
    let expected = baseline + 3;
    let deadline = Instant::now() + common::PATIENCE;
    while open_fds(last.child.id()) > expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let fds = open_fds(last.child.id());
    assert_eq!(fds, expected, "baseline {baseline}");
    drop(last);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A UDP backend that answers each datagram with the address it came from
/// (the daemon's flow socket) and the datagram.
fn udp_backend_naming_its_peer() -> std::net::SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((len, from)) = socket.recv_from(&mut buf) {
            let mut reply = format!("{from} ").into_bytes();
            reply.extend_from_slice(&buf[..len]);
            let _ = socket.send_to(&reply, from);
        }
    });
    addr
}

/// A UDP flow goes on in the successor on its own backend socket: the
/// backend sees the same source port before and after the upgrade (a
/// WireGuard or OpenVPN server would otherwise see its peer move), the
/// flow keeps its row in `show sessions`, and the successor does not count
/// it as a new flow.
#[test]
fn udp_flows_keep_their_backend_socket_across_an_upgrade() {
    let dir = common::scratch_dir();
    let backend = udp_backend_naming_its_peer();
    let addr = free_address(104);
    let mut old = Daemon::binary(&format!(
        "listen = [{{ address = \"{addr}\", udp = true, udp_default = \"vpn\" }}]\n\
         upgrade_socket = \"{}\"\nadmin_socket = \"{}\"\n[service.vpn]\nproxy_udp = \"{backend}\"\n",
        dir.join("upgrade.sock").display(),
        dir.join("admin.sock").display()
    ));
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(common::PATIENCE)).unwrap();
    let ask = |text: &str| {
        client.send_to(text.as_bytes(), &addr).unwrap();
        let mut buf = [0u8; 2048];
        let len = client.recv(&mut buf).expect("a reply");
        let reply = String::from_utf8_lossy(&buf[..len]).into_owned();
        let (seen_from, echoed) = reply.split_once(' ').expect("PEER TEXT");
        assert_eq!(echoed, text);
        seen_from.to_owned()
    };
    let before = ask("before");
    let successor = Successor::start(&old.config_path());
    successor.wait_for_log("took over from the running daemon");
    successor.wait_for_log("UDP flows taken over");
    let status = old.wait_exit().expect("the old daemon exits");
    assert!(status.success(), "{status:?}");
    assert_eq!(ask("after"), before, "the backend saw the flow move");
    let sessions = common::admin_ok(&dir.join("admin.sock"), "--json show sessions vpn");
    let reply: serde_json::Value = serde_json::from_str(&sessions).expect("JSON");
    let rows = reply["sessions"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{reply}");
    assert_eq!(rows[0]["udp"], true, "{reply}");
    let mut stats = TcpStream::connect(&addr).unwrap();
    stats.write_all(b"stats\r\n").unwrap();
    let stats = String::from_utf8(read_all(&mut stats)).unwrap();
    assert!(stats.contains("tcpmuxd_udp_flows 1\n"), "{stats}");
    assert!(
        !stats.contains("tcpmuxd_udp_flows_total{service=\"vpn\""),
        "{stats}"
    );
}
