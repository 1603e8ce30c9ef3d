//! A three-member etcd cluster on loopback ports, for the fleet's tests:
//! started by the test (Debian's etcd-server), a member stopped and started
//! again by PID, everything stopped and removed on drop.

use std::process::{Child, Command, Stdio};
use std::time::Instant;

use super::dns::free_port;
use super::{scratch_dir, Scratch, PATIENCE};

pub struct Etcd {
    dir: Scratch,
    /// Each member's client and peer port.
    ports: Vec<(u16, u16)>,
    members: Vec<Option<Child>>,
}

impl Etcd {
    /// Three members, once a write through each succeeds.
    pub fn cluster() -> Etcd {
        super::require_program("etcd", "--version", "etcd-server");
        super::require_program("etcdctl", "version", "etcd-client");
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let mut etcd = Etcd {
            dir: scratch_dir(),
            ports,
            members: vec![None, None, None],
        };
        for i in 0..3 {
            etcd.start(i);
        }
        for i in 0..3 {
            etcd.wait_writable(i);
        }
        etcd
    }

    /// The client URLs.
    fn urls(&self) -> Vec<String> {
        let url = |(client, _): &(u16, u16)| format!("http://127.0.0.1:{client}");
        self.ports.iter().map(url).collect()
    }

    /// The client URLs, as a TOML array's items.
    pub fn endpoints_toml(&self) -> String {
        let quoted: Vec<String> = self.urls().iter().map(|u| format!("\"{u}\"")).collect();
        quoted.join(", ")
    }

    /// `cluster = { ... }` for an instance `node` under `prefix`, with the
    /// secret file in `dir` ([`secret`]).
    pub fn cluster_line(&self, dir: &std::path::Path, prefix: &str, node: &str) -> String {
        format!(
            "cluster = {{ etcd = [{}], prefix = \"{prefix}\", node = \"{node}\", secret = \"{}\", cache = \"{}\" }}\n",
            self.endpoints_toml(),
            secret(dir).display(),
            dir.join(format!("fleet-{node}")).display(),
        )
    }

    fn endpoints(&self) -> String {
        self.urls().join(",")
    }

    /// Starts member `i` (again).
    pub fn start(&mut self, i: usize) {
        let cluster: Vec<String> = self
            .ports
            .iter()
            .enumerate()
            .map(|(n, (_, peer))| format!("m{n}=http://127.0.0.1:{peer}"))
            .collect();
        let (client, peer) = self.ports[i];
        let data = self.dir.join(format!("m{i}"));
        let child = Command::new("etcd")
            .args(["--name", &format!("m{i}")])
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--listen-client-urls",
                &format!("http://127.0.0.1:{client}"),
            ])
            .args([
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{client}"),
            ])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
            ])
            .args(["--initial-cluster", &cluster.join(",")])
            .args(["--initial-cluster-state", "new"])
            .args([
                "--initial-cluster-token",
                &format!("t{}", std::process::id()),
            ])
            .args(["--log-level", "error"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        self.members[i] = Some(child);
    }

    /// Stops member `i` (SIGKILL, by PID).
    pub fn stop(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits until a write through member `i` succeeds (it has a leader).
    pub fn wait_writable(&self, i: usize) {
        let endpoint = format!("http://127.0.0.1:{}", self.ports[i].0);
        let deadline = Instant::now() + PATIENCE * 2;
        loop {
            let out = self.etcdctl(&endpoint, &["put", "/ready", "1"]);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd member {i} never took a write: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Waits until etcd holds exactly `n` leases (one per live instance,
    /// once a stopped one's has run out).
    pub fn wait_leases(&self, n: usize) {
        let deadline = Instant::now() + PATIENCE * 2;
        loop {
            let out = self.etcdctl(&self.endpoints(), &["lease", "list"]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if text.starts_with(&format!("found {n} leases")) {
                return;
            }
            assert!(Instant::now() < deadline, "leases: {text}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Writes `value` at `key`, as any etcd client may.
    pub fn put(&self, key: &str, value: &str) {
        let out = self.etcdctl(&self.endpoints(), &["put", "--", key, value]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Every key and value under `prefix`, as etcdctl prints them.
    pub fn dump(&self, prefix: &str) -> String {
        let out = self.etcdctl(&self.endpoints(), &["get", "--prefix", prefix]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn etcdctl(&self, endpoints: &str, args: &[&str]) -> std::process::Output {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoints, "--command-timeout", "2s"])
            .args(args)
            .output()
            .expect("run etcdctl")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.stop(i);
        }
    }
}

/// The secret every instance of a test's fleet shares: `cluster.key` in
/// `dir`, mode 0600 (the same bytes each time).
pub fn secret(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("cluster.key");
    std::fs::write(&path, super::random_bytes(7, 32)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}
