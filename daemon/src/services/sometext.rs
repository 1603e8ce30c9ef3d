//! sometext: the seed's bulk service, exactly 1,000,007 bytes of printable text in
//! CRLF lines, then close. The text is built once, so each client costs only the
//! writes: this is the service that measures the daemon at socket speed.

use std::io;
use std::sync::OnceLock;

use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::chargen::pattern_line;

/// The seed's size, an odd number so that no buffer size divides it.
pub const SOMETEXT_LEN: usize = 1_000_007;

pub fn text() -> &'static [u8] {
    static TEXT: OnceLock<Vec<u8>> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut text = Vec::with_capacity(SOMETEXT_LEN);
        let mut index = 0;
        while text.len() < SOMETEXT_LEN {
            let line = pattern_line(index);
            let room = SOMETEXT_LEN - text.len();
            if room >= line.len() {
                text.extend_from_slice(&line);
            } else {
                // A shorter last line, still ended by CRLF.
                text.extend_from_slice(&line[..room - 2]);
                text.extend_from_slice(b"\r\n");
            }
            index += 1;
        }
        text
    })
}

pub async fn serve<S: AsyncWrite + Unpin>(conn: &mut S) -> io::Result<()> {
    conn.write_all(text()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_length_printable_lines() {
        let text = text();
        assert_eq!(text.len(), SOMETEXT_LEN);
        assert!(text.ends_with(b"\r\n"));
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let body = line.strip_suffix(b"\r").expect("CRLF line ends");
            assert!(body.iter().all(|b| (0x20..0x7f).contains(b)));
        }
    }
}
