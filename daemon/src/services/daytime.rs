//! daytime (RFC 867): one human-readable line with the current UTC time.

use std::io;

use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::clock::Civil;

pub async fn serve<S: AsyncWrite + Unpin>(conn: &mut S) -> io::Result<()> {
    let line = format!("{}\r\n", Civil::now().daytime());
    conn.write_all(line.as_bytes()).await
}
