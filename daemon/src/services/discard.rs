//! discard (RFC 863): read and drop everything until the client's EOF.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

pub async fn serve<S: AsyncRead + Unpin>(conn: &mut S) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    while conn.read(&mut buf).await? != 0 {}
    Ok(())
}
