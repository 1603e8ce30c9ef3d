//! One epoll set of a UDP listener's flows' backend sockets, each at a slot
//! its events carry, so that a reply wakes the listener's task and not a
//! task per flow: an idle flow costs a slot here and nothing in tokio.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::event::epoll;
use tokio::io::unix::AsyncFd;

/// Ready sockets taken from the set per turn: the rest wait for the next,
/// behind the listener's own datagrams.
const EVENTS: usize = 64;

/// The watched sockets, each with the `T` it belongs to.
pub(super) struct Backends<T> {
    epoll: AsyncFd<OwnedFd>,
    slots: Mutex<Slots<T>>,
}

struct Slots<T> {
    held: Vec<Option<Arc<T>>>,
    /// Empty slots to reuse, the last freed first.
    free: Vec<usize>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            held: Vec::new(),
            free: Vec::new(),
        }
    }
}

/// How a ready socket's turn went.
pub(super) enum Turn {
    /// Nothing more waits on it.
    Drained,
    /// Something may: it is to be asked again.
    More,
}

impl<T> Backends<T> {
    /// An empty set; must run inside the runtime.
    pub(super) fn new() -> io::Result<Backends<T>> {
        let epoll = crate::net::epoll::set()?;
        Ok(Backends {
            epoll,
            slots: Mutex::new(Slots::default()),
        })
    }

    fn slots(&self) -> MutexGuard<'_, Slots<T>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Watches `socket` for what it receives (and its errors) on behalf of
    /// `owner`; `keep` is told its slot, for [`Backends::unwatch`], before
    /// an unwatch can look for it.
    pub(super) fn watch(
        &self,
        socket: impl AsFd,
        owner: &Arc<T>,
        keep: impl FnOnce(usize),
    ) -> io::Result<()> {
        let mut slots = self.slots();
        let slot = slots.free.last().copied().unwrap_or(slots.held.len());
        let data = epoll::EventData::new_u64(slot as u64);
        // Level-triggered: a socket left with datagrams after its turn is
        // reported again at the next.
        epoll::add(self.epoll.get_ref(), socket, data, epoll::EventFlags::IN)?;
        keep(slot);
        match slots.free.pop() {
            Some(slot) => slots.held[slot] = Some(Arc::clone(owner)),
            None => slots.held.push(Some(Arc::clone(owner))),
        }
        Ok(())
    }

    /// Stops watching `owner`'s `socket` at `slot`: it may live on (in a
    /// successor), so its close would not take it out.
    pub(super) fn unwatch(&self, slot: usize, socket: impl AsFd, owner: &T) {
        let mut slots = self.slots();
        let ours = matches!(slots.held.get(slot), Some(Some(held)) if std::ptr::eq(&**held, owner));
        if !ours {
            return;
        }
        let _ = epoll::delete(self.epoll.get_ref(), socket);
        slots.held[slot] = None;
        slots.free.push(slot);
        if slots.free.len() == slots.held.len() && slots.held.len() > 1024 {
            // After a wave, the table it needed goes back to the allocator.
            *slots = Slots::default();
        }
    }

    /// Waits for sockets with something to read, then gives each ready
    /// one's owner to `serve` (with whether the socket reported an error):
    /// one turn of at most [`EVENTS`].
    pub(super) async fn turn(&self, mut serve: impl FnMut(&Arc<T>, bool) -> Turn) {
        let Ok(mut guard) = self.epoll.readable().await else {
            // The runtime is going away: nothing more to serve.
            return std::future::pending().await;
        };
        // On the stack: an epoll event holds a pointer, so a set that kept
        // them could not move between threads with its loop.
        let mut events = [MaybeUninit::<epoll::Event>::uninit(); EVENTS];
        let now = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // The owners, not their slots: an owner `serve` ends frees its
        // slot, which a new one may take before this turn is over.
        let mut ready: [(Option<Arc<T>>, bool); EVENTS] = std::array::from_fn(|_| (None, false));
        let mut count = 0;
        // A failed wait (EINTR) leaves the readiness up, to wait again.
        let mut drained = false;
        if let Ok((events, _)) = epoll::wait(self.epoll.get_ref(), &mut events, Some(&now)) {
            let slots = self.slots();
            for (event, ready) in events.iter().zip(ready.iter_mut()) {
                let slot = usize::try_from(event.data.u64()).unwrap_or(usize::MAX);
                let flags = event.flags;
                let error = flags.contains(epoll::EventFlags::ERR);
                *ready = (slots.held.get(slot).cloned().flatten(), error);
                count += 1;
            }
            drained = count < EVENTS;
        }
        for (owner, error) in &ready[..count] {
            if let Some(owner) = owner {
                if let Turn::More = serve(owner, *error) {
                    drained = false;
                }
            }
        }
        if drained {
            // Nothing waits that the set has reported; a datagram that came
            // meanwhile has raised the readiness again, which this leaves.
            guard.clear_ready();
        } else {
            guard.retain_ready();
        }
    }
}
