//! Certificates that renew themselves, against Debian's pebble (an ACME test
//! server) validating by TLS-ALPN-01 on the daemon's own TLS listener, with
//! dnsmasq resolving the test names to 127.0.0.1: the first start obtains a
//! certificate that verifies against pebble's root; a restart orders
//! nothing; `renew_before`, raised by a reload, brings a renewal; with
//! pebble gone the daemon serves what it has and retries with backoff;
//! `--workers 2` places one order; a listener with `detect` answers the
//! challenge too.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use common::dns::Dnsmasq;
use common::peers::{curl, free_port, wait_for_port, Peer};
use common::pki::Ca;
use common::Daemon;

const NAME: &str = "acme.test";

/// pebble with its output collected, to count the orders it was sent.
struct Pebble {
    _child: Peer,
    directory: String,
    management: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Pebble {
    /// pebble on free ports, its HTTPS under a certificate of `ca`, checking
    /// TLS-ALPN-01 on `tls_port` and resolving names through `dns_port`.
    fn start(dir: &Path, ca: &Ca, tls_port: u16, dns_port: u16) -> Pebble {
        common::require_program("pebble", "-h", "pebble");
        let https = ca.server("pebble-https", 9);
        let (port, management) = (free_port(), free_port());
        let config = dir.join("pebble.json");
        let json = format!(
            r#"{{"pebble": {{"listenAddress": "127.0.0.1:{port}", "managementListenAddress": "127.0.0.1:{management}",
               "certificate": "{}", "privateKey": "{}", "httpPort": {}, "tlsPort": {tls_port},
               "ocspResponderURL": "", "externalAccountBindingRequired": false}}}}"#,
            https.cert.display(),
            https.key.display(),
            free_port()
        );
        std::fs::write(&config, json).expect("pebble config");
        let mut child = Command::new("pebble")
            .arg("-config")
            .arg(&config)
            .args([
                "-strict=false",
                "-dnsserver",
                &format!("127.0.0.1:{dns_port}"),
            ])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("pebble's output");
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                lines.lock().expect("log").push(line);
            }
        });
        wait_for_port(port);
        Pebble {
            _child: Peer(child),
            directory: format!("https://localhost:{port}/dir"),
            management,
            log,
        }
    }

    fn orders(&self) -> usize {
        let log = self.log.lock().expect("log");
        log.iter().filter(|l| l.contains("POST /order-plz")).count()
    }

    /// The root this run of pebble issues under, as a PEM file.
    fn root(&self, ca: &Ca, dir: &Path) -> PathBuf {
        let pem = curl(&[
            "--cacert",
            ca.pem.to_str().expect("path"),
            &format!("https://localhost:{}/roots/0", self.management),
        ]);
        let path = dir.join("pebble-root.pem");
        std::fs::write(&path, pem).expect("root");
        path
    }
}

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
    let mut s_client = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", NAME])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run openssl s_client");
    let x509 = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(s_client.stdout.take().expect("s_client output"))
        .output()
        .expect("run openssl x509");
    let _ = s_client.wait();
    String::from_utf8_lossy(&x509.stdout).trim().to_owned()
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
    for file in ["acme.test.crt.pem", "acme.test.key.pem"] {
        let mode = std::fs::metadata(setup.dir.join("acme").join(file))
            .expect(file)
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
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
