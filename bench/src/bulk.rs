//! Bulk transfer: `source`, a backend that sends a fixed number of bytes per
//! connection (so relays can be put between it and the client), and `bulk`, the
//! client: N connections at once, each read to EOF and its byte count checked.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::{progress, BUFFER};

/// `source` with one task per connection on one thread instead of a thread
/// per connection: for connection-rate runs, where spawning a thread would
/// cost the backend more than the front being measured. `ports` listeners on
/// consecutive ports from `listen`'s (a pool of that many members).
pub fn source_tasks(listen: SocketAddr, bytes: u64, ports: u16) -> Result<(), String> {
    let runtime = crate::runtime()?;
    runtime.block_on(async move {
        let block: Arc<[u8]> = (0..BUFFER).map(|i| (i % 251) as u8).collect();
        let mut loops = tokio::task::JoinSet::new();
        for i in 0..ports.max(1) {
            let port = listen
                .port()
                .checked_add(i)
                .ok_or("--ports runs past port 65535")?;
            let addr = SocketAddr::new(listen.ip(), port);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            loops.spawn(accept_loop(listener, Arc::clone(&block), bytes));
        }
        println!("listening {listen} ({} ports)", ports.max(1));
        let _ = io::stdout().flush();
        while loops.join_next().await.is_some() {}
        Ok(())
    })
}

async fn accept_loop(listener: tokio::net::TcpListener, block: Arc<[u8]>, bytes: u64) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            continue;
        };
        let block = Arc::clone(&block);
        tokio::spawn(async move {
            let mut left = bytes;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                if conn.write_all(&block[..n]).await.is_err() {
                    return;
                }
                left -= n as u64;
            }
            // As in `source`: FIN, then wait for the client's close.
            let _ = conn.shutdown().await;
            let mut scratch = [0u8; 4096];
            let drain = async { while matches!(conn.read(&mut scratch).await, Ok(n) if n > 0) {} };
            let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
        });
    }
}

pub fn source(listen: SocketAddr, bytes: u64) -> Result<(), String> {
    let listener =
        TcpListener::bind(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    // The bound address (the real port when 0 was asked for), for scripts.
    if let Ok(bound) = listener.local_addr() {
        println!("listening {bound}");
        let _ = io::stdout().flush();
    }
    let block: Arc<[u8]> = (0..BUFFER).map(|i| (i % 251) as u8).collect();
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let block = Arc::clone(&block);
        std::thread::spawn(move || {
            let mut left = bytes;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                if conn.write_all(&block[..n]).is_err() {
                    return;
                }
                left -= n as u64;
            }
            // FIN after the last byte; wait for the client's close so no RST can
            // cut the tail off.
            let _ = conn.shutdown(Shutdown::Write);
            let mut scratch = [0u8; 4096];
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            while matches!(conn.read(&mut scratch), Ok(n) if n > 0) {}
        });
    }
    Ok(())
}

pub struct Sample {
    pub started: Instant,
    pub finished: Instant,
    pub bytes: u64,
}

impl Sample {
    fn rate(&self) -> f64 {
        self.bytes as f64 / 1e6 / (self.finished - self.started).as_secs_f64().max(1e-9)
    }
}

/// What a download sends before it reads: nothing (a plain source), a TCPMUX
/// name, or raw first bytes (an SSH banner or a ClientHello, for detection).
#[derive(Clone, Debug)]
pub enum Opening {
    Nothing,
    Service(String),
    Probe(Vec<u8>),
}

impl Opening {
    fn service(&self) -> Option<&str> {
        match self {
            Opening::Service(name) => Some(name),
            _ => None,
        }
    }
}

