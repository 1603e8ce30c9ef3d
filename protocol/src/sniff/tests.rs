use super::client_hello::{self, build, ClientHello, HelloError};
use super::http::{self, HeadError, RequestHead};
use super::*;
use crate::test_rng::Rng;

const HELLO_LIMIT: usize = 64 * 1024;
const HEAD_LIMIT: usize = 8192;

#[test]
fn classify_tells_the_protocols_apart_as_early_as_it_can() {
    assert_eq!(classify(b""), None);
    assert_eq!(classify(b"\x16"), Some(Protocol::Tls));
    assert_eq!(classify(b"SS"), None);
    assert_eq!(classify(b"SSH-2.0-OpenSSH_9.2\r\n"), Some(Protocol::Ssh));
    assert_eq!(classify(b"GE"), None);
    assert_eq!(classify(b"GET / HTTP/1.1\r\n"), Some(Protocol::Http));
    assert_eq!(classify(b"OPTIONS * HTTP/1.1\r\n"), Some(Protocol::Http));
    // TCPMUX names, including ones that start like a method or SSH.
    for name in [
        &b"echo\r\n"[..],
        b"GET\r\n",
        b"get / x",
        b"SSH\r\n",
        b"ssh-keys\r\n",
        b"help\r\n",
    ] {
        assert_eq!(classify(name), Some(Protocol::Tcpmux), "{name:?}");
    }
}

#[test]
fn every_split_of_a_client_hello_decides_like_the_whole() {
    let cases = [
        (
            build(Some("DB.Example.com"), &["h2", "http/1.1"], 0, 16384),
            Some("db.example.com"),
        ),
        (
            build(Some("pq.example.org"), &[], 20_000, 16384),
            Some("pq.example.org"),
        ),
        (
            build(Some("tiny.example"), &[], 3000, 100),
            Some("tiny.example"),
        ),
        (build(None, &["h2"], 0, 16384), None),
    ];
    for (bytes, name) in cases {
        for cut in 0..bytes.len() {
            assert_eq!(
                client_hello::parse(&bytes[..cut], HELLO_LIMIT),
                Ok(None),
                "cut at {cut} of {}",
                bytes.len()
            );
        }
        let hello = client_hello::parse(&bytes, HELLO_LIMIT).unwrap().unwrap();
        assert_eq!(hello.server_name.as_deref(), name);
        assert_eq!(hello.length, bytes.len());
        // What follows the ClientHello changes nothing.
        let mut more = bytes.clone();
        more.extend_from_slice(&[0x17, 0x03, 0x03, 0, 1, 0]);
        assert_eq!(
            client_hello::parse(&more, HELLO_LIMIT).unwrap().unwrap(),
            hello
        );
    }
    let alpn = client_hello::parse(
        &build(Some("a.b"), &["h2", "http/1.1"], 0, 512),
        HELLO_LIMIT,
    );
    assert_eq!(
        alpn,
        Ok(Some(ClientHello {
            server_name: Some("a.b".into()),
            alpn: vec!["h2".into(), "http/1.1".into()],
            length: build(Some("a.b"), &["h2", "http/1.1"], 0, 512).len(),
        }))
    );
}

#[test]
fn hellos_that_cannot_be_routed_are_refused_with_the_reason() {
    let large = build(Some("big.example"), &[], 70_000, 16384);
    assert!(matches!(
        client_hello::parse(&large[..16], HELLO_LIMIT),
        Err(HelloError::TooLong { .. })
    ));
    assert_eq!(
        client_hello::parse(b"\x17\x03\x03", HELLO_LIMIT),
        Err(HelloError::NotTls)
    );
    assert_eq!(
        client_hello::parse(b"\x16\x02", HELLO_LIMIT),
        Err(HelloError::NotTls)
    );
    assert_eq!(
        client_hello::parse(b"\x16\x03\x01\x00\x04\x02\x00\x00\x00", HELLO_LIMIT),
        Err(HelloError::NotClientHello(2))
    );
    assert_eq!(
        client_hello::parse(b"\x16\x03\x01\xff\xff", HELLO_LIMIT),
        Err(HelloError::RecordTooLong(65535))
    );
    let mut short = build(Some("x.example"), &[], 0, 16384);
    // Claim more extension bytes than the message holds.
    let at = short.len() - 2 - 4 - 2 - 1 - 2 - 9 - 2;
    short[at] = 0xff;
    assert!(matches!(
        client_hello::parse(&short, HELLO_LIMIT),
        Err(HelloError::Malformed(_))
    ));
    // A server name of 255 bytes is a name; of 256, malformed.
    let longest = format!("{}.example", "a".repeat(255 - 8));
    let hello = client_hello::parse(&build(Some(&longest), &[], 0, 16384), HELLO_LIMIT);
    assert_eq!(
        hello.map(|h| h.map(|h| h.server_name)),
        Ok(Some(Some(longest)))
    );
    let too_long = format!("{}.example", "a".repeat(256 - 8));
    assert_eq!(
        client_hello::parse(&build(Some(&too_long), &[], 0, 16384), HELLO_LIMIT),
        Err(HelloError::Malformed("server name longer than 255 bytes"))
    );
    // Two server_name extensions (RFC 8446 §4.2): malformed, not routed by
    // the last one.
    let twice = client_hello::build_with_names(&["a.example", "b.example"], &[], 0, 16384);
    assert_eq!(
        client_hello::parse(&twice, HELLO_LIMIT),
        Err(HelloError::Malformed("an extension given twice"))
    );
}

