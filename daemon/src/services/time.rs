//! time (RFC 868): four bytes, seconds since 1900-01-01 UTC, big-endian.

use std::io;

use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::clock::{rfc868, unix_seconds};

pub async fn serve<S: AsyncWrite + Unpin>(conn: &mut S) -> io::Result<()> {
    conn.write_all(&rfc868(unix_seconds())).await
}
