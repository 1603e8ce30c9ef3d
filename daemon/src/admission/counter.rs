//! A count of things in use with an optional cap, and the queue in front of
//! it: with `queue_timeout`, a client that finds the cap reached waits in
//! line (FIFO, at most `queue_max`) and takes the next unit given back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::oneshot;

use crate::model::{Queue, QueueFigures};

/// Shared by every connection that counts against it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counter(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    used: AtomicUsize,
    /// The cap the queue hands units out under (the latest one asked with).
    cap: AtomicUsize,
    /// Clients in the queue now; zero keeps `Slot::drop` off the lock.
    waiting: AtomicUsize,
    /// The queue, first in line at the front. A unit given back goes to the
    /// front client already counted, so it keeps its place and nobody jumps
    /// ahead. Entries whose client left are skipped.
    line: Mutex<VecDeque<oneshot::Sender<()>>>,
    /// Clients served from the queue, and the nanoseconds they waited.
    served: AtomicU64,
    waited_ns: AtomicU64,
    /// Clients that left the queue at its timeout.
    timeouts: AtomicU64,
}

/// One unit of a [`Counter`]; dropping it gives the unit back.
#[derive(Debug)]
pub(crate) struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Why no unit was had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Busy {
    /// The cap is reached and there is no queue.
    Full,
    /// The queue holds `queue_max` clients already.
    QueueFull,
    /// The client waited `queue_timeout` in the queue.
    TimedOut,
}

impl Shared {
    /// Counts a unit unless `cap` are in use.
    fn take(&self, cap: usize) -> bool {
        if self.used.fetch_add(1, SeqCst) < cap {
            return true;
        }
        self.used.fetch_sub(1, SeqCst);
        false
    }

    /// Gives a unit back, to the first client in line if there is one.
    fn release(&self) {
        self.used.fetch_sub(1, SeqCst);
        self.serve_line();
    }

    /// Hands units to the clients in line, the first first, while the cap
    /// allows: after a unit is given back, or the cap grew.
    fn serve_line(&self) {
        // A client that joins after this load retries after announcing
        // itself, so it sees the room made before.
        if self.waiting.load(SeqCst) == 0 {
            return;
        }
        let mut line = self.line.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(front) = line.pop_front() {
            if front.is_closed() {
                continue;
            }
            if !self.take(self.cap.load(SeqCst)) {
                // No room (or a newcomer had it first); the front keeps its place.
                line.push_front(front);
                return;
            }
            if front.send(()).is_err() {
                self.used.fetch_sub(1, SeqCst);
            }
        }
    }
}

impl Counter {
    /// Takes a unit unless `max` are already taken.
    pub(crate) fn acquire(&self, max: Option<usize>) -> Option<Slot> {
        let taken = self.0.take(max.unwrap_or(usize::MAX));
        taken.then(|| Slot(Arc::clone(&self.0)))
    }

    /// Sets the cap units are handed out under when clients wait; room it
    /// makes (a reload that raised it, a member back in service) goes to
    /// the clients in line, first first.
    pub(crate) fn set_cap(&self, max: Option<usize>) {
        self.0.cap.store(max.unwrap_or(usize::MAX), SeqCst);
        self.0.serve_line();
    }

    /// Takes a unit, waiting in the queue for one when `queue` is set and
    /// the cap is reached. Clients already waiting go first: a newcomer
    /// takes a unit only when nobody is in line. Cancel-safe: a client that
    /// goes away leaves the queue (the caller drops this future).
    pub(crate) async fn acquire_queued(
        &self,
        max: Option<usize>,
        queue: Option<&Queue>,
    ) -> Result<Slot, Busy> {
        let Some(queue) = queue else {
            return self.acquire(max).ok_or(Busy::Full);
        };
        let cap = max.unwrap_or(usize::MAX);
        self.set_cap(max);
        if self.0.waiting.load(SeqCst) == 0 {
            if let Some(slot) = self.acquire(max) {
                return Ok(slot);
            }
        }
        let since = Instant::now();
        let mut place = {
            let mut line = self.0.line.lock().unwrap_or_else(|e| e.into_inner());
            if self.0.waiting.load(SeqCst) >= queue.max {
                return Err(Busy::QueueFull);
            }
            self.0.waiting.fetch_add(1, SeqCst);
            // Room freed while this client announced itself is its own only
            // if nobody waits ahead of it.
            let ahead = line.iter().any(|entry| !entry.is_closed());
            if !ahead && self.0.take(cap) {
                self.0.waiting.fetch_sub(1, SeqCst);
                return Ok(Slot(Arc::clone(&self.0)));
            }
            if line.len() > 2 * queue.max {
                line.retain(|entry| !entry.is_closed());
            }
            let (tx, rx) = oneshot::channel();
            line.push_back(tx);
            Place {
                shared: Arc::clone(&self.0),
                rx,
                served: false,
            }
        };
        let deadline = tokio::time::Instant::from_std(since + queue.timeout);
        match tokio::time::timeout_at(deadline, &mut place.rx).await {
            Ok(Ok(())) => {
                place.served = true;
                self.0.served.fetch_add(1, SeqCst);
                let waited = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
                self.0.waited_ns.fetch_add(waited, SeqCst);
                Ok(Slot(Arc::clone(&self.0)))
            }
            // Entries are only dropped unsent once their client has left.
            Ok(Err(_)) => Err(Busy::Full),
            Err(_) => {
                self.0.timeouts.fetch_add(1, SeqCst);
                Err(Busy::TimedOut)
            }
        }
    }

