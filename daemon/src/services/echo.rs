//! echo (RFC 862): every byte back, in order, until the client's EOF.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut S) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        conn.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn echoes_until_eof() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let task = tokio::spawn(async move { serve(&mut server).await });
        client.write_all(b"some bytes").await.unwrap();
        client.shutdown().await.unwrap();
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"some bytes");
        task.await.unwrap().unwrap();
    }
}
