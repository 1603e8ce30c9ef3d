//! The live-session table: every connection from accept to close, what it has
//! become (client, service, route, backend, TLS) and the bytes it relays, with a
//! way to end it. `show sessions`, `kill session` and the dashboard read it;
//! every worker of a daemon registers in the same table.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use tcpmux_proto::admin::SessionRow;
use tcpmux_proto::ServiceName;
use tokio::sync::Notify;

use crate::model::{Endpoint, Peer, Routed};
use crate::net::relay::Traffic;

/// Locks are per shard, so workers registering at once rarely meet.
const SHARDS: usize = 16;

type Shard = Mutex<HashMap<u64, Arc<LiveSession>>>;

/// Every live session of the daemon, by id.
pub struct SessionTable {
    next: AtomicU64,
    shards: Vec<Shard>,
}

impl Default for SessionTable {
    fn default() -> Self {
        SessionTable {
            next: AtomicU64::new(1),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

/// One session as the table knows it.
pub struct LiveSession {
    pub id: u64,
    started: Instant,
    started_at: SystemTime,
    /// The local address the client connected to (`None`: a Unix listener).
    listener: Option<SocketAddr>,
    /// What a relay moves, counted as it moves.
    pub traffic: Traffic,
    detail: Mutex<Detail>,
    kill: Notify,
    /// Whether it was asked to end: what a session without a task of its
    /// own (a UDP flow) is checked for.
    killed: AtomicBool,
}

/// What a session learns as it goes: set by the session, read by `show`.
#[derive(Clone, Debug)]
pub struct Detail {
    /// The client: the announced address behind a PROXY header.
    pub client: Peer,
    pub service: Option<ServiceName>,
    pub routed: Routed,
    /// Kept as an address: written out only when someone looks.
    pub backend: Option<Endpoint>,
    /// Boxed: most sessions have none, and each has a row for its life.
    pub tls: Option<Box<TlsDetail>>,
}

/// A TLS session's protocol version and its client certificate's name.
#[derive(Clone, Debug)]
pub struct TlsDetail {
    pub version: String,
    pub cert: Option<String>,
}

/// A session's place in the table, given up when it is dropped.
pub struct Registered {
    table: Arc<SessionTable>,
    live: Arc<LiveSession>,
}

impl SessionTable {
    /// Enters a session accepted from `client` on `listener`. Addresses are
    /// kept as they are and written out only for `show sessions`.
    pub fn open(self: &Arc<Self>, client: Peer, listener: Option<SocketAddr>) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let live = Arc::new(LiveSession {
            id,
            started: Instant::now(),
            started_at: SystemTime::now(),
            listener,
            traffic: Traffic::default(),
            detail: Mutex::new(Detail {
                client,
                service: None,
                routed: Routed::Tcpmux,
                backend: None,
                tls: None,
            }),
            kill: Notify::new(),
            killed: AtomicBool::new(false),
        });
        self.shard(id).insert(id, Arc::clone(&live));
        Registered {
            table: Arc::clone(self),
            live,
        }
    }

    /// The session `id`, if it is live.
    pub fn get(&self, id: u64) -> Option<Arc<LiveSession>> {
        self.shard(id).get(&id).cloned()
    }

    /// Every live session, oldest first.
    pub fn sessions(&self) -> Vec<Arc<LiveSession>> {
        let mut all: Vec<_> = self
            .shards
            .iter()
            .flat_map(|shard| lock(shard).values().cloned().collect::<Vec<_>>())
            .collect();
        all.sort_by_key(|s| s.id);
        all
    }

    /// How many sessions are live, and the rows of the `n` that relayed the
    /// most: one pass over the table that builds only those `n` rows.
    pub fn busiest(&self, n: usize) -> (usize, Vec<SessionRow>) {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let mut total = 0;
        // The n largest so far, the smallest of them on top; ties go to
        // the older session (the smaller id).
        let mut top: BinaryHeap<Reverse<(u64, Reverse<u64>)>> = BinaryHeap::new();
        let mut kept: HashMap<u64, Arc<LiveSession>> = HashMap::new();
        for shard in &self.shards {
            for session in lock(shard).values() {
                total += 1;
                let key = (session.traffic.moved(), Reverse(session.id));
                if top.len() < n {
                    top.push(Reverse(key));
                } else if top.peek().is_some_and(|Reverse(least)| key > *least) {
                    if let Some(Reverse((_, Reverse(out)))) = top.pop() {
                        kept.remove(&out);
                    }
                    top.push(Reverse(key));
                } else {
                    continue;
                }
                kept.insert(session.id, Arc::clone(session));
            }
        }
        let mut rows: Vec<SessionRow> = kept.values().map(|s| s.row()).collect();
        rows.sort_by_key(|row| (Reverse(row.bytes_in + row.bytes_out), row.id));
        (total, rows)
    }

    /// The bytes live sessions relayed so far, by service.
    pub fn relayed_by_service(&self) -> HashMap<String, u64> {
        let mut by = HashMap::new();
        for session in self.sessions() {
            let moved = session.traffic.moved();
            if let (Some(service), true) = (session.detail().service, moved > 0) {
                *by.entry(service.to_string()).or_insert(0) += moved;
            }
        }
        by
    }

    /// Ends every session of `service` relayed to `backend`; how many.
    pub fn kill_backend(&self, service: &str, backend: &str) -> usize {
        // Not an address: no session was relayed to it.
        let Ok(backend) = backend.parse::<Endpoint>() else {
            return 0;
        };
        let mut killed = 0;
        for session in self.sessions() {
            let detail = session.detail();
            if detail.service.as_ref().map(ServiceName::as_str) == Some(service)
                && detail.backend.as_ref() == Some(&backend)
            {
                session.kill();
                killed += 1;
            }
        }
        killed
    }

    fn shard(&self, id: u64) -> MutexGuard<'_, HashMap<u64, Arc<LiveSession>>> {
        lock(&self.shards[(id % SHARDS as u64) as usize])
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl LiveSession {
    /// Records what the session has learnt.
    pub fn update(&self, f: impl FnOnce(&mut Detail)) {
        f(&mut lock(&self.detail));
    }

    pub fn detail(&self) -> Detail {
        lock(&self.detail).clone()
    }

    /// Asks the session to end; it closes its client (who sees EOF) and logs
    /// the outcome `killed`.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        // A stored permit: a session not yet waiting still sees it.
        self.kill.notify_one();
    }

    /// Whether [`LiveSession::kill`] was called.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Resolves once [`LiveSession::kill`] was called.
    pub async fn killed(&self) {
        self.kill.notified().await;
    }

    pub fn row(&self) -> SessionRow {
        let detail = self.detail();
        let started = self
            .started_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        SessionRow {
            id: self.id,
            client: detail.client.to_string(),
            listener: self
                .listener
                .map_or_else(|| "unix".to_owned(), |a| a.to_string()),
            service: detail.service.map(|name| name.to_string()),
            routed: detail.routed.label().to_owned(),
            age: self.started.elapsed().as_secs_f64(),
            started,
            bytes_in: self.traffic.up.load(Ordering::Relaxed),
            bytes_out: self.traffic.down.load(Ordering::Relaxed),
            backend: detail.backend.map(|b| b.to_string()),
            cert: detail.tls.as_ref().and_then(|t| t.cert.clone()),
            tls: detail.tls.map(|t| t.version),
            udp: matches!(detail.routed, Routed::Udp(_)),
        }
    }
}

impl Registered {
    /// The session as the table holds it, to wait on while the session
    /// itself is borrowed.
    pub fn handle(&self) -> Arc<LiveSession> {
        Arc::clone(&self.live)
    }
}

impl std::ops::Deref for Registered {
    type Target = LiveSession;

    fn deref(&self) -> &LiveSession {
        &self.live
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.table.shard(self.live.id).remove(&self.live.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_listed_until_dropped_and_killed_by_backend() {
        let table = Arc::new(SessionTable::default());
        let addr = |s: &str| s.parse::<SocketAddr>().expect("address");
        let a = table.open(Peer::Tcp(addr("127.0.0.1:1")), Some(addr("127.0.0.1:9")));
        let b = table.open(Peer::Tcp(addr("127.0.0.1:2")), Some(addr("127.0.0.1:9")));
        for (s, backend) in [(&a, "10.0.0.1:80"), (&b, "10.0.0.2:80")] {
            s.update(|d| {
                d.service = ServiceName::parse("web").ok();
                d.backend = Some(backend.parse().unwrap());
            });
        }
        assert_eq!(table.sessions().len(), 2);
        assert!(table.get(a.id).is_some());
        assert_eq!(table.kill_backend("web", "10.0.0.2:80"), 1);
        assert_eq!(table.kill_backend("other", "10.0.0.2:80"), 0);
        let id = b.id;
        drop(b);
        assert!(table.get(id).is_none());
        assert_eq!(table.sessions().len(), 1);
    }

    #[test]
    fn the_busiest_are_the_ones_that_moved_the_most() {
        let table = Arc::new(SessionTable::default());
        let peer = Peer::Tcp(([127, 0, 0, 1], 1).into());
        let sessions: Vec<_> = (0..50u64)
            .map(|i| {
                let s = table.open(peer.clone(), None);
                // 0, 7, 14, ... with one tie (the last two move the same).
                let moved = (i * 7).min(48 * 7);
                s.traffic.up.store(moved, Ordering::Relaxed);
                s
            })
            .collect();
        let (total, rows) = table.busiest(3);
        assert_eq!(total, 50);
        let moved: Vec<u64> = rows.iter().map(|r| r.bytes_in).collect();
        assert_eq!(moved, vec![336, 336, 329]);
        // The older of the tie first.
        assert_eq!(rows[0].id, sessions[48].id);
        assert_eq!(rows[1].id, sessions[49].id);
        let (total, rows) = table.busiest(100);
        assert_eq!((total, rows.len()), (50, 50));
        let (total, rows) = table.busiest(0);
        assert_eq!((total, rows.len()), (50, 0));
    }

    #[tokio::test]
    async fn a_kill_before_the_wait_is_not_lost() {
        let table = Arc::new(SessionTable::default());
        let s = table.open(Peer::Tcp(([127, 0, 0, 1], 1).into()), None);
        s.kill();
        tokio::time::timeout(std::time::Duration::from_secs(5), s.killed())
            .await
            .expect("the stored kill is seen");
    }
}
