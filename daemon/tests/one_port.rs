//! One port for everything: a listener with `detect` and `tls` passes through
//! the TLS names a service's `sni` takes, terminates every other TLS client
//! (straight to an `sni_terminate` service, else TCPMUX inside TLS), and still
//! routes SSH, HTTP and silent clients. Real peers: curl, openssl's s_server,
//! OpenSSH and the `tcpmux` client.

use crate::common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use common::peers::{curl, free_port, http_backend, ssh, sshd, wait_for_port, Peer};
use common::pki::{Ca, LeafSpec};
use common::Daemon;

fn leaf_spec<'a>(file: &'a str, dns: &'a [&'a str]) -> LeafSpec<'a> {
    LeafSpec {
        file,
        dns,
        common_name: dns[0],
        serial: 3,
        expired: false,
        client: false,
    }
}

#[test]
#[ignore = "needs root, openssl, curl and OpenSSH (ssh, sshd, ssh-keygen)"]
fn passthrough_termination_tcpmux_ssh_http_and_silence_share_one_port() {
    common::require_root();
    common::require_program("openssl", "version", "openssl");
    common::require_program("curl", "--version", "curl");
    common::require_program("/usr/sbin/sshd", "-V", "openssh-server");
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "one-port CA");
    // The listener's certificate does not carry pass.test: a client that
    // verifies pass.test has reached the backend's own.
    let own = ca.leaf(&leaf_spec("listener", &["app.test", "localhost"]));
    let backend = ca.leaf(&leaf_spec("backend", &["pass.test"]));
    let tls_port = free_port();
    let _s_server = Peer(
        Command::new("openssl")
            .args(["s_server", "-www", "-accept", &tls_port.to_string()])
            .arg("-cert")
            .arg(&backend.cert)
            .arg("-key")
            .arg(&backend.key)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start openssl s_server"),
    );
    wait_for_port(tls_port);
    let (_sshd, sshd_port) = sshd(&dir);
    let (app, web) = (http_backend("from app"), http_backend("from web"));
    let mut daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true, ssh = \"ssh\", http = \"web\",\n\
            silent = \"sometext\", detect_timeout = \"300ms\",\n\
            tls = {{ cert = \"{}\", key = \"{}\" }} }}]\n\
         [service.pass]\nproxy = \"127.0.0.1:{tls_port}\"\nsni = [\"pass.test\"]\n\
         [service.app]\nproxy = \"127.0.0.1:{app}\"\nsni_terminate = [\"app.test\"]\n\
         [service.web]\nproxy = \"127.0.0.1:{web}\"\nhttp_host = [\"web.test\"]\n\
         [service.ssh]\nproxy = \"127.0.0.1:{sshd_port}\"\n",
        own.cert.display(),
        own.key.display()
    ));
    let port = daemon.addr.port();
    let ca_pem = ca.pem.to_str().expect("a UTF-8 path");
    let https = |name: &str| {
        curl(&[
            "--cacert",
            ca_pem,
            "--resolve",
            &format!("{name}:{port}:127.0.0.1"),
            &format!("https://{name}:{port}/"),
        ])
    };

    // Passed through untouched: curl verified the backend's certificate.
    assert!(https("pass.test").contains("s_server"));
    // Terminated here, then straight to the plain backend.
    assert_eq!(https("app.test"), "from app");
    daemon
        .wait_for_log(|l| l.contains("service=app routed=sni_terminate"))
        .expect("the terminated client's log line");

    // Any other name: TCPMUX inside TLS.
    let out = Command::new(common::sibling_binary("tcpmux"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--tls", "--ca", ca_pem, "--server-name", "localhost"])
        .arg("sometext")
        .output()
        .expect("run tcpmux");
    assert!(out.status.success(), "{out:?}");
    assert!(!out.stdout.is_empty());

    // HTTP by Host, SSH, and a client that says nothing, in clear.
    let url = format!("http://web.test:{port}/");
    let resolve = format!("web.test:{port}:127.0.0.1");
    assert_eq!(curl(&["--resolve", &resolve, &url]), "from web");
    let out = ssh(
        &dir,
        &["-p", &port.to_string(), "root@127.0.0.1", "echo by ssh"],
    );
    assert_eq!(out, "by ssh\n");
    let mut silent = daemon.connect();
    let text = common::read_all(&mut silent);
    assert!(!text.is_empty() && !text.starts_with(b"+"), "{text:?}");

    // A TCPMUX name in clear is told to use TLS.
    let mut plain = daemon.connect();
    plain.write_all(b"sometext\r\n").expect("send");
    let mut reply = String::new();
    plain.read_to_string(&mut reply).expect("read");
    assert!(
        reply.starts_with("-TCPMUX on this port runs inside TLS"),
        "{reply}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs openssl"]
fn an_exact_sni_terminate_name_wins_over_an_sni_wildcard() {
    common::require_program("openssl", "version", "openssl");
    let dir = common::scratch_dir();
    let ca = Ca::new(&dir, "exact CA");
    let own = ca.leaf(&leaf_spec("listener", &["app.example.com"]));
    let echo = common::echo_backend();
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true,\n\
            tls = {{ cert = \"{}\", key = \"{}\" }} }}]\n\
         [service.pass]\nproxy = \"{echo}\"\nsni = [\"*.example.com\"]\n\
         [service.app]\nbuiltin = \"daytime\"\nsni_terminate = [\"app.example.com\"]\n",
        own.cert.display(),
        own.key.display()
    ));
    // Terminated here (the handshake verifies the listener's certificate)
    // and answered by app; passed through to the echo backend, the
    // ClientHello came back and no handshake was possible.
    let out = Command::new("openssl")
        .args(["s_client", "-quiet", "-verify_return_error"])
        .args(["-connect", &format!("127.0.0.1:{}", daemon.addr.port())])
        .args(["-servername", "app.example.com", "-CAfile"])
        .arg(&ca.pem)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.trim_end().ends_with("UTC"), "{text} {out:?}");
    // Another name under the wildcard still passes through.
    let mut other = daemon.connect();
    let hello = tcpmux_proto::sniff::client_hello::build(Some("db.example.com"), &[], 0, 16384);
    assert_eq!(common::send_and_receive(&mut other, hello.clone()), hello);
}
