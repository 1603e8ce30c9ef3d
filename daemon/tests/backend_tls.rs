//! `backend_tls` against `openssl s_server -rev` (it answers each line
//! reversed): the backend's certificate verified against `ca`, a wrong name
//! refused, a client certificate presented, and health checks over TLS.
//! Needs `openssl`: ignored by a plain `cargo test`, run by
//! `--include-ignored` (as CI does).

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use common::pki::{Ca, Leaf};
use common::{read_all, Daemon, PATIENCE};

/// `openssl s_server -rev` on a free port, stopped by PID on drop.
struct Server(Child, u16);

impl Server {
    fn start(leaf: &Leaf, verify_clients_of: Option<&Path>) -> Server {
        common::require_program("openssl", "version", "openssl");
        let port = common::dns::free_port();
        let mut command = Command::new("openssl");
        command
            .args(["s_server", "-accept", &format!("127.0.0.1:{port}")])
            .arg("-cert")
            .arg(&leaf.cert)
            .arg("-key")
            .arg(&leaf.key)
            .args(["-rev", "-quiet"]);
        if let Some(ca) = verify_clients_of {
            command.args(["-Verify", "1", "-CAfile"]).arg(ca);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start openssl s_server");
        let server = Server(child, port);
        let deadline = Instant::now() + PATIENCE;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "s_server never listened");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What `service` answers `ping`: the status line and, through the backend,
/// `gnip` when it worked.
fn ping(daemon: &Daemon, service: &str) -> String {
    let mut stream = daemon.connect();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
        .write_all(format!("{service}\r\nping\n").as_bytes())
        .unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8];
    // Up to the reversed line, or the end of a refusal.
    while !answer.ends_with(b"gnip\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
        answer.push(byte[0]);
    }
    let _ = stream.shutdown(Shutdown::Write);
    let _ = read_all(&mut stream);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
#[ignore = "needs openssl"]
fn backends_are_reached_over_verified_tls() {
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "ca");
    let backend = ca.server("backend", 1);
    let client = ca.client("client", "tcpmuxd.example", false);
    let plain = Server::start(&backend, None);
    let strict = Server::start(&backend, Some(&ca.pem));
    let tls = |extra: &str| format!("backend_tls = {{ ca = \"{}\"{extra} }}", ca.pem.display());
    let mut daemon = Daemon::binary(&format!(
        "[service.good]\nproxy = \"127.0.0.1:{}\"\n{}\n\
         health_check = {{ interval = \"100ms\", send = \"ping\\n\", expect = \"gnip\" }}\n\
         [service.wrong]\nproxy = \"127.0.0.1:{}\"\n{}\n\
         [service.mine]\nproxy = \"127.0.0.1:{}\"\n{}\n\
         [service.system]\nproxy = \"127.0.0.1:{}\"\nbackend_tls = {{ server_name = \"localhost\" }}\n\
         [service.any]\nproxy = \"127.0.0.1:{}\"\nbackend_tls = {{ insecure_skip_verify = true }}\n",
        plain.1,
        tls(", server_name = \"localhost\""),
        plain.1,
        tls(", server_name = \"wrong.example\""),
        strict.1,
        tls(&format!(
            ", server_name = \"localhost\", cert = \"{}\", key = \"{}\"",
            client.cert.display(),
            client.key.display()
        )),
        plain.1,
        plain.1,
    ));
    // The health check passes over TLS: the backend is up.
    let up = format!(
        "tcpmuxd_backend_up{{service=\"good\",backend=\"127.0.0.1:{}\"}} 1\n",
        plain.1
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
        if stats.contains(&up) && stats.contains("tcpmuxd_backend_last_check{service=\"good\"") {
            break;
        }
        assert!(Instant::now() < deadline, "{up} in {stats}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(ping(&daemon, "good"), "+\r\ngnip\n");
    assert_eq!(
        ping(&daemon, "wrong"),
        "-service unavailable: backend TLS handshake failed\r\n"
    );
    daemon
        .wait_for_log(|l| l.contains("TLS handshake failed") && l.contains("not valid for name"))
        .expect("the log says why");
    assert_eq!(ping(&daemon, "mine"), "+\r\ngnip\n", "client certificate");
    // The system's trust store does not know the test CA: refused.
    assert_eq!(
        ping(&daemon, "system"),
        "-service unavailable: backend TLS handshake failed\r\n"
    );
    // Unless told to take any certificate, which warns at every load.
    assert_eq!(ping(&daemon, "any"), "+\r\ngnip\n");
    daemon
        .wait_for_log(|l| l.contains("service any: backend_tls.insecure_skip_verify = true"))
        .expect("warned");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn backend_tls_mistakes_are_refused() {
    for (config, words) in [
        (
            "[service.s]\nproxy = \"127.0.0.1:1\"\nbackend_tls = { cert = \"/x.pem\" }\n",
            "cert and key go together",
        ),
        (
            "[service.s]\nproxy = [\"127.0.0.1:1\", \"127.0.0.2:1\"]\nbackend_tls = {}\n",
            "backends with different hosts need server_name",
        ),
        (
            "[service.s]\nproxy = \"srv:_app._tcp.example.com\"\nbackend_tls = {}\n",
            "srv: backends need server_name",
        ),
        (
            "[service.s]\nproxy = \"127.0.0.1:1\"\nbackend_tls = { ca = \"/nonexistent.pem\" }\n",
            "ca /nonexistent.pem",
        ),
        (
            "[service.s]\nbuiltin = \"echo\"\nbackend_tls = {}\n",
            "only applies to `proxy` services",
        ),
    ] {
        common::assert_config_rejected(config, words);
    }
}

#[test]
#[ignore = "needs openssl"]
fn a_backend_that_cuts_its_tls_reaches_a_tls_client_as_a_cut() {
    use std::io::ErrorKind;
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "ca");
    let leaf = ca.server("backend", 1);
    let mut backend = Server::start(&leaf, None);
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", tls = {{ cert = \"{}\", key = \"{}\" }} }}]\n\
         [service.cut]\nproxy = \"127.0.0.1:{}\"\n\
         backend_tls = {{ ca = \"{}\", server_name = \"localhost\" }}\n",
        leaf.cert.display(),
        leaf.key.display(),
        backend.1,
        ca.pem.display()
    ));
    let tls = tcpmux::tls::TlsOptions {
        ca: Some(ca.pem.clone()),
        client_cert: None,
    };
    let options = tcpmux::Options {
        connect_timeout: Some(PATIENCE),
        reply_timeout: Some(PATIENCE),
        fast_open: false,
    };
    let mut stream = tcpmux::tls::connect(daemon.addr, "localhost", "cut", &tls, &options)
        .expect("the service over TLS");
    stream.write_all(b"ping\n").unwrap();
    let mut answer = [0u8; 5];
    stream.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"gnip\n");
    // The backend dies: its connection ends with no close_notify. The
    // client must see that too, not a clean end it would take as complete.
    let _ = backend.0.kill();
    let _ = backend.0.wait();
    let mut rest = Vec::new();
    let end = stream.read_to_end(&mut rest).map_err(|e| e.kind());
    assert_eq!(end, Err(ErrorKind::UnexpectedEof), "{rest:?}");
}
