//! Unmodified clients and servers from Debian reaching services through a
//! detecting listener and through `tcpmux forward`: curl routed by Host, curl
//! verifying a certificate end to end through SNI passthrough to openssl's
//! s_server, OpenSSH through detection and through a ProxyCommand.

use crate::common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use common::peers::{curl, free_port, http_backend, ssh, sshd, wait_for_port, Peer};
use common::Daemon;

#[test]
#[ignore = "needs curl"]
fn curl_is_routed_by_its_host_header() {
    common::require_program("curl", "--version", "curl");
    let (a, b) = (http_backend("from a"), http_backend("from b"));
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true, http = \"b\" }}]\n\
         [service.a]\nproxy = \"127.0.0.1:{a}\"\nhttp_host = [\"a.example\"]\n\
         [service.b]\nproxy = \"127.0.0.1:{b}\"\n"
    ));
    let url = format!("http://127.0.0.1:{}/", daemon.addr.port());
    assert_eq!(curl(&["-H", "Host: A.example", &url]), "from a");
    assert_eq!(curl(&["-H", "Host: other.example", &url]), "from b");
    // TCPMUX clients still use the same port.
    let mut stream = daemon.connect();
    stream.write_all(b"a\r\n").unwrap();
    assert_eq!(common::read_line(&mut stream), b"+\r\n");
}

#[test]
#[ignore = "needs openssl and curl"]
fn tls_is_passed_through_by_sni_and_verified_end_to_end() {
    common::require_program("openssl", "version", "openssl");
    common::require_program("curl", "--version", "curl");
    let dir = common::scratch_dir();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args(["-days", "1", "-subj", "/CN=db.example.com"])
        .args(["-addext", "subjectAltName=DNS:db.example.com"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .expect("run openssl req");
    assert!(made.success());
    let tls_port = free_port();
    let _server = Peer(
        Command::new("openssl")
            .args(["s_server", "-www", "-accept"])
            .arg(tls_port.to_string())
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start openssl s_server"),
    );
    wait_for_port(tls_port);
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true }}]\n\
         [service.db]\nproxy = \"127.0.0.1:{tls_port}\"\nsni = [\"db.example.com\"]\n"
    ));
    let port = daemon.addr.port();
    let page = curl(&[
        "--cacert",
        cert.to_str().unwrap(),
        "--resolve",
        &format!("db.example.com:{port}:127.0.0.1"),
        &format!("https://db.example.com:{port}/"),
    ]);
    assert!(page.contains("s_server"), "{page}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs root and OpenSSH (ssh, sshd, ssh-keygen)"]
fn openssh_reaches_sshd_through_detection_and_through_a_proxy_command() {
    common::require_root();
    common::require_program("ssh", "-V", "openssh-client");
    common::require_program("/usr/sbin/sshd", "-V", "openssh-server");
    let dir = common::scratch_dir();
    let (_sshd, sshd_port) = sshd(&dir);
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true, ssh = \"ssh\" }}]\n\
         [service.ssh]\nproxy = \"127.0.0.1:{sshd_port}\"\n"
    ));
    let port = daemon.addr.port().to_string();
    // The detecting port, as an ordinary SSH server.
    let out = ssh(
        &dir,
        &["-p", &port, "root@127.0.0.1", "echo through detection"],
    );
    assert_eq!(out, "through detection\n");
    // By name, with tcpmux as the ProxyCommand.
    let tcpmux = common::sibling_binary("tcpmux");
    let proxy = format!(
        "ProxyCommand={} --host 127.0.0.1 --port {port} ssh",
        tcpmux.display()
    );
    let out = ssh(
        &dir,
        &["-o", &proxy, "root@anything", "echo through tcpmux"],
    );
    assert_eq!(out, "through tcpmux\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs curl"]
fn curl_reaches_a_service_through_tcpmux_forward() {
    common::require_program("curl", "--version", "curl");
    let web = http_backend("forwarded");
    let config = format!("[service.web]\nproxy = \"127.0.0.1:{web}\"\n");
    let server = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::start_with(Some(&config), &["--listen", &server]);
    let local = free_port();
    let mut forward = Command::new(common::sibling_binary("tcpmux"));
    forward
        .args(["forward", "--host", "127.0.0.1", "--port"])
        .arg(daemon.addr.port().to_string())
        .arg(format!("127.0.0.1:{local}=web"))
        .arg(format!("127.0.0.1:{}=nope", free_port()))
        .stderr(Stdio::piped());
    let mut forward = Peer(forward.spawn().expect("start tcpmux forward"));
    wait_for_port(local);
    assert_eq!(curl(&[&format!("http://127.0.0.1:{local}/")]), "forwarded");
    assert_eq!(
        curl(&[&format!("http://127.0.0.1:{local}/again")]),
        "forwarded"
    );
    // While the server is down, clients are closed and the forwarder stays up.
    drop(daemon);
    let refused = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            &format!("http://127.0.0.1:{local}/"),
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        forward.0.try_wait().unwrap().is_none(),
        "the forwarder exited"
    );
    // And serves again once the server is back.
    let _daemon = Daemon::start_with(Some(&config), &["--listen", &server]);
    assert_eq!(curl(&[&format!("http://127.0.0.1:{local}/")]), "forwarded");
    let _ = forward.0.kill();
    let mut log = String::new();
    forward
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(log.contains("web on 127.0.0.1:"), "{log}");
}
