//! Certificates that renew themselves, against Debian's pebble (an ACME test
//! server) validating by TLS-ALPN-01 on the daemon's own TLS listener, with
//! dnsmasq resolving the test names to 127.0.0.1: the first start obtains a
//! certificate that verifies against pebble's root; a restart orders
//! nothing; `renew_before`, raised by a reload, brings a renewal; with
//! pebble gone the daemon serves what it has and retries with backoff;
//! `--workers 2` places one order; a listener with `detect` answers the
//! challenge too; a reload back to earlier settings serves the newest
//! certificate; on a full disk the new certificate is served from memory,
//! the stored pair stays whole, and nothing is ordered twice. Without
//! pebble: a CA that never answers, one that refuses connections, and a
//! storage directory others may write.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use common::dns::Dnsmasq;
use common::pebble::Pebble;
use common::peers::free_port;
use common::pki::Ca;
use common::Daemon;

const NAME: &str = "acme.test";

/// A pebble with dnsmasq resolving acme.test for it, its CA's files, and
/// the port the daemon's TLS listener takes (where pebble validates).
struct Setup {
    ca: Ca,
    tls_port: u16,
    _dns: Dnsmasq,
    /// Taken to stop the CA.
    pebble: Option<Pebble>,
    directory: String,
    /// Last: removed after pebble and dnsmasq have stopped.
    dir: common::Scratch,
}

impl Setup {
    fn start() -> Setup {
        let dir = common::scratch_dir();
        let ca = Ca::new(&dir, "pebble CA");
        let (tls_port, dns_port) = (free_port(), common::dns::free_port());
        let dns = Dnsmasq::start(&dir, dns_port, &format!("127.0.0.1 {NAME}\n"), &[]);
        let pebble = Pebble::start(&dir, &ca, tls_port, dns_port);
        let directory = pebble.directory.clone();
        Setup {
            dir,
            ca,
            tls_port,
            _dns: dns,
            pebble: Some(pebble),
            directory,
        }
    }

    fn pebble(&self) -> &Pebble {
        self.pebble.as_ref().expect("pebble runs")
    }

    /// The root this pebble issues under, as a PEM file.
    fn root(&self) -> PathBuf {
        self.pebble().root(&self.ca, &self.dir)
    }

    /// A daemon's configuration: a plain listener, and the TLS listener
    /// with its certificate from this pebble.
    fn config(&self, renew_before: &str) -> String {
        format!(
            "listen = [\"127.0.0.1:0\", {{ address = \"127.0.0.1:{}\", tls = {{ acme = {{\n\
               directory = \"{}\", email = \"ops@example.org\", names = [\"{NAME}\"],\n\
               storage = \"{}\", renew_before = \"{renew_before}\", directory_ca = \"{}\" }} }} }}]\n",
            self.tls_port,
            self.directory,
            self.dir.join("acme").display(),
            self.ca.pem.display()
        )
    }
}

