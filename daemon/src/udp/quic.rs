//! QUIC Initial packets unprotected: the keys a client's first packets are
//! protected with derive from their destination connection ID (RFC 9001
//! §5.2), so the daemon reads the ClientHello's server name and ALPN as any
//! on-path observer may. rustls derives the keys and removes the protection;
//! the frames are `tcpmux_proto::sniff::quic`'s.

use rustls::quic::{Keys, Version};
use rustls::Side;
use tcpmux_proto::sniff::datagram::{quic_initial, varint, QUIC_V1, QUIC_V2};

/// The Initial keys of a connection that `version` and the client's first
/// destination connection ID `dcid` name; on the server `side`, `remote`
/// opens the client's packets.
fn keys(version: u32, dcid: &[u8], side: Side) -> Option<Keys> {
    let version = match version {
        QUIC_V1 => Version::V1,
        QUIC_V2 => Version::V2,
        _ => return None,
    };
    // Initial packets are always AES-128-GCM with SHA-256 (RFC 9001 §5.2).
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256.tls13()?;
    Some(Keys::initial(version, suite, suite.quic?, dcid, side))
}

/// The decrypted payload (its frames) of the client Initial packet at the
/// start of `datagram`; `None` when it is none, or does not open.
pub(crate) fn initial_payload(datagram: &[u8]) -> Option<Vec<u8>> {
    let header = quic_initial(datagram)?;
    let keys = keys(header.version, header.dcid, Side::Server)?;
    let (length, width) = varint(datagram.get(header.length_at..)?)?;
    let pn_at = header.length_at + width;
    let mut packet = datagram.get(..pn_at.checked_add(length)?)?.to_vec();
    // The sample starts 4 bytes past the packet number's start (§5.4.2).
    let sample_len = keys.remote.header.sample_len();
    let sample = packet.get(pn_at + 4..pn_at + 4 + sample_len)?.to_vec();
    let (head, rest) = packet.split_at_mut(pn_at);
    let number = rest.get_mut(..4)?;
    keys.remote
        .header
        .decrypt_in_place(&sample, &mut head[0], number)
        .ok()?;
    let pn_len = usize::from(head[0] & 0x03) + 1;
    let pn = rest[..pn_len]
        .iter()
        .fold(0u64, |n, b| n << 8 | u64::from(*b));
    let (header_bytes, payload) = packet.split_at_mut(pn_at + pn_len);
    let opened = keys
        .remote
        .packet
        .decrypt_in_place(pn, header_bytes, payload);
    opened.ok().map(<[u8]>::to_vec)
}

/// A client's Initial packet holding `frames`, protected as a client does,
/// padded to 1200 bytes: for tests.
#[cfg(test)]
pub(crate) fn build_initial(version: u32, dcid: &[u8], frames: &[u8]) -> Vec<u8> {
    let keys = keys(version, dcid, Side::Client).expect("a known version");
    let kind = if version == QUIC_V2 { 1 } else { 0 };
    let mut header = vec![0xc0 | kind << 4 | 0x03];
    header.extend_from_slice(&version.to_be_bytes());
    header.push(dcid.len() as u8);
    header.extend_from_slice(dcid);
    header.extend_from_slice(&[4, 0xa, 0xb, 0xc, 0xd, 0]); // SCID, no token
    let tag = keys.local.packet.tag_len();
    // 2 bytes of Length, 4 of packet number, the frames padded, the tag.
    let padded = (1200 - header.len() - 2 - 4 - tag).max(frames.len());
    let mut payload = frames.to_vec();
    payload.resize(padded, 0);
    let length = 4 + padded + tag;
    header.extend_from_slice(&(0x4000 | length as u16).to_be_bytes());
    let pn_at = header.len();
    header.extend_from_slice(&[0, 0, 0, 1]);
    let sealed = keys
        .local
        .packet
        .encrypt_in_place(1, &header, &mut payload)
        .expect("sealed");
    let mut packet = header;
    packet.extend_from_slice(&payload);
    packet.extend_from_slice(sealed.as_ref());
    let sample = packet[pn_at + 4..pn_at + 4 + keys.local.header.sample_len()].to_vec();
    let (head, rest) = packet.split_at_mut(pn_at);
    keys.local
        .header
        .encrypt_in_place(&sample, &mut head[0], &mut rest[..4])
        .expect("protected");
    packet
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcpmux_proto::sniff::client_hello;
    use tcpmux_proto::sniff::client_hello::ClientHello;
    use tcpmux_proto::sniff::quic::{crypto_frame, CryptoStream};

    /// The ClientHello of the client Initial packet at the start of
    /// `datagram`, when that one packet holds all of it.
    fn client_hello(datagram: &[u8]) -> Option<ClientHello> {
        let mut crypto = CryptoStream::default();
        crypto.add(&initial_payload(datagram)?).ok()?;
        crypto.hello().ok().flatten()
    }

    fn hello(name: &str) -> Vec<u8> {
        client_hello::build(Some(name), &["h3"], 0, 1 << 20)[5..].to_vec()
    }

    #[test]
    fn a_client_initial_opens_to_its_client_hello_v1_and_v2() {
        for version in [QUIC_V1, QUIC_V2] {
            let packet = build_initial(version, &[7; 8], &crypto_frame(0, &hello("h3.example")));
            assert_eq!(packet.len(), 1200);
            let found = client_hello(&packet).expect("opened");
            assert_eq!(found.server_name.as_deref(), Some("h3.example"));
            assert_eq!(found.alpn, ["h3"]);
        }
    }

    #[test]
    fn a_packet_changed_in_transit_or_for_another_id_does_not_open() {
        let packet = build_initial(QUIC_V1, &[7; 8], &crypto_frame(0, &hello("x.example")));
        let mut changed = packet.clone();
        changed[600] ^= 1;
        assert!(initial_payload(&changed).is_none());
        let mut other_id = packet.clone();
        other_id[6] ^= 1; // the DCID's first byte: other keys
        assert!(initial_payload(&other_id).is_none());
        assert!(client_hello(&packet[..1199]).is_none());
    }
}
