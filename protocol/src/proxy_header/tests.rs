use super::*;

const LIMIT: usize = 4096;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Valid headers of every form, with what each announces.
fn samples() -> Vec<(Vec<u8>, Announced)> {
    let pairs = [
        (addr("192.0.2.7:51000"), addr("198.51.100.1:1")),
        (addr("[2001:db8::7]:51000"), addr("[2001:db8::1]:41397")),
    ];
    let mut samples = Vec::new();
    for (source, destination) in pairs {
        let proxied = Announced::Proxied {
            source,
            destination,
        };
        for version in [Version::V1, Version::V2] {
            samples.push((encode(version, Some(source), Some(destination)), proxied));
        }
    }
    for version in [Version::V1, Version::V2] {
        samples.push((encode(version, None, None), Announced::Local));
    }
    // A v2 header with TLVs after the addresses (as AWS and GCP send).
    let mut with_tlvs = encode(Version::V2, Some(pairs[0].0), Some(pairs[0].1));
    let tlvs = [0x04u8, 0x00, 0x03, b'a', b'b', b'c'];
    let length = 12 + tlvs.len() as u16;
    with_tlvs[14..16].copy_from_slice(&length.to_be_bytes());
    with_tlvs.extend_from_slice(&tlvs);
    samples.push((
        with_tlvs,
        Announced::Proxied {
            source: pairs[0].0,
            destination: pairs[0].1,
        },
    ));
    samples.push((
        b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n".to_vec(),
        Announced::Local,
    ));
    samples
}

#[test]
fn every_split_of_a_valid_header_decodes_like_the_whole() {
    for (header, announced) in samples() {
        for cut in 0..header.len() {
            assert_eq!(
                decode(&header[..cut], LIMIT),
                Ok(None),
                "{:?} cut at {cut}",
                String::from_utf8_lossy(&header)
            );
        }
        assert_eq!(decode(&header, LIMIT), Ok(Some((announced, header.len()))));
        let mut followed = header.clone();
        followed.extend_from_slice(b"echo\r\n");
        assert_eq!(
            decode(&followed, LIMIT),
            Ok(Some((announced, header.len())))
        );
    }
}

#[test]
fn a_v1_line_split_before_the_destination_port_is_accepted() {
    let line = b"PROXY TCP4 192.0.2.7 198.51.100.1 51000 1\r\n";
    let cut = line.len() - 3;
    assert_eq!(decode(&line[..cut], LIMIT), Ok(None));
    assert!(matches!(
        decode(line, LIMIT),
        Ok(Some((Announced::Proxied { .. }, 43)))
    ));
}

#[test]
fn a_huge_declared_v2_length_is_refused_at_once() {
    let mut header = V2_SIGNATURE.to_vec();
    header.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
    assert_eq!(
        decode(&header, LIMIT),
        Err(HeaderError::V2TooLong {
            declared: 16 + 65535,
            limit: LIMIT
        })
    );
}

#[test]
fn malformed_v2_headers_say_what_is_wrong() {
    let fixed = |version_command: u8, family: u8, length: u16| {
        let mut header = V2_SIGNATURE.to_vec();
        header.extend_from_slice(&[version_command, family]);
        header.extend_from_slice(&length.to_be_bytes());
        header
    };
    assert_eq!(
        decode(&fixed(0x31, 0x11, 12), LIMIT),
        Err(HeaderError::V2Version(3))
    );
    // The version is refused as soon as its byte arrives.
    assert_eq!(
        decode(&fixed(0x31, 0x11, 12)[..13], LIMIT),
        Err(HeaderError::V2Version(3))
    );
    assert_eq!(
        decode(&fixed(0x2f, 0x11, 12), LIMIT),
        Err(HeaderError::V2Command(0xf))
    );
    assert_eq!(
        decode(&fixed(0x21, 0x11, 4), LIMIT),
        Err(HeaderError::V2ShortAddresses { have: 4, need: 12 })
    );
    assert_eq!(
        decode(&fixed(0x21, 0x51, 12), LIMIT),
        Err(HeaderError::V2Family(0x51))
    );
    // LOCAL with no addresses is fine.
    assert_eq!(
        decode(&fixed(0x20, 0x00, 0), LIMIT),
        Ok(Some((Announced::Local, 16)))
    );
    assert_eq!(
        HeaderError::V2Version(3).to_string(),
        "PROXY v2 header with version 3 (only 2 exists)"
    );
}