/// `tcpmux --tls` asking for `sometext` on `port`, verifying the server's
/// certificate for acme.test against `root`.
fn tls_client(port: u16, root: &Path) -> Output {
    Command::new(common::sibling_binary("tcpmux"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--tls"])
        .arg("--ca")
        .arg(root)
        .args(["--server-name", NAME, "sometext"])
        .output()
        .expect("run tcpmux")
}

/// The serial of the certificate served on `port`.
fn served_serial(port: u16) -> String {
    common::pebble::served_serial(port, NAME)
}

fn waited(daemon: &mut Daemon, what: &str) -> String {
    daemon
        .wait_for_log(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no {what:?} in {:#?}", daemon.logs()))
}

#[test]
#[ignore = "needs pebble, dnsmasq, openssl and curl"]
fn a_certificate_is_obtained_reused_renewed_and_kept_while_the_ca_is_down() {
    common::require_program("openssl", "version", "openssl");
    let setup = Setup::start();
    let (tls_port, config) = (setup.tls_port, |renew: &str| setup.config(renew));

    // The first start orders, answers the challenge on its own listener,
    // and serves what it got: verified against this pebble's root.
    let mut daemon = Daemon::binary(&config("30d"));
    waited(&mut daemon, "acme: certificate obtained and served");
    assert_eq!(setup.pebble().orders(), 1);
    let out = tls_client(tls_port, &setup.root());
    assert!(out.status.success(), "{out:?}");
    // The chain and its key in one file, replaced as one; the directory
    // is the daemon's alone.
    let storage = setup.dir.join("acme");
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .expect("stored")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&storage.join("acme.test.pem")), 0o600);
    assert_eq!(mode(&storage), 0o700);
    let first = served_serial(tls_port);
    let metrics = String::from_utf8_lossy(&daemon.exchange(b"stats\r\n")).into_owned();
    assert!(
        metrics.contains(&format!(
            "tcpmuxd_tls_certificate_expiry_timestamp_seconds{{name=\"{NAME}\"}}"
        )),
        "{metrics}"
    );
    daemon.signal("TERM");
    daemon.wait_exit();

    // A restart serves the stored certificate and orders nothing: the
    // keeper logs the certificate in hand before it could order.
    let mut daemon = Daemon::binary(&config("30d"));
    waited(&mut daemon, "acme: certificate in hand");
    assert_eq!(served_serial(tls_port), first);
    assert!(!daemon.logs().iter().any(|l| l.contains("acme: ordering")));
    assert_eq!(setup.pebble().orders(), 1);

    // renew_before raised above what is left, by a reload: renewed at once.
    std::fs::write(daemon.config_path(), config("2000d")).expect("new config");
    daemon.signal("HUP");
    waited(&mut daemon, "configuration reloaded");
    waited(&mut daemon, "acme: certificate obtained and served");
    waited(&mut daemon, "longer than the certificate's lifetime");
    assert_eq!(setup.pebble().orders(), 2);
    let renewed = served_serial(tls_port);
    assert_ne!(renewed, first);
    daemon.signal("TERM");
    daemon.wait_exit();

    // The CA is down: the certificate in hand is served, and renewal is
    // retried, soon and then later.
    let mut setup = setup;
    drop(setup.pebble.take());
    let mut daemon = Daemon::binary(&setup.config("2000d"));
    waited(&mut daemon, "attempt=1 retry_in_s=10");
    assert_eq!(served_serial(tls_port), renewed);
    waited(&mut daemon, "attempt=2 retry_in_s=60");
    assert_eq!(served_serial(tls_port), renewed);
}

#[test]
#[ignore = "needs pebble, dnsmasq and openssl"]
fn two_workers_place_one_order() {
    let setup = Setup::start();
    let mut daemon = Daemon::start_with(Some(&setup.config("30d")), &["--workers", "2"]);
    waited(&mut daemon, "acme: certificate obtained and served");
    // Both workers serve it.
    let root = setup.root();
    for _ in 0..8 {
        let out = tls_client(setup.tls_port, &root);
        assert!(out.status.success(), "{out:?}");
    }
    assert_eq!(setup.pebble().orders(), 1);
    assert_eq!(
        daemon
            .logs()
            .iter()
            .filter(|l| l.contains("acme: ordering"))
            .count(),
        1
    );
}

#[test]
#[ignore = "needs pebble and dnsmasq"]
fn a_listener_with_detect_answers_the_challenge_too() {
    let setup = Setup::start();
    let tls_port = setup.tls_port;
    // One port for TLS and SSH: the validation's ClientHello names no
    // passed-through service, so it is terminated, with the challenge.
    let config = setup.config("30d").replace(
        "tls = { acme",
        "detect = true, ssh = \"daytime\", tls = { acme",
    );
    let mut daemon = Daemon::binary(&config);
    waited(&mut daemon, "acme: certificate obtained and served");
    let out = tls_client(tls_port, &setup.root());
    assert!(out.status.success(), "{out:?}");
    let mut ssh = std::net::TcpStream::connect(("127.0.0.1", tls_port)).expect("connect");
    std::io::Write::write_all(&mut ssh, b"SSH-2.0-test\r\n").expect("banner");
    let answer = common::read_all(&mut ssh);
    assert!(
        String::from_utf8_lossy(&answer).contains("UTC"),
        "{answer:?}"
    );
}

#[test]
#[ignore = "needs pebble, dnsmasq and openssl"]
fn a_reload_back_to_earlier_settings_serves_the_newest_certificate() {
    let setup = Setup::start();
    let mut daemon = Daemon::binary(&setup.config("30d"));
    waited(&mut daemon, "acme: certificate obtained and served");
    let first = served_serial(setup.tls_port);
    std::fs::write(daemon.config_path(), setup.config("2000d")).expect("new config");
    daemon.signal("HUP");
    assert_eq!(
        daemon.wait_for_lines(2, |l| l.contains("acme: certificate obtained and served")),
        2
    );
    let renewed = served_serial(setup.tls_port);
    assert_ne!(renewed, first);
    // Back to the first table: its slot from before held the first
    // certificate, and served it again.
    std::fs::write(daemon.config_path(), setup.config("30d")).expect("old config");
    daemon.signal("HUP");
    assert_eq!(
        daemon.wait_for_lines(2, |l| l.contains("configuration reloaded")),
        2
    );
    assert_eq!(served_serial(setup.tls_port), renewed);
    assert_eq!(setup.pebble().orders(), 2);
}

/// A tmpfs of `size` at `dir`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mount point");
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a tmpfs (needs root)");
        Tmpfs(dir.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the file system of `dir` with `path` until a write fails.
fn fill(path: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).expect("filler");
    let block = vec![0u8; 4096];
    while file.write_all(&block).is_ok() && file.sync_all().is_ok() {}
}

/// Whether the key in `pem` is the certificate's (openssl compares the
/// public keys).
fn pair_matches(pem: &Path) -> bool {
    let public = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .arg("-in")
            .arg(pem)
            .output()
            .expect("run openssl");
        assert!(out.status.success(), "{out:?}");
        out.stdout
    };
    public(&["x509", "-noout", "-pubkey"]) == public(&["pkey", "-pubout"])
}

#[test]
#[ignore = "needs root (a tmpfs), pebble, dnsmasq and openssl"]
fn on_a_full_disk_the_new_certificate_is_served_and_the_stored_pair_stays_whole() {
    common::require_root();
    let setup = Setup::start();
    let storage = setup.dir.join("acme");
    let _disk = Tmpfs::mount(&storage, "256k");
    let mut daemon = Daemon::binary(&setup.config("30d"));
    waited(&mut daemon, "acme: certificate obtained and served");
    let pair = storage.join("acme.test.pem");
    let stored = std::fs::read(&pair).expect("stored");
    let first = served_serial(setup.tls_port);
    // The disk fills up; a reload asks for a renewal at once.
    let filler = storage.join("filler");
    fill(&filler);
    std::fs::write(daemon.config_path(), setup.config("2000d")).expect("new config");
    daemon.signal("HUP");
    waited(&mut daemon, "served from memory but cannot be stored");
    let renewed = served_serial(setup.tls_port);
    assert_ne!(renewed, first, "the new certificate is served");
    assert_eq!(std::fs::read(&pair).expect("still there"), stored);
    assert!(pair_matches(&pair), "the stored key is its certificate's");
    // Space again: the certificate in memory is stored, not ordered anew.
    std::fs::remove_file(&filler).expect("free the disk");
    waited(&mut daemon, "served from memory is stored now");
    assert!(pair_matches(&pair));
    assert_ne!(std::fs::read(&pair).expect("stored"), stored);
    assert_eq!(setup.pebble().orders(), 2);
    daemon.signal("TERM");
    daemon.wait_exit();
}

/// A "CA" on a port of its own that accepts connections and never answers
/// (at most 20, then it stops accepting; each is held until the test ends).
fn silent_ca() -> (u16, Arc<Mutex<Vec<std::net::TcpStream>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&held);
    std::thread::spawn(move || {
        for stream in listener.incoming().take(20).flatten() {
            keep.lock().expect("held").push(stream);
        }
    });
    (port, held)
}

