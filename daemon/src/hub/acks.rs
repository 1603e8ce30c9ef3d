//! Acknowledged deliveries: for a backend that registered with `REGISTER-ACK`,
//! each client socket sent is kept (a duplicate descriptor) until the backend
//! acknowledges it. One not acknowledged within the delivery timeout is shut
//! down both ways, which the backend's copy sees too: a backend that stops
//! reading cannot leave a client waiting after its `+`.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// One backend's deliveries waiting for their `ACK`.
#[derive(Debug, Default)]
pub(crate) struct Acks {
    next: AtomicU64,
    pending: Mutex<BTreeMap<u64, (OwnedFd, Instant)>>,
    /// A delivery was added: the watcher's next deadline may be earlier.
    added: Notify,
}

impl Acks {
    /// Deliveries sent and not yet acknowledged.
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().len()
    }

    /// The number the next client frame carries.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Keeps `socket` (a duplicate of the client's) until `seq` is
    /// acknowledged, or `within` passes.
    pub(crate) fn expect(&self, seq: u64, socket: OwnedFd, within: Duration) {
        self.lock().insert(seq, (socket, Instant::now() + within));
        self.added.notify_one();
    }

    /// The backend holds `seq`'s socket: ours is closed. False for a number
    /// that is not waiting (already expired, or never sent).
    pub(crate) fn acked(&self, seq: u64) -> bool {
        self.lock().remove(&seq).is_some()
    }

    /// When the oldest waiting delivery expires.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.lock().values().map(|(_, due)| *due).min()
    }

    /// Shuts down every delivery due by `now`; how many.
    pub(crate) fn expire(&self, now: Instant) -> usize {
        let mut pending = self.lock();
        let overdue: Vec<u64> = pending
            .iter()
            .filter(|(_, (_, due))| *due <= now)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in &overdue {
            if let Some((socket, _)) = pending.remove(seq) {
                let _ = rustix::net::shutdown(&socket, rustix::net::Shutdown::Both);
            }
        }
        overdue.len()
    }

    /// Resolves when a delivery is added (or was, since the last call).
    pub(crate) async fn added(&self) {
        self.added.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (OwnedFd, Instant)>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unacknowledged_socket_is_shut_down_both_ways() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let acks = Acks::default();
        let (first, second) = (acks.next_seq(), acks.next_seq());
        assert_ne!(first, second);
        let start = Instant::now();
        acks.expect(
            first,
            OwnedFd::from(ours.try_clone().unwrap()),
            Duration::from_secs(2),
        );
        acks.expect(second, OwnedFd::from(ours), Duration::from_secs(2));
        assert!(acks.acked(first));
        assert!(!acks.acked(first), "acknowledged once");
        assert_eq!(acks.expire(start), 0, "not due yet");
        assert_eq!(acks.expire(start + Duration::from_secs(3)), 1);
        assert_eq!(acks.next_due(), None);
        // The peer sees the shutdown: EOF.
        let mut byte = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut &theirs, &mut byte).unwrap(), 0);
    }
}
