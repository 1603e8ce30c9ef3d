//! The frames of QUIC Initial packets (RFC 9000 §19), once their protection
//! is removed: the CRYPTO frames that carry the client's ClientHello,
//! gathered by offset from one or several packets until the message is
//! whole. Pure code: decrypted payloads in, the ClientHello out.

use super::client_hello::{self, ClientHello, HelloError};
use super::datagram::varint;

/// The most CRYPTO data kept for one client: a ClientHello with
/// post-quantum key shares is under 2 KB; 16 KB is room for any real one.
pub const MAX_CRYPTO: usize = 16 * 1024;

/// Why Initial payloads are not a client's opening.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuicError {
    /// A frame that does not parse, or one an Initial packet may not hold.
    #[error("malformed frame in a QUIC Initial packet")]
    Frame,
    /// CRYPTO data beyond [`MAX_CRYPTO`].
    #[error("more than {MAX_CRYPTO} bytes of CRYPTO data")]
    TooLong,
    /// The CRYPTO stream is not a ClientHello.
    #[error(transparent)]
    Hello(#[from] HelloError),
}

/// The CRYPTO stream of a client's Initial packets, as it arrives.
#[derive(Clone, Debug, Default)]
pub struct CryptoStream {
    /// Pieces by offset; overlaps are allowed, as a retransmission is.
    pieces: Vec<(usize, Vec<u8>)>,
}

impl CryptoStream {
    /// Adds the frames of one decrypted Initial payload.
    pub fn add(&mut self, payload: &[u8]) -> Result<(), QuicError> {
        let mut at = 0;
        while at < payload.len() {
            let kind = payload[at];
            at += 1;
            match kind {
                0x00 | 0x01 => {} // PADDING, PING
                0x02 | 0x03 => at = skip_ack(payload, at, kind == 0x03)?,
                0x06 => {
                    let (offset, n) = read(payload, at)?;
                    let (len, m) = read(payload, at + n)?;
                    let start = at + n + m;
                    let data = payload.get(start..start + len).ok_or(QuicError::Frame)?;
                    if offset.saturating_add(len) > MAX_CRYPTO {
                        return Err(QuicError::TooLong);
                    }
                    self.pieces.push((offset, data.to_vec()));
                    at = start + len;
                }
                0x1c => {
                    // CONNECTION_CLOSE: error code, frame type, reason.
                    let (_, n) = read(payload, at)?;
                    let (_, m) = read(payload, at + n)?;
                    let (reason, r) = read(payload, at + n + m)?;
                    at = at + n + m + r + reason;
                    if at > payload.len() {
                        return Err(QuicError::Frame);
                    }
                }
                _ => return Err(QuicError::Frame),
            }
        }
        Ok(())
    }

    /// The bytes from offset 0 that have all arrived.
    fn contiguous(&self) -> Vec<u8> {
        let mut pieces: Vec<&(usize, Vec<u8>)> = self.pieces.iter().collect();
        pieces.sort_by_key(|(offset, _)| *offset);
        let mut out = Vec::new();
        for (offset, data) in pieces {
            if *offset > out.len() {
                break;
            }
            let skip = out.len() - offset;
            if skip < data.len() {
                out.extend_from_slice(&data[skip..]);
            }
        }
        out
    }

    /// The ClientHello, once the stream holds all of it.
    pub fn hello(&self) -> Result<Option<ClientHello>, QuicError> {
        Ok(client_hello::parse_message(&self.contiguous())?)
    }
}

fn read(payload: &[u8], at: usize) -> Result<(usize, usize), QuicError> {
    varint(payload.get(at..).ok_or(QuicError::Frame)?).ok_or(QuicError::Frame)
}

/// Where the ACK frame whose body starts at `at` ends.
fn skip_ack(payload: &[u8], mut at: usize, ecn: bool) -> Result<usize, QuicError> {
    // Largest acknowledged, delay, range count, first range.
    let mut fields = [0usize; 4];
    for field in &mut fields {
        let (value, n) = read(payload, at)?;
        *field = value;
        at += n;
    }
    // Each further range is a gap and a length; bounded by the payload.
    let ranges = fields[2].min(payload.len());
    for _ in 0..ranges * 2 + if ecn { 3 } else { 0 } {
        at += read(payload, at)?.1;
    }
    Ok(at)
}

/// A CRYPTO frame holding `data` at `offset`: for tests and for building
/// Initial packets.
pub fn crypto_frame(offset: usize, data: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x06];
    frame.extend_from_slice(&encode_varint(offset));
    frame.extend_from_slice(&encode_varint(data.len()));
    frame.extend_from_slice(data);
    frame
}

/// A QUIC variable-length integer (RFC 9000 §16), in its shortest form.
pub fn encode_varint(value: usize) -> Vec<u8> {
    let value = value as u64;
    match value {
        0..=0x3f => vec![value as u8],
        0x40..=0x3fff => ((value as u16) | 0x4000).to_be_bytes().to_vec(),
        0x4000..=0x3fff_ffff => ((value as u32) | 0x8000_0000).to_be_bytes().to_vec(),
        _ => (value | 0xc000_0000_0000_0000).to_be_bytes().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello's handshake message, without TLS's record header.
    fn hello_message(name: &str, padding: usize) -> Vec<u8> {
        client_hello::build(Some(name), &["h3"], padding, 1 << 20)[5..].to_vec()
    }

    #[test]
    fn a_hello_in_one_packet_or_split_over_several_in_any_order() {
        let message = hello_message("www.example.org", 1500);
        let mut whole = CryptoStream::default();
        let mut payload = vec![0x01, 0x02, 0x00, 0x00, 0x00, 0x00]; // PING, ACK
        payload.extend(crypto_frame(0, &message));
        payload.extend([0u8; 40]);
        whole.add(&payload).unwrap();
        let hello = whole.hello().unwrap().unwrap();
        assert_eq!(hello.server_name.as_deref(), Some("www.example.org"));
        assert_eq!(hello.alpn, ["h3"]);
        // Three packets, the last first, one of them resent.
        let cuts = [0, 700, 1400, message.len()];
        let mut split = CryptoStream::default();
        for i in [2, 0, 0, 1] {
            let piece = &message[cuts[i]..cuts[i + 1]];
            split.add(&crypto_frame(cuts[i], piece)).unwrap();
            let done = split.hello().unwrap().is_some();
            assert_eq!(done, i == 1, "after piece {i}");
        }
    }

    #[test]
    fn frames_an_initial_packet_may_not_hold_are_refused() {
        let mut stream = CryptoStream::default();
        assert_eq!(stream.add(&[0x08, 0, 0]), Err(QuicError::Frame)); // STREAM
        assert_eq!(stream.add(&[0x06, 0x05]), Err(QuicError::Frame)); // cut short
        let far = crypto_frame(MAX_CRYPTO, b"x");
        assert_eq!(stream.add(&far), Err(QuicError::TooLong));
        let mut other = CryptoStream::default();
        other.add(&crypto_frame(0, b"\x02\x00\x00\x01x")).unwrap();
        assert!(matches!(other.hello(), Err(QuicError::Hello(_))));
    }

    #[test]
    fn varints_round_trip() {
        for value in [0, 63, 64, 16_383, 16_384, 1 << 30, (1 << 30) - 1] {
            let bytes = encode_varint(value);
            assert_eq!(varint(&bytes), Some((value, bytes.len())));
        }
    }
}
