//! TLS listeners against Debian's openssl as the client (`openssl s_client`),
//! and a PROXY v2 backend reading the TLS client's name. Needs `openssl`:
//! ignored by a plain `cargo test`, run by `--include-ignored` (as CI does).

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};

use common::pki::{Ca, Leaf};
use common::Daemon;

/// `openssl s_client` to `port` with `args`, sending `input`; returns its
/// exit code (`None` if we stopped it) and what it printed. stdin stays open
/// (with `-quiet`, s_client ignores its EOF anyway), so it ends when the
/// server closes, or when `enough` bytes have arrived and we stop it.
fn s_client(
    port: u16,
    ca: &Path,
    args: &[&str],
    input: &[u8],
    enough: Option<usize>,
) -> (Option<i32>, String) {
    common::require_program("openssl", "version", "openssl");
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args([
            "-CAfile",
            ca.to_str().unwrap(),
            "-verify_return_error",
            "-quiet",
        ])
        .args(["-servername", "localhost", "-verify_hostname", "localhost"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run openssl");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + common::PATIENCE;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(bytes) => out.extend_from_slice(&bytes),
            Err(_) => break, // closed (the server ended) or out of patience
        }
        if enough.is_some_and(|n| out.len() >= n) {
            let _ = child.kill();
            break;
        }
    }
    let code = child.wait().ok().and_then(|s| s.code());
    drop(stdin);
    (code, String::from_utf8_lossy(&out).into_owned())
}

fn daemon(ca: &Ca, server: &Leaf, client_auth: &str) -> Daemon {
    let client = match client_auth {
        "" => String::new(),
        mode => format!(
            ", client_ca = \"{}\", client_auth = \"{mode}\"",
            ca.pem.display()
        ),
    };
    Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", tls = {{ cert = \"{}\", key = \"{}\"{client} }} }}]\n\
         [service.ops]\nbuiltin = \"echo\"\nallow_cert_names = [\"ops.example.com\"]\n",
        server.cert.display(),
        server.key.display()
    ))
}

