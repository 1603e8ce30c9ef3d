//! Active health checks of a proxy's members (`health_check = { … }`): every
//! `interval`, a TCP connect to each within `timeout`, optionally sending
//! `send` and reading until `expect` appears; for UDP backends
//! (`udp_health_check`), `send` as one datagram and a reply (holding
//! `expect`, if set) within `timeout`. The results move members up and down
//! in the pool. One task per pool, started by the server for the
//! configuration in force; it checks whatever members DNS gives it.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use super::Pool;
use crate::model::{AdminState, BackendTls, Endpoint, HealthCheck, Proxy};
use crate::net::stream::Stream;

/// What a pool's checks speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Speaks {
    /// A TCP (or Unix) connection: a `proxy`'s members.
    Stream,
    /// A datagram and its reply: a `proxy_udp`'s members.
    Datagram,
}

/// Checks `proxy`'s members until the task is dropped; `after_round` runs
/// once each round's verdicts are in (a member back up is room for the
/// clients waiting in the service's queue).
pub(crate) async fn check_loop(
    service: String,
    (proxy, speaks): (Arc<Proxy>, Speaks),
    pool: Arc<Pool>,
    after_round: impl Fn() + Send + 'static,
) {
    let Some(check) = proxy.health_check.clone().map(Arc::new) else {
        return;
    };
    let mut ticks = tokio::time::interval(check.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(members) = pool.current(&proxy) else {
            continue;
        };
        // All at once, so one slow member does not delay the others' verdicts;
        // dropping the set (the task's end) cancels the probes.
        let mut probes = JoinSet::new();
        for member in &members.list {
            // In maintenance: not checked until it is back.
            if pool.override_of(&member.endpoint).state == AdminState::Maint {
                continue;
            }
            let (endpoint, check) = (member.endpoint.clone(), Arc::clone(&check));
            let proxy = Arc::clone(&proxy);
            probes.spawn(async move {
                let tls = proxy.backend_tls.as_ref();
                let passed = match speaks {
                    Speaks::Stream => {
                        tokio::time::timeout(check.timeout, probe(&endpoint, &check, tls)).await
                    }
                    Speaks::Datagram => {
                        tokio::time::timeout(check.timeout, probe_datagram(&endpoint, &check)).await
                    }
                };
                (endpoint, passed.is_ok_and(|r| r))
            });
        }
        while let Some(done) = probes.join_next().await {
            if let Ok((endpoint, passed)) = done {
                pool.checked(&service, &endpoint, passed, check.rise, check.fall);
            }
        }
        after_round();
    }
}

/// One check: connect (with `backend_tls`, a verified handshake too),
/// send, expect.
async fn probe(endpoint: &Endpoint, check: &HealthCheck, tls: Option<&BackendTls>) -> bool {
    let Ok(stream) = Stream::connect(endpoint).await else {
        return false;
    };
    match tls {
        None => converse(stream, check).await,
        Some(tls) => match crate::net::tls::connect_backend(stream, tls).await {
            Ok(session) => converse(session, check).await,
            Err(_) => false,
        },
    }
}

async fn converse<S: AsyncReadExt + AsyncWriteExt + Unpin>(
    mut stream: S,
    check: &HealthCheck,
) -> bool {
    if let Some(send) = &check.send {
        if stream.write_all(send.as_bytes()).await.is_err() {
            return false;
        }
    }
    let Some(expect) = &check.expect else {
        return true;
    };
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    // Bounded: the check's timeout ends a backend that sends forever.
    while seen.len() < 64 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
        if seen.windows(expect.len()).any(|w| w == expect.as_bytes()) {
            return true;
        }
    }
    false
}

/// One check of a UDP backend: `send` from a socket of our own, connected
/// to it, and a reply holding `expect` (any reply without it). An ICMP port
/// unreachable fails it at once; replies without `expect` (a late answer to
/// an earlier round) are read past until the timeout.
async fn probe_datagram(endpoint: &Endpoint, check: &HealthCheck) -> bool {
    let Endpoint::Tcp(addr) = endpoint else {
        return false;
    };
    let any: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let Ok(socket) = tokio::net::UdpSocket::bind(any).await else {
        return false;
    };
    let send = check.send.as_deref().unwrap_or_default();
    if socket.connect(addr).await.is_err() || socket.send(send.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let Ok(n) = socket.recv(&mut buf).await else {
            return false;
        };
        let reply = &buf[..n];
        match &check.expect {
            None => return true,
            Some(expect) if reply.windows(expect.len()).any(|w| w == expect.as_bytes()) => {
                return true
            }
            Some(_) => {}
        }
    }
}
