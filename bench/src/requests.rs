//! Request workloads: C client threads in a loop for a fixed time, each
//! exchange a whole connection. `short` is connect, name, the whole (short)
//! answer, close; `rpc` is the CS 537 notes' echo client, with 40,000-byte
//! payloads by default.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::latency::{Latencies, Summary};
use crate::progress;

/// Runs `exchange` in a loop on `clients` threads until `duration` passes,
/// recording the latency of each that returns `Ok(true)`.
pub(crate) fn run_clients<F>(
    clients: usize,
    duration: f64,
    what: &str,
    exchange: F,
) -> Result<Summary, String>
where
    F: Fn(&mut Vec<u8>) -> io::Result<bool> + Send + Sync + 'static,
{
    paced_clients(clients, duration, None, what, exchange)
}

/// [`run_clients`], each client starting an exchange every `interval` if
/// given (an open loop: a latency counts from when the exchange was due, so
/// a server stall shows in full, not only in the one exchange that met it).
pub(crate) fn paced_clients<F>(
    clients: usize,
    duration: f64,
    interval: Option<Duration>,
    what: &str,
    exchange: F,
) -> Result<Summary, String>
where
    F: Fn(&mut Vec<u8>) -> io::Result<bool> + Send + Sync + 'static,
{
    let duration = Duration::from_secs_f64(duration.max(0.1));
    let exchange = Arc::new(exchange);
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let exchange = Arc::clone(&exchange);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut latencies = Latencies::new();
                let mut buf = Vec::with_capacity(256);
                let mut due = Instant::now();
                while Instant::now() < deadline {
                    let t0 = match interval {
                        Some(interval) => {
                            std::thread::sleep(due.saturating_duration_since(Instant::now()));
                            let t0 = due;
                            due += interval;
                            t0
                        }
                        None => Instant::now(),
                    };
                    match exchange(&mut buf) {
                        Ok(true) => {
                            latencies.record(t0.elapsed());
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => latencies.fail(),
                    }
                }
                latencies
            })
        })
        .collect();
    let workers = progress::follow(workers, started, duration, &done, what);
    Summary::collect(workers, started)
}

/// One short exchange. With a request (a TCPMUX name line), success is a `+`
/// answer; without one (a plain port such as inetd's daytime), any answer.
fn short_once(
    target: SocketAddr,
    request: Option<&[u8]>,
    (tcpmux, fast_open, refused): (bool, bool, bool),
    buf: &mut Vec<u8>,
) -> io::Result<bool> {
    let mut stream = match fast_open {
        true => {
            let options = tcpmux::Options {
                fast_open: true,
                ..Default::default()
            };
            tcpmux::open(target, &options).map_err(io::Error::other)?
        }
        false => TcpStream::connect(target)?,
    };
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    if let Some(request) = request {
        stream.write_all(request)?;
    }
    buf.clear();
    stream.read_to_end(buf)?;
    Ok(match tcpmux {
        true => buf.first() == Some(if refused { &b'-' } else { &b'+' }),
        false => !buf.is_empty(),
    })
}

/// `probe`: raw first bytes to send instead of a TCPMUX name (an SSH banner or
/// a ClientHello, for a detecting listener); success is then any answer.
/// `refused`: success is a `-` line instead of a `+`.
pub fn short(
    target: SocketAddr,
    (service, fast_open, refused): (Option<&str>, bool, bool),
    probe: Option<Vec<u8>>,
    connections: usize,
    duration: f64,
    label: &str,
    json: bool,
) -> Result<(), String> {
    let tcpmux = service.is_some();
    let request: Option<Arc<[u8]>> = match probe {
        Some(bytes) => Some(bytes.into()),
        None => service.map(|s| format!("{s}\r\n").into_bytes().into()),
    };
    let summary = run_clients(connections, duration, "connections", move |buf| {
        short_once(
            target,
            request.as_deref(),
            (tcpmux, fast_open, refused),
            buf,
        )
    })?;
    if json {
        println!(
            "{{\"label\":\"{label}\",\"service\":{},\"clients\":{connections},{}}}",
            service.map_or("null".to_owned(), |s| format!("\"{s}\"")),
            summary.json()
        );
    } else {
        println!("{label}: {}", summary.text("connections"));
    }
    summary.require_success(label)
}

fn rpc_once(
    target: SocketAddr,
    service: Option<&str>,
    payload: &[u8],
    buf: &mut [u8],
) -> io::Result<bool> {
    let mut stream = TcpStream::connect(target)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    if let Some(name) = service {
        let name = tcpmux::ServiceName::parse(name).map_err(|e| io::Error::other(e.to_string()))?;
        tcpmux::negotiate(&mut stream, &name, &tcpmux::Options::default())
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    stream.write_all(payload)?;
    stream.read_exact(buf)?;
    stream.shutdown(Shutdown::Write)?;
    Ok(buf == payload)
}

#[allow(clippy::too_many_arguments)]
pub fn rpc(
    target: SocketAddr,
    service: Option<&str>,
    size: usize,
    connections: usize,
    duration: f64,
    interval: Option<Duration>,
    label: &str,
    json: bool,
) -> Result<(), String> {
    let payload: Arc<[u8]> = (0..size).map(|i| (i % 253) as u8).collect();
    let service = service.map(str::to_owned);
    let summary = paced_clients(connections, duration, interval, "requests", move |buf| {
        buf.resize(payload.len(), 0);
        rpc_once(target, service.as_deref(), &payload, buf)
    })?;
    let kb_s = summary.per_second() * size as f64 / 1e3;
    if json {
        println!(
            "{{\"label\":\"{label}\",\"size\":{size},\"clients\":{connections},{},\"kb_per_second\":{kb_s:.0}}}",
            summary.json()
        );
    } else {
        println!(
            "{label}: {size}-byte requests: {}, {kb_s:.0} kB/s",
            summary.text("requests")
        );
    }
    summary.require_success(label)
}
