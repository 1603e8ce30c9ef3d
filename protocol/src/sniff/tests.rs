use super::client_hello::{self, build, ClientHello, HelloError};
use super::http::{self, HeadError, RequestHead};
use super::*;

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
}

#[test]
fn every_split_of_a_request_head_decides_like_the_whole() {
    let head = b"GET /x HTTP/1.1\r\nUser-Agent: curl\r\nHOST: App.Example.com:8080\r\n\r\nbody";
    let whole = http::parse(head, HEAD_LIMIT).unwrap().unwrap();
    assert_eq!(
        whole,
        RequestHead {
            method: "GET".into(),
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
    let long = format!("GET / HTTP/1.1\r\nX: {}\r\n", "y".repeat(HEAD_LIMIT));
    assert_eq!(
        http::parse(long.as_bytes(), HEAD_LIMIT),
        Err(HeadError::TooLong(HEAD_LIMIT))
    );
}
