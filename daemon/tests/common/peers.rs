//! Debian's programs as peers of the daemon in tests: a child process stopped
//! by PID when dropped, a root sshd and the ssh client, curl, and a small
//! HTTP backend.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process stopped (by PID) when dropped.
pub struct Peer(pub Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// HAProxy in the foreground with `config` (written to `dir`), stopped by
/// PID when dropped.
pub fn haproxy(dir: &Path, config: &str) -> Peer {
    super::require_program("haproxy", "-v", "haproxy");
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, config).expect("write haproxy.cfg");
    let child = Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start haproxy");
    Peer(child)
}

/// A port for a peer to listen on: below the kernel's ephemeral range, so
/// that no test's outgoing connection takes it between this call and the
/// peer's bind (a port from `bind(:0)` is an ephemeral one).
pub fn free_port() -> u16 {
    super::dns::free_port()
}

pub fn wait_for_port(port: u16) {
    let deadline = Instant::now() + super::PATIENCE;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An HTTP/1.0 server answering every request with `body`.
pub fn http_backend(body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut head = Vec::new();
            let mut byte = [0u8];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let response = format!(
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(response.as_bytes());
        }
    });
    port
}

pub fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A root sshd on a free port with a fresh host key, letting in one user key.
pub fn sshd(dir: &Path) -> (Peer, u16) {
    let port = free_port();
    for key in ["host", "user"] {
        let made = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(key))
            .status()
            .expect("run ssh-keygen");
        assert!(made.success());
    }
    std::fs::create_dir_all("/run/sshd").expect("sshd's privilege separation directory");
    let child = Command::new("/usr/sbin/sshd")
        .args(["-D", "-e", "-p", &port.to_string(), "-f", "/dev/null", "-h"])
        .arg(dir.join("host"))
        .arg("-o")
        .arg(format!(
            "AuthorizedKeysFile={}",
            dir.join("user.pub").display()
        ))
        .args([
            "-o",
            "PermitRootLogin=yes",
            "-o",
            "StrictModes=no",
            "-o",
            "UsePAM=no",
        ])
        .args(["-o", "ListenAddress=127.0.0.1", "-o", "PidFile=none"])
        .stderr(Stdio::null())
        .spawn()
        .expect("start sshd");
    wait_for_port(port);
    (Peer(child), port)
}

pub fn ssh(dir: &Path, extra: &[&str]) -> String {
    let out = Command::new("ssh")
        .arg("-i")
        .arg(dir.join("user"))
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"])
        .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
        .args(["-o", "ConnectTimeout=20"])
        .args(extra)
        .output()
        .expect("run ssh");
    assert!(
        out.status.success(),
        "ssh {extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
