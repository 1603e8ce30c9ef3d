//! Proxy services against real backends: relay both ways in both relay modes,
//! half-close, pipelined bytes, failover, timeouts, Unix backends, the PROXY
//! protocol in both directions and the /etc/services import.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixListener;
use std::thread::JoinHandle;

use common::{read_all, read_line, Daemon};

/// A backend that serves one connection with `serve` and returns what it saw.
fn one_shot_backend<T: Send + 'static>(
    serve: impl FnOnce(TcpStream) -> T + Send + 'static,
) -> (SocketAddr, JoinHandle<T>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(common::PATIENCE)).unwrap();
        serve(conn)
    });
    (addr, handle)
}

fn unused_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Sends `payload` through `service` and returns what comes back, status line
/// stripped, writing and reading at the same time.
fn round_trip(daemon: &Daemon, service: &str, payload: &[u8]) -> Vec<u8> {
    let mut stream = daemon.connect();
    stream
        .write_all(format!("{service}\r\n").as_bytes())
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let data = payload.to_vec();
    let sender = std::thread::spawn(move || {
        writer.write_all(&data).unwrap();
        writer.shutdown(Shutdown::Write).unwrap();
    });
    let status = read_line(&mut stream);
    assert_eq!(status, b"+\r\n", "{}", String::from_utf8_lossy(&status));
    let body = read_all(&mut stream);
    sender.join().unwrap();
    body
}

#[test]
fn large_random_payloads_cross_both_relay_modes_intact() {
    let backend = common::echo_backend();
    let daemon = Daemon::with_config(&format!(
        "[service.zero]\nproxy = \"{backend}\"\nrelay = \"splice\"\n\
         [service.plain]\nproxy = \"{backend}\"\nrelay = \"copy\"\n"
    ));
    for (i, service) in ["zero", "plain"].iter().enumerate() {
        let payload = common::random_bytes(100 + i as u64, 16 * 1024 * 1024 + 7);
        let echoed = round_trip(&daemon, service, &payload);
        assert_eq!(echoed.len(), payload.len(), "{service}");
        assert_eq!(fnv(&echoed), fnv(&payload), "{service}: bytes differ");
    }
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn half_close_is_carried_to_the_backend_and_the_answer_comes_back() {
    // The backend answers only after it has seen EOF: the client's half-close must
    // reach it while the way back stays open.
    for relay in ["splice", "copy"] {
        let (backend, seen) = one_shot_backend(|mut conn| {
            let mut got = Vec::new();
            conn.read_to_end(&mut got).unwrap();
            conn.write_all(format!("got {} bytes", got.len()).as_bytes())
                .unwrap();
            got
        });
        let daemon = Daemon::with_config(&format!(
            "[service.count]\nproxy = \"{backend}\"\nrelay = \"{relay}\"\n"
        ));
        let reply = round_trip(&daemon, "count", b"twelve bytes");
        assert_eq!(reply, b"got 12 bytes", "{relay}");
        assert_eq!(seen.join().unwrap(), b"twelve bytes", "{relay}");
    }
}

#[test]
fn pipelined_bytes_reach_the_backend_first_and_in_order() {
    let (backend, seen) = one_shot_backend(|mut conn| {
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        got
    });
    let daemon = Daemon::with_config(&format!("[service.sink]\nproxy = \"{backend}\"\n"));
    let mut stream = daemon.connect();
    // Name, CRLF and the first data in a single write, then more data.
    stream.write_all(b"SINK\r\nfirst-").unwrap();
    assert_eq!(read_line(&mut stream), b"+\r\n");
    stream.write_all(b"second").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut stream), b"");
    assert_eq!(seen.join().unwrap(), b"first-second");
}

#[test]
fn a_dead_backend_is_refused_with_a_reason_and_logged_in_detail() {
    let dead = unused_port();
    let mut daemon = Daemon::with_config(&format!("[service.db]\nproxy = \"{dead}\"\n"));
    let reply = String::from_utf8(daemon.exchange(b"db\r\n")).unwrap();
    assert_eq!(reply, "-service unavailable: connection refused\r\n");
    let line = daemon.wait_for_log(|l| l.contains("service=db")).unwrap();
    assert!(
        line.contains(&format!("backend unavailable: {dead}")),
        "{line}"
    );
}

#[test]
fn backends_are_tried_in_order() {
    let dead = unused_port();
    let alive = common::echo_backend();
    let mut daemon = Daemon::with_config(&format!(
        "[service.ha]\nproxy = [\"{dead}\", \"{alive}\"]\n"
    ));
    assert_eq!(round_trip(&daemon, "ha", b"still here"), b"still here");
    let line = daemon.wait_for_log(|l| l.contains("service=ha")).unwrap();
    assert!(line.contains(&format!("backend={alive}")), "{line}");
}