    pub(crate) fn get(&self) -> usize {
        self.0.used.load(SeqCst)
    }

    /// Whether anything but this handle holds it: a unit in use, a client
    /// in its queue, a clone.
    pub(crate) fn is_held(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    pub(crate) fn queue(&self) -> QueueFigures {
        QueueFigures {
            waiting: self.0.waiting.load(SeqCst),
            served: self.0.served.load(SeqCst),
            waited_seconds: self.0.waited_ns.load(SeqCst) as f64 / 1e9,
            timeouts: self.0.timeouts.load(SeqCst),
        }
    }
}

/// A client's place in the queue. Leaving unserved (timed out or gone)
/// gives back a unit that arrived meanwhile, so it goes to the next client
/// instead of being lost.
struct Place {
    shared: Arc<Shared>,
    rx: oneshot::Receiver<()>,
    served: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.shared.waiting.fetch_sub(1, SeqCst);
        if !self.served {
            self.rx.close();
            if self.rx.try_recv().is_ok() {
                drop(Slot(Arc::clone(&self.shared)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn queue(max: usize, timeout_ms: u64) -> Queue {
        Queue {
            max,
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    #[tokio::test]
    async fn a_queued_client_gets_the_next_unit_given_back_in_order() {
        let counter = Counter::default();
        let held = counter.acquire(Some(1)).unwrap();
        let q = queue(8, 10_000);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..3 {
            let (c, q, tx) = (counter.clone(), q.clone(), tx.clone());
            tokio::spawn(async move {
                let slot = c.acquire_queued(Some(1), Some(&q)).await.unwrap();
                tx.send(i).unwrap();
                tokio::task::yield_now().await;
                drop(slot);
            });
            // Each joins the line before the next.
            while counter.queue().waiting < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(counter.queue().waiting, 3);
        drop(held);
        let order = [rx.recv().await, rx.recv().await, rx.recv().await];
        assert_eq!(order, [Some(0), Some(1), Some(2)]);
        assert_eq!(counter.queue().served, 3);
        assert_eq!(counter.queue().waiting, 0);
    }

    #[tokio::test]
    async fn a_full_queue_and_a_timeout_say_busy() {
        let counter = Counter::default();
        let _held = counter.acquire(Some(1)).unwrap();
        assert_eq!(
            counter.acquire_queued(Some(1), None).await.unwrap_err(),
            Busy::Full
        );
        let q = queue(1, 50);
        let first = counter.acquire_queued(Some(1), Some(&q));
        let second = async {
            while counter.queue().waiting == 0 {
                tokio::task::yield_now().await;
            }
            counter.acquire_queued(Some(1), Some(&q)).await
        };
        let (first, second) = tokio::join!(first, second);
        assert_eq!(second.unwrap_err(), Busy::QueueFull);
        assert_eq!(first.unwrap_err(), Busy::TimedOut);
        assert_eq!(counter.queue().timeouts, 1);
        assert_eq!(counter.queue().waiting, 0);
    }

    #[tokio::test]
    async fn a_client_that_leaves_the_queue_passes_its_turn_on() {
        let counter = Counter::default();
        let held = counter.acquire(Some(1)).unwrap();
        let q = queue(8, 10_000);
        let leaving = tokio::spawn({
            let (counter, q) = (counter.clone(), q.clone());
            async move { counter.acquire_queued(Some(1), Some(&q)).await.map(drop) }
        });
        while counter.queue().waiting < 1 {
            tokio::task::yield_now().await;
        }
        let staying = tokio::spawn({
            let (counter, q) = (counter.clone(), q.clone());
            async move { counter.acquire_queued(Some(1), Some(&q)).await.is_ok() }
        });
        while counter.queue().waiting < 2 {
            tokio::task::yield_now().await;
        }
        // The first in line goes away just as the unit comes back.
        leaving.abort();
        drop(held);
        assert!(staying.await.unwrap());
    }
}
