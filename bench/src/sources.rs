//! Many sources: short connections (name, whole answer, close), each from the
//! next of S distinct loopback source addresses (127.1.0.0 up), as many
//! clients behind many addresses look to a per-address rate limiter.
//! bench/harden.sh reads the daemon's CPU time around a run.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// The `index`th source address: 127.1.0.0 and up (all of 127/8 is loopback).
fn source(index: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(
        u32::from(Ipv4Addr::new(127, 1, 0, 0)) + index,
    ))
}

pub fn sources(target: SocketAddr, service: &str, sources: u32, total: u64) -> Result<(), String> {
    if sources == 0 || sources > (1 << 24) - (1 << 16) {
        return Err("--sources must be from 1 to 16,711,680".into());
    }
    let runtime = crate::runtime()?;
    let request = format!("{service}\r\n").into_bytes();
    let started = Instant::now();
    let (mut served, mut failed) = (0u64, 0u64);
    runtime.block_on(async {
        for i in 0..total {
            let from = source((i % u64::from(sources)) as u32);
            match tokio::time::timeout(Duration::from_secs(10), once(target, from, &request)).await
            {
                Ok(Ok(true)) => served += 1,
                _ => failed += 1,
            }
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{served} served, {failed} refused or failed, from {sources} sources in {seconds:.2} s ({:.0}/s)",
        total as f64 / seconds
    );
    Ok(())
}

/// One exchange from `from`; `true` for a `+` answer.
async fn once(target: SocketAddr, from: IpAddr, request: &[u8]) -> std::io::Result<bool> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let mut stream = socket.connect(target).await?;
    stream.write_all(request).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    Ok(answer.starts_with(b"+"))
}
