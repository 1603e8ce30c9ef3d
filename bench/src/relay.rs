//! The floor of a task-per-session proxy on tokio: bench/c/relay.c's
//! exchange (read the request line, connect to the backend, `+`, copy both
//! ways, each EOF passed on, close when both have ended) as the least tokio
//! code that does it. No lookup, limits, timers, logs or tables: what it
//! costs per connection beside the C relay is what the design costs before
//! any of tcpmuxd's own work (bench/proxy_short.sh prints the three).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request line read (RFC 1078 names are short).
const LINE: usize = 512;

/// Serves `listen` on one thread until killed, relaying to `to`.
pub fn relay(listen: SocketAddr, to: SocketAddr) -> Result<(), String> {
    let runtime = crate::runtime()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| format!("listen on {listen}: {e}"))?;
        if let Ok(bound) = listener.local_addr() {
            println!("listening {bound}");
        }
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                // A failed exchange ends only its own connection.
                let _ = session(client, to).await;
            });
        }
    })
}

async fn session(mut client: TcpStream, to: SocketAddr) -> std::io::Result<()> {
    let mut line = [0u8; LINE];
    let mut seen = 0;
    let end = loop {
        let got = client.read(&mut line[seen..]).await?;
        if got == 0 {
            return Ok(());
        }
        seen += got;
        if let Some(at) = line[..seen].iter().position(|&b| b == b'\n') {
            break at + 1;
        }
        if seen == LINE {
            return Ok(());
        }
    };
    let Ok(mut backend) = TcpStream::connect(to).await else {
        return client.write_all(b"-backend unavailable\r\n").await;
    };
    client.write_all(b"+\r\n").await?;
    if seen > end {
        backend.write_all(&line[end..seen]).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut backend).await?;
    Ok(())
}
