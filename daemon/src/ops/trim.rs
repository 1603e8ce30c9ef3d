//! Giving memory back after a wave of connections has passed. glibc keeps the
//! heap a wave grew for its next allocations, so a daemon that once held ten
//! thousand clients would hold their memory for good; once most of such a
//! wave has left, `malloc_trim` returns the free pages to the system.

use std::time::Duration;

/// How often the count of open connections is looked at.
const CHECK: Duration = Duration::from_secs(1);

/// The smallest wave worth a trim: below it there is little to give back.
const WAVE: usize = 1024;

/// Runs for the life of the event loop: trims once the open connections fall
/// to a quarter of the most open at once, when that was at least [`WAVE`],
/// and again as the rest of the wave leaves (each further eighth of it, and
/// its last connection): under load the first quarter can take a while to
/// close, and what it frees after the first trim would otherwise stay.
/// `counts` gives the most open at once since it was last called (a
/// high-water mark, so a wave between two looks still counts) and the number
/// open now.
pub(crate) async fn after_waves(counts: impl Fn() -> (usize, usize)) {
    let mut wave = Wave::default();
    let mut tick = tokio::time::interval(CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let (high, now) = counts();
        if wave.should_trim(high, now) {
            // Off the loop: walking and releasing a wave's free chunks takes
            // 4-7 ms, which the clients still here would otherwise wait out.
            let released = tokio::task::spawn_blocking(release_free_memory)
                .await
                .unwrap_or(false);
            tracing::debug!(
                peak = wave.peak,
                now,
                released,
                "returned free heap memory to the system"
            );
        }
    }
}

/// One wave of connections: its peak, and the count at the last trim.
#[derive(Debug, Default)]
struct Wave {
    peak: usize,
    trimmed_at: Option<usize>,
}

impl Wave {
    /// Whether to trim now, with `high` the most open since the last look
    /// and `now` the number open; notes the trim.
    fn should_trim(&mut self, high: usize, now: usize) -> bool {
        self.peak = self.peak.max(high);
        if self.peak < WAVE || now > self.peak / 4 {
            return false;
        }
        let trim = match self.trimmed_at {
            None => true,
            Some(last) => last.saturating_sub(now) >= self.peak / 8 || (now == 0 && last > 0),
        };
        if trim {
            self.trimmed_at = Some(now);
        }
        if now == 0 {
            // The wave is over: the next one is measured afresh.
            *self = Wave::default();
        }
        trim
    }
}

/// Whether glibc gave any memory back (always false elsewhere). Blocks for
/// milliseconds on a large heap: call it off the event loop.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointers; it only walks glibc's own
        // arenas, under their locks, and is safe to call from any thread.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_end_of_a_large_wave_trims() {
        assert!(
            !Wave::default().should_trim(500, 0),
            "a small wave is left alone"
        );
        assert!(
            !Wave::default().should_trim(4000, 1500),
            "most of the wave is still here"
        );
        assert!(Wave::default().should_trim(4000, 1000));
        assert!(Wave::default().should_trim(WAVE, 0));
    }

    #[test]
    fn the_rest_of_a_slow_wave_is_trimmed_as_it_leaves() {
        let mut wave = Wave::default();
        assert!(wave.should_trim(3000, 700), "a quarter left");
        assert!(!wave.should_trim(700, 600), "too few have left since");
        assert!(wave.should_trim(600, 300), "another eighth left");
        assert!(wave.should_trim(300, 0), "the last one left");
        assert!(!wave.should_trim(0, 0), "nothing more to give back");
        assert!(!wave.should_trim(800, 0), "a new wave, too small");
    }
}