/// A daemon whose ACME directory is at `directory`, with a TLS listener,
/// storage in `storage`, and `request_timeout`.
fn acme_daemon(directory: &str, storage: &Path, timeout: &str) -> Daemon {
    Daemon::binary(&format!(
        "listen = [\"127.0.0.1:0\", {{ address = \"127.0.0.1:{}\", tls = {{ acme = {{\n\
           directory = \"{directory}\", names = [\"{NAME}\"], storage = \"{}\",\n\
           request_timeout = \"{timeout}\" }} }} }}]\n",
        free_port(),
        storage.display()
    ))
}

#[test]
fn a_ca_that_never_answers_costs_a_timeout_and_a_retry_and_the_expiry_warning_does_not_wait() {
    let dir = common::scratch_dir();
    let storage = dir.join("acme");
    // A certificate in hand that has expired: it must be renewed, and the
    // daemon must say so on its own clock, not only once an order fails.
    std::fs::create_dir(&storage).unwrap();
    std::fs::set_permissions(&storage, std::fs::Permissions::from_mode(0o700)).unwrap();
    let ca = Ca::new(&dir, "old CA");
    let old = ca.leaf(&common::pki::LeafSpec {
        file: "old",
        dns: &[NAME],
        common_name: NAME,
        serial: 7,
        expired: true,
        client: false,
    });
    let pem = [
        std::fs::read(&old.cert).unwrap(),
        std::fs::read(&old.key).unwrap(),
    ]
    .concat();
    std::fs::write(storage.join("acme.test.pem"), pem).unwrap();
    let (port, _held) = silent_ca();
    let mut daemon = acme_daemon(&format!("https://localhost:{port}/dir"), &storage, "2s");
    let warning = waited(
        &mut daemon,
        "acme: the certificate has expired and has not been renewed",
    );
    let logs = daemon.logs();
    let at = |what: &str| logs.iter().position(|l| l.contains(what));
    assert!(
        at("could not obtain").map_or(true, |failed| Some(failed) > at(&warning)),
        "the warning waited for a failed order: {logs:#?}"
    );
    let failed = waited(&mut daemon, "acme: could not obtain a certificate");
    assert!(failed.contains("attempt=1 retry_in_s=10"), "{failed}");
    assert!(
        failed.contains(&format!("https://localhost:{port}/dir"))
            && failed.contains("no answer within 2s (request_timeout)"),
        "{failed}"
    );
}

