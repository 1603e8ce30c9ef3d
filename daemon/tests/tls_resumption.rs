//! TLS session resumption against `openssl s_client -sess_out`/`-sess_in`:
//! a ticket from one connection resumes the next, after a reload too and
//! whichever worker takes it; `tickets = false` turns it off. Needs
//! `openssl`: ignored by a plain `cargo test`, run by `--include-ignored`.

use crate::common;

use std::path::Path;

use common::pki::Ca;
use common::Daemon;

fn connect(port: u16, ca: &Path, session: &Path, resume: bool) -> String {
    common::pki::openssl_session(port, ca, session, resume)
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
