//! The status line every kind sends (`+` and its message, or `-` and why), and
//! telling a client that went away from a failure: the pieces the service
//! kinds share, kept apart from the dispatch in mod.rs that uses the kinds.

use std::io;

use tcpmux_proto::encode_reply;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::net::conn::Conn;
use crate::net::stream::Metered;
use crate::outcome::{Outcome, Refusal};

/// Sends the `+` line.
pub(super) async fn accept<S: AsyncWrite + Unpin>(conn: &mut S, message: &str) -> io::Result<()> {
    if message.is_empty() {
        // The usual line, without building it (every proxied client gets it).
        return conn.write_all(b"+\r\n").await;
    }
    let mut line = Vec::new();
    encode_reply(true, message, &mut line);
    conn.write_all(&line).await
}

/// Tells the client why it is refused (a `-` line, the last thing it gets,
/// if the refusal tells it anything), and makes the outcome.
pub(crate) async fn refused(conn: &mut Metered<Conn>, refusal: Refusal) -> Outcome {
    if let Some(told) = refusal.told() {
        refuse(conn, &told).await;
    }
    Outcome::Refused(refusal)
}

/// Sends a `-` line, the last thing the client gets. A failure means the
/// client is already gone; nothing to do.
async fn refuse(conn: &mut Metered<Conn>, reason: &str) {
    let mut line = Vec::new();
    encode_reply(false, reason, &mut line);
    // Boxed: any session may end in a refusal, so this future is part of
    // every session's, idle ones included; refusing is the rare path.
    let _ = Box::pin(send_last(conn, &line)).await;
}

/// Sends `bytes`, the last before the session's graceful close, which
/// follows at once: on a plain socket they leave with the FIN, in one
/// segment (`Stream::send_before_fin`).
pub(crate) async fn send_last(conn: &mut Metered<Conn>, bytes: &[u8]) -> io::Result<()> {
    match conn.get_ref().socket() {
        Some(socket) => socket.send_before_fin(bytes).await?,
        None => return conn.write_all(bytes).await,
    }
    conn.bytes_out += bytes.len() as u64;
    Ok(())
}

/// Errors that only mean "the client went away", the normal end of an endless
/// service such as chargen.
pub(super) fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}
