//! tcpmux-bench: measures tcpmuxd and its peers on the same workloads.
//!
//! `source` is a backend that sends a fixed number of bytes per connection, so
//! relays (tcpmuxd, socat, HAProxy) can be put between it and `bulk`, the client,
//! which runs N connections at once and reports per-connection and aggregate
//! rates. Every run checks that each connection received exactly what was sent.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    version,
    about = "Load tool for tcpmuxd and the servers it is compared with"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A backend: every connection gets exactly --bytes bytes, then EOF.
    Source {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value_t = 1 << 30)]
        bytes: u64,
    },
    /// Concurrency sweep, as the seed's Table 9.1 and beyond: for each level,
    /// that many simultaneous downloads on one async client thread. Prints a
    /// markdown table and writes JSON lines and an SVG plot if asked.
    Sweep {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value = "sometext")]
        service: String,
        #[arg(long, default_value_t = 1_000_007)]
        expect: u64,
        /// The service never ends (chargen): read exactly --expect bytes, then close.
        #[arg(long)]
        endless: bool,
        /// Comma-separated concurrency levels.
        #[arg(long, default_value = "1,2,4,8,16,32,64,256,1024,10000")]
        levels: String,
        /// Write one JSON object per level here.
        #[arg(long)]
        json_out: Option<std::path::PathBuf>,
        /// Write an SVG plot of aggregate MB/s and fairness here.
        #[arg(long)]
        svg_out: Option<std::path::PathBuf>,
    },
    /// Short connections: C clients in a loop of connect, request, read the whole
    /// (short) answer, close; connections per second and latency percentiles.
    Short {
        #[arg(long)]
        connect: SocketAddr,
        /// Service to ask for; its whole answer is read (e.g. daytime).
        #[arg(long)]
        service: String,
        #[arg(long, default_value_t = 8)]
        connections: usize,
        /// Seconds to run.
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        #[arg(long, default_value = "target")]
        label: String,
        #[arg(long)]
        json: bool,
    },
    /// Connect per request, as the CS 537 notes' echo client: connect, (name),
    /// write --size bytes, read them back, half-close, close; in a loop.
    Rpc {
        #[arg(long)]
        connect: SocketAddr,
        /// Negotiate this service first (leave out for plain TCP echo servers).
        #[arg(long)]
        service: Option<String>,
        #[arg(long, default_value_t = 40_000)]
        size: usize,
        #[arg(long, default_value_t = 1)]
        connections: usize,
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        #[arg(long, default_value = "target")]
        label: String,
        #[arg(long)]
        json: bool,
    },
    /// The seeds' Nagle experiment on the negotiation itself: the name and its
    /// CRLF as two writes before reading the reply, against one write.
    Nagle {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value = "daytime")]
        service: String,
        #[arg(long, default_value_t = 40)]
        iterations: usize,
    },
    /// Idle clients: open C connections that never send a name, hold them, close.
    Idle {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 10_000)]
        connections: usize,
        /// Seconds to hold them open.
        #[arg(long, default_value_t = 5.0)]
        hold: f64,
    },
    /// Bulk download: C connections at once, each reading to EOF.
    Bulk {
        #[arg(long)]
        connect: SocketAddr,
        /// Negotiate this TCPMUX service first (leave out for plain TCP targets).
        #[arg(long)]
        service: Option<String>,
        #[arg(long, default_value_t = 1)]
        connections: usize,
        /// Bytes each connection must receive; a mismatch fails the run.
        #[arg(long)]
        expect: u64,
        /// Runs; the report gives the median aggregate rate.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Label for the report line.
        #[arg(long, default_value = "target")]
        label: String,
        /// Print one JSON object instead of the text line.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Source { listen, bytes } => source(listen, bytes),
        Command::Sweep {
            connect,
            service,
            expect,
            endless,
            levels,
            json_out,
            svg_out,
        } => sweep(
            connect,
            &service,
            expect,
            endless,
            &levels,
            json_out.as_deref(),
            svg_out.as_deref(),
        ),
        Command::Short {
            connect,
            service,
            connections,
            duration,
            label,
            json,
        } => short(
            connect,
            &service,
            connections.max(1),
            duration,
            &label,
            json,
        ),
        Command::Rpc {
            connect,
            service,
            size,
            connections,
            duration,
            label,
            json,
        } => rpc(
            connect,
            service.as_deref(),
            size,
            connections.max(1),
            duration,
            &label,
            json,
        ),
        Command::Nagle {
            connect,
            service,
            iterations,
        } => nagle(connect, &service, iterations.max(1)),
        Command::Idle {
            connect,
            connections,
            hold,
        } => idle(connect, connections, hold),
        Command::Bulk {
            connect,
            service,
            connections,
            expect,
            repeat,
            label,
            json,
        } => bulk(
            connect,
            service.as_deref(),
            connections,
            expect,
            repeat.max(1),
            &label,
            json,
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcpmux-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

const BUFFER: usize = 256 * 1024;

/// One short exchange; `Ok(true)` when the answer was a `+` line.
fn short_once(target: SocketAddr, request: &[u8], buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut stream = TcpStream::connect(target)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request)?;
    buf.clear();
    stream.read_to_end(buf)?;
    Ok(buf.first() == Some(&b'+'))
}

fn short(
    target: SocketAddr,
    service: &str,
    connections: usize,
    duration: f64,
    label: &str,
    json: bool,
) -> Result<(), String> {
    let request: Arc<[u8]> = format!("{service}\r\n").into_bytes().into();
    let deadline = Instant::now() + Duration::from_secs_f64(duration.max(0.1));
    let started = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let request = Arc::clone(&request);
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                let mut failures = 0u64;
                let mut buf = Vec::with_capacity(256);
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    match short_once(target, &request, &mut buf) {
                        Ok(true) => latencies.push(t0.elapsed()),
                        _ => failures += 1,
                    }
                }
                (latencies, failures)
            })
        })
        .collect();
    let summary = Summary::collect(workers, started)?;
    if json {
        println!(
            "{{\"label\":\"{label}\",\"service\":\"{service}\",\"clients\":{connections},{}}}",
            summary.json()
        );
    } else {
        println!("{label}: {}", summary.text("connections"));
    }
    summary.require_success(label)
}

