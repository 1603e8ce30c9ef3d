use super::*;
use crate::test_rng::Rng;

fn wireguard_initiation() -> Vec<u8> {
    let mut packet = vec![1, 0, 0, 0];
    packet.extend((0..144).map(|i| (i * 7 + 3) as u8));
    packet
}

fn openvpn_reset() -> Vec<u8> {
    // P_CONTROL_HARD_RESET_CLIENT_V2, a session ID, no ACKs, packet ID 0.
    let mut packet = vec![7 << 3, 0x8a, 0x1f, 0x02, 0x9c, 0x44, 0x10, 0xee, 0x71];
    packet.extend_from_slice(&[0, 0, 0, 0, 0]);
    packet
}

/// A QUIC v1 client Initial's header over a padded 1200-byte datagram.
fn quic_initial_packet(version: u32, dcid: &[u8]) -> Vec<u8> {
    let kind = if version == QUIC_V2 { 1 } else { 0 };
    let mut packet = vec![0xc0 | kind << 4 | 0x03];
    packet.extend_from_slice(&version.to_be_bytes());
    packet.push(dcid.len() as u8);
    packet.extend_from_slice(dcid);
    packet.extend_from_slice(&[4, 1, 2, 3, 4]); // SCID
    packet.push(0); // no token
    let length = 1200 - packet.len() - 2;
    packet.extend_from_slice(&(0x4000 | length as u16).to_be_bytes());
    packet.resize(1200, 0);
    packet
}

#[test]
fn each_probe_takes_its_own_protocol_and_nothing_of_the_others() {
    let cases = [
        (quic_initial_packet(QUIC_V1, &[9; 8]), Datagram::Quic),
        (quic_initial_packet(QUIC_V2, &[9; 20]), Datagram::Quic),
        (build_dtls_hello(Some("vpn.example"), &[]), Datagram::Dtls),
        (wireguard_initiation(), Datagram::WireGuard),
        (openvpn_reset(), Datagram::OpenVpn),
        (build_dns_query(0x1234, "example.org", false), Datagram::Dns),
        (build_dns_query(7, "a.b.example.org.", true), Datagram::Dns),
    ];
    for (packet, protocol) in &cases {
        assert_eq!(
            classify(packet, &Datagram::ALL),
            Some(*protocol),
            "{protocol:?}"
        );
        let others: Vec<_> = Datagram::ALL
            .into_iter()
            .filter(|p| p != protocol)
            .collect();
        assert_eq!(
            classify(packet, &others),
            None,
            "{protocol:?} taken by another"
        );
        assert_eq!(classify(packet, &[]), None);
    }
}

#[test]
fn a_truncated_or_extended_datagram_is_no_longer_its_protocol() {
    let strict = [
        build_dns_query(1, "example.org", true),
        wireguard_initiation(),
        build_dtls_hello(Some("x.example"), &["h2"]),
        quic_initial_packet(QUIC_V1, &[1; 8]),
    ];
    for packet in &strict {
        let whole = classify(packet, &Datagram::ALL);
        for cut in 0..packet.len() {
            let part = classify(&packet[..cut], &Datagram::ALL);
            assert_ne!(part, whole, "cut at {cut} of {whole:?}");
        }
    }
    let mut longer = build_dns_query(1, "example.org", false);
    longer.push(0);
    assert!(!dns_query(&longer));
    let mut longer = wireguard_initiation();
    longer.push(0);
    assert!(!wireguard(&longer));
}

#[test]
fn dtls_gives_the_server_name_and_alpn() {
    let hello = dtls_record(&build_dtls_hello(Some("VPN.Example"), &["webrtc"])).unwrap();
    assert_eq!(hello.server_name.as_deref(), Some("vpn.example"));
    assert_eq!(hello.alpn, ["webrtc"]);
    assert_eq!(
        dtls_record(&build_dtls_hello(None, &[]))
            .unwrap()
            .server_name,
        None
    );
}

