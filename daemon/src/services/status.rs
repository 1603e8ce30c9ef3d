//! The status line every kind sends (`+` and its message, or `-` and why), and
//! telling a client that went away from a failure: the pieces the service
//! kinds share, kept apart from the dispatch in mod.rs that uses the kinds.

use std::io;

use tcpmux_proto::encode_reply;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Sends the `+` line.
pub async fn accept<S: AsyncWrite + Unpin>(conn: &mut S, message: &str) -> io::Result<()> {
    let mut line = Vec::new();
    encode_reply(true, message, &mut line);
    conn.write_all(&line).await
}

/// Sends a `-` line. A failure means the client is already gone; nothing to do.
pub async fn refuse<S: AsyncWrite + Unpin>(conn: &mut S, reason: &str) {
    let mut line = Vec::new();
    encode_reply(false, reason, &mut line);
    let _ = conn.write_all(&line).await;
}

/// Errors that only mean "the client went away", the normal end of an endless
/// service such as chargen.
pub fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}
