//! Progress bars for the long runs, on stderr and only when it is a terminal:
//! piped into a file or a script (bench/*.sh), the output is the results alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

const TICK: Duration = Duration::from_millis(100);

fn bar(len: u64, template: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// A bar over a fixed number of steps (runs, levels).
pub fn steps(len: u64, label: &str) -> ProgressBar {
    bar(
        len,
        &format!("{label} [{{bar:30}}] {{pos}}/{{len}} {{msg}} ({{elapsed}})"),
    )
}

/// A bar over bytes, for one level of a sweep.
pub fn bytes(len: u64, label: &str) -> ProgressBar {
    bar(
        len,
        &format!("{label} [{{bar:30}}] {{bytes}}/{{total_bytes}} {{bytes_per_sec}}"),
    )
}

/// Waits for timed client threads, showing the time left and `done` (exchanges
/// completed so far) while they run; returns them for joining.
pub fn follow<T>(
    workers: Vec<JoinHandle<T>>,
    started: Instant,
    duration: Duration,
    done: &Arc<AtomicU64>,
    what: &str,
) -> Vec<JoinHandle<T>> {
    let total = duration.as_millis().max(1) as u64;
    let bar = bar(total, "[{bar:30}] {msg}");
    if bar.is_hidden() {
        return workers;
    }
    while workers.iter().any(|w| !w.is_finished()) {
        let elapsed = started.elapsed();
        bar.set_position((elapsed.as_millis() as u64).min(total));
        let n = done.load(Ordering::Relaxed);
        let rate = n as f64 / elapsed.as_secs_f64().max(1e-3);
        bar.set_message(format!("{n} {what}, {rate:.0}/s"));
        std::thread::sleep(TICK);
    }
    bar.finish_and_clear();
    workers
}

/// Keeps a bytes bar in step with a counter from a tokio task until dropped.
pub struct Ticker {
    bar: ProgressBar,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Ticker {
    pub fn start(bar: ProgressBar, counter: Arc<AtomicU64>) -> Ticker {
        let task = (!bar.is_hidden()).then(|| {
            let bar = bar.clone();
            tokio::spawn(async move {
                loop {
                    bar.set_position(counter.load(Ordering::Relaxed));
                    tokio::time::sleep(TICK).await;
                }
            })
        });
        Ticker { bar, task }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.bar.finish_and_clear();
    }
}
