//! Debian's pebble, an ACME test CA, on free ports: its orders counted
//! from its output, its root fetched for clients.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use super::peers::{curl, free_port, wait_for_port, Peer};
use super::pki::Ca;

/// pebble with its output collected, to count the orders it was sent.
pub struct Pebble {
    _child: Peer,
    pub directory: String,
    management: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Pebble {
    /// pebble on free ports, its HTTPS under a certificate of `ca`, checking
    /// TLS-ALPN-01 on `tls_port` and resolving names through `dns_port`.
    pub fn start(dir: &Path, ca: &Ca, tls_port: u16, dns_port: u16) -> Pebble {
        super::require_program("pebble", "-h", "pebble");
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

    pub fn orders(&self) -> usize {
        let log = self.log.lock().expect("log");
        log.iter().filter(|l| l.contains("POST /order-plz")).count()
    }

    /// The root this run of pebble issues under, as a PEM file.
    pub fn root(&self, ca: &Ca, dir: &Path) -> PathBuf {
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

/// The serial of the certificate served on `port` for `name`.
pub fn served_serial(port: u16, name: &str) -> String {
    let mut s_client = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", name])
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