#[test]
fn a_ca_that_refuses_connections_is_named_with_the_cause() {
    let dir = common::scratch_dir();
    let port = free_port();
    let mut daemon = acme_daemon(
        &format!("https://localhost:{port}/dir"),
        &dir.join("acme"),
        "5s",
    );
    let failed = waited(&mut daemon, "acme: could not obtain a certificate");
    // Not hyper's bare "client error (Connect)": where, and why.
    assert!(
        failed.contains(&format!("https://localhost:{port}/dir")) && failed.contains("refused"),
        "{failed}"
    );
    // And counted, for an alert (the stats built-in on the plain listener).
    let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
    assert!(
        stats.contains(&format!(
            "tcpmuxd_acme_order_failures_total{{name=\"{NAME}\"}} 1\n"
        )),
        "{stats}"
    );
}

#[test]
fn a_storage_directory_others_may_write_is_refused() {
    let dir = common::scratch_dir();
    let storage = dir.join("acme");
    std::fs::create_dir(&storage).unwrap();
    std::fs::set_permissions(&storage, std::fs::Permissions::from_mode(0o777)).unwrap();
    common::assert_config_rejected(
        &format!(
            "listen = [{{ address = \"127.0.0.1:0\", tls = {{ acme = {{ directory = \"https://localhost/dir\", \
             names = [\"{NAME}\"], storage = \"{}\" }} }} }}]\n",
            storage.display()
        ),
        "may be written by every user (mode 0777)",
    );
}

#[test]
fn account_credentials_with_a_bad_key_name_their_file() {
    let dir = common::scratch_dir();
    let storage = dir.join("acme");
    std::fs::create_dir(&storage).unwrap();
    std::fs::set_permissions(&storage, std::fs::Permissions::from_mode(0o700)).unwrap();
    let port = free_port();
    let directory = format!("https://localhost:{port}/dir");
    let file = storage.join(format!("account-https___localhost_{port}_dir.json"));
    std::fs::write(
        &file,
        format!(r#"{{"id": "https://localhost:{port}/acct/1", "key_pkcs8": "AAAA", "directory": "{directory}"}}"#),
    )
    .unwrap();
    let mut daemon = acme_daemon(&directory, &storage, "5s");
    let failed = waited(&mut daemon, "acme: could not obtain a certificate");
    assert!(
        failed.contains(&file.display().to_string()) && failed.contains("invalid key bytes"),
        "{failed}"
    );
}
