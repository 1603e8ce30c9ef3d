//! Admission control: how many connections the daemon, one source address and one
//! service may hold, how fast one address may open new ones, and which clients a
//! service accepts. Every refusal becomes a `-` line with its reason.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::cidr::Cidr;
use crate::stream::Peer;

/// Daemon-wide limits, from the configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    pub max_connections: Option<usize>,
    pub max_connections_per_ip: Option<usize>,
    /// New connections per second per source address (burst: one second's worth).
    pub connection_rate_per_ip: Option<f64>,
}

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    DaemonFull,
    AddressFull,
    AddressTooFast,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::DaemonFull => "server busy: too many connections, try again later",
            Refusal::AddressFull => "too many connections from your address",
            Refusal::AddressTooFast => "too many new connections from your address, slow down",
        })
    }
}

/// A count of things in use with an optional cap; shared by every connection that
/// counts against it.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicUsize>);

impl PartialEq for Counter {
    /// Settings compare equal whatever is in use right now.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Counter {}

/// One unit of a [`Counter`]; dropping it gives the unit back.
#[derive(Debug)]
pub struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Counter {
    /// Takes a unit unless `max` are already taken.
    pub fn acquire(&self, max: Option<usize>) -> Option<Slot> {
        let previous = self.0.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(Arc::clone(&self.0));
        match max {
            Some(max) if previous >= max => None, // dropping `slot` undoes the add
            _ => Some(slot),
        }
    }

    pub fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// Entries kept per address before idle ones are pruned.
const PRUNE_AT: usize = 4096;

struct Bucket {
    tokens: f64,
    refilled: Instant,
}

/// The daemon-wide admission state.
#[derive(Default)]
pub struct Gate {
    pub active: Counter,
    per_address: Mutex<HashMap<IpAddr, usize>>,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

/// A connection's admission; dropping it releases its share of every limit.
pub struct Admission {
    _active: Slot,
    address: Option<(IpAddr, Arc<Gate>)>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some((ip, gate)) = self.address.take() {
            let mut counts = lock(&gate.per_address);
            if let Some(count) = counts.get_mut(&ip) {
                *count -= 1;
                if *count == 0 {
                    counts.remove(&ip);
                }
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each critical section is one map edit, so a poisoned lock holds no torn state.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Gate {
    /// Admits a new connection from `peer` or says why not.
    pub fn admit(self: &Arc<Self>, peer: &Peer, limits: &Limits) -> Result<Admission, Refusal> {
        let active = self
            .active
            .acquire(limits.max_connections)
            .ok_or(Refusal::DaemonFull)?;
        let Some(ip) = peer.tcp_addr().map(|a| a.ip()) else {
            return Ok(Admission {
                _active: active,
                address: None,
            });
        };
        if let Some(rate) = limits.connection_rate_per_ip {
            let mut buckets = lock(&self.buckets);
            let now = Instant::now();
            if buckets.len() >= PRUNE_AT {
                buckets.retain(|_, b| {
                    b.tokens + now.duration_since(b.refilled).as_secs_f64() * rate < rate
                });
            }
            let bucket = buckets.entry(ip).or_insert(Bucket {
                tokens: rate,
                refilled: now,
            });
            bucket.tokens = (bucket.tokens
                + now.duration_since(bucket.refilled).as_secs_f64() * rate)
                .min(rate);
            bucket.refilled = now;
            if bucket.tokens < 1.0 {
                return Err(Refusal::AddressTooFast);
            }
            bucket.tokens -= 1.0;
        }
        let mut counts = lock(&self.per_address);
        let count = counts.entry(ip).or_insert(0);
        if limits
            .max_connections_per_ip
            .is_some_and(|max| *count >= max)
        {
            if *count == 0 {
                counts.remove(&ip);
            }
            return Err(Refusal::AddressFull);
        }
        *count += 1;
        Ok(Admission {
            _active: active,
            address: Some((ip, Arc::clone(self))),
        })
    }
}

/// Which clients a service accepts. TCP clients are judged by address (`deny`
/// wins over `allow`; an empty `allow` allows all), Unix-socket clients by their
/// uid/gid (empty lists allow all).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    pub allow: Vec<Cidr>,
    pub deny: Vec<Cidr>,
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
}

impl Access {
    pub fn permits(&self, peer: &Peer) -> bool {
        match peer {
            Peer::Tcp(addr) => {
                let ip = addr.ip();
                !self.deny.iter().any(|r| r.contains(ip))
                    && (self.allow.is_empty() || self.allow.iter().any(|r| r.contains(ip)))
            }
            Peer::Unix { uid, gid, .. } => {
                (self.uids.is_empty() && self.gids.is_empty())
                    || self.uids.contains(uid)
                    || self.gids.contains(gid)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(ip: &str) -> Peer {
        Peer::Tcp(format!("{ip}:1000").parse().unwrap())
    }

    #[test]
    fn per_address_and_global_caps_release_on_drop() {
        let gate = Arc::new(Gate::default());
        let limits = Limits {
            max_connections: Some(3),
            max_connections_per_ip: Some(2),
            connection_rate_per_ip: None,
        };
        let a1 = gate.admit(&tcp("10.0.0.1"), &limits).unwrap();
        let _a2 = gate.admit(&tcp("10.0.0.1"), &limits).unwrap();
        assert_eq!(
            gate.admit(&tcp("10.0.0.1"), &limits).err(),
            Some(Refusal::AddressFull)
        );
        let _b1 = gate.admit(&tcp("10.0.0.2"), &limits).unwrap();
        assert_eq!(
            gate.admit(&tcp("10.0.0.3"), &limits).err(),
            Some(Refusal::DaemonFull)
        );
        drop(a1);
        assert!(gate.admit(&tcp("10.0.0.1"), &limits).is_ok());
    }

    #[test]
    fn rate_limit_allows_a_burst_then_refuses() {
        let gate = Arc::new(Gate::default());
        let limits = Limits {
            connection_rate_per_ip: Some(5.0),
            ..Limits::default()
        };
        for _ in 0..5 {
            drop(gate.admit(&tcp("192.0.2.1"), &limits).unwrap());
        }
        assert_eq!(
            gate.admit(&tcp("192.0.2.1"), &limits).err(),
            Some(Refusal::AddressTooFast)
        );
        assert!(gate.admit(&tcp("192.0.2.2"), &limits).is_ok());
    }

    #[test]
    fn access_rules() {
        let access = Access {
            allow: vec!["10.0.0.0/8".parse().unwrap()],
            deny: vec!["10.0.0.66".parse().unwrap()],
            uids: vec![1000],
            gids: vec![],
        };
        assert!(access.permits(&tcp("10.1.2.3")));
        assert!(!access.permits(&tcp("10.0.0.66")));
        assert!(!access.permits(&tcp("192.0.2.1")));
        let unix = |uid| Peer::Unix {
            listener: Arc::from("/x"),
            uid,
            gid: 5,
        };
        assert!(access.permits(&unix(1000)));
        assert!(!access.permits(&unix(1001)));
        assert!(Access::default().permits(&unix(1)));
    }
}
