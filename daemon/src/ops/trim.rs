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
/// to a quarter of the most open at once since the last trim, when that was at
/// least [`WAVE`]. `counts` gives the most open at once since it was last
/// called (a high-water mark, so a wave between two looks still counts) and
/// the number open now.
pub async fn after_waves(counts: impl Fn() -> (usize, usize)) {
    let mut peak = 0;
    let mut tick = tokio::time::interval(CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let (high, now) = counts();
        peak = peak.max(high);
        if should_trim(peak, now) {
            let released = release_free_memory();
            tracing::debug!(
                peak,
                now,
                released,
                "returned free heap memory to the system"
            );
            peak = now;
        }
    }
}

fn should_trim(peak: usize, now: usize) -> bool {
    peak >= WAVE && now <= peak / 4
}

/// Whether glibc gave any memory back (always false elsewhere).
fn release_free_memory() -> bool {
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
        assert!(!should_trim(500, 0), "a small wave is left alone");
        assert!(!should_trim(4000, 1500), "most of the wave is still here");
        assert!(should_trim(4000, 1000));
        assert!(should_trim(WAVE, 0));
    }
}
