//! What every accept loop (clients, the handoff control socket, the upgrade
//! socket, the metrics endpoint) does when accept fails: one policy, logged the
//! same way, so that no loop spins on an error that persists and none hides one.

use std::io;
use std::time::{Duration, Instant};

use rustix::io::Errno;

use crate::model::ListenAddr;

/// The pause after a failure that waiting can cure (descriptors or memory
/// run out) or that we do not know: long enough not to spin, short enough
/// that clients barely notice once it is over.
pub(crate) const PAUSE: Duration = Duration::from_millis(100);

/// At most one warning per loop in this time; the ones held back are counted
/// in the next.
const WARN_EVERY: Duration = Duration::from_secs(1);

/// What a failed accept means for the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// One client's connection went wrong before it was accepted (it reset,
    /// or the network under it did: accept(2)'s "treat like EAGAIN" list).
    /// The next is unaffected: accept again at once.
    Client,
    /// The process or the system is out of descriptors or memory.
    Resources,
    /// Anything else: treated as lasting.
    Other,
}

impl Failure {
    pub(crate) fn of(e: &io::Error) -> Failure {
        let Some(errno) = Errno::from_io_error(e) else {
            return Failure::Other;
        };
        const CLIENT: [Errno; 10] = [
            Errno::CONNABORTED,
            Errno::PROTO,
            Errno::NETDOWN,
            Errno::NOPROTOOPT,
            Errno::HOSTDOWN,
            Errno::NONET,
            Errno::HOSTUNREACH,
            Errno::OPNOTSUPP,
            Errno::NETUNREACH,
            Errno::INTR,
        ];
        if CLIENT.contains(&errno) {
            Failure::Client
        } else if [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM].contains(&errno) {
            Failure::Resources
        } else {
            Failure::Other
        }
    }
}

/// One accept loop's failures: what it is (for the log) and when it last warned.
pub(crate) struct AcceptErrors {
    role: &'static str,
    warned: Option<Instant>,
    held_back: u64,
}

impl AcceptErrors {
    /// `role` names the loop in its log lines: "clients", "handoff control",
    /// "upgrade", "metrics".
    pub(crate) fn new(role: &'static str) -> AcceptErrors {
        AcceptErrors {
            role,
            warned: None,
            held_back: 0,
        }
    }

    /// Handles a failed accept on `address`: logs it and waits as its kind
    /// asks, before the loop accepts again.
    pub(crate) async fn failed(&mut self, address: &ListenAddr, e: &io::Error) {
        let failure = Failure::of(e);
        if failure == Failure::Client {
            tracing::debug!(listener = self.role, %address, error = %e, "accept failed for one client");
            // Never round the loop without giving the runtime a turn.
            tokio::task::yield_now().await;
            return;
        }
        if let Some(held_back) = self.warn_now(Instant::now()) {
            tracing::warn!(
                listener = self.role,
                %address,
                error = %e,
                held_back,
                "accept failed; accepting again in {} ms",
                PAUSE.as_millis()
            );
        }
        tokio::time::sleep(PAUSE).await;
    }

    /// Whether to warn at `now`, with how many failures went unlogged since
    /// the last warning; `None` holds this one back.
    fn warn_now(&mut self, now: Instant) -> Option<u64> {
        if self
            .warned
            .is_some_and(|at| now.saturating_duration_since(at) < WARN_EVERY)
        {
            self.held_back += 1;
            return None;
        }
        self.warned = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno(e: Errno) -> io::Error {
        io::Error::from_raw_os_error(e.raw_os_error())
    }

    #[test]
    fn failures_are_told_apart_by_errno() {
        assert_eq!(Failure::of(&errno(Errno::CONNABORTED)), Failure::Client);
        assert_eq!(Failure::of(&errno(Errno::PROTO)), Failure::Client);
        assert_eq!(Failure::of(&errno(Errno::MFILE)), Failure::Resources);
        assert_eq!(Failure::of(&errno(Errno::NFILE)), Failure::Resources);
        assert_eq!(Failure::of(&errno(Errno::NOMEM)), Failure::Resources);
        assert_eq!(Failure::of(&errno(Errno::INVAL)), Failure::Other);
        assert_eq!(Failure::of(&io::Error::other("no errno")), Failure::Other);
    }

    #[test]
    fn one_warning_a_second_counts_the_ones_held_back() {
        let mut errors = AcceptErrors::new("clients");
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        assert_eq!(errors.warn_now(at(0)), Some(0));
        for ms in (100..1000).step_by(100) {
            assert_eq!(errors.warn_now(at(ms)), None, "at {ms} ms");
        }
        assert_eq!(errors.warn_now(at(1000)), Some(9));
        assert_eq!(errors.warn_now(at(1500)), None);
        assert_eq!(errors.warn_now(at(2000)), Some(1));
    }
}