#[test]
fn a_backend_that_never_accepts_hits_the_connect_timeout() {
    // A listener with a full backlog that never accepts: further SYNs are dropped,
    // so connecting hangs rather than failing.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    socket.listen(0).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..8 {
        let filler =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        filler.set_nonblocking(true).unwrap();
        let _ = filler.connect(&addr.into());
        fillers.push(filler);
    }
    let daemon = Daemon::with_config(&format!(
        "[service.slow]\nproxy = \"{addr}\"\nconnect_timeout = \"300ms\"\n"
    ));
    let reply = String::from_utf8(daemon.exchange(b"slow\r\n")).unwrap();
    assert_eq!(
        reply,
        "-service unavailable: backend connection timed out\r\n"
    );
    drop(fillers);
}

#[test]
fn unix_socket_backends() {
    let dir = common::scratch_dir();
    let path = dir.join("backend.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let backend = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        got.reverse();
        conn.write_all(&got).unwrap();
    });
    let daemon = Daemon::with_config(&format!(
        "[service.rev]\nproxy = \"unix:{}\"\n",
        path.display()
    ));
    assert_eq!(round_trip(&daemon, "rev", b"abcdef"), b"fedcba");
    backend.join().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn idle_relays_are_closed_after_the_idle_timeout() {
    let backend = common::echo_backend();
    let mut daemon = Daemon::with_config(&format!(
        "[service.quiet]\nproxy = \"{backend}\"\nidle_timeout = \"300ms\"\n"
    ));
    let mut stream = daemon.connect();
    stream.write_all(b"quiet\r\nping").unwrap();
    assert_eq!(read_line(&mut stream), b"+\r\n");
    let mut echoed = [0u8; 4];
    stream.read_exact(&mut echoed).unwrap();
    // Then silence, until the daemon gives up on the relay and closes.
    assert_eq!(read_all(&mut stream), b"");
    let line = daemon
        .wait_for_log(|l| l.contains("service=quiet"))
        .unwrap();
    assert!(line.contains("idle timeout"), "{line}");
}

/// Backend that reads a PROXY header line (v1) and sends it back, then closes.
fn v1_header_backend() -> (SocketAddr, JoinHandle<String>) {
    one_shot_backend(|conn| {
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        header
    })
}

#[test]
fn the_backend_is_told_the_real_client_with_proxy_v1_and_v2() {
    let (v1_backend, v1_seen) = v1_header_backend();
    let (v2_backend, v2_seen) = one_shot_backend(|mut conn| {
        let mut header = [0u8; 28];
        conn.read_exact(&mut header).unwrap();
        header
    });
    let daemon = Daemon::with_config(&format!(
        "[service.v1]\nproxy = \"{v1_backend}\"\nsend_proxy = \"v1\"\n\
         [service.v2]\nproxy = \"{v2_backend}\"\nsend_proxy = \"v2\"\n"
    ));
    let mut stream = daemon.connect();
    let me = stream.local_addr().unwrap();
    stream.write_all(b"v1\r\n").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let _ = read_all(&mut stream);
    assert_eq!(
        v1_seen.join().unwrap(),
        format!(
            "PROXY TCP4 127.0.0.1 127.0.0.1 {} {}\r\n",
            me.port(),
            daemon.addr.port()
        )
    );

    let mut stream = daemon.connect();
    let me = stream.local_addr().unwrap();
    stream.write_all(b"v2\r\n").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let _ = read_all(&mut stream);
    let header = v2_seen.join().unwrap();
    assert_eq!(&header[..12], b"\r\n\r\n\0\r\nQUIT\n");
    assert_eq!(header[12], 0x21, "v2, PROXY command");
    assert_eq!(header[13], 0x11, "TCP over IPv4");
    assert_eq!(&header[16..20], &[127, 0, 0, 1]);
    assert_eq!(u16::from_be_bytes([header[24], header[25]]), me.port());
    assert_eq!(
        u16::from_be_bytes([header[26], header[27]]),
        daemon.addr.port()
    );
}

#[test]
fn a_listener_trusts_proxy_headers_only_from_configured_upstreams() {
    let (backend, seen) = v1_header_backend();
    let mut daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", accept_proxy_from = [\"127.0.0.0/8\"] }}]\n\
         [service.who]\nproxy = \"{backend}\"\nsend_proxy = \"v1\"\n"
    ));
    // An upstream (loopback is trusted here) announces a client from 203.0.113.9.
    let mut stream = daemon.connect();
    let upstream = stream.local_addr().unwrap();
    stream
        .write_all(b"PROXY TCP4 203.0.113.9 198.51.100.1 5555 1\r\nwho\r\n")
        .unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut stream), b"+\r\n");
    // The backend hears of the real client, not of the upstream.
    assert_eq!(
        seen.join().unwrap(),
        "PROXY TCP4 203.0.113.9 198.51.100.1 5555 1\r\n"
    );
    let line = daemon.wait_for_log(|l| l.contains("service=who")).unwrap();
    assert!(
        line.contains("peer=203.0.113.9:5555") && line.contains(&format!("via={upstream}")),
        "{line}"
    );

    // A trusted upstream that sends no header is refused, with the reason.
    let reply = String::from_utf8(daemon.exchange(b"echo\r\n")).unwrap();
    assert!(
        reply.starts_with("-invalid PROXY protocol header"),
        "{reply:?}"
    );
}

