//! The optional probes (OpenVPN, XMPP, SOCKS, PostgreSQL, RDP) and `match`
//! rules on a detecting listener: each client reaches its own service with
//! every byte it sent, however its opening is split, while TCPMUX names keep
//! working on the same port; and the real clients (curl through SOCKS, psql,
//! openvpn) get through.

use crate::common;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use common::{read_all, send_and_receive, tagged_echo, Daemon};

/// Openings captured from real clients, each with the service that gets it.
const OPENINGS: [(&[u8], &str); 8] = [
    (
        b"\x00\x0e\x38\x1f\x2e\x3d\x4c\x5b\x6a\x79\x88\x00\x00\x00\x00\x00",
        "vpn",
    ),
    (
        b"<?xml version='1.0'?><stream:stream to='example.com' xmlns='jabber:client' \
          xmlns:stream='http://etherx.jabber.org/streams' version='1.0'>",
        "chat",
    ),
    (b"\x05\x02\x00\x01", "proxy"),
    (b"\x04\x01\x00\x50\x7f\x00\x00\x01curl\x00", "proxy"),
    (b"\x00\x00\x00\x08\x04\xd2\x16\x2f", "db"),
    (
        b"\x03\x00\x00\x13\x0e\xe0\x00\x00\x00\x00\x00\x01\x00\x08\x00\x03\x00\x00\x00",
        "desktop",
    ),
    (b"TS3INIT1\x00\x65", "voice"),
    (b"\x17\x01binary\x02thing", "thing"),
];

/// A detecting listener with every probe and two rules, each to a backend
/// that says its name first.
fn daemon() -> Daemon {
    let mut config = String::from(
        "listen = [{ address = \"127.0.0.1:0\", detect = true, detect_timeout = \"300ms\", \
         openvpn = \"vpn\", xmpp = \"chat\", socks = \"proxy\", postgres = \"db\", rdp = \"desktop\", \
         match = [{ regex = '^TS3INIT1', service = \"voice\" }, \
                  { regex = 'binary\\x02', service = \"thing\" }] }]\n",
    );
    for name in ["vpn", "chat", "proxy", "db", "desktop", "voice", "thing"] {
        let tag: &'static str = format!("{name}:").leak();
        let backend = tagged_echo("127.0.0.1:0".parse().unwrap(), tag);
        config += &format!("[service.{name}]\nproxy = \"{backend}\"\n");
    }
    Daemon::with_config(&config)
}

fn expected(opening: &[u8], service: &str) -> Vec<u8> {
    [format!("{service}:").as_bytes(), opening].concat()
}

#[test]
fn each_protocol_reaches_its_service_and_names_still_work() {
    let mut daemon = daemon();
    for (opening, service) in OPENINGS {
        let answer = send_and_receive(&mut daemon.connect(), opening.to_vec());
        assert_eq!(answer, expected(opening, service), "{service}");
    }
    assert_eq!(daemon.exchange(b"time\r\n")[..3], *b"+\r\n");
    // `<` starts XMPP's opening, yet a name on its own line is a name.
    let answer = daemon.exchange(b"<jabber>\r\n");
    assert!(
        answer.starts_with(b"-unknown service <jabber>"),
        "{answer:?}"
    );
    for label in [
        "openvpn", "xmpp", "socks", "postgres", "rdp", "match", "tcpmux",
    ] {
        let routed = format!("routed={label} ");
        daemon
            .wait_for_log(|l| l.contains(&routed))
            .unwrap_or_else(|| panic!("{routed}"));
    }
    let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
    assert!(
        stats.contains("service=\"proxy\",outcome=\"served\",routed=\"socks\"} 2\n"),
        "{stats}"
    );
}

#[test]
fn an_opening_one_byte_at_a_time_is_routed_the_same() {
    let daemon = daemon();
    for (opening, service) in OPENINGS {
        let mut stream = daemon.connect();
        stream.set_nodelay(true).unwrap();
        for byte in opening {
            stream.write_all(&[*byte]).unwrap();
            std::thread::sleep(Duration::from_millis(3));
        }
        stream.shutdown(Shutdown::Write).unwrap();
        assert_eq!(
            read_all(&mut stream),
            expected(opening, service),
            "{service}"
        );
    }
}

