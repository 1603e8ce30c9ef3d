//! A fleet's shared TLS session-ticket keys, against a real three-member
//! etcd and `openssl s_client`: a session made through one instance resumes
//! on another, and etcd holds neither a private key nor a ticket key in
//! the clear.

mod common;

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
