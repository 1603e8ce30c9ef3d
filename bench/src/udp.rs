//! UDP workloads: `udp-echo`, a backend that returns every datagram to its
//! sender; `udp`, flows of datagrams with W of each in flight (a window of 1
//! is request/response, one flow with a large window a bulk stream); and
//! `udp-idle`, flows that send one datagram each and then hold, for memory
//! per idle flow. bench/udp.sh runs them against tcpmuxd, nginx and sslh.

use std::io::{self, Write};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::latency::{Latencies, Summary};
use crate::progress;

/// Bytes at the start of each datagram: when it was sent, in nanoseconds
/// since the run started, so a reply carries its own latency.
const STAMP: usize = 8;

/// How long a flow waits for a reply before it counts what is in flight as
/// lost and sends a fresh window (a proxy that drops must not stall the run).
const LOSS: Duration = Duration::from_millis(200);

/// Every datagram back to where it came from, on one thread, until killed.
pub fn echo(listen: SocketAddr) -> Result<(), String> {
    let socket = UdpSocket::bind(listen).map_err(|e| format!("bind {listen}: {e}"))?;
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, from) = socket
            .recv_from(&mut buf)
            .map_err(|e| format!("receive on {listen}: {e}"))?;
        // A full socket buffer drops the reply, as the network would.
        let _ = socket.send_to(&buf[..n], from);
    }
}

/// The shape of a `udp` load.
pub struct Load {
    pub target: SocketAddr,
    pub flows: usize,
    pub window: usize,
    pub size: usize,
    pub threads: usize,
    pub duration: f64,
}

/// Runs the load: `flows` sockets (each its own source port, so its own
/// flow at the proxy) spread over `threads` client threads, each flow
/// keeping `window` datagrams of `size` bytes in flight until `duration`
/// passes. Every reply is checked (its length) and timed.
pub fn load(load: &Load, label: &str, json: bool) -> Result<(), String> {
    let size = load.size.clamp(STAMP, 65_507);
    let duration = Duration::from_secs_f64(load.duration.max(0.1));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let threads = load.threads.clamp(1, load.flows.max(1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let flows = (load.flows.max(1) + threads - 1 - t) / threads;
            let (target, window) = (load.target, load.window.max(1));
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let shape = Flow {
                    target,
                    window,
                    size,
                    started,
                    deadline,
                };
                client_thread(flows, shape, &done)
            })
        })
        .collect();
    let workers = progress::follow(workers, started, duration, &done, "datagrams");
    let summary = Summary::collect(workers, started)?;
    summary.require_success(label)?;
    if json {
        println!(
            "{{\"label\":\"{label}\",\"flows\":{},\"window\":{},\"size\":{size},{}}}",
            load.flows,
            load.window,
            summary.json()
        );
    } else {
        println!(
            "{label}: {}, {:.1} MB/s of replies",
            summary.text("replies"),
            summary.per_second() * size as f64 / 1e6
        );
    }
    Ok(())
}

/// What every flow of a run shares.
#[derive(Clone, Copy)]
struct Flow {
    target: SocketAddr,
    window: usize,
    size: usize,
    started: Instant,
    deadline: Instant,
}

/// One client thread: its flows as tasks on a current-thread runtime.
fn client_thread(flows: usize, shape: Flow, done: &Arc<AtomicU64>) -> Latencies {
    let mut all = Latencies::new();
    let runtime = match crate::runtime() {
        Ok(runtime) => runtime,
        Err(_) => {
            all.fail();
            return all;
        }
    };
    runtime.block_on(async {
        let tasks: Vec<_> = (0..flows)
            .map(|_| tokio::spawn(run_flow(shape, Arc::clone(done))))
            .collect();
        for task in tasks {
            match task.await {
                Ok(Ok(one)) => all.merge(&one),
                _ => all.fail(),
            }
        }
    });
    all
}

async fn run_flow(shape: Flow, done: Arc<AtomicU64>) -> io::Result<Latencies> {
    let local: SocketAddr = if shape.target.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    }
    .parse()
    .map_err(|_| io::Error::other("local address"))?;
    let socket = tokio::net::UdpSocket::bind(local).await?;
    socket.connect(shape.target).await?;
    let mut latencies = Latencies::new();
    let mut out = vec![b'x'; shape.size];
    let mut buf = vec![0u8; 65_536];
    let mut in_flight = 0usize;
    while Instant::now() < shape.deadline {
        while in_flight < shape.window {
            stamp(&mut out, shape.started);
            if socket.send(&out).await.is_err() {
                latencies.fail();
                break;
            }
            in_flight += 1;
        }
        let wait = (Instant::now() + LOSS).min(shape.deadline);
        match tokio::time::timeout_at(wait.into(), socket.recv(&mut buf)).await {
            Ok(Ok(n)) if n == shape.size => {
                let sent = u64::from_le_bytes(buf[..STAMP].try_into().unwrap_or_default());
                let now = shape.started.elapsed().as_nanos() as u64;
                latencies.record(Duration::from_nanos(now.saturating_sub(sent)));
                done.fetch_add(1, Ordering::Relaxed);
                in_flight = in_flight.saturating_sub(1);
            }
            // Wrong length, or an error such as an ICMP refusal: a failure,
            // and the slot is sent again.
            Ok(_) => {
                latencies.fail();
                in_flight = in_flight.saturating_sub(1);
            }
            Err(_) if Instant::now() >= shape.deadline => break,
            Err(_) => {
                for _ in 0..in_flight {
                    latencies.fail();
                }
                in_flight = 0;
            }
        }
    }
    Ok(latencies)
}

fn stamp(out: &mut [u8], started: Instant) {
    let now = started.elapsed().as_nanos() as u64;
    out[..STAMP].copy_from_slice(&now.to_le_bytes());
}

/// Opens `flows` sockets, each sends one datagram and waits for its reply,
/// then all are held for `hold` seconds: the proxy holds that
/// many idle flows meanwhile. Prints `holding N flows` once they are up.
pub fn idle(target: SocketAddr, flows: usize, hold: f64) -> Result<(), String> {
    let local = if target.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    };
    let mut open = Vec::with_capacity(flows);
    let mut answered = 0;
    let mut buf = [0u8; 64];
    // One at a time, each answered (or given up on after three tries)
    // before the next: a burst would measure the front's socket buffer.
    for i in 0..flows {
        let socket = UdpSocket::bind(local)
            .and_then(|s| s.connect(target).map(|()| s))
            .and_then(|s| {
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .map(|()| s)
            })
            .map_err(|e| format!("flow {i}: {e} (raise ulimit -n?)"))?;
        for _ in 0..3 {
            socket
                .send(b"idle flow, first datagram")
                .map_err(|e| format!("flow {i}: {e}"))?;
            if socket.recv(&mut buf).is_ok() {
                answered += 1;
                break;
            }
        }
        open.push(socket);
    }
    println!(
        "holding {} flows ({answered} answered) for {hold} s",
        open.len()
    );
    let _ = io::stdout().flush();
    std::thread::sleep(Duration::from_secs_f64(hold.max(0.0)));
    Ok(())
}