fn idle(target: SocketAddr, connections: usize, hold: f64) -> Result<(), String> {
    let mut open = Vec::with_capacity(connections);
    for i in 0..connections {
        match TcpStream::connect(target) {
            Ok(stream) => open.push(stream),
            Err(e) => return Err(format!("connection {i}: {e} (raise ulimit -n?)")),
        }
    }
    println!("holding {} idle connections for {hold} s", open.len());
    let _ = io::stdout().flush();
    std::thread::sleep(Duration::from_secs_f64(hold.max(0.0)));
    // Each still-open connection proves the daemon kept it (reads would see EOF).
    drop(open);
    Ok(())
}

fn source(listen: SocketAddr, bytes: u64) -> Result<(), String> {
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

struct Sample {
    started: Instant,
    finished: Instant,
    bytes: u64,
}

impl Sample {
    fn rate(&self) -> f64 {
        self.bytes as f64 / 1e6 / (self.finished - self.started).as_secs_f64().max(1e-9)
    }
}

fn one_connection(target: SocketAddr, service: Option<&str>, expect: u64) -> io::Result<Sample> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(target)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    if let Some(name) = service {
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
fn aggregate(samples: &[Sample]) -> Result<Run, String> {
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

struct Run {
    aggregate: f64,
    per_connection_min: f64,
    per_connection_max: f64,
    seconds: f64,
}

fn run_once(
    target: SocketAddr,
    service: Option<&str>,
    connections: usize,
    expect: u64,
) -> Result<Run, String> {
    let barrier = Arc::new(Barrier::new(connections));
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            let service = service.map(str::to_owned);
            std::thread::spawn(move || {
                barrier.wait();
                one_connection(target, service.as_deref(), expect)
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

fn bulk(
    target: SocketAddr,
    service: Option<&str>,
    connections: usize,
    expect: u64,
    repeat: usize,
    label: &str,
    json: bool,
) -> Result<(), String> {
    let mut runs = (0..repeat)
        .map(|_| run_once(target, service, connections.max(1), expect))
        .collect::<Result<Vec<_>, _>>()?;
    runs.sort_by(|a, b| a.aggregate.total_cmp(&b.aggregate));
    let median = &runs[runs.len() / 2];
    let fairness = median.per_connection_max / median.per_connection_min.max(1e-9);
    if json {
        println!(
            "{{\"label\":\"{label}\",\"target\":\"{target}\",\"service\":{},\"connections\":{connections},\"bytes_per_connection\":{expect},\"runs\":{repeat},\"median_aggregate_mb_s\":{:.1},\"per_connection_min_mb_s\":{:.1},\"per_connection_max_mb_s\":{:.1},\"fairness\":{:.3},\"median_seconds\":{:.4}}}",
            service.map_or("null".to_owned(), |s| format!("\"{s}\"")),
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

fn rpc(
    target: SocketAddr,
    service: Option<&str>,
    size: usize,
    connections: usize,
    duration: f64,
    label: &str,
    json: bool,
) -> Result<(), String> {
    let payload: Arc<[u8]> = (0..size).map(|i| (i % 253) as u8).collect();
    let deadline = Instant::now() + Duration::from_secs_f64(duration.max(0.1));
    let started = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let payload = Arc::clone(&payload);
            let service = service.map(str::to_owned);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; payload.len()];
                let mut latencies = Vec::new();
                let mut failures = 0u64;
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    match rpc_once(target, service.as_deref(), &payload, &mut buf) {
                        Ok(true) => latencies.push(t0.elapsed()),
                        _ => failures += 1,
                    }
                }
                (latencies, failures)
            })
        })
        .collect();
    let summary = Summary::collect(workers, started)?;
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

fn nagle(target: SocketAddr, service: &str, iterations: usize) -> Result<(), String> {
    let name = tcpmux::ServiceName::parse(service).map_err(|e| e.to_string())?;
    let once = |split: bool| -> io::Result<Duration> {
        let t0 = Instant::now();
        let mut stream = TcpStream::connect(target)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        if split {
            stream.write_all(name.as_str().as_bytes())?;
            stream.write_all(b"\r\n")?;
        } else {
            let mut line = name.as_str().as_bytes().to_vec();
            line.extend_from_slice(b"\r\n");
            stream.write_all(&line)?;
        }
        let mut first = [0u8; 1];
        stream.read_exact(&mut first)?;
        let elapsed = t0.elapsed();
        if first[0] != b'+' {
            return Err(io::Error::other("service refused"));
        }
        Ok(elapsed)
    };
    for (label, split) in [
        ("one write (name+CRLF)", false),
        ("two writes (name, CRLF)", true),
    ] {
        let mut samples = (0..iterations)
            .map(|_| once(split))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| format!("{target}: {e}"))?;
        samples.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{label}: connect to first reply byte, median {:.3} ms, max {:.3} ms over {iterations}",
            ms(samples[samples.len() / 2]),
            ms(samples[samples.len() - 1])
        );
    }
    Ok(())
}

/// Latencies and failures gathered from client threads.
struct Summary {
    latencies: Vec<Duration>,
    failures: u64,
    seconds: f64,
}

type Worker = std::thread::JoinHandle<(Vec<Duration>, u64)>;

impl Summary {
    fn collect(workers: Vec<Worker>, started: Instant) -> Result<Summary, String> {
        let mut latencies = Vec::new();
        let mut failures = 0;
        for worker in workers {
            let (l, f) = worker
                .join()
                .map_err(|_| "a client thread panicked".to_owned())?;
            latencies.extend(l);
            failures += f;
        }
        latencies.sort_unstable();
        Ok(Summary {
            latencies,
            failures,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.seconds
    }

    /// The `p` quantile in microseconds (nearest rank, from every sample).
    fn quantile_us(&self, p: f64) -> f64 {
        let n = self.latencies.len();
        if n == 0 {
            return 0.0;
        }
        let i = ((n as f64 * p).ceil() as usize).clamp(1, n) - 1;
        self.latencies[i].as_secs_f64() * 1e6
    }

    fn json(&self) -> String {
        format!(
            "\"seconds\":{:.2},\"completed\":{},\"failed\":{},\"per_second\":{:.0},\"p50_us\":{:.0},\"p99_us\":{:.0},\"p999_us\":{:.0}",
            self.seconds,
            self.latencies.len(),
            self.failures,
            self.per_second(),
            self.quantile_us(0.50),
            self.quantile_us(0.99),
            self.quantile_us(0.999)
        )
    }

    fn text(&self, what: &str) -> String {
        format!(
            "{:.0} {what}/s ({} in {:.1} s, {} failed), latency p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us",
            self.per_second(),
            self.latencies.len(),
            self.seconds,
            self.failures,
            self.quantile_us(0.50),
            self.quantile_us(0.99),
            self.quantile_us(0.999)
        )
    }

    fn require_success(&self, label: &str) -> Result<(), String> {
        if self.latencies.is_empty() {
            Err(format!("{label}: no exchange succeeded"))
        } else {
            Ok(())
        }
    }
}

struct Level {
    connections: usize,
    aggregate: f64,
    min: f64,
    max: f64,
    seconds: f64,
}

fn sweep(
    target: SocketAddr,
    service: &str,
    expect: u64,
    endless: bool,
    levels: &str,
    json_out: Option<&std::path::Path>,
    svg_out: Option<&std::path::Path>,
) -> Result<(), String> {
    let levels: Vec<usize> = levels
        .split(',')
        .map(|l| l.trim().parse().map_err(|_| format!("bad level {l:?}")))
        .collect::<Result<_, _>>()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut results = Vec::new();
    println!("| connections | aggregate MB/s | per-connection MB/s min..max | fairness (max/min) | seconds |");
    println!("|---:|---:|---:|---:|---:|");
    for &connections in &levels {
        let level = runtime.block_on(sweep_level(
            target,
            service,
            expect,
            endless,
            connections.max(1),
        ))?;
        println!(
            "| {} | {:.0} | {:.1}..{:.1} | {:.2} | {:.2} |",
            level.connections,
            level.aggregate,
            level.min,
            level.max,
            level.max / level.min.max(1e-9),
            level.seconds
        );
        let _ = io::stdout().flush();
        results.push(level);
    }
    if let Some(path) = json_out {
        let lines: String = results
            .iter()
            .map(|l| {
                format!(
                    "{{\"service\":\"{service}\",\"connections\":{},\"aggregate_mb_s\":{:.1},\"per_connection_min_mb_s\":{:.2},\"per_connection_max_mb_s\":{:.2},\"fairness\":{:.3},\"seconds\":{:.3}}}\n",
                    l.connections, l.aggregate, l.min, l.max, l.max / l.min.max(1e-9), l.seconds
                )
            })
            .collect();
        std::fs::write(path, lines).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = svg_out {
        std::fs::write(path, svg(&results, service))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// One level. For an endless service every connection negotiates first and all
/// start reading at once (a barrier), so per-connection rates compare transfers,
/// not the connect ramp. A finite service is read as soon as it answers: held
/// back, 10,000 answers of 1 MB would sit in kernel buffers and push TCP into
/// memory pressure, where the kernel resets connections.
async fn sweep_level(
    target: SocketAddr,
    service: &str,
    expect: u64,
    endless: bool,
    connections: usize,
) -> Result<Level, String> {
    use tokio::io::AsyncReadExt;
    let options = tcpmux::Options {
        connect_timeout: Some(Duration::from_secs(30)),
        reply_timeout: Some(Duration::from_secs(30)),
    };
    let mut tasks = tokio::task::JoinSet::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(connections));
    for _ in 0..connections {
        let service = service.to_owned();
        let barrier = Arc::clone(&barrier);
        tasks.spawn(async move {
            let connected = tcpmux::connect_async(target, &service, &options).await;
            if endless {
                // Wait even after a failure, so the others are not left waiting.
                barrier.wait().await;
            }
            let mut stream = connected.map_err(|e| e.to_string())?;
            let started = Instant::now();
            // Small per-connection buffers: 10,000 of them must fit comfortably.
            let mut buf = vec![0u8; 16 * 1024];
            let mut bytes = 0u64;
            loop {
                let want = if endless {
                    (expect - bytes).min(buf.len() as u64) as usize
                } else {
                    buf.len()
                };
                if want == 0 {
                    break;
                }
                match stream.read(&mut buf[..want]).await {
                    Ok(0) => break,
                    Ok(n) => bytes += n as u64,
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok::<_, String>(Sample {
                started,
                finished: Instant::now(),
                bytes,
            })
        });
    }
    let mut samples = Vec::with_capacity(connections);
    while let Some(joined) = tasks.join_next().await {
        let sample = joined.map_err(|e| e.to_string())??;
        if sample.bytes != expect {
            return Err(format!(
                "a connection received {} bytes, expected {expect}",
                sample.bytes
            ));
        }
        samples.push(sample);
    }
    let run = aggregate(&samples)?;
    Ok(Level {
        connections,
        aggregate: run.aggregate,
        min: run.per_connection_min,
        max: run.per_connection_max,
        seconds: run.seconds,
    })
}

/// A small hand-written SVG: aggregate MB/s (left axis) and fairness (right
/// axis) against connections on a log scale.
fn svg(levels: &[Level], service: &str) -> String {
    let (w, h, pad) = (640.0, 360.0, 50.0);
    let max_rate = levels.iter().map(|l| l.aggregate).fold(1.0, f64::max) * 1.1;
    let max_fair = levels
        .iter()
        .map(|l| l.max / l.min.max(1e-9))
        .fold(2.0, f64::max)
        * 1.1;
    let max_c = levels
        .iter()
        .map(|l| l.connections)
        .max()
        .unwrap_or(1)
        .max(2) as f64;
    let x = |c: usize| pad + (c as f64).ln() / max_c.ln() * (w - 2.0 * pad);
    let y = |v: f64, top: f64| h - pad - v / top * (h - 2.0 * pad);
    let line = |f: &dyn Fn(&Level) -> f64, top: f64| {
        levels
            .iter()
            .map(|l| format!("{:.1},{:.1}", x(l.connections), y(f(l), top)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{pad}\" y=\"20\" font-size=\"13\">tcpmuxd {service}: aggregate MB/s (blue) and fairness max/min (orange) by connections</text>\n\
         <line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
         <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - pad, w - pad, h - pad, h - pad
    );
    out += &format!(
        "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>\n",
        line(&|l| l.aggregate, max_rate)
    );
    out += &format!(
        "<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" stroke-dasharray=\"4 3\" points=\"{}\"/>\n",
        line(&|l| l.max / l.min.max(1e-9), max_fair)
    );
    for l in levels {
        out += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#1f77b4\" text-anchor=\"middle\">{:.0}</text>\n",
            x(l.connections),
            h - pad + 15.0,
            l.connections,
            x(l.connections),
            y(l.aggregate, max_rate) - 6.0,
            l.aggregate
        );
    }
    out += &format!(
        "<text x=\"10\" y=\"{}\">0</text><text x=\"5\" y=\"{}\">{max_rate:.0}</text>\n",
        h - pad,
        pad + 4.0
    );
    out += &format!(
        "<text x=\"{}\" y=\"{}\" fill=\"#ff7f0e\">{max_fair:.1}</text>\n",
        w - pad + 5.0,
        pad + 4.0
    );
    out += "</svg>\n";
    out
}
