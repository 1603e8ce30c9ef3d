//! chargen (RFC 864): the rotating 72-character pattern, until the client goes away.

use std::io;
use std::sync::OnceLock;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::net::conn::Conn;
use crate::net::sendfile::FixedBytes;
use crate::net::stream::{Metered, Stream};

/// Characters of one line, and the printable ASCII set the pattern rotates through.
const LINE_CHARS: usize = 72;
const FIRST: u8 = b' ';
const PRINTABLE: usize = 95;

/// Line `index` of the pattern: 72 characters starting `index` places into the
/// printable set, then CRLF.
pub(super) fn pattern_line(index: usize) -> [u8; LINE_CHARS + 2] {
    let mut line = [0u8; LINE_CHARS + 2];
    for (i, byte) in line[..LINE_CHARS].iter_mut().enumerate() {
        *byte = FIRST + ((index + i) % PRINTABLE) as u8;
    }
    line[LINE_CHARS] = b'\r';
    line[LINE_CHARS + 1] = b'\n';
    line
}

/// Periods of the pattern held in the memfd and sent in one pass.
const PERIODS: usize = 20;
/// Most bytes one system call sends before the session yields to the others:
/// five periods (35,150 bytes); see docs/benchmarks.md for how this was chosen.
const TURN: usize = 5 * PRINTABLE * (LINE_CHARS + 2);

/// Whole periods of the pattern (95 lines each), built once and sent over and
/// over; whole periods keep the stream continuous from one pass to the next.
fn cycle() -> &'static FixedBytes {
    static CYCLE: OnceLock<FixedBytes> = OnceLock::new();
    CYCLE.get_or_init(|| {
        let bytes = (0..PRINTABLE * PERIODS)
            .map(|i| i % PRINTABLE)
            .flat_map(pattern_line)
            .collect();
        FixedBytes::new("chargen", bytes)
    })
}

pub(super) fn prepare() {
    cycle();
}

pub(super) async fn serve(conn: &mut Metered<Conn>) -> io::Result<()> {
    // Input is read and dropped: what the negotiation read ahead too, so the
    // socket is whole again for the fast path.
    conn.bytes_in += conn.get_mut().take_early().len() as u64;
    let Some(stream) = conn.get_ref().plain() else {
        return through_tls(conn).await;
    };
    let (result, sent, received) = by_sendfile(stream).await;
    conn.bytes_out += sent;
    conn.bytes_in += received;
    match result {
        Err(e) if super::status_line::is_disconnect(&e) => Ok(()),
        other => other,
    }
}

/// The same stream written through a TLS session, its input read and dropped.
async fn through_tls(conn: &mut Metered<Conn>) -> io::Result<()> {
    let (mut input, mut output) = tokio::io::split(conn);
    let generate = async {
        let cycle = cycle().as_slice();
        loop {
            for turn in cycle.chunks(TURN) {
                output.write_all(turn).await?;
            }
        }
    };
    let discard = async {
        let mut buf = vec![0u8; 4096];
        while input.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        std::future::pending::<()>().await
    };
    let result: io::Result<()> = tokio::select! {
        result = generate => result,
        () = discard => Ok(()),
    };
    match result {
        Err(e) if super::status_line::is_disconnect(&e) => Ok(()),
        other => other,
    }
}

/// The pattern by sendfile from the memfd, input discarded; the result and
/// the bytes sent and received.
async fn by_sendfile(stream: &Stream) -> (io::Result<()>, u64, u64) {
    let (mut sent, mut received) = (0u64, 0u64);
    let generate = async {
        let cycle = cycle();
        loop {
            cycle
                .send(stream, 0, cycle.as_slice().len(), TURN, &mut sent)
                .await?;
        }
    };
    // Input is discarded; its EOF does not stop the stream (a client may half-close
    // and keep reading), only a failed write does.
    let discard = async {
        loop {
            match stream.read_lent(4096).await {
                Ok((_, 0)) | Err(_) => break,
                Ok((_, n)) => received += n as u64,
            }
        }
        std::future::pending::<()>().await
    };
    let result: io::Result<()> = tokio::select! {
        result = generate => result,
        () = discard => Ok(()),
    };
    (result, sent, received)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc864_pattern() {
        let first = pattern_line(0);
        assert_eq!(
            &first[..LINE_CHARS],
            &b" !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefg"[..]
        );
        assert_eq!(pattern_line(1)[0], b'!');
        assert_eq!(pattern_line(PRINTABLE), first);
        let period = PRINTABLE * (LINE_CHARS + 2);
        let cycle = cycle().as_slice();
        assert_eq!(cycle.len(), PERIODS * period);
        assert_eq!(&cycle[..period], &cycle[period..2 * period]);
    }
}
