//! Sockets whose answer and FIN are sent, waiting for the client's FIN before
//! their close (net/close.rs says why a close waits), held for the accept loop
//! that answered them on one epoll set of its own instead of a task and a timer
//! each: adding one is one epoll_ctl, and the close that ends it takes it out.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rustix::event::epoll;
use tokio::io::unix::AsyncFd;

use super::close::DRAIN_LIMIT;

/// Events taken from the set per wake-up: the rest wait for the next turn of
/// the loop, behind the clients it accepts meanwhile.
const EVENTS: usize = 64;

/// Slots an empty set keeps: a quiet daemon's lingering clients.
const KEPT_SLOTS: usize = 1024;

/// Sweeps per drain timeout: a socket waits from the whole timeout to a
/// quarter more.
const SWEEPS: u32 = 4;

/// How often [`Lingering::sweep`] is to run for a drain timeout of `drain`.
pub(crate) fn sweep_period(drain: Duration) -> Duration {
    (drain / SWEEPS).max(Duration::from_millis(1))
}

/// A socket waiting for its client's FIN, and what is released at its close.
struct Waiting<T> {
    socket: OwnedFd,
    _held: T,
    drained: usize,
    /// When its connection was accepted.
    since: Instant,
}

/// The sockets an accept loop has answered and not yet closed, each with a
/// `T` dropped at its close (its share of the connection limits).
pub(crate) struct Lingering<T> {
    epoll: AsyncFd<OwnedFd>,
    /// Dense slots, each event carrying its slot: sized by how many linger
    /// at once, not by the descriptor numbers, which the daemon's other
    /// clients push up (20,000 idle sessions made every short connection's
    /// close grow and free a 20,000-slot table when it was by number).
    waiting: Vec<Option<Waiting<T>>>,
    /// Empty slots to reuse, the last freed first.
    free: Vec<usize>,
    count: usize,
}

impl<T> Lingering<T> {
    /// An empty set; must run inside the runtime.
    pub(crate) fn new() -> io::Result<Lingering<T>> {
        let epoll = crate::net::epoll::set()?;
        Ok(Lingering {
            epoll,
            waiting: Vec::new(),
            free: Vec::new(),
            count: 0,
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Waits for `socket`'s FIN (its answer and ours are sent), then closes
    /// it and drops `held`; does so now if it cannot be watched. `since`:
    /// when the connection was accepted, from which the drain timeout runs.
    pub(crate) fn add(&mut self, socket: OwnedFd, held: T, since: Instant) {
        let slot = self.free.last().copied().unwrap_or(self.waiting.len());
        let data = epoll::EventData::new_u64(slot as u64);
        let flags = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
        if epoll::add(self.epoll.get_ref(), &socket, data, flags).is_err() {
            return;
        }
        let waiting = Some(Waiting {
            socket,
            _held: held,
            drained: 0,
            since,
        });
        match self.free.pop() {
            Some(slot) => self.waiting[slot] = waiting,
            None => self.waiting.push(waiting),
        }
        self.count += 1;
    }

    /// Ready when some waiting socket has something to read (its FIN, most
    /// likely).
    pub(crate) fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.epoll.poll_read_ready(cx).map(drop)
    }

    /// Reads what the ready sockets sent and closes those whose client has
    /// closed (or reset, or sent more than it may); at most one batch.
    pub(crate) fn drain_ready(&mut self) {
        // On the stack: an epoll event holds a pointer, so a set that kept
        // them could not move between threads with its loop.
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); EVENTS];
        let mut slots = [0u64; EVENTS];
        let ready = self.epoll.try_io(tokio::io::Interest::READABLE, |set| {
            let now = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let (ready, _) = epoll::wait(set, &mut events, Some(&now))?;
            for (slot, event) in slots.iter_mut().zip(ready.iter()) {
                *slot = event.data.u64();
            }
            match ready.len() {
                0 => Err(io::ErrorKind::WouldBlock.into()),
                n => Ok(n),
            }
        });
        let Ok(ready) = ready else {
            return;
        };
        let mut scratch = [0u8; 4096];
        for &slot in &slots[..ready] {
            let slot = usize::try_from(slot).unwrap_or(usize::MAX);
            if let Some(Some(waiting)) = self.waiting.get_mut(slot) {
                if !still_open(waiting, &mut scratch) {
                    self.close(slot);
                }
            }
        }
        self.shrink_if_empty();
    }

