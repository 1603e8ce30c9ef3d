//! Running as a system service: dropping root after binding, systemd socket
//! activation (LISTEN_FDS) and readiness notices (NOTIFY_SOCKET).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{read_all, Daemon};

#[test]
#[ignore = "needs root (to bind port 1 and switch users)"]
fn binds_as_root_then_runs_as_the_configured_user() {
    common::require_root();
    // RFC 1078's own port, which only root may bind.
    let daemon = Daemon::binary(
        "listen = [\"127.0.0.1:1\"]\nuser = \"nobody\"\n[service.who]\nexec = [\"/usr/bin/id\", \"-u\"]\n",
    );
    assert_eq!(daemon.addr.port(), 1);
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid_line.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["65534"; 4],
        "{uid_line}"
    );
    let groups = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
    assert_eq!(
        groups.trim_end(),
        "Groups:",
        "supplementary groups kept: {groups}"
    );
    // It still serves, and what it runs runs as that user too.
    assert_eq!(daemon.exchange(b"who\r\n"), b"+\r\n65534\n");
}

#[test]
fn serves_on_a_socket_passed_by_systemd() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // systemd passes its sockets from fd 3 on, with LISTEN_PID naming the process:
    // the shell moves the listener from stdin to fd 3 and execs with its own pid.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("exec 3<&0 </dev/null; LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\"")
        .arg(env!("CARGO_BIN_EXE_tcpmuxd"))
        .stdin(Stdio::from(OwnedFd::from(listener)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    log.read_line(&mut line).unwrap();
    assert!(
        line.contains(&format!("listening address={addr}")),
        "{line}"
    );
    std::thread::spawn(move || for _ in log.lines() {});
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    stream.write_all(b"echo\r\nactivated").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut stream), b"+\r\nactivated");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn tells_systemd_when_ready_reloading_and_stopping() {
    let dir = common::scratch_dir();
    let path = dir.join("notify.sock");
    let notify = UnixDatagram::bind(&path).unwrap();
    notify.set_read_timeout(Some(common::PATIENCE)).unwrap();
    let next = || {
        let mut buf = [0u8; 256];
        let n = notify.recv(&mut buf).expect("a notice");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let mut daemon = Daemon::start_full(
        Some("[service.x]\nbuiltin = \"echo\"\n"),
        &[],
        &[("NOTIFY_SOCKET", path.to_str().unwrap())],
    );
    assert_eq!(next(), "READY=1");
    daemon.signal("HUP");
    let reloading = next();
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading:?}"
    );
    assert_eq!(next(), "READY=1");
    daemon.signal("TERM");
    assert_eq!(next(), "STOPPING=1");
    assert!(daemon.wait_exit().is_some());
    std::thread::sleep(Duration::from_millis(10));
    let _ = std::fs::remove_dir_all(dir);
}