#[test]
#[ignore = "needs openssl"]
fn openssl_negotiates_services_over_tls_1_2_and_1_3() {
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "ca");
    let server = ca.server("server", 1);
    let daemon = daemon(&ca, &server, "");
    let port = daemon.addr.port();
    for version in ["-tls1_2", "-tls1_3"] {
        let request = b"echo\r\nping\r\n";
        let (_, out) = s_client(
            port,
            &ca.pem,
            &[version, "-alpn", "tcpmux"],
            request,
            Some(9),
        );
        assert_eq!(out, "+\r\nping\r\n", "{version}");
        let (code, out) = s_client(port, &ca.pem, &[version], b"sometext\r\n", None);
        assert_eq!(code, Some(0), "{version}");
        assert_eq!(
            out.len(),
            3 + 1_000_007,
            "{version}: the whole text and a clean end"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs openssl"]
fn openssl_client_certificates_from_our_ca_and_another() {
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "ca");
    let other = Ca::new(&dir, "other");
    let server = ca.server("server", 1);
    let good = ca.client("good", "ops.example.com", false);
    let dev = ca.client("dev", "dev.example.com", false);
    let stranger = other.client("stranger", "ops.example.com", false);
    let cert = |leaf: &Leaf| {
        vec![
            "-cert".to_owned(),
            leaf.cert.display().to_string(),
            "-key".to_owned(),
            leaf.key.display().to_string(),
        ]
    };

    let required = daemon(&ca, &server, "required");
    let port = required.addr.port();
    let (_, out) = s_client(port, &ca.pem, &args(&cert(&good)), b"daytime\r\n", None);
    assert!(out.starts_with("+\r\n"), "{out:?}");
    for (who, extra) in [("another CA's", cert(&stranger)), ("none", vec![])] {
        let (_, out) = s_client(port, &ca.pem, &args(&extra), b"daytime\r\n", None);
        assert!(out.is_empty(), "{who}: {out:?}");
    }

    let optional = daemon(&ca, &server, "optional");
    let port = optional.addr.port();
    let (_, out) = s_client(port, &ca.pem, &[], b"daytime\r\n", None);
    assert!(
        out.starts_with("+\r\n"),
        "no certificate, no name rule: {out:?}"
    );
    let (_, out) = s_client(port, &ca.pem, &[], b"ops\r\n", None);
    assert_eq!(out, "-access denied\r\n");
    let (_, out) = s_client(port, &ca.pem, &args(&cert(&dev)), b"ops\r\n", None);
    assert_eq!(out, "-access denied\r\n");
    let (_, out) = s_client(
        port,
        &ca.pem,
        &args(&cert(&good)),
        b"ops\r\nhi\r\n",
        Some(7),
    );
    assert_eq!(out, "+\r\nhi\r\n");
    let (_, out) = s_client(port, &ca.pem, &args(&cert(&stranger)), b"daytime\r\n", None);
    assert!(
        out.is_empty(),
        "a certificate from another CA, optional or not: {out:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_proxy_v2_backend_learns_the_tls_client_name() {
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "ca");
    let server = ca.server("server", 1);
    let client = ca.client("ops", "ops.example.com", false);
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend_addr = backend.local_addr().unwrap();
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", tls = {{ cert = \"{}\", key = \"{}\", client_ca = \"{}\" }} }}]\n\
         [service.app]\nproxy = \"{backend_addr}\"\nsend_proxy = \"v2\"\n",
        server.cert.display(),
        server.key.display(),
        ca.pem.display()
    ));
    let header = std::thread::spawn(move || {
        let (mut conn, _) = backend.accept().unwrap();
        let mut head = [0u8; 16];
        conn.read_exact(&mut head).unwrap();
        let len = u16::from_be_bytes([head[14], head[15]]) as usize;
        let mut rest = vec![0u8; len];
        conn.read_exact(&mut rest).unwrap();
        conn.write_all(b"ok").unwrap();
        rest
    });
    let tls = tcpmux::tls::TlsOptions {
        ca: Some(ca.pem.clone()),
        client_cert: Some((client.cert.clone(), client.key.clone())),
    };
    let options = tcpmux::Options::default();
    let mut stream = tcpmux::tls::connect(daemon.addr, "localhost", "app", &tls, &options).unwrap();
    let mut ok = [0u8; 2];
    stream.read_exact(&mut ok).unwrap();
    let block = header.join().unwrap();
    // After the 12 address bytes of TCP4: PP2_TYPE_SSL with the client bits,
    // verify 0, the version and the CN.
    let tlvs = &block[12..];
    assert_eq!(tlvs[0], 0x20, "PP2_TYPE_SSL");
    assert_eq!(tlvs[3], 0x03, "PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN");
    assert_eq!(&tlvs[4..8], &[0, 0, 0, 0], "verified");
    let text = String::from_utf8_lossy(tlvs);
    assert!(
        text.contains("TLSv1.3") && text.contains("ops.example.com"),
        "{text:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A key and a certificate signed by `ca`, made by openssl: `algorithm` is
/// `rsa:2048`-style for `-newkey`, or `ed25519`.
fn openssl_leaf(dir: &Path, ca: &Ca, name: &str, algorithm: &[&str]) -> Leaf {
    let key = dir.join(format!("{name}.key"));
    let csr = dir.join(format!("{name}.csr"));
    let cert = dir.join(format!("{name}.pem"));
    let ext = dir.join("leaf.ext");
    std::fs::write(
        &ext,
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    let ok = Command::new("openssl")
        .args(["req", "-new", "-nodes", "-subj", "/CN=localhost", "-newkey"])
        .args(algorithm)
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&csr)
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "openssl req {algorithm:?}");
    let ok = Command::new("openssl")
        .args(["x509", "-req", "-days", "1", "-CAcreateserial", "-in"])
        .arg(&csr)
        .arg("-CA")
        .arg(&ca.pem)
        .arg("-CAkey")
        .arg(ca.key_path())
        .arg("-extfile")
        .arg(&ext)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "openssl x509 {algorithm:?}");
    Leaf { cert, key }
}

#[test]
#[ignore = "needs openssl"]
fn rsa_and_ed25519_certificates_from_openssl_serve_beside_a_plain_listener() {
    common::require_program("openssl", "version", "openssl");
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "ca");
    for (name, algorithm) in [("rsa", &["rsa:2048"][..]), ("ed25519", &["ed25519"][..])] {
        let leaf = openssl_leaf(&dir, &ca, name, algorithm);
        let plain = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let daemon = Daemon::with_config(&format!(
            "listen = [{{ address = \"127.0.0.1:0\", tls = {{ cert = \"{}\", key = \"{}\" }} }}, \"{plain}\"]\n",
            leaf.cert.display(),
            leaf.key.display()
        ));
        let tls = tcpmux::tls::TlsOptions {
            ca: Some(ca.pem.clone()),
            client_cert: None,
        };
        let options = tcpmux::Options::default();
        let mut stream = tcpmux::tls::connect(daemon.addr, "localhost", "daytime", &tls, &options)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        assert!(text.ends_with("\r\n"), "{name}: {text:?}");
        // The plain listener beside it speaks TCPMUX in clear.
        let mut clear = tcpmux::connect(plain, "daytime").unwrap();
        let mut text = String::new();
        clear.read_to_string(&mut text).unwrap();
        assert!(text.ends_with("\r\n"), "{name} plain: {text:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs openssl"]
fn a_tls_listener_routes_by_the_protocol_the_handshake_agreed() {
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "ca");
    let server = ca.server("server", 1);
    let app = common::tagged_echo("127.0.0.1:0".parse().unwrap(), "APP:");
    let mut daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", tls = {{ cert = \"{}\", key = \"{}\" }} }}]\n\
         [service.app]\nproxy = \"{app}\"\nalpn = [\"x-app\", \"h2\"]\n",
        server.cert.display(),
        server.key.display()
    ));
    let port = daemon.addr.port();
    // The service's protocol: the decrypted stream goes to it, no TCPMUX line.
    for offer in ["x-app", "x-unknown,h2"] {
        let (_, out) = s_client(port, &ca.pem, &["-alpn", offer], b"ping\n", Some(9));
        assert_eq!(out, "APP:ping\n", "offering {offer}");
    }
    // tcpmux first on the server's list; no ALPN at all: a TCPMUX line.
    for args in [&["-alpn", "h2,tcpmux"][..], &[]] {
        let (_, out) = s_client(port, &ca.pem, args, b"echo\r\nping\r\n", Some(9));
        assert_eq!(out, "+\r\nping\r\n", "{args:?}");
    }
    daemon
        .wait_for_log(|l| l.contains("routed=alpn") && l.contains("service=app"))
        .expect("logged as routed by ALPN");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CN of the certificate a listener on `port` presents to openssl for
