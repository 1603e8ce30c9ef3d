//! QUIC through a UDP listener, with aioquic's client and servers
//! (tests/peers/quic_peer.py): two servers behind one port chosen by the
//! server name of a ClientHello in one Initial or two, and a client that
//! moves to new addresses mid-connection and keeps its server, among
//! several in one service, by its connection ID.

use crate::common;

use std::net::SocketAddr;
use std::process::Command;

use common::Daemon;

/// `tests/peers/quic_peer.py`, run by python3 with aioquic.
fn quic_peer(args: &[&str]) -> Command {
    let found = Command::new("python3")
        .args(["-c", "import aioquic"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(found, "this test needs aioquic: python3 -m pip install aioquic (contrib/test-peers.sh installs it)");
    let mut command = Command::new("python3");
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/peers/quic_peer.py"
        ))
        .args(args);
    command
}

/// A QUIC echo server answering with `tag`, stopped when dropped.
struct QuicServer(std::process::Child, SocketAddr);

impl QuicServer {
    fn start(tag: &str) -> QuicServer {
        QuicServer::naming_itself(tag, None)
    }

    /// A server whose connection IDs carry `server_id` (hex) if given.
    fn naming_itself(tag: &str, server_id: Option<&str>) -> QuicServer {
        let port = common::dns::free_port().to_string();
        let mut args = vec!["server", &port, tag];
        args.extend(server_id);
        let mut child = quic_peer(&args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the QUIC server");
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the QUIC server did not start");
        let port = port.parse().expect("a port");
        QuicServer(child, SocketAddr::from(([127, 0, 0, 1], port)))
    }
}

impl Drop for QuicServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs python3 with aioquic (contrib/test-peers.sh)"]
fn two_quic_servers_behind_one_udp_port_are_chosen_by_server_name_in_one_initial_or_two() {
    let (a, b) = (QuicServer::start("A"), QuicServer::start("B"));
    let daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, quic = \"qb\" }}]\n\
         [service.qa]\nsni = [\"a.example\"]\nproxy_udp = \"{}\"\n\
         [service.qb]\nsni = [\"b.example\"]\nproxy_udp = \"{}\"\n",
        a.1, b.1
    ));
    let port = daemon.addr.port().to_string();
    // A whole QUIC handshake and a stream each way, through the daemon.
    for (name, answer) in [
        ("a.example", "Ahello"),
        ("b.example", "Bhello"),
        ("c.example", "Bhello"),
    ] {
        let out = quic_peer(&["client", &port, name])
            .output()
            .expect("run the QUIC client");
        let said = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            said.trim(),
            answer,
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A ClientHello over two Initial packets (two 1,200-byte datagrams):
    // held until whole, then routed by its name, both packets sent on.
    let out = quic_peer(&["client", &port, "a.example"])
        .env("BIG_HELLO", "1")
        .output()
        .expect("run the QUIC client");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said.trim(),
        "Ahello",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"qa\",routed=\"sni\"}",
        |v| v == 2.0,
    );
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"qb\",routed=\"sni\"}",
        |v| v == 1.0,
    );
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"qb\",routed=\"quic\"}",
        |v| v == 1.0,
    );
}

/// A client that moves: its connection ID, not its address, keeps it on
/// its server. The service has two servers, so a new address routed as a
/// new client could land on the other (rendezvous-hashed on the address);
/// and the listener has no `udp_default`, so without the ID the moved
/// client's datagrams (short headers, no Initial) would be dropped.
#[test]
#[ignore = "needs python3 with aioquic (contrib/test-peers.sh)"]
fn a_client_that_moves_keeps_its_server_by_connection_id() {
    moves_and_keeps_its_server(&[]);
}

/// The same with two workers: the kernel spreads the client's addresses
/// over both workers' sockets, which share the connection IDs.
#[test]
#[ignore = "needs python3 with aioquic (contrib/test-peers.sh)"]
fn a_client_that_moves_to_another_workers_socket_keeps_its_server() {
    moves_and_keeps_its_server(&["--workers", "2"]);
}

fn moves_and_keeps_its_server(daemon_args: &[&str]) {
    let (a, b) = (QuicServer::start("A"), QuicServer::start("B"));
    let daemon = Daemon::start_with(
        Some(&format!(
            "listen = [{{ address = \"127.0.0.1:0\", udp = true, quic = \"h3\" }}]\n\
             [service.h3]\nproxy_udp = [\"{}\", \"{}\"]\n",
            a.1, b.1
        )),
        daemon_args,
    );
    let port = daemon.addr.port().to_string();
    let moves = [
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
        "127.0.0.5",
        "127.0.0.6",
    ];
    migrate_and_ask(&port, &moves, false);
    // Each move was a flow of its own, found by the connection's ID.
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"h3\",routed=\"connection_id\"}",
        |v| v == moves.len() as f64,
    );
}

/// A client that moves and switches to a connection ID its server issued
/// inside the encrypted handshake, which the daemon never saw: found by the
/// server's own ID in it (`quic_server_id`). Without it, the moved
/// client's datagrams go nowhere (no `udp_default`) and it is not answered.
#[test]
#[ignore = "needs python3 with aioquic (contrib/test-peers.sh)"]
fn a_client_that_moves_to_a_fresh_connection_id_keeps_its_server_by_its_server_id() {
    let a = QuicServer::naming_itself("A", Some("a1"));
    let b = QuicServer::naming_itself("B", Some("b2c3"));
    let daemon = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", udp = true, quic = \"h3\" }}]\n\
         [service.h3]\nproxy_udp = [{{ address = \"{}\", quic_server_id = \"a1\" }}, \
         {{ address = \"{}\", quic_server_id = \"b2c3\" }}]\n",
        a.1, b.1
    ));
    let port = daemon.addr.port().to_string();
    let moves = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    migrate_and_ask(&port, &moves, true);
    daemon.wait_for_figure(
        "tcpmuxd_udp_flows_total{service=\"h3\",routed=\"server_id\"}",
        |v| v == moves.len() as f64,
    );
}

/// The QUIC client asks on the daemon's `port`, moves to each of `moves`
/// (switching to a fresh connection ID each time with `fresh_id`) and asks
/// again: every answer must come, from the same server.
fn migrate_and_ask(port: &str, moves: &[&str], fresh_id: bool) {
    let mut args = vec!["migrate", port, "moving.example"];
    args.extend(moves);
    let mut client = quic_peer(&args);
    if fresh_id {
        client.env("FRESH_ID", "1");
    }
    let out = client.output().expect("run the QUIC client");
    let said = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines.len(),
        1 + moves.len(),
        "every exchange answered: {said:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = &lines[0][..1];
    assert_eq!(lines[0], format!("{server}before"));
    for (line, address) in lines[1..].iter().zip(moves) {
        assert_eq!(
            *line,
            format!("{server}{address}"),
            "the same server after the move to {address}"
        );
    }
}