#[test]
fn every_split_of_a_request_head_decides_like_the_whole() {
    let head = b"GET /x HTTP/1.1\r\nUser-Agent: curl\r\nHOST: App.Example.com:8080\r\n\r\nbody";
    let whole = http::parse(head, HEAD_LIMIT).unwrap().unwrap();
    assert_eq!(
        whole,
        RequestHead {
            method: "GET".into(),
            target: "/x".into(),
            host: Some("app.example.com".into()),
            length: head.len() - 4,
        }
    );
    for cut in 0..whole.length {
        assert_eq!(
            http::parse(&head[..cut], HEAD_LIMIT),
            Ok(None),
            "cut at {cut}"
        );
    }
}

#[test]
fn hosts_and_malformed_heads() {
    let host = |value: &str| {
        let head = format!("GET / HTTP/1.1\r\nHost: {value}\r\n\r\n");
        http::parse(head.as_bytes(), HEAD_LIMIT)
            .unwrap()
            .unwrap()
            .host
    };
    assert_eq!(host("[::1]:80").as_deref(), Some("::1"));
    assert_eq!(host("example.com.").as_deref(), Some("example.com"));
    assert_eq!(host("").as_deref(), None);
    let no_host = http::parse(b"GET / HTTP/1.0\n\n", HEAD_LIMIT)
        .unwrap()
        .unwrap();
    assert_eq!(no_host.host, None);
    assert_eq!(
        http::parse(b"GET / HTTP/2.0\r\n", HEAD_LIMIT),
        Err(HeadError::NotHttp)
    );
    assert_eq!(http::parse(b"GE\x01", HEAD_LIMIT), Err(HeadError::NotHttp));
    // Found by the sniff fuzz target: a control byte in the target, refused
    // by the incomplete line, must be refused by the whole one too.
    let nul_target = b"OPTIONS a\x00b HTTP/1.1\n\n";
    assert_eq!(http::parse(nul_target, HEAD_LIMIT), Err(HeadError::NotHttp));
    assert_eq!(
        http::parse(&nul_target[..12], HEAD_LIMIT),
        Err(HeadError::NotHttp)
    );
    assert!(matches!(
        http::parse(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", HEAD_LIMIT),
        Err(HeadError::Malformed(_))
    ));
    // RFC 9112 §5.1: whitespace between a field name and its colon.
    for head in ["Host : a", "Host\t: a", "X-Forwarded-Host : b"] {
        let head = format!("GET / HTTP/1.1\r\n{head}\r\n\r\n");
        assert_eq!(
            http::parse(head.as_bytes(), HEAD_LIMIT),
            Err(HeadError::Malformed("whitespace before a header's colon")),
            "{head}"
        );
    }
    let long = format!("GET / HTTP/1.1\r\nX: {}\r\n", "y".repeat(HEAD_LIMIT));
    assert_eq!(
        http::parse(long.as_bytes(), HEAD_LIMIT),
        Err(HeadError::TooLong(HEAD_LIMIT))
    );
}

#[test]
fn an_absolute_form_target_names_the_host_over_the_host_header() {
    let host = |head: &str| {
        http::parse(head.as_bytes(), HEAD_LIMIT)
            .unwrap()
            .unwrap()
            .host
    };
    // RFC 9112 §3.2.2: the target's authority wins.
    let head = "GET http://Admin.Example:8080/x?y HTTP/1.1\r\nHost: app.example\r\n\r\n";
    assert_eq!(host(head).as_deref(), Some("admin.example"));
    let head = "GET HTTPS://user:pw@[::1]:443 HTTP/1.1\r\nHost: app.example\r\n\r\n";
    assert_eq!(host(head).as_deref(), Some("::1"));
    // Origin-form, and a target that only looks like a URL, keep Host's.
    assert_eq!(
        host("GET /http://x HTTP/1.1\r\nHost: app.example\r\n\r\n").as_deref(),
        Some("app.example")
    );
    assert_eq!(
        host("GET ftp://x/ HTTP/1.1\r\nHost: app.example\r\n\r\n").as_deref(),
        Some("app.example")
    );
}

/// Openings captured from real clients (curl, psql, openvpn, mstsc, a
/// jabber client), each with the protocol it is.
const OPENINGS: [(&[u8], Protocol); 9] = [
    (b"\x05\x02\x00\x01", Protocol::Socks),
    (b"\x04\x01\x00\x50\x7f\x00\x00\x01curl\x00", Protocol::Socks),
    (b"\x00\x00\x00\x08\x04\xd2\x16\x2f", Protocol::Postgres),
    (
        b"\x00\x00\x00\x25\x00\x03\x00\x00user\x00postgres\x00database\x00db\x00\x00",
        Protocol::Postgres,
    ),
    (
        b"\x03\x00\x00\x13\x0e\xe0\x00\x00\x00\x00\x00\x01\x00\x08\x00\x03\x00\x00\x00",
        Protocol::Rdp,
    ),
    (
        b"\x00\x0e\x38\x1f\x2e\x3d\x4c\x5b\x6a\x79\x88\x00\x00\x00\x00\x00",
        Protocol::OpenVpn,
    ),
    (
        b"<?xml version='1.0'?><stream:stream to='example.com' xmlns='jabber:client' \
          xmlns:stream='http://etherx.jabber.org/streams' version='1.0'>",
        Protocol::Xmpp,
    ),
    (b"SSH-2.0-OpenSSH_9.2p1\r\n", Protocol::Ssh),
    (b"<echo>\r\n", Protocol::Tcpmux),
];

fn all_probes() -> Probes {
    Protocol::OPTIONAL
        .into_iter()
        .fold(Probes::NONE, Probes::with)
}

#[test]
fn each_optional_probe_knows_its_clients_and_only_when_turned_on() {
    for (opening, protocol) in OPENINGS {
        assert_eq!(
            classify_with(opening, all_probes()),
            Some(protocol),
            "{opening:?}"
        );
        let alone = Probes::NONE.with(protocol);
        assert_eq!(classify_with(opening, alone), Some(protocol));
        if Protocol::OPTIONAL.contains(&protocol) {
            // Not turned on: the bytes are read as a TCPMUX line.
            let others = Protocol::OPTIONAL
                .into_iter()
                .filter(|&p| p != protocol)
                .fold(Probes::NONE, Probes::with);
            assert_eq!(classify_with(opening, others), Some(Protocol::Tcpmux));
        }
    }
}

#[test]
fn near_misses_are_not_taken_for_a_protocol() {
    let probes = all_probes();
    for near in [
        &b"\x05\x00\x00"[..],                // SOCKS5 with no method
        b"\x05\x01\x42",                     // an unassigned method
        b"\x04\x03\x00\x50\x7f\x00\x00\x01", // SOCKS4 command 3
        b"\x00\x00\x00\x09\x04\xd2\x16\x2f", // an SSLRequest of length 9
        b"\x00\x00\x00\x08\x00\x02\x00\x00", // protocol 2
        b"\x03\x00\x00\x13\x0d\xe0",         // RDP with the wrong indicator
        b"\x03\x00\x00\x13\x0e\xd0",         // not a connection request
        b"\x00\x0e\x30",                     // OpenVPN opcode 6
        b"\x00\x02\x38",                     // too short for a hard reset
        b"<jabber>\r\n",                     // a TCPMUX name
    ] {
        assert_eq!(
            classify_with(near, probes),
            Some(Protocol::Tcpmux),
            "{near:?}"
        );
    }
    // XMPP without the namespace is decided at the window's end.
    let plain_xml = format!("<?xml version='1.0'?><x a='{}'/>", "b".repeat(600));
    assert_eq!(classify_with(&plain_xml.as_bytes()[..100], probes), None);
    assert_eq!(
        classify_with(plain_xml.as_bytes(), probes),
        Some(Protocol::Tcpmux)
    );
    // One byte says nothing yet.
    for first in [&b"\x05"[..], b"\x04", b"\x00", b"\x03", b"<"] {
        assert_eq!(classify_with(first, probes), None, "{first:?}");
    }
}

#[test]
fn a_decision_on_some_bytes_holds_for_any_bytes_they_begin() {
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    for _ in 0..20_000 {
        // A real opening, mutated here and there, cut anywhere, extended; or
        // a soup of the tokens the probes look for.
        const TOKENS: [&[u8]; 10] = [
            b"<",
            b"jabber",
            b" ",
            b"\r",
            b"\n",
            b"\x00",
            b"\x05\x01",
            b"\x04\x01",
            b"x",
            b"SSH-",
        ];
        let mut bytes = match rng.below(2) {
            0 => OPENINGS[rng.below(OPENINGS.len())].0.to_vec(),
            _ => (0..1 + rng.below(12))
                .flat_map(|_| TOKENS[rng.below(TOKENS.len())].iter().copied())
                .collect(),
        };
        for _ in 0..rng.below(3) {
            let at = rng.below(bytes.len());
            bytes[at] = [0, 3, 5, b'<', b'\n', b' ', b'j', rng.next() as u8][rng.below(8)];
        }
        bytes.extend((0..rng.below(40)).map(|_| b"jabber \r\n\x00"[rng.below(10)]));
        let probes = Probes(rng.below(32) as u8);
        let whole = classify_with(&bytes, probes);
        for cut in 0..bytes.len() {
            if let Some(early) = classify_with(&bytes[..cut], probes) {
                assert_eq!(Some(early), whole, "{bytes:?} cut at {cut}, {probes:?}");
            }
        }
    }
}