    /// Called every [`sweep_period`]: closes the sockets whose
    /// client has not closed within `drain` (`close_drain_timeout`).
    pub(crate) fn sweep(&mut self, now: Instant, drain: Duration) {
        for slot in 0..self.waiting.len() {
            let due = self.waiting[slot]
                .as_ref()
                .is_some_and(|w| now.duration_since(w.since) >= drain);
            if due {
                self.close(slot);
            }
        }
        self.shrink_if_empty();
    }

    fn close(&mut self, slot: usize) {
        // Dropping the socket closes it, which takes it out of the set (its
        // events with it, so the slot can be reused at once).
        if self.waiting.get_mut(slot).and_then(Option::take).is_some() {
            self.count -= 1;
            self.free.push(slot);
        }
    }

    /// After a wave, gives the table it needed back to the allocator; only
    /// once a pass over it is done, never in the middle of one.
    fn shrink_if_empty(&mut self) {
        if self.count == 0 && self.waiting.len() > KEPT_SLOTS {
            self.waiting = Vec::new();
            self.free = Vec::new();
        }
    }
}

/// Reads what `waiting` has queued; false once it is to be closed.
fn still_open<T>(waiting: &mut Waiting<T>, scratch: &mut [u8]) -> bool {
    let flags = rustix::net::RecvFlags::DONTWAIT;
    loop {
        match rustix::net::recv(waiting.socket.as_fd(), &mut *scratch, flags) {
            Ok((0, _)) => return false,
            Ok((n, _)) => {
                waiting.drained += n;
                if waiting.drained >= DRAIN_LIMIT {
                    return false;
                }
            }
            Err(rustix::io::Errno::AGAIN) => return true,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Our end of a fresh pair, answered and shut, as the accept loop hands
    /// it over, and the client's end.
    async fn answered() -> (OwnedFd, tokio::net::TcpStream) {
        let (ours, client) = crate::net::test_pair().await;
        let crate::net::stream::Stream::Tcp(ours) = ours else {
            unreachable!("a TCP pair")
        };
        let ours = OwnedFd::from(ours.into_std().unwrap());
        rustix::net::shutdown(&ours, rustix::net::Shutdown::Write).unwrap();
        (ours, client)
    }

    /// Drains ready sockets until `done`, waiting on the set's readiness.
    async fn drain_until(
        closer: &mut Lingering<Arc<()>>,
        done: impl Fn(&Lingering<Arc<()>>) -> bool,
    ) {
        let waited = tokio::time::timeout(Duration::from_secs(20), async {
            while !done(closer) {
                std::future::poll_fn(|cx| closer.poll_ready(cx)).await;
                closer.drain_ready();
            }
        });
        waited.await.expect("the closer acts on the client's end");
    }

    #[tokio::test]
    async fn a_socket_closes_once_its_client_half_closes_and_releases_what_it_held() {
        let mut closer = Lingering::new().unwrap();
        let held = Arc::new(());
        let (ours, mut client) = answered().await;
        closer.add(ours, Arc::clone(&held), Instant::now());
        assert_eq!(Arc::strong_count(&held), 2);
        // The client reads our FIN, sends a last word, then its own FIN.
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        client.write_all(b"bye").await.unwrap();
        client.shutdown().await.unwrap();
        drain_until(&mut closer, Lingering::is_empty).await;
        assert_eq!(Arc::strong_count(&held), 1);
    }

    #[tokio::test]
    async fn a_client_that_resets_is_closed() {
        let mut closer = Lingering::new().unwrap();
        let held = Arc::new(());
        let (ours, client) = answered().await;
        closer.add(ours, Arc::clone(&held), Instant::now());
        socket2::SockRef::from(&client)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(client);
        drain_until(&mut closer, Lingering::is_empty).await;
        assert_eq!(Arc::strong_count(&held), 1);
    }

    #[tokio::test]
    async fn a_client_that_keeps_sending_is_closed_past_the_drain_limit() {
        let mut closer = Lingering::new().unwrap();
        let (ours, mut client) = answered().await;
        closer.add(ours, Arc::new(()), Instant::now());
        let sender = tokio::spawn(async move {
            let chunk = [7u8; 16 * 1024];
            let mut sent = 0;
            // Until the closed socket resets it; bounded all the same.
            while sent < 4 * DRAIN_LIMIT {
                match client.write(&chunk).await {
                    Ok(n) => sent += n,
                    Err(_) => return sent,
                }
            }
            sent
        });
        drain_until(&mut closer, Lingering::is_empty).await;
        let sent = sender.await.unwrap();
        assert!(sent >= DRAIN_LIMIT, "closed after {sent} bytes");
    }

    #[tokio::test]
    async fn a_silent_client_is_closed_once_the_drain_timeout_has_passed() {
        let mut closer = Lingering::new().unwrap();
        let held = Arc::new(());
        let (ours, mut client) = answered().await;
        let since = Instant::now();
        let drain = Duration::from_secs(2);
        closer.add(ours, Arc::clone(&held), since);
        closer.sweep(since + drain - Duration::from_millis(1), drain);
        assert!(!closer.is_empty(), "swept before its time");
        closer.sweep(since + drain, drain);
        assert!(closer.is_empty());
        assert_eq!(Arc::strong_count(&held), 1);
        // Closed, not just forgotten: a write now is answered with RST.
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        let reset = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if client.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::task::yield_now().await;
            }
        });
        reset.await.expect("the client's writes are refused");
    }

    /// `socket` moved to a descriptor number of at least `at`.
    fn renumbered(socket: OwnedFd, at: usize) -> OwnedFd {
        rustix::io::fcntl_dupfd_cloexec(&socket, at as i32).unwrap()
    }

    /// Room for descriptors numbered up to `needed`.
    fn allow_descriptors(needed: u64) {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if limit.current.is_some_and(|soft| soft < needed) {
            let raised = rustix::process::Rlimit {
                current: Some(needed.max(limit.current.unwrap_or(0))),
                maximum: limit.maximum,
            };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, raised)
                .expect("room for the test's descriptors");
        }
    }

    /// The table is as large as the sockets lingering at once, whatever
    /// their descriptor numbers (other clients' descriptors push them up).
    #[tokio::test]
    async fn the_table_is_sized_by_the_sockets_not_their_numbers() {
        allow_descriptors(2100);
        let mut closer = Lingering::new().unwrap();
        let since = Instant::now();
        for _ in 0..3 {
            let (ours, mut client) = answered().await;
            closer.add(renumbered(ours, 2000), Arc::new(()), since);
            assert_eq!(closer.waiting.len(), 1, "one slot, reused");
            client.shutdown().await.unwrap();
            drain_until(&mut closer, Lingering::is_empty).await;
        }
    }

    #[tokio::test]
    async fn a_sweep_that_empties_a_large_table_gives_it_back_and_goes_on() {
        allow_descriptors((KEPT_SLOTS * 2 + 100) as u64);
        let mut closer = Lingering::new().unwrap();
        let since = Instant::now();
        let drain = Duration::from_secs(2);
        // More lingering at once than the table keeps; the last client
        // closes first.
        let mut clients = Vec::new();
        for _ in 0..=KEPT_SLOTS {
            let (ours, client) = answered().await;
            closer.add(ours, Arc::new(()), since);
            clients.push(client);
        }
        let mut last = clients.pop().expect("a client");
        last.shutdown().await.unwrap();
        drain_until(&mut closer, |c| c.count == KEPT_SLOTS).await;
        // The rest go at the sweep, which must not trip over the table it
        // gives back.
        closer.sweep(since + drain, drain);
        assert!(closer.is_empty());
        assert!(closer.waiting.is_empty(), "the table was kept");
        assert!(closer.free.is_empty());
    }

    #[test]
    fn sweeps_come_four_times_per_drain_timeout() {
        assert_eq!(
            sweep_period(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
        assert_eq!(sweep_period(Duration::ZERO), Duration::from_millis(1));
    }
}