#[test]
fn untrusted_peers_cannot_claim_another_address() {
    // Only 10.0.0.0/8 is trusted, so a loopback client's PROXY line is just a
    // (bad) service name.
    let daemon = Daemon::with_config(
        "listen = [{ address = \"127.0.0.1:0\", accept_proxy_from = [\"10.0.0.0/8\"] }]\n",
    );
    let reply =
        String::from_utf8(daemon.exchange(b"PROXY TCP4 203.0.113.9 127.0.0.1 5555 1\r\necho\r\n"))
            .unwrap();
    assert!(reply.starts_with("-byte 0x20"), "{reply:?}");
    assert_eq!(round_trip_plain(&daemon), b"+\r\nplain");
}

fn round_trip_plain(daemon: &Daemon) -> Vec<u8> {
    let mut stream = daemon.connect();
    stream.write_all(b"echo\r\nplain").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    read_all(&mut stream)
}

#[test]
fn etc_services_names_become_proxies_to_the_same_local_port() {
    let backend = common::echo_backend();
    let dir = common::scratch_dir();
    let services = dir.join("services");
    std::fs::write(
        &services,
        format!(
            "# test services\nfakeproto {port}/tcp fake-alias # comment\nfakeproto {port}/udp\nother 9/udp\n",
            port = backend.port()
        ),
    )
    .unwrap();
    let daemon = Daemon::with_config(&format!(
        "[import_etc_services]\nallow = [\"FAKE-ALIAS\"]\nfile = \"{}\"\n",
        services.display()
    ));
    assert!(String::from_utf8(daemon.exchange(b"help\r\n"))
        .unwrap()
        .contains("fake-alias\r\n"));
    assert_eq!(
        round_trip(&daemon, "fake-alias", b"via /etc/services"),
        b"via /etc/services"
    );

    // A name that is not a TCP service there is a config error, not a silent gap.
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "[import_etc_services]\nallow = [\"other\"]\nfile = \"{}\"\n",
            services.display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .arg("--check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("other is not a TCP service"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_proxy_pointed_back_at_the_daemon_is_refused_not_amplified() {
    // Through --listen, where the file cannot know the address: only the
    // run-time check can see the loop.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut daemon = Daemon::start_with(
        Some(&format!("[service.loop]\nproxy = \"{listen}\"\n")),
        &["--listen", &listen],
    );
    let mut stream = daemon.connect();
    let names = b"loop\r\n".repeat(3000);
    let reply = String::from_utf8(common::send_and_receive(&mut stream, names)).unwrap();
    assert!(
        reply.starts_with("+\r\n-proxy loop: this connection comes from tcpmuxd's own proxy"),
        "{:?}",
        &reply[..reply.len().min(200)]
    );
    daemon
        .wait_for_log(|l| l.contains("outcome=\"refused: proxy loop"))
        .expect("the looped connection is logged");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", daemon.pid()))
        .unwrap()
        .count();
    assert!(fds < 64, "the daemon holds {fds} descriptors");
}

#[test]
fn an_oversized_or_malformed_proxy_header_is_refused_at_once() {
    // A negotiation timeout longer than the test's patience: a header that
    // were waited for would fail the test, not pass it late.
    let daemon = Daemon::with_config(
        "negotiation_timeout = \"60s\"\n\
         listen = [{ address = \"127.0.0.1:0\", accept_proxy_from = [\"127.0.0.0/8\"] }]\n",
    );
    let v2 = |rest: &[u8]| {
        let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        header.extend_from_slice(rest);
        header
    };
    for (header, words) in [
        (
            v2(&[0x21, 0x11, 0xff, 0xff]),
            "declares 65551 bytes, more than the 4096 accepted",
        ),
        (v2(&[0x31, 0x11, 0x00, 0x0c]), "version 3"),
        (v2(&[0x2f, 0x11, 0x00, 0x0c]), "unknown command 0xf"),
        (v2(&[0x21, 0x11, 0x00, 0x04]), "too short for its family"),
    ] {
        let mut stream = daemon.connect();
        stream.write_all(&header).unwrap();
        // Nothing more is sent: the answer cannot depend on what follows.
        let reply = String::from_utf8(common::read_line(&mut stream)).unwrap();
        assert!(
            reply.starts_with("-invalid PROXY protocol header: ") && reply.contains(words),
            "{reply:?}"
        );
    }
    // A v1 line in two segments, split right before the destination port.
    let mut stream = daemon.connect();
    stream
        .write_all(b"PROXY TCP4 203.0.113.9 198.51.100.1 5555 ")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    stream.write_all(b"1\r\ndaytime\r\n").unwrap();
    assert_eq!(common::read_line(&mut stream), b"+\r\n");
}
