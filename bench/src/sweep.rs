//! The concurrency sweep, as the seed's Table 9.1 and beyond: for each level,
//! that many simultaneous downloads on one async client thread; a markdown
//! table, JSON lines and an SVG plot.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bulk::{aggregate, Sample};
use crate::progress;

struct Level {
    connections: usize,
    aggregate: f64,
    min: f64,
    max: f64,
    seconds: f64,
}

pub fn sweep(
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
    let runtime = crate::runtime()?;
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
        fast_open: false,
    };
    let received = Arc::new(AtomicU64::new(0));
    let _ticker = progress::Ticker::start(
        progress::bytes(
            expect * connections as u64,
            &format!("{connections} connections"),
        ),
        Arc::clone(&received),
    );
    let mut tasks = tokio::task::JoinSet::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(connections));
    for _ in 0..connections {
        let service = service.to_owned();
        let barrier = Arc::clone(&barrier);
        let received = Arc::clone(&received);
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
                    Ok(n) => {
                        bytes += n as u64;
                        received.fetch_add(n as u64, Ordering::Relaxed);
                    }
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
