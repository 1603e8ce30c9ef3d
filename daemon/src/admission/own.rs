//! The daemon's own outgoing proxy connections, to tell one that comes back
//! to our own listener (a proxy pointed at its own port) from a client.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The daemon's own outgoing proxy connections (local and remote address),
/// across every worker (one set in the `DaemonState` they share): a connection that arrives from one of them (its peer
/// the local end, its local address the remote end) is the daemon talking to
/// itself (a proxy pointed back at its own port), which would
/// otherwise turn one client into as many connections as it sends names.
pub(crate) struct OwnConnections {
    /// How many are registered: the common case, none, costs no lock.
    count: AtomicUsize,
    addresses: Mutex<HashSet<(SocketAddr, SocketAddr)>>,
    /// The ports our TCPMUX listeners have listened on, one bit each: only a
    /// connection to one of them can come back to us, so only those are
    /// registered (a port no longer listened on is not forgotten, which only
    /// costs a registration that was not needed).
    ports: Box<[AtomicU64; 1024]>,
}

impl Default for OwnConnections {
    fn default() -> Self {
        OwnConnections {
            count: AtomicUsize::new(0),
            addresses: Mutex::default(),
            ports: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }
}

/// One registered outgoing connection; dropping it forgets it.
pub(crate) struct Own<'a> {
    set: &'a OwnConnections,
    key: (SocketAddr, SocketAddr),
}

impl Drop for Own<'_> {
    fn drop(&mut self) {
        if lock(&self.set.addresses).remove(&self.key) {
            self.set.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl OwnConnections {
    /// Remembers an outgoing connection from `local` to `remote`. (Both
    /// addresses: one local port may serve connections to different hosts.)
    pub(crate) fn register(&self, local: SocketAddr, remote: SocketAddr) -> Own<'_> {
        if lock(&self.addresses).insert((local, remote)) {
            self.count.fetch_add(1, Ordering::AcqRel);
        }
        Own {
            set: self,
            key: (local, remote),
        }
    }

    /// Notes that a TCPMUX listener listens on `port`.
    pub(crate) fn listening_on(&self, port: u16) {
        let (word, bit) = (usize::from(port) / 64, port % 64);
        self.ports[word].fetch_or(1 << bit, Ordering::Relaxed);
    }

    /// Whether a connection to `port` may reach one of our listeners, and so
    /// must be registered before its first byte.
    pub(crate) fn may_loop(&self, port: u16) -> bool {
        let (word, bit) = (usize::from(port) / 64, port % 64);
        self.ports[word].load(Ordering::Relaxed) & (1 << bit) != 0
    }

    /// Whether a client at `peer`, connected to our `local` address, is one of
    /// our own outgoing connections.
    pub(crate) fn contains(&self, peer: SocketAddr, local: SocketAddr) -> bool {
        self.count.load(Ordering::Acquire) > 0 && lock(&self.addresses).contains(&(peer, local))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_connections_are_matched_by_both_ends() {
        let own = OwnConnections::default();
        let (local, backend, daemon) = (
            "127.0.0.1:40000".parse().unwrap(),
            "127.0.0.1:8080".parse().unwrap(),
            "127.0.0.1:41397".parse().unwrap(),
        );
        let registered = own.register(local, daemon);
        assert!(own.contains(local, daemon));
        // The same local port, used by the kernel for another destination, is
        // a client like any other.
        assert!(!own.contains(local, backend));
        drop(registered);
        assert!(!own.contains(local, daemon));
    }

    #[test]
    fn only_our_listening_ports_may_loop() {
        let own = OwnConnections::default();
        assert!(!own.may_loop(41397));
        for port in [0, 63, 64, 41397, u16::MAX] {
            own.listening_on(port);
            assert!(own.may_loop(port), "{port}");
        }
        for port in [1, 62, 65, 41396, 41398, u16::MAX - 1] {
            assert!(!own.may_loop(port), "{port}");
        }
    }
}
