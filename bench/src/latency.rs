//! Latency of the request workloads (short, rpc): every exchange recorded in an
//! HdrHistogram, per client thread and merged, so memory stays bounded however
//! long a run is, and percentiles are exact to three significant digits.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Longest latency recorded exactly; anything slower is counted at this value.
const MAX_MICROS: u64 = 60_000_000;

/// One client thread's record: latencies of the exchanges that succeeded, and a
/// count of those that failed.
pub struct Latencies {
    histogram: Histogram<u64>,
    failures: u64,
}

impl Latencies {
    pub fn new() -> Latencies {
        Latencies {
            // 1 us to 60 s at 3 significant digits: a few hundred KiB per thread.
            histogram: Histogram::new_with_bounds(1, MAX_MICROS, 3)
                .expect("constant histogram bounds are valid"),
            failures: 0,
        }
    }

    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.histogram
            .saturating_record(micros.clamp(1, MAX_MICROS));
    }

    pub fn fail(&mut self) {
        self.failures += 1;
    }

    pub fn merge(&mut self, other: &Latencies) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
        self.failures += other.failures;
    }
}

/// The merged record of a whole run.
pub struct Summary {
    latencies: Latencies,
    seconds: f64,
}

pub type Worker = std::thread::JoinHandle<Latencies>;

impl Summary {
    pub fn collect(workers: Vec<Worker>, started: Instant) -> Result<Summary, String> {
        let mut latencies = Latencies::new();
        for worker in workers {
            let one = worker
                .join()
                .map_err(|_| "a client thread panicked".to_owned())?;
            latencies.merge(&one);
        }
        Ok(Summary {
            latencies,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    pub fn completed(&self) -> u64 {
        self.latencies.histogram.len()
    }

    pub fn per_second(&self) -> f64 {
        self.completed() as f64 / self.seconds
    }

    /// The `q` quantile in microseconds (0 when nothing completed).
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.completed() == 0 {
            return 0;
        }
        self.latencies.histogram.value_at_quantile(q)
    }

    pub fn json(&self) -> String {
        format!(
            "\"seconds\":{:.2},\"completed\":{},\"failed\":{},\"per_second\":{:.0},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"max_us\":{}",
            self.seconds,
            self.completed(),
            self.latencies.failures,
            self.per_second(),
            self.quantile_us(0.50),
            self.quantile_us(0.99),
            self.quantile_us(0.999),
            self.latencies.histogram.max()
        )
    }

    pub fn text(&self, what: &str) -> String {
        format!(
            "{:.0} {what}/s ({} in {:.1} s, {} failed), latency p50 {} us, p99 {} us, p99.9 {} us, max {} us",
            self.per_second(),
            self.completed(),
            self.seconds,
            self.latencies.failures,
            self.quantile_us(0.50),
            self.quantile_us(0.99),
            self.quantile_us(0.999),
            self.latencies.histogram.max()
        )
    }

    pub fn require_success(&self, label: &str) -> Result<(), String> {
        if self.completed() == 0 {
            Err(format!("{label}: no exchange succeeded"))
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_merged_threads() {
        let mut a = Latencies::new();
        let mut b = Latencies::new();
        for us in 1..=900 {
            a.record(Duration::from_micros(us));
        }
        for us in 901..=1000 {
            b.record(Duration::from_micros(us));
        }
        b.fail();
        let mut all = Latencies::new();
        all.merge(&a);
        all.merge(&b);
        let summary = Summary {
            latencies: all,
            seconds: 2.0,
        };
        assert_eq!(summary.completed(), 1000);
        assert_eq!(summary.per_second(), 500.0);
        assert_eq!(summary.quantile_us(0.5), 500);
        assert_eq!(summary.quantile_us(0.99), 990);
        assert!(summary.json().contains("\"failed\":1"));
        // Beyond the bounds is clamped, not lost or panicking.
        let mut slow = Latencies::new();
        slow.record(Duration::from_secs(3600));
        assert_eq!(slow.histogram.len(), 1);
    }
}
