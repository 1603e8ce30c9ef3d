//! A fleet's shared TLS session-ticket keys, against a real three-member
//! etcd and `openssl s_client`: a session made through one instance resumes
//! on another, and etcd holds neither a private key nor a ticket key in
//! the clear.

use crate::common;

use std::path::Path;

use common::etcd::Etcd;
use common::pki::Ca;
use common::Daemon;

fn connect(port: u16, ca: &Path, session: &Path, resume: bool) -> String {
    common::pki::openssl_session(port, ca, session, resume)
}

/// The key named on `daemon`'s newest "session-ticket keys in force" line.
fn ticket_key(daemon: &mut Daemon) -> String {
    let said = |l: &str| l.contains("fleet: session-ticket keys in force");
    daemon
        .wait_for_log(said)
        .unwrap_or_else(|| panic!("no ticket keys: {:?}", daemon.logs()));
    let logs = daemon.logs();
    let newest = logs.iter().rev().find(|l| said(l));
    newest
        .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("key=")))
        .unwrap_or_default()
        .to_owned()
}

#[test]
#[ignore = "needs etcd, etcdctl and openssl (CI runs it)"]
fn a_session_made_through_one_instance_resumes_on_another() {
    common::require_program("openssl", "version", "openssl");
    let etcd = Etcd::cluster();
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "ca");
    let server = ca.server("server", 1);
    let prefix = format!("/tls{}", std::process::id());
    let instance = |node: &str| {
        let config = format!(
            "listen = [{{ address = \"127.0.0.1:0\", tls = {{ cert = \"{}\", key = \"{}\" }} }}]\n{}",
            server.cert.display(),
            server.key.display(),
            etcd.cluster_line(&dir, &prefix, node),
        );
        Daemon::binary(&config)
    };
    let mut a = instance("a");
    let mut b = instance("b");
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while ticket_key(&mut a) != ticket_key(&mut b) {
        assert!(std::time::Instant::now() < deadline, "never the same keys");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    let session = dir.join("session.pem");
    assert_eq!(connect(a.addr.port(), &ca.pem, &session, false), "New");
    assert_eq!(connect(b.addr.port(), &ca.pem, &session, true), "Reused");
    assert_eq!(connect(a.addr.port(), &ca.pem, &session, true), "Reused");

    // What etcd holds: the ticket keys sealed, no private key anywhere.
    let held = etcd.dump(&prefix);
    assert!(held.contains(&format!("{prefix}/tickets")), "{held}");
    assert!(!held.contains("PRIVATE KEY"), "{held}");
    let secret = std::fs::read(common::etcd::secret(&dir)).unwrap();
    assert!(!held
        .as_bytes()
        .windows(16)
        .any(|w| secret.windows(16).any(|s| s == w)));
}

/// etcd over TLS with client certificates and its user authentication
/// on: an instance with `ca`, `cert`, `key`, `user` and `password` joins;
/// one without the password is refused by etcd and says so.
#[test]
#[ignore = "needs etcd and etcdctl (CI runs it)"]
fn an_instance_joins_an_etcd_that_asks_for_tls_client_certificates_and_a_password() {
    common::require_program("etcd", "--version", "etcd-server");
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "etcd ca");
    let server = ca.server("etcd", 2);
    let client = ca.client("client", "root", false);
    let (port, peer) = (common::dns::free_port(), common::dns::free_port());
    let url = format!("https://localhost:{port}");
    let _etcd = common::peers::Peer(
        std::process::Command::new("etcd")
            .args(["--name", "tls", "--log-level", "error"])
            .arg("--data-dir")
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &format!("https://127.0.0.1:{port}")])
            .args(["--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
            ])
            .args(["--initial-cluster", &format!("tls=http://127.0.0.1:{peer}")])
            .arg("--cert-file")
            .arg(&server.cert)
            .arg("--key-file")
            .arg(&server.key)
            .arg("--trusted-ca-file")
            .arg(&ca.pem)
            .arg("--client-cert-auth")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start etcd"),
    );
    let etcdctl = |args: &[&str]| {
        std::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &url, "--command-timeout", "2s"])
            .arg("--cacert")
            .arg(&ca.pem)
            .arg("--cert")
            .arg(&client.cert)
            .arg("--key")
            .arg(&client.key)
            .args(args)
            .output()
            .expect("run etcdctl")
    };
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while !etcdctl(&["user", "add", "root", "--new-user-password=s3cret"])
        .status
        .success()
    {
        assert!(std::time::Instant::now() < deadline, "etcd never answered");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(etcdctl(&["auth", "enable"]).status.success());

    let secret = common::etcd::secret(&dir);
    let config = |node: &str, password: &str| {
        format!(
            "listen = [\"127.0.0.1:0\"]\ncluster = {{ etcd = [\"{url}\"], node = \"{node}\", secret = \"{}\", \
             cache = \"\", ca = \"{}\", cert = \"{}\", key = \"{}\", user = \"root\", password = \"{password}\" }}\n",
            secret.display(),
            ca.pem.display(),
            client.cert.display(),
            client.key.display(),
        )
    };
    let mut good = Daemon::binary(&config("good", "s3cret"));
    good.wait_for_log(|l| l.contains("fleet: joined"))
        .unwrap_or_else(|| panic!("{:?}", good.logs()));
    let mut bad = Daemon::binary(&config("bad", "wrong"));
    let refused = bad
        .wait_for_log(|l| l.contains("fleet: etcd unreachable"))
        .unwrap_or_else(|| panic!("{:?}", bad.logs()));
    assert!(refused.contains("authentication failed"), "{refused}");
}
