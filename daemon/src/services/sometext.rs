//! sometext: the seed's bulk service, exactly 1,000,007 bytes of printable text in
//! CRLF lines, then close. The text is built once and written from memory to
//! every client: this is the service that measures the daemon at socket speed.

use std::io;
use std::sync::OnceLock;

use super::chargen::pattern_line;
use crate::net::sendfile::FixedBytes;
use tokio::io::AsyncWriteExt;

use crate::net::conn::Conn;
use crate::net::stream::Metered;

/// The seed's size, an odd number so that no buffer size divides it.
pub(super) const SOMETEXT_LEN: usize = 1_000_007;

/// Most bytes one system call sends before the session yields to the others.
const TURN: usize = 256 * 1024;

fn text() -> &'static FixedBytes {
    static TEXT: OnceLock<FixedBytes> = OnceLock::new();
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
        // By write(2), not sendfile: for 1 MB per new connection with 8
        // clients, sendfile's 4 KiB page references cost more CPU than the copy
        // (docs/benchmarks.md, "sometext by write(2) again").
        FixedBytes::in_memory(text)
    })
}

pub(super) fn prepare() {
    text();
}

/// Straight to a plain socket, in turns; through the TLS session otherwise.
pub(super) async fn serve(conn: &mut Metered<Conn>) -> io::Result<()> {
    // Input is read and dropped: what the negotiation read ahead too, so the
    // socket is whole again for the fast path.
    conn.bytes_in += conn.get_mut().take_early().len() as u64;
    let Some(stream) = conn.get_ref().plain() else {
        return conn.write_all(text().as_slice()).await;
    };
    let mut sent = 0;
    let result = text().send(stream, 0, SOMETEXT_LEN, TURN, &mut sent).await;
    conn.bytes_out += sent;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_length_printable_lines() {
        let text = text().as_slice();
        assert_eq!(text.len(), SOMETEXT_LEN);
        assert!(text.ends_with(b"\r\n"));
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let body = line.strip_suffix(b"\r").expect("CRLF line ends");
            assert!(body.iter().all(|b| (0x20..0x7f).contains(b)));
        }
    }
}
