//! chargen (RFC 864): the rotating 72-character pattern, until the client goes away.

use std::io;
use std::sync::OnceLock;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Characters of one line, and the printable ASCII set the pattern rotates through.
const LINE_CHARS: usize = 72;
const FIRST: u8 = b' ';
const PRINTABLE: usize = 95;

/// Line `index` of the pattern: 72 characters starting `index` places into the
/// printable set, then CRLF.
pub fn pattern_line(index: usize) -> [u8; LINE_CHARS + 2] {
    let mut line = [0u8; LINE_CHARS + 2];
    for (i, byte) in line[..LINE_CHARS].iter_mut().enumerate() {
        *byte = FIRST + ((index + i) % PRINTABLE) as u8;
    }
    line[LINE_CHARS] = b'\r';
    line[LINE_CHARS + 1] = b'\n';
    line
}

/// Periods of the pattern to write at once: five periods (35,150 bytes) moved
/// 1.6x to 2x what one (7,030 bytes) did on one connection (docs/benchmarks.md).
const PERIODS_PER_WRITE: usize = 5;

/// Whole periods of the pattern (95 lines each), built once and written over and
/// over; whole periods keep the stream continuous from one write to the next.
fn cycle() -> &'static [u8] {
    static CYCLE: OnceLock<Vec<u8>> = OnceLock::new();
    CYCLE.get_or_init(|| {
        (0..PRINTABLE * PERIODS_PER_WRITE)
            .map(|i| i % PRINTABLE)
            .flat_map(pattern_line)
            .collect()
    })
}

pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut S) -> io::Result<()> {
    let (mut input, mut output) = tokio::io::split(conn);
    let generate = async {
        loop {
            output.write_all(cycle()).await?;
            // One buffer per turn: without this, a connection whose socket keeps
            // draining would write on and on while the others wait.
            tokio::task::yield_now().await;
        }
    };
    // Input is discarded; its EOF does not stop the stream (a client may half-close
    // and keep reading), only a failed write does.
    let discard = async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = input.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
        std::future::pending::<()>().await
    };
    let result: io::Result<()> = tokio::select! {
        result = generate => result,
        () = discard => Ok(()),
    };
    match result {
        Err(e) if super::is_disconnect(&e) => Ok(()),
        other => other,
    }
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
        assert_eq!(cycle().len(), PERIODS_PER_WRITE * period);
        assert_eq!(&cycle()[..period], &cycle()[period..2 * period]);
    }
}