#[test]
fn a_rule_that_cannot_tell_yet_decides_when_the_client_pauses() {
    // `binary\x02` can match anywhere: the client sends a line with no line
    // feed and waits for an answer, as binary protocols do. After
    // detect_timeout (300 ms) without more bytes, the rule sees what came.
    let daemon = daemon();
    let mut stream = daemon.connect();
    let opening = b"\x17\x01binary\x02thing";
    stream.write_all(opening).unwrap();
    let mut answer = vec![0; 6 + opening.len()];
    stream.read_exact(&mut answer).unwrap();
    assert_eq!(answer, expected(opening, "thing"));
    // One that matches nothing waits the same, then is read as a TCPMUX line.
    let mut stream = daemon.connect();
    stream.write_all(b"\x17\x01other").unwrap();
    let line = common::read_line(&mut stream);
    assert!(line.starts_with(b"-"), "{line:?}");
}

#[test]
fn a_cut_opening_is_answered_at_once_on_fin() {
    let daemon = daemon();
    for (opening, _) in OPENINGS {
        for cut in [1, opening.len() / 2] {
            let started = Instant::now();
            let mut stream = daemon.connect();
            stream.write_all(&opening[..cut]).unwrap();
            stream.shutdown(Shutdown::Write).unwrap();
            let answer = read_all(&mut stream);
            // Either a TCPMUX refusal or, when the cut is already decided, the
            // service's echo: never the negotiation timeout (30 s).
            assert!(
                answer.starts_with(b"-") || answer.ends_with(&opening[..cut]),
                "{opening:?} cut at {cut}: {answer:?}"
            );
            assert!(started.elapsed() < Duration::from_secs(10), "{opening:?}");
        }
    }
}

#[test]
fn bad_probe_settings_are_config_errors() {
    common::assert_config_rejected(
        "listen = [{ address = \"127.0.0.1:0\", socks = \"x\" }]\n",
        "`socks` needs `detect = true`",
    );
    common::assert_config_rejected(
        "listen = [{ address = \"127.0.0.1:0\", detect = true, \
         match = [{ regex = '^(abc', service = \"echo\" }] }]\n",
        "match[0] regex \"^(abc\": unclosed group at byte 1 of the pattern",
    );
    common::assert_config_rejected(
        "listen = [{ address = \"127.0.0.1:0\", detect = true, rdp = \"nowhere\" }]\n",
        "rdp = \"nowhere\" is not a service",
    );
    common::assert_config_rejected(
        "listen = [{ address = \"127.0.0.1:0\", detect = true, \
         match = [{ regex = 'x', service = \"echo\", extra = 1 }] }]\n",
        "extra",
    );
}

/// A TCP listener that records the first bytes of one connection.
fn recorder() -> (std::net::SocketAddr, std::sync::mpsc::Receiver<Vec<u8>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((mut conn, _)) = listener.accept() {
            let mut buf = vec![0; 4096];
            let n = conn.read(&mut buf).unwrap_or(0);
            let _ = tx.send(buf[..n].to_vec());
        }
    });
    (addr, rx)
}

#[test]
#[ignore = "needs openvpn (apt-get install openvpn; CI runs it)"]
fn an_openvpn_client_in_tcp_mode_is_routed() {
    common::require_program("openvpn", "--version", "openvpn");
    let (backend, first) = recorder();
    let mut daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true, openvpn = \"vpn\" }}]\n\
         [service.vpn]\nproxy = \"{backend}\"\n"
    ));
    let dir = common::scratch_dir();
    let ca = common::pki::Ca::new(&dir, "vpn-ca");
    let leaf = ca.client("vpn-client", "client", false);
    let port = daemon.addr.port();
    let mut client = std::process::Command::new("openvpn")
        .args(["--client", "--proto", "tcp-client", "--remote", "127.0.0.1"])
        .arg(port.to_string())
        .args([
            "--dev",
            "null",
            "--nobind",
            "--connect-retry-max",
            "1",
            "--verb",
            "0",
        ])
        .arg("--ca")
        .arg(&ca.pem)
        .arg("--cert")
        .arg(&leaf.cert)
        .arg("--key")
        .arg(&leaf.key)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start openvpn");
    let bytes = first.recv_timeout(Duration::from_secs(30));
    let _ = client.kill();
    let _ = client.wait();
    let bytes = bytes.expect("the backend got openvpn's connection");
    assert!(bytes.len() >= 3 && bytes[2] >> 3 == 7, "{bytes:?}");
    daemon
        .wait_for_log(|l| l.contains("routed=openvpn") && l.contains("service=vpn"))
        .expect("logged as routed by the openvpn probe");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs curl and microsocks (apt-get install curl microsocks; CI runs it)"]
