//! Event-loop lag: how late a periodic timer fires on each worker's loop (and
//! on the TLS threads, where `tls` listeners' sessions run), as
//! the `tcpmuxd_event_loop_lag_seconds` histogram and one rate-limited warning
//! when a loop falls more than 100 ms behind. A task that runs without
//! yielding stalls every client of its loop; this is where an operator sees it
//! before the clients do.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often each loop's timer is set.
pub(crate) const PERIOD: Duration = Duration::from_millis(100);
/// Lateness that is worth a warning.
pub(crate) const WARN_OVER: Duration = Duration::from_millis(100);
/// At most one warning per loop this often.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Upper bounds of the histogram's buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// One loop's lateness samples, Prometheus style (cumulative when rendered).
#[derive(Clone, Debug, Default)]
struct Histogram {
    /// Samples per bucket, not cumulative; the last counts those above all.
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
    /// When the loop last ran its timer.
    last: Option<Instant>,
}

impl Histogram {
    fn record(&mut self, seconds: f64) {
        self.last = Some(Instant::now());
        let bucket = BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(BUCKETS.len());
        self.counts[bucket] += 1;
        self.sum += seconds;
    }
}

/// Which loop: a worker's event loop, by index, or the TLS threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Loop {
    Worker(usize),
    Tls,
}

impl std::fmt::Display for Loop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loop::Worker(index) => write!(f, "{index}"),
            Loop::Tls => f.write_str("tls"),
        }
    }
}

/// Every loop's histogram: the workers' by index, then the TLS threads'.
#[derive(Debug, Default)]
pub(crate) struct Lag {
    workers: Mutex<BTreeMap<Loop, Histogram>>,
    /// Whether a watch runs on the TLS threads (one per daemon, whichever
    /// worker's listener started it).
    tls_watched: std::sync::atomic::AtomicBool,
}