#[test]
fn malformed_v1_lines_are_refused_when_they_end() {
    for bad in [
        &b"PROXY TCP4 192.0.2.7 198.51.100.1 51000\r\n"[..],
        b"PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n",
        b"PROXY TCP4 192.0.2.7 198.51.100.1 1 65536\r\n",
        b"PROXY TCP4 192.0.2.7 198.51.100.1 +1 2\r\n",
        b"PROXY UDP4 192.0.2.7 198.51.100.1 1 2\r\n",
        b"PROXY TCP4  192.0.2.7 198.51.100.1 1 2\r\n",
    ] {
        assert!(
            matches!(decode(bad, LIMIT), Err(HeaderError::V1Malformed(_))),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(decode(&[b'x'; 3], LIMIT), Err(HeaderError::NoSignature));
    let mut long = b"PROXY TCP4 ".to_vec();
    long.resize(V1_MAX_LEN, b'1');
    assert_eq!(decode(&long, LIMIT), Err(HeaderError::V1TooLong));
}

#[test]
fn errors_are_final() {
    let bad: [&[u8]; 4] = [
        b"PROXY TCP4 1 2 3 4\r\n",
        b"GET / HTTP/1.1\r\n",
        b"\r\n\r\n\0\r\nQUIT\n\x31",
        b"PROXY UNKNOWN",
    ];
    for input in bad {
        let first = decode(input, LIMIT);
        if first.is_err() {
            let mut longer = input.to_vec();
            longer.extend_from_slice(b"\r\nmore bytes\r\n");
            assert!(decode(&longer, LIMIT).is_err(), "{input:?}");
        }
    }
}

#[test]
fn mapped_ipv4_is_announced_as_ipv4() {
    let header = encode(
        Version::V1,
        Some(addr("[::ffff:192.0.2.7]:1000")),
        Some(addr("198.51.100.1:1")),
    );
    assert_eq!(header, b"PROXY TCP4 192.0.2.7 198.51.100.1 1000 1\r\n");
}

#[test]
fn v2_carries_the_ssl_tlv_with_version_and_common_name() {
    let tlv = ssl_tlv(&Ssl {
        version: "TLSv1.3",
        client_cert: true,
        common_name: Some("ops.example.com"),
    });
    let mut expected = vec![
        PP2_TYPE_SSL,
        0,
        33,
        PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN,
        0,
        0,
        0,
        0,
    ];
    expected.extend_from_slice(&[PP2_SUBTYPE_SSL_VERSION, 0, 7]);
    expected.extend_from_slice(b"TLSv1.3");
    expected.extend_from_slice(&[PP2_SUBTYPE_SSL_CN, 0, 15]);
    expected.extend_from_slice(b"ops.example.com");
    assert_eq!(tlv, expected);

    let (s, d) = (addr("192.0.2.7:1000"), addr("198.51.100.1:1"));
    let header = encode_with_tlvs(Version::V2, Some(s), Some(d), &tlv);
    assert_eq!(header.len(), 16 + 12 + tlv.len());
    assert!(header.ends_with(&tlv));
    let (announced, length) = decode(&header, LIMIT).unwrap().unwrap();
    assert_eq!(length, header.len());
    assert_eq!(
        announced,
        Announced::Proxied {
            source: s,
            destination: d
        }
    );
    // v1 has no room for TLVs.
    let v1 = encode_with_tlvs(Version::V1, Some(s), Some(d), &tlv);
    assert_eq!(v1, encode(Version::V1, Some(s), Some(d)));
}
