//! The descriptor table, grown once to what the limits need. Linux doubles a
//! process's table when a new descriptor does not fit, and in a process with
//! threads each doubling waits for an RCU grace period (`expand_files`,
//! `synchronize_rcu`): the thread that accepted sleeps 10-16 ms here, and
//! with it every client of its event loop. A burst of new connections
//! crosses several doublings. Growing the table before the clients come (at
//! start, and off the event loop at a reload that raises the limit) takes
//! that wait out of their way; the kernel never shrinks it.

use std::io;

use crate::model::Limits;

/// Descriptors a connection may hold: its client's and a backend's.
const PER_CONNECTION: usize = 2;
/// Listeners, control and admin sockets, logs, exec'd programs' pipes.
const SPARE: usize = 1024;
/// At most this many slots (8 bytes each in the kernel: 2 MiB); past that
/// the table grows on demand as before.
const MOST: usize = 1 << 18;

/// Slots worth holding for `limits`: every allowed connection with a
/// backend, within the soft descriptor limit (`None` for no limit).
fn wanted(limits: &Limits, soft: Option<u64>) -> usize {
    let for_connections = limits.max_connections.map_or(MOST, |n| {
        n.saturating_mul(PER_CONNECTION).saturating_add(SPARE)
    });
    let soft = soft.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    for_connections.min(MOST).min(soft)
}

/// Grows the table for `limits` (at start, and on a blocking thread at a
/// reload), saying what it did in a debug line: a failure only leaves the
/// table to grow on demand, as without this.
pub fn grow_ahead(limits: &Limits) {
    match reserve(limits) {
        Ok(slots) => tracing::debug!(slots, "descriptor table grown ahead"),
        Err(e) => {
            tracing::debug!(error = %e, "descriptor table not grown ahead; it grows on demand");
        }
    }
}

/// Grows the table to hold [`wanted`] descriptors, by placing a copy of a
/// descriptor at the highest of them and closing it; returns that count.
/// Nothing to do (a table already that large) costs three system calls.
fn reserve(limits: &Limits) -> io::Result<usize> {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let slots = wanted(limits, soft);
    let Some(highest) = slots.checked_sub(1) else {
        return Ok(0);
    };
    let highest = i32::try_from(highest).unwrap_or(i32::MAX);
    let any = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)?;
    drop(rustix::io::fcntl_dupfd_cloexec(&any, highest)?);
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: Option<usize>) -> Limits {
        Limits {
            max_connections: max,
            ..Limits::default()
        }
    }

    #[test]
    fn wanted_covers_every_connection_within_the_soft_limit() {
        assert_eq!(wanted(&limits(Some(16_384)), Some(65_536)), 33_792);
        assert_eq!(wanted(&limits(Some(16_384)), Some(1024)), 1024);
        assert_eq!(wanted(&limits(None), None), MOST);
        assert_eq!(wanted(&limits(Some(usize::MAX)), None), MOST);
        assert_eq!(wanted(&limits(Some(0)), Some(0)), 0);
    }

    /// The kernel reports the table's slots as FDSize.
    fn table_size() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("FDSize")
    }

    #[test]
    fn reserving_grows_the_table_and_leaves_no_descriptor_open() {
        let slots = reserve(&limits(Some(3000))).expect("reserve");
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        assert_eq!(slots, wanted(&limits(Some(3000)), soft));
        assert!(table_size() >= slots, "FDSize {} < {slots}", table_size());
        let highest = format!("/proc/self/fd/{}", slots - 1);
        assert!(
            !std::path::Path::new(&highest).exists(),
            "{highest} left open"
        );
    }
}