impl Lag {
    /// `true` once: for the first caller, which is to start the TLS
    /// threads' watch.
    pub(crate) fn first_to_watch_tls(&self) -> bool {
        !self
            .tls_watched
            .swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    pub(crate) fn record(&self, worker: Loop, lag: Duration) {
        let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        workers.entry(worker).or_default().record(lag.as_secs_f64());
    }

    /// The loops that have not run their timer for longer than `stuck`, and
    /// for how long: a loop that cannot run a 100 ms timer serves no one.
    pub(crate) fn stalled(&self, stuck: Duration) -> Vec<(Loop, Duration)> {
        let workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        workers
            .iter()
            .filter_map(|(&worker, h)| Some((worker, h.last?.elapsed())))
            .filter(|(_, since)| *since > stuck)
            .collect()
    }

    /// The histogram family, one series per worker.
    pub(crate) fn render(&self, out: &mut String) {
        let name = "tcpmuxd_event_loop_lag_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} How late a {} ms timer fired on each event loop.\n# TYPE {name} histogram",
            PERIOD.as_millis()
        );
        let workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        for (worker, histogram) in workers.iter() {
            let mut cumulative = 0;
            for (i, count) in histogram.counts.iter().enumerate() {
                cumulative += count;
                let le = BUCKETS.get(i).map_or("+Inf".to_owned(), |b| b.to_string());
                let _ = writeln!(
                    out,
                    "{name}_bucket{{worker=\"{worker}\",le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(out, "{name}_sum{{worker=\"{worker}\"}} {}", histogram.sum);
            let _ = writeln!(out, "{name}_count{{worker=\"{worker}\"}} {cumulative}");
        }
    }
}

/// One loop's lateness in brief, for the dashboard.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct LoopLag {
    /// The worker's index, or `tls`.
    pub worker: String,
    pub samples: u64,
    pub mean_ms: f64,
    /// The histogram bucket the 99th percentile falls in, by its upper
    /// bound; `None` when it is above the last one (10 s).
    pub p99_ms_at_most: Option<f64>,
}

impl Lag {
    /// Every loop's lag in brief.
    pub(crate) fn summary(&self) -> Vec<LoopLag> {
        let workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        workers
            .iter()
            .map(|(&worker, h)| {
                let samples: u64 = h.counts.iter().sum();
                let wanted = (samples as f64 * 0.99).ceil() as u64;
                let mut seen = 0;
                let bucket = h.counts.iter().position(|&c| {
                    seen += c;
                    seen >= wanted
                });
                LoopLag {
                    worker: worker.to_string(),
                    samples,
                    mean_ms: if samples == 0 {
                        0.0
                    } else {
                        h.sum * 1e3 / samples as f64
                    },
                    p99_ms_at_most: bucket.and_then(|b| BUCKETS.get(b)).map(|le| le * 1e3),
                }
            })
            .collect()
    }
}

/// Sets a timer every [`PERIOD`] on the calling loop for ever and records how
/// late each fires; spawn it on the loop it is to watch.
pub(crate) async fn watch(lag_of_loops: Arc<Lag>, worker: Loop) {
    let mut warned: Option<Instant> = None;
    loop {
        let due = Instant::now() + PERIOD;
        tokio::time::sleep_until(due.into()).await;
        let lag = Instant::now().saturating_duration_since(due);
        lag_of_loops.record(worker, lag);
        if lag > WARN_OVER && !warned.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            warned = Some(Instant::now());
            tracing::warn!(
                %worker,
                lag_ms = lag.as_millis() as u64,
                "event loop fell behind: something ran this long without yielding, and every client of this loop waited"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn a_stalled_loop_shows_in_the_histogram_and_the_log() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let histogram = Arc::new(Lag::default());
        let log = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = Arc::clone(&log);
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || Sink(Arc::clone(&sink)))
            .with_ansi(false)
            .finish();
        let _log = tracing::subscriber::set_default(subscriber);
        runtime.block_on(async {
            let samples = || {
                let workers = histogram.workers.lock().unwrap();
                workers
                    .get(&Loop::Worker(3))
                    .map_or(0, |h| h.counts.iter().sum::<u64>())
            };
            let watcher = tokio::spawn(watch(Arc::clone(&histogram), Loop::Worker(3)));
            // Once a first tick is recorded the next timer is set: then hold
            // the loop for 400 ms, and wait for the late tick (bounded).
            for _ in 0..1000 {
                if samples() > 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            std::thread::sleep(Duration::from_millis(400));
            for _ in 0..1000 {
                if samples() > 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            watcher.abort();
        });
        let mut text = String::new();
        histogram.render(&mut text);
        let count = |le: &str| -> u64 {
            let prefix =
                format!("tcpmuxd_event_loop_lag_seconds_bucket{{worker=\"3\",le=\"{le}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {le} bucket in\n{text}"))
        };
        // The late tick was at least 300 ms late: above the 0.25 s bucket.
        assert!(count("0.25") < count("+Inf"), "{text}");
        assert!(text.contains("tcpmuxd_event_loop_lag_seconds_count{worker=\"3\"} "));
        let log = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
        assert_eq!(log.matches("event loop fell behind").count(), 1, "{log}");
    }

    /// A log writer into a shared buffer.
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn buckets_are_cumulative() {
        let lag = Lag::default();
        for ms in [0, 2, 2, 30, 2_000, 60_000] {
            lag.record(Loop::Worker(0), Duration::from_millis(ms));
        }
        let mut text = String::new();
        lag.render(&mut text);
        for (le, n) in [
            ("0.001", 1),
            ("0.0025", 3),
            ("0.05", 4),
            ("2.5", 5),
            ("+Inf", 6),
        ] {
            let line =
                format!("tcpmuxd_event_loop_lag_seconds_bucket{{worker=\"0\",le=\"{le}\"}} {n}\n");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        assert!(text.contains("tcpmuxd_event_loop_lag_seconds_count{worker=\"0\"} 6\n"));
    }
}
