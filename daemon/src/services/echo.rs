//! echo (RFC 862): every byte back, in order, until the client's EOF. An idle
//! session holds no buffer: one is lent only while bytes are in flight.

use std::io;

use tokio::io::AsyncWriteExt;

use crate::net::conn::Conn;
use crate::net::stream::Metered;

/// Most bytes taken per read: the size of a TLS record.
const CHUNK: usize = 16 * 1024;

pub(super) async fn serve(conn: &mut Metered<Conn>) -> io::Result<()> {
    loop {
        let (buf, n) = conn.read_lent(CHUNK).await?;
        if n == 0 {
            return Ok(());
        }
        conn.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::heap;
    use crate::net::buffers::{kept_buffers, lent_out};

    #[tokio::test]
    async fn echoes_until_eof_holding_no_buffer_while_idle() {
        let (server, mut client) = crate::net::test_pair().await;
        let mut conn = Metered::new(Conn::Plain(server));
        let before = heap::live();
        let session = tokio::spawn(async move { serve(&mut conn).await.map(|()| conn.bytes_in) });
        for message in [&b"ping"[..], &[7u8; 40_000][..]] {
            client.write_all(message).await.unwrap();
            let mut back = vec![0u8; message.len()];
            client.read_exact(&mut back).await.unwrap();
            assert_eq!(back, message);
            drop(back);
            // The session waits for more input now, and holds nothing to read it
            // into: its task and little else (a 16 KiB buffer before).
            tokio::task::yield_now().await;
            assert_eq!(lent_out(), 0);
            let held = heap::live() - before - kept_buffers();
            assert!(held < 1024, "an idle echo session holds {held} bytes");
        }
        client.shutdown().await.unwrap();
        assert_eq!(session.await.unwrap().unwrap(), 40_004);
    }
}
