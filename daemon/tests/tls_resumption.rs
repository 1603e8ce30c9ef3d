//! TLS session resumption against `openssl s_client -sess_out`/`-sess_in`:
//! a ticket from one connection resumes the next, after a reload too and
//! whichever worker takes it; `tickets = false` turns it off. Needs
//! `openssl`: ignored by a plain `cargo test`, run by `--include-ignored`.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::pki::Ca;
use common::Daemon;

/// How openssl saw a connection asking for daytime: `New` or `Reused`,
/// writing its session to `session` (first) or resuming it.
fn connect(port: u16, ca: &Path, session: &Path, resume: bool) -> String {
    common::require_program("openssl", "version", "openssl");
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-CAfile", ca.to_str().unwrap(), "-verify_return_error"])
        .args(["-servername", "localhost", "-tls1_3", "-ign_eof"])
        .arg(if resume { "-sess_in" } else { "-sess_out" })
        .arg(session)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run openssl");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"daytime\r\n").unwrap();
    drop(stdin);
    // daytime answers and closes: s_client ends with the server.
    let out = child.wait_with_output().expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("+\r\n"), "{text}");
    for kind in ["Reused", "New"] {
        if text.contains(&format!("{kind}, TLSv1.3")) {
            return kind.to_owned();
        }
    }
    panic!("no session line in {text}");
}

fn config(dir: &Path, tickets: &str) -> (Ca, String) {
    let ca = Ca::new(dir, "ca");
    let server = ca.server("server", 1);
    let config = format!(
        "listen = [{{ address = \"127.0.0.1:0\", tls = {{ cert = \"{}\", key = \"{}\"{tickets} }} }}]\n",
        server.cert.display(),
        server.key.display()
    );
    (ca, config)
}

#[test]
#[ignore = "needs openssl"]
fn a_ticket_resumes_the_session_after_a_reload_and_on_any_worker() {
    let dir = common::scratch_dir();
    let (ca, config) = config(&dir, "");
    let session = dir.join("session.pem");
    let mut daemon = Daemon::with_config(&config);
    let port = daemon.addr.port();
    assert_eq!(connect(port, &ca.pem, &session, false), "New");
    assert_eq!(connect(port, &ca.pem, &session, true), "Reused");
    daemon.signal("HUP");
    daemon
        .wait_for_log(|l| l.contains("configuration reloaded"))
        .expect("reloaded");
    assert_eq!(
        connect(port, &ca.pem, &session, true),
        "Reused",
        "after a reload"
    );
    // The counters, through the client library (a fresh session of its own).
    let stats = {
        let tls = tcpmux::tls::TlsOptions {
            ca: Some(ca.pem.clone()),
            client_cert: None,
        };
        let options = tcpmux::Options {
            connect_timeout: Some(common::PATIENCE),
            reply_timeout: Some(common::PATIENCE),
            fast_open: false,
        };
        let mut stream = tcpmux::tls::connect(daemon.addr, "localhost", "stats", &tls, &options)
            .expect("stats over TLS");
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stream, &mut text);
        text
    };
    assert!(
        stats.contains("tcpmuxd_tls_handshakes_total{resumed=\"true\"} 2\n"),
        "{stats}"
    );
    drop(daemon);

    let workers = Daemon::start_with(Some(&config), &["--workers", "2"]);
    let port = workers.addr.port();
    assert_eq!(connect(port, &ca.pem, &session, false), "New");
    for round in 0..6 {
        assert_eq!(
            connect(port, &ca.pem, &session, true),
            "Reused",
            "round {round}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs openssl"]
fn tickets_false_makes_every_session_new() {
    let dir = common::scratch_dir();
    let (ca, config) = config(&dir, ", tickets = false");
    let session = dir.join("session.pem");
    let daemon = Daemon::with_config(&config);
    let port = daemon.addr.port();
    assert_eq!(connect(port, &ca.pem, &session, false), "New");
    // openssl writes no session file when no ticket came; if it wrote one,
    // the server must not resume it.
    if session.exists() {
        assert_eq!(connect(port, &ca.pem, &session, true), "New");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
