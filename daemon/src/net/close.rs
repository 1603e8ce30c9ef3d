//! Graceful close: every reply byte reaches the client before the connection ends.
//!
//! Closing a socket that still has unread input makes the kernel send RST instead of
//! FIN, and an RST can destroy reply bytes still in flight. The seed server hid this
//! behind a fixed 5-second sleep; we send FIN, then read until the client closes too.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Most bytes we read and throw away while waiting for the client's FIN; a client
/// that keeps sending past this is not closing, and gets the RST it asked for.
pub(crate) const DRAIN_LIMIT: usize = 256 * 1024;

/// Flushes, shuts down the write side, then drains input until EOF, `DRAIN_LIMIT`
/// bytes or `drain` elapsed, whichever comes first. Errors mean the client is gone,
/// which is the goal, so they end the close quietly.
pub(crate) async fn close_gracefully<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    drain: Duration,
) {
    if conn.shutdown().await.is_err() {
        return;
    }
    // On the heap, not in the future: every session future would otherwise carry
    // these 4 KiB for its whole life, idle or not.
    let mut scratch = vec![0u8; 4096];
    let mut drained = 0;
    let _ = tokio::time::timeout(drain, async {
        while drained < DRAIN_LIMIT {
            match conn.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
}
