//! Real peers through a UDP listener: dig asking dnsmasq, and an OpenVPN
//! client and server (TLS mode over UDP) completing their handshake.

use crate::common;

use std::process::Command;
use std::thread;
use std::time::Instant;

use common::dns::Dnsmasq;
use common::{require_program, Daemon, PATIENCE};

/// `openvpn` with the arguments `args`, its output lines sent on a
/// channel; killed when the guard drops.
struct OpenVpn(std::process::Child, std::sync::mpsc::Receiver<String>);

impl OpenVpn {
    fn start(
        args: &[&str],
        dir: &std::path::Path,
        leaf: &common::pki::Leaf,
        ca: &common::pki::Ca,
    ) -> OpenVpn {
        let mut child = Command::new("openvpn")
            .args(args)
            .args(["--proto", "udp", "--dev", "null", "--verb", "3"])
            .arg("--ca")
            .arg(&ca.pem)
            .arg("--cert")
            .arg(&leaf.cert)
            .arg("--key")
            .arg(&leaf.key)
            .current_dir(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start openvpn");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            for line in
                std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        OpenVpn(child, rx)
    }

    /// Waits for a line containing `text`.
    fn wait_for(&self, text: &str) -> bool {
        let deadline = Instant::now() + PATIENCE;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.1.recv_timeout(left) {
                Ok(line) if line.contains(text) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    }
}

impl Drop for OpenVpn {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A real OpenVPN client and server (TLS mode, UDP; `--dev null`, so no tun
/// device) complete their handshake through the daemon: the client's hard
/// reset is recognized, and the whole exchange after it is relayed.
#[test]
#[ignore = "needs openvpn (contrib/test-peers.sh)"]
fn openvpn_client_and_server_shake_hands_through_the_daemon() {
    require_program("openvpn", "--version", "openvpn");
    let dir = common::scratch_dir();
    let ca = common::pki::Ca::new(&dir, "vpn-ca");
    let (server_leaf, client_leaf) = (
        ca.server("vpn-server", 2),
        ca.client("vpn-client", "client", false),
    );
    let port = common::dns::free_port();
    let server = OpenVpn::start(
        &[
            "--tls-server",
            "--dh",
            "none",
            "--local",
            "127.0.0.1",
            "--lport",
            &port.to_string(),
        ],
        &dir,
        &server_leaf,
        &ca,
    );
    let daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, openvpn = \"vpn\" }}]\n\
         [service.vpn]\nproxy_udp = \"127.0.0.1:{port}\"\n"
    ));
    let client = OpenVpn::start(
        &[
            "--tls-client",
            "--nobind",
            "--remote",
            "127.0.0.1",
            &daemon.addr.port().to_string(),
        ],
        &dir,
        &client_leaf,
        &ca,
    );
    assert!(
        client.wait_for("Initialization Sequence Completed"),
        "the client's handshake completed"
    );
    assert!(
        server.wait_for("Initialization Sequence Completed"),
        "the server's handshake completed"
    );
    // One flow, recognized by the probe.
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"vpn\",routed=\"openvpn\"}",
        |v| v == 1.0,
    );
}

#[test]
#[ignore = "needs dnsmasq and dig (contrib/test-peers.sh)"]
fn dig_asks_dnsmasq_through_the_daemon_and_each_query_ends_with_its_answer() {
    require_program("dig", "-v", "bind9-dnsutils");
    let dir = common::scratch_dir();
    let port = common::dns::free_port();
    let _dnsmasq = Dnsmasq::start(&dir, port, "192.0.2.77 through.tcpmux.test\n", &[]);
    let mut daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, dns = \"resolver\" }}]\n\
         [service.resolver]\nproxy_udp = \"127.0.0.1:{port}\"\nudp_responses = 1\n"
    ));
    let deadline = Instant::now() + PATIENCE;
    let answer = loop {
        let output = Command::new("dig")
            .args([
                "@127.0.0.1",
                "-p",
                &daemon.addr.port().to_string(),
                "through.tcpmux.test",
                "A",
                "+short",
                "+tries=1",
                "+time=2",
            ])
            .output()
            .expect("run dig");
        let answer = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if !answer.is_empty() && !answer.contains("timed out") {
            break answer;
        }
        assert!(Instant::now() < deadline, "dig got no answer: {answer}");
    };
    assert_eq!(answer, "192.0.2.77");
    // The query's flow ended with its answer, not a minute later.
    let line = daemon
        .wait_for_log(|l| l.contains("udp flow ended: answered"))
        .expect("the flow's line");
    assert!(
        line.contains("service=resolver") && line.contains("routed=dns"),
        "{line}"
    );
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"resolver\",routed=\"dns\"}",
        |v| v >= 1.0,
    );
}