fn one_connection(target: SocketAddr, opening: &Opening, expect: u64) -> io::Result<Sample> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(target)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    if let Opening::Probe(probe) = opening {
        stream.write_all(probe)?;
    }
    if let Some(name) = opening.service() {
        let name = tcpmux::ServiceName::parse(name).map_err(|e| io::Error::other(e.to_string()))?;
        tcpmux::negotiate(&mut stream, &name, &tcpmux::Options::default())
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    let mut buf = vec![0u8; BUFFER];
    let mut bytes = 0u64;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    let finished = Instant::now();
    if bytes != expect {
        return Err(io::Error::other(format!(
            "received {bytes} bytes, expected {expect}"
        )));
    }
    Ok(Sample {
        started,
        finished,
        bytes,
    })
}

/// Aggregate and per-connection rates over simultaneous transfers.
pub fn aggregate(samples: &[Sample]) -> Result<Run, String> {
    let first = samples
        .iter()
        .map(|s| s.started)
        .min()
        .ok_or("no connection ran")?;
    let last = samples
        .iter()
        .map(|s| s.finished)
        .max()
        .ok_or("no connection ran")?;
    let seconds = (last - first).as_secs_f64().max(1e-9);
    let total: u64 = samples.iter().map(|s| s.bytes).sum();
    let rates: Vec<f64> = samples.iter().map(Sample::rate).collect();
    Ok(Run {
        aggregate: total as f64 / 1e6 / seconds,
        per_connection_min: rates.iter().copied().fold(f64::INFINITY, f64::min),
        per_connection_max: rates.iter().copied().fold(0.0, f64::max),
        seconds,
    })
}

pub struct Run {
    pub aggregate: f64,
    pub per_connection_min: f64,
    pub per_connection_max: f64,
    pub seconds: f64,
}

fn run_once(
    target: SocketAddr,
    opening: &Opening,
    connections: usize,
    expect: u64,
) -> Result<Run, String> {
    let barrier = Arc::new(Barrier::new(connections));
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            let opening = opening.clone();
            std::thread::spawn(move || {
                barrier.wait();
                one_connection(target, &opening, expect)
            })
        })
        .collect();
    let mut samples = Vec::with_capacity(connections);
    for worker in workers {
        let sample = worker
            .join()
            .map_err(|_| "a connection thread panicked".to_owned())?
            .map_err(|e| format!("{target}: {e}"))?;
        samples.push(sample);
    }
    aggregate(&samples)
}

pub fn bulk(
    target: SocketAddr,
    opening: &Opening,
    connections: usize,
    expect: u64,
    repeat: usize,
    label: &str,
    json: bool,
) -> Result<(), String> {
    let bar = progress::steps(repeat as u64, "runs");
    let mut runs = (0..repeat)
        .map(|_| {
            let run = run_once(target, opening, connections.max(1), expect);
            bar.inc(1);
            run
        })
        .collect::<Result<Vec<_>, _>>()?;
    bar.finish_and_clear();
    runs.sort_by(|a, b| a.aggregate.total_cmp(&b.aggregate));
    let median = &runs[runs.len() / 2];
    let fairness = median.per_connection_max / median.per_connection_min.max(1e-9);
    if json {
        println!(
            "{{\"label\":\"{label}\",\"target\":\"{target}\",\"service\":{},\"connections\":{connections},\"bytes_per_connection\":{expect},\"runs\":{repeat},\"median_aggregate_mb_s\":{:.1},\"per_connection_min_mb_s\":{:.1},\"per_connection_max_mb_s\":{:.1},\"fairness\":{:.3},\"median_seconds\":{:.4}}}",
            opening.service().map_or("null".to_owned(), |s| format!("\"{s}\"")),
            median.aggregate,
            median.per_connection_min,
            median.per_connection_max,
            fairness,
            median.seconds
        );
    } else {
        println!(
            "{label}: {connections} conn x {expect} B, median of {repeat}: {:.1} MB/s aggregate, per connection {:.1}..{:.1} MB/s (fairness {:.2})",
            median.aggregate, median.per_connection_min, median.per_connection_max, fairness
        );
    }
    Ok(())
}
