//! Bytes as lowercase hex and back: connection IDs and server IDs in
//! frames and configuration, key fingerprints in the log.

/// `bytes` as lowercase hex, two digits each.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes `text` spells, two hex digits each (either case); `None` for
/// an odd length or a character that is not a hex digit.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    // from_str_radix alone would take "+1" for a byte.
    if text.len() % 2 != 0 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_reads_back_and_refuses_what_is_not_hex() {
        assert_eq!(encode(&[0x0a, 0xff, 0]), "0aff00");
        assert_eq!(decode("0aFF00"), Some(vec![0x0a, 0xff, 0]));
        assert_eq!(decode(""), Some(Vec::new()));
        for bad in ["0", "0g", "+1", "é1"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
