//! isotime: the seed server's own time service, one ISO 8601 UTC line
//! (`2026-12-02T13:31:13Z`). The seed printed `2004-FEB-11T23:45:29`, which is not
//! ISO 8601; we print the standard form.

use std::io;

use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::clock::Civil;

pub async fn serve<S: AsyncWrite + Unpin>(conn: &mut S) -> io::Result<()> {
    let line = format!("{}\r\n", Civil::now().iso8601());
    conn.write_all(line.as_bytes()).await
}