/// `server_name` (none: no SNI), verified against the CA and, with a name,
/// for that name.
fn presented(port: u16, ca: &Path, server_name: Option<&str>) -> String {
    common::require_program("openssl", "version", "openssl");
    let mut command = Command::new("openssl");
    command
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-CAfile", ca.to_str().unwrap(), "-verify_return_error"])
        .args(["-nameopt", "sep_multiline"]);
    match server_name {
        Some(name) => command.args(["-servername", name, "-verify_hostname", name]),
        None => command.arg("-noservername"),
    };
    let out = command
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("run openssl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{server_name:?}: {text}");
    let subject = text.split("subject=").nth(1).unwrap_or_default();
    let cn = subject.lines().find_map(|l| l.trim().strip_prefix("CN="));
    cn.unwrap_or_else(|| panic!("{server_name:?}: no subject CN in {text}"))
        .to_owned()
}

#[test]
#[ignore = "needs openssl"]
fn each_certificate_is_served_for_its_names_and_the_default_for_the_rest() {
    use common::pki::LeafSpec;
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "ca");
    let leaf = |file: &str, dns: &[&str]| {
        ca.leaf(&LeafSpec {
            file,
            dns,
            common_name: file,
            serial: 7,
            expired: false,
            client: false,
        })
    };
    let default = leaf("default", &["localhost", "other.test"]);
    let app = leaf("app", &["app.example", "*.app.example"]);
    let db = leaf("db", &["db.example"]);
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", tls = {{ cert = \"{}\", key = \"{}\", \
         certs = [{{ cert = \"{}\", key = \"{}\" }}, {{ cert = \"{}\", key = \"{}\" }}] }} }}]\n",
        default.cert.display(),
        default.key.display(),
        app.cert.display(),
        app.key.display(),
        db.cert.display(),
        db.key.display(),
    ));
    let port = daemon.addr.port();
    for (name, cn) in [
        (Some("app.example"), "app"),
        (Some("API.App.Example"), "app"),
        (Some("db.example"), "db"),
        (Some("localhost"), "default"),
        (Some("other.test"), "default"),
        (None, "default"),
    ] {
        assert_eq!(presented(port, &ca.pem, name), cn, "{name:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs openssl"]
fn a_revoked_client_certificate_is_refused_and_a_new_crl_applies_on_reload() {
    use common::pki::LeafSpec;
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "ca");
    let server = ca.server("server", 1);
    let client = |file: &str, serial: u64| {
        ca.leaf(&LeafSpec {
            file,
            dns: &["ops.example.com"],
            common_name: "ops.example.com",
            serial,
            expired: false,
            client: true,
        })
    };
    let (kept, revoked) = (client("kept", 21), client("revoked", 22));
    let crl = ca.crl("crl", 1, &[22]);
    let mut daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", tls = {{ cert = \"{}\", key = \"{}\", \
         client_ca = \"{}\", client_crl = [\"{}\"] }} }}]\n",
        server.cert.display(),
        server.key.display(),
        ca.pem.display(),
        crl.display()
    ));
    let port = daemon.addr.port();
    let daytime = |leaf: &Leaf| {
        let (cert, key) = (leaf.cert.to_str().unwrap(), leaf.key.to_str().unwrap());
        s_client(
            port,
            &ca.pem,
            &["-cert", cert, "-key", key],
            b"daytime\r\n",
            None,
        )
        .1
    };
    assert!(daytime(&kept).starts_with("+\r\n"), "not revoked");
    assert_eq!(daytime(&revoked), "", "revoked");
    daemon
        .wait_for_log(|l| l.contains("TLS handshake failed") && l.contains("evoked"))
        .expect("the log says the certificate is revoked");
    // A new CRL revokes the other one too; a reload reads it.
    ca.crl("crl", 2, &[21, 22]);
    daemon.signal("HUP");
    daemon
        .wait_for_log(|l| l.contains("configuration reloaded"))
        .expect("reloaded");
    assert_eq!(daytime(&kept), "", "revoked by the new CRL");
    let _ = std::fs::remove_dir_all(&dir);
}
