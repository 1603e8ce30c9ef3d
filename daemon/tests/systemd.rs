//! Running as a system service: dropping root after binding, systemd socket
//! activation (LISTEN_FDS) and readiness notices (NOTIFY_SOCKET).

use crate::common;

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
    // The next notice, past the descriptors offered to systemd's store.
    let next = || loop {
        let mut buf = [0u8; 256];
        let n = notify.recv(&mut buf).expect("a notice");
        let notice = String::from_utf8_lossy(&buf[..n]).into_owned();
        if !notice.starts_with("FDSTORE=1") {
            return notice;
        }
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

/// A notice and the descriptor that came with it, if any.
fn notice_with_fd(socket: &UnixDatagram) -> (String, Option<OwnedFd>) {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut buf = [0u8; 256];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        socket,
        &mut [std::io::IoSliceMut::new(&mut buf)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC,
    )
    .expect("a notice");
    let fd = ancillary.drain().find_map(|m| match m {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    });
    (String::from_utf8_lossy(&buf[..got.bytes]).into_owned(), fd)
}

#[test]
fn stores_its_sockets_with_systemd_and_feeds_the_watchdog() {
    let dir = common::scratch_dir();
    let path = dir.join("notify.sock");
    let notify = UnixDatagram::bind(&path).unwrap();
    notify.set_read_timeout(Some(common::PATIENCE)).unwrap();
    let daemon = Daemon::start_full(
        None,
        &[],
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            ("WATCHDOG_USEC", "200000"),
        ],
    );
    let (store, fd) = notice_with_fd(&notify);
    let name = daemon.addr.to_string().replace(':', "_");
    assert_eq!(store, format!("FDSTORE=1\nFDNAME={name}"));
    let stored = rustix::net::getsockname(fd.expect("the listening socket")).unwrap();
    assert!(
        format!("{stored:?}").contains(&daemon.addr.port().to_string()),
        "{stored:?}"
    );
    assert_eq!(notice_with_fd(&notify).0, "READY=1");
    // Half of WATCHDOG_USEC: a keep-alive every 100 ms.
    assert_eq!(notice_with_fd(&notify).0, "WATCHDOG=1");
    assert_eq!(notice_with_fd(&notify).0, "WATCHDOG=1");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sockets_passed_by_name_get_their_listeners_options() {
    let (private, public) = (
        TcpListener::bind("127.0.0.1:0").unwrap(),
        TcpListener::bind("127.0.0.1:0").unwrap(),
    );
    let (private_addr, public_addr) = (private.local_addr().unwrap(), public.local_addr().unwrap());
    let dir = common::scratch_dir();
    let config = dir.join("named.toml");
    std::fs::write(
        &config,
        "listen = [{ address = \"127.0.0.1:1\", name = \"private\", detect = true, ssh = \"echo\" }]\n",
    )
    .unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("exec 3<&0 4>&1 </dev/null >/dev/null; LISTEN_PID=$$ LISTEN_FDS=2 LISTEN_FDNAMES=private:public exec \"$0\" --config \"$1\"")
        .arg(env!("CARGO_BIN_EXE_tcpmuxd"))
        .arg(&config)
        .stdin(Stdio::from(OwnedFd::from(private)))
        .stdout(Stdio::from(OwnedFd::from(public)))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    log.read_line(&mut line).unwrap();
    std::thread::spawn(move || for _ in log.lines() {});
    let exchange = |addr, request: &[u8]| {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
        stream.write_all(request).unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        read_all(&mut stream)
    };
    // The socket named "private" detects SSH; the other reads a TCPMUX name.
    assert_eq!(exchange(private_addr, b"SSH-2.0-x\r\n"), b"SSH-2.0-x\r\n");
    assert!(exchange(public_addr, b"SSH-2.0-x\r\n").starts_with(b"-unknown service ssh-2.0-x"));
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(dir);
}