fn curl_through_a_socks5_server_behind_the_port() {
    common::require_program("curl", "--version", "curl");
    let socks_port = common::dns::free_port();
    let mut socks = std::process::Command::new("microsocks")
        .args(["-i", "127.0.0.1", "-p"])
        .arg(socks_port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start microsocks (apt-get install microsocks)");
    let web = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let web_addr = web.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in web.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut head = [0; 1024];
            let _ = conn.read(&mut head);
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        }
    });
    let mut daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true, socks = \"socks\" }}]\n\
         [service.socks]\nproxy = \"127.0.0.1:{socks_port}\"\n"
    ));
    let port = daemon.addr.port();
    let mut fetched = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    // microsocks may still be binding: try until it answers.
    while fetched.is_none() && Instant::now() < deadline {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "--socks5"])
            .arg(format!("127.0.0.1:{port}"))
            .arg(format!("http://{web_addr}/"))
            .output()
            .expect("run curl");
        if out.status.success() {
            fetched = Some(out.stdout);
        } else {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let _ = socks.kill();
    let _ = socks.wait();
    assert_eq!(fetched.expect("curl through the SOCKS server"), b"hello");
    daemon
        .wait_for_log(|l| l.contains("routed=socks") && l.contains("outcome=served"))
        .expect("logged as routed by the socks probe");
}

#[test]
#[ignore = "needs root and postgresql (apt-get install postgresql; CI runs it)"]
fn psql_reaches_postgresql_behind_the_port_with_and_without_ssl_request() {
    common::require_root();
    common::require_program("psql", "--version", "postgresql-client");
    let bin = std::fs::read_dir("/usr/lib/postgresql")
        .expect("apt-get install postgresql")
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .find(|p| p.join("postgres").exists())
        .expect("a PostgreSQL server under /usr/lib/postgresql");
    let dir = common::scratch_dir();
    let data = dir.join("pg");
    std::fs::create_dir(&data).unwrap();
    let as_postgres = |program: &str| {
        let mut command = std::process::Command::new("runuser");
        command
            .args(["-u", "postgres", "--"])
            .arg(bin.join(program));
        command
    };
    let chown = std::process::Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(&dir)
        .status();
    assert!(chown.is_ok_and(|s| s.success()));
    let initdb = as_postgres("initdb")
        .args(["-A", "trust", "-U", "postgres", "-D"])
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run initdb");
    assert!(initdb.success());
    let pg_port = common::dns::free_port();
    let mut server = as_postgres("postgres")
        .arg("-D")
        .arg(&data)
        .args(["-c", "listen_addresses=127.0.0.1", "-c"])
        .arg(format!("unix_socket_directories={}", dir.display()))
        .args(["-p", &pg_port.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start postgres");
    let mut daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true, postgres = \"pg\" }}]\n\
         [service.pg]\nproxy = \"127.0.0.1:{pg_port}\"\n"
    ));
    let port = daemon.addr.port();
    let mut answers = Vec::new();
    // prefer: SSLRequest first, the server's `N` relayed, then the startup;
    // disable: the StartupMessage first.
    for sslmode in ["prefer", "disable"] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = std::process::Command::new("psql")
                .arg(format!(
                    "host=127.0.0.1 port={port} user=postgres dbname=postgres \
                     sslmode={sslmode} connect_timeout=10"
                ))
                .args(["-tAc", "select 'through tcpmuxd'"])
                .output()
                .expect("run psql");
            if out.status.success() || Instant::now() > deadline {
                answers.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
                break;
            }
            // The server is still starting.
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // runuser passes no signal on: pg_ctl stops the server it started.
    let _ = as_postgres("pg_ctl")
        .args(["stop", "-m", "fast", "-D"])
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .status();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(answers, ["through tcpmuxd", "through tcpmuxd"]);
    daemon
        .wait_for_log(|l| l.contains("routed=postgres") && l.contains("outcome=served"))
        .expect("logged as routed by the postgres probe");
}
