//! tcpmuxd behind a real HAProxy that sends PROXY protocol v2, as it runs when it
//! scales past one machine. Needs `haproxy`: ignored by a plain `cargo test`,
//! run by `--include-ignored` (as CI does), where a missing haproxy fails.

use crate::common;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{read_all, Daemon};

struct Haproxy {
    child: Child,
    port: u16,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_haproxy(dir: &std::path::Path, backend_port: u16) -> Haproxy {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("haproxy.cfg");
    std::fs::write(
        &config,
        format!(
            "global\n  maxconn 2000\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend fe\n  bind 127.0.0.1:{port}\n  default_backend be\n\
             backend be\n  server tcpmuxd 127.0.0.1:{backend_port} send-proxy-v2\n"
        ),
    )
    .unwrap();
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start haproxy");
    let deadline = Instant::now() + common::PATIENCE;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "haproxy did not start listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    Haproxy { child, port }
}

#[test]
#[ignore = "needs haproxy"]
fn behind_haproxy_with_proxy_v2_clients_keep_their_address_and_bytes() {
    common::require_program("haproxy", "-v", "haproxy");
    let mut daemon = Daemon::with_config(
        "listen = [{ address = \"127.0.0.1:0\", accept_proxy_from = [\"127.0.0.1/32\"] }]\n",
    );
    let haproxy = start_haproxy(&daemon.dir, daemon.addr.port());

    let payload = common::random_bytes(42, 4 * 1024 * 1024);
    let mut stream = TcpStream::connect(("127.0.0.1", haproxy.port)).unwrap();
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    let me = stream.local_addr().unwrap();
    let mut request = b"echo\r\n".to_vec();
    request.extend_from_slice(&payload);
    let reply = common::send_and_receive(&mut stream, request);
    let echoed = reply.strip_prefix(b"+\r\n").expect("+ line");
    assert!(
        echoed == payload.as_slice(),
        "{} of {} bytes came back intact",
        echoed.len(),
        payload.len()
    );

    // The log names the real client, and HAProxy as the hop it came through.
    let line = daemon
        .wait_for_log(|l| l.contains(&format!("peer={me}")))
        .unwrap_or_else(|| panic!("no log line for {me}:\n{}", daemon.logs().join("\n")));
    assert!(
        line.contains("service=echo") && line.contains("via=127.0.0.1:"),
        "{line}"
    );

    // HELP through HAProxy too, for a short exchange.
    let mut stream = TcpStream::connect(("127.0.0.1", haproxy.port)).unwrap();
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    stream.write_all(b"HELP\r\n").unwrap();
    let names = String::from_utf8(read_all(&mut stream)).unwrap();
    assert!(names.contains("sometext\r\n"), "{names:?}");
}
