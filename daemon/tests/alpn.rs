//! `alpn` on a detecting listener: a ClientHello passed through goes to the
//! most specific service for its server name and ALPN protocols (SNI and
//! ALPN, then SNI, then ALPN alone), and the configuration refuses two
//! services that would claim the same client. TLS listeners, which route by
//! the protocol the handshake agreed on, are tested against openssl in
//! tls_peers.rs.

use crate::common;

use std::io::{Read, Write};

use common::{tagged_echo, Daemon, PATIENCE};

/// The tag of the backend a ClientHello for `name` offering `alpn` reaches,
/// or `None` if the daemon closed the connection.
fn reached(daemon: &Daemon, name: Option<&str>, alpn: &[&str]) -> Option<String> {
    let hello = tcpmux_proto::sniff::client_hello::build(name, alpn, 0, 16384);
    let mut stream = daemon.connect();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(&hello).unwrap();
    let mut tag = [0u8; 3];
    stream.read_exact(&mut tag).ok()?;
    // The backend echoes the hello: read it all, so the session ends cleanly.
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(common::read_all(&mut stream), hello);
    Some(String::from_utf8_lossy(&tag).into_owned())
}

#[test]
fn the_most_specific_service_for_name_and_protocol_wins() {
    let any = "127.0.0.1:0".parse().unwrap();
    let (web, web_h2, wild_h2, pg) = (
        tagged_echo(any, "WEB"),
        tagged_echo(any, "H2W"),
        tagged_echo(any, "WH2"),
        tagged_echo(any, "PG:"),
    );
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true }}]\n\
         [service.web]\nproxy = \"{web}\"\nsni = [\"app.example\"]\n\
         [service.web-h2]\nproxy = \"{web_h2}\"\nsni = [\"app.example\"]\nalpn = [\"h2\"]\n\
         [service.wild-h2]\nproxy = \"{wild_h2}\"\nsni = [\"*.example\"]\nalpn = [\"h2\"]\n\
         [service.pg]\nproxy = \"{pg}\"\nalpn = [\"postgresql\"]\n"
    ));
    let cases: [(Option<&str>, &[&str], Option<&str>); 9] = [
        // SNI and ALPN together beat SNI alone, by the client's preference.
        (Some("app.example"), &["h2", "http/1.1"], Some("H2W")),
        (Some("app.example"), &["http/1.1", "h2"], Some("H2W")),
        (Some("app.example"), &["http/1.1"], Some("WEB")),
        (Some("app.example"), &[], Some("WEB")),
        // An exact name before a wildcard; the wildcard with its protocol.
        (Some("b.example"), &["h2"], Some("WH2")),
        // SNI that leads nowhere for this protocol: ALPN alone decides.
        (Some("b.example"), &["postgresql"], Some("PG:")),
        (None, &["postgresql"], Some("PG:")),
        (Some("app.example"), &["postgresql"], Some("WEB")),
        // Nothing matches and there is no sni_default: closed.
        (Some("other.test"), &["h2"], None),
    ];
    for (name, alpn, want) in cases {
        let got = reached(&daemon, name, alpn);
        assert_eq!(got.as_deref(), want, "{name:?} offering {alpn:?}");
    }
    // Counted as each connection ends, which follows our close.
    let lines = [
        "{service=\"web-h2\",outcome=\"served\",routed=\"alpn\"} 2\n",
        "{service=\"pg\",outcome=\"served\",routed=\"alpn\"} 2\n",
        "{service=\"web\",outcome=\"served\",routed=\"sni\"} 3\n",
    ];
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
        if lines.iter().all(|line| stats.contains(line)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{lines:?} in {stats}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn two_services_for_one_client_are_refused() {
    for (config, words) in [
        (
            "[service.a]\nbuiltin = \"echo\"\nsni = [\"x.example\"]\nalpn = [\"h2\", \"x\"]\n\
             [service.b]\nbuiltin = \"echo\"\nsni = [\"x.example\"]\nalpn = [\"x\"]\n",
            "sni x.example with alpn x is already claimed by service a",
        ),
        (
            "[service.a]\nbuiltin = \"echo\"\nalpn = [\"postgresql\"]\n\
             [service.b]\nbuiltin = \"echo\"\nalpn = [\"postgresql\"]\n",
            "alpn postgresql is already claimed by service a",
        ),
        (
            "[service.a]\nbuiltin = \"echo\"\nalpn = []\n",
            "alpn needs at least one protocol",
        ),
        (
            "[service.a]\nbuiltin = \"echo\"\nalpn = [\"tcpmux\"]\n",
            "TCPMUX over TLS itself",
        ),
        (
            "[service.a]\nbuiltin = \"echo\"\nalpn = [\"\"]\n",
            "must be 1 to 255 bytes",
        ),
    ] {
        common::assert_config_rejected(config, words);
    }
}