#[test]
fn quic_initial_reads_the_clear_header() {
    let packet = quic_initial_packet(QUIC_V1, &[5; 12]);
    let initial = quic_initial(&packet).unwrap();
    assert_eq!(
        (initial.version, initial.dcid, initial.scid),
        (QUIC_V1, &[5; 12][..], &[1, 2, 3, 4][..])
    );
    assert_eq!(initial.length_at, 1 + 4 + 1 + 12 + 1 + 4 + 1);
    // A short DCID (a server's choice, never a client's first), a Handshake
    // packet, an unknown version, an unpadded datagram: not a client Initial.
    assert!(quic_initial(&quic_initial_packet(QUIC_V1, &[5; 4])).is_none());
    let mut handshake = packet.clone();
    handshake[0] = 0xe3;
    assert!(quic_initial(&handshake).is_none());
    let mut other = packet.clone();
    other[1..5].copy_from_slice(&0xff00_001d_u32.to_be_bytes());
    assert!(quic_initial(&other).is_none());
    assert!(quic_initial(&packet[..1199]).is_none());
}

#[test]
fn varints_of_every_width() {
    assert_eq!(varint(&[0x25]), Some((37, 1)));
    assert_eq!(varint(&[0x7b, 0xbd]), Some((15293, 2)));
    assert_eq!(varint(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
    assert_eq!(
        varint(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]),
        Some((151_288_809_941_952_652, 8))
    );
    assert_eq!(varint(&[0x40]), None);
    assert_eq!(varint(&[]), None);
}

#[test]
fn random_and_tiny_datagrams_are_nothing_known_and_never_panic() {
    let mut rng = Rng(0x5eed_da7a);
    let mut taken = 0;
    for _ in 0..20_000 {
        let len = rng.below(1400);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if classify(&bytes, &Datagram::ALL).is_some() {
            taken += 1;
        }
        let _ = dtls_record(&bytes);
    }
    // OpenVPN's probe, the loosest, takes one random datagram in 128.
    assert!(taken < 400, "{taken} random datagrams classified");
    for byte in 0..=255u8 {
        assert_eq!(classify(&[byte], &Datagram::ALL), None);
    }
}

#[test]
fn connection_ids_are_read_from_long_and_short_headers() {
    // A server's Handshake packet (v1, type 2): to the client's ID, from
    // its own.
    let mut handshake = vec![0xe0, 0, 0, 0, 1, 4, 1, 2, 3, 4, 8];
    handshake.extend_from_slice(&[9; 8]);
    handshake.extend_from_slice(&[0x40, 0x20]);
    let header = long_header(&handshake).expect("a long header");
    assert_eq!(
        (header.version, header.dcid, header.scid),
        (1, &[1, 2, 3, 4][..], &[9; 8][..])
    );
    // Version negotiation, IDs over 20 bytes, or cut short: none.
    let mut negotiation = handshake.clone();
    negotiation[1..5].copy_from_slice(&[0; 4]);
    assert_eq!(long_header(&negotiation), None);
    let mut long_id = handshake.clone();
    long_id[5] = 21;
    assert_eq!(long_header(&long_id), None);
    for cut in 0..19 {
        assert_eq!(long_header(&handshake[..cut]), None, "cut at {cut}");
    }
    // A short header: the ID is whatever length its chooser uses.
    let mut short = vec![0x41];
    short.extend_from_slice(&[9; 8]);
    short.extend_from_slice(&[0; 20]);
    assert_eq!(short_header_dcid(&short, 8), Some(&[9; 8][..]));
    assert_eq!(short_header_dcid(&short[..28], 8), None);
    assert_eq!(short_header_dcid(&short, 0), None);
    assert_eq!(short_header_dcid(&handshake, 4), None);
}

#[test]
fn header_readers_never_panic_on_any_bytes() {
    let mut rng = Rng(44);
    for _ in 0..20_000 {
        let len = rng.below(64);
        let bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
        if let Some(header) = long_header(&bytes) {
            assert!(header.dcid.len() <= 20 && header.scid.len() <= 20);
        }
        for id in 0..22 {
            if let Some(dcid) = short_header_dcid(&bytes, id) {
                assert_eq!(dcid.len(), id);
            }
        }
    }
}
