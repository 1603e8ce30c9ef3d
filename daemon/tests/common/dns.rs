//! A real DNS server for the discovery tests: Debian's dnsmasq on loopback.

use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::PATIENCE;

/// dnsmasq on 127.0.0.1:`port`, answering from `hosts` (re-read on SIGHUP)
/// and the `--srv-host` lines it was started with, every answer with TTL 1 s.
pub struct Dnsmasq {
    child: Child,
    port: u16,
    hosts: PathBuf,
}

impl Dnsmasq {
    pub fn start(dir: &Path, port: u16, hosts: &str, srv: &[String]) -> Dnsmasq {
        Dnsmasq::start_with(dir, port, hosts, srv, &[])
    }

    /// [`Dnsmasq::start`] with more of dnsmasq's options: `--local=/test/`
    /// makes it answer NXDOMAIN for unknown names there (else REFUSED).
    pub fn start_with(
        dir: &Path,
        port: u16,
        hosts: &str,
        srv: &[String],
        extra: &[&str],
    ) -> Dnsmasq {
        super::require_program("dnsmasq", "--version", "dnsmasq-base");
        let path = dir.join("hosts");
        std::fs::write(&path, hosts).unwrap();
        let mut command = Command::new("dnsmasq");
        command
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
            ])
            .args([
                "--no-hosts",
                "--bind-interfaces",
                "--listen-address=127.0.0.1",
            ])
            .args(["--local-ttl=1", "--pid-file=", "--log-facility=-"])
            .arg(format!("--port={port}"))
            .arg(format!("--addn-hosts={}", path.display()));
        if super::is_root() {
            // Root would drop to `nobody`, who may not read the scratch dir.
            command.arg("--user=root");
        }
        for record in srv {
            command.arg(format!("--srv-host={record}"));
        }
        command.args(extra);
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dnsmasq");
        let dnsmasq = Dnsmasq {
            child,
            port,
            hosts: path,
        };
        dnsmasq.wait_until_answering();
        dnsmasq
    }

    /// Polls with a real query until dnsmasq answers.
    fn wait_until_answering(&self) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        // A query for the root's NS records: any answer will do.
        let query = [0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1];
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            let _ = socket.send_to(&query, ("127.0.0.1", self.port));
            if socket.recv(&mut [0u8; 512]).is_ok() {
                return;
            }
        }
        panic!("dnsmasq did not answer on port {}", self.port);
    }

    /// New A records: rewrite the hosts file and have dnsmasq re-read it.
    pub fn set_hosts(&self, hosts: &str) {
        std::fs::write(&self.hosts, hosts).unwrap();
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A UDP and TCP port free on 127.0.0.1 now, for dnsmasq: below the
/// kernel's ephemeral range (32768 and up), so that no client socket (the
/// daemon's own DNS queries among them) can take it while dnsmasq restarts on
/// it; spread by process and call so parallel tests do not pick the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let spread = (std::process::id() % 500) as u16 * 20;
    loop {
        let port = 20_000 + (spread + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000;
        let udp = UdpSocket::bind(("127.0.0.1", port));
        if udp.is_ok() && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
