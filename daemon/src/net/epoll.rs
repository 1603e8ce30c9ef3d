//! An epoll set of the event loop's own, for sockets a loop watches without
//! a task each (the lingering closes, a UDP listener's flows): the set is
//! readable in tokio's reactor when one of them is.

use std::io;
use std::os::fd::OwnedFd;

use rustix::event::epoll;
use tokio::io::unix::AsyncFd;

/// An empty set in the current runtime's reactor; must run inside it.
pub(crate) fn set() -> io::Result<AsyncFd<OwnedFd>> {
    let set = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    // SAFETY: the OwnedFd is the AsyncFd's, open and the same descriptor
    // for as long as the AsyncFd lives.
    Ok(unsafe { AsyncFd::register(set) }?)
}
