//! Active health checks of proxy backends (`health_check = { … }`): every
//! `interval`, a TCP connect within `timeout`, optionally sending `send` and
//! reading until `expect` appears; the results move the backend up and down in
//! its service's pool (`balance.rs`). One task per backend, started by the
//! server for the configuration in force.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::admission::ServiceCounts;
use crate::model::{Backend, HealthCheck, Proxy};

/// Checks `proxy.backends[index]` until the task is dropped.
pub async fn check_loop(
    service: String,
    proxy: Arc<Proxy>,
    index: usize,
    counts: Arc<ServiceCounts>,
) {
    let (Some(check), Some(backend)) = (&proxy.health_check, proxy.backends.get(index)) else {
        return;
    };
    let mut ticks = tokio::time::interval(check.interval);
    loop {
        ticks.tick().await;
        let passed = tokio::time::timeout(check.timeout, probe(backend, check))
            .await
            .is_ok_and(|r| r);
        counts
            .pool
            .checked(&service, backend, passed, check.rise, check.fall);
    }
}

/// One check: connect, send, expect.
async fn probe(backend: &Backend, check: &HealthCheck) -> bool {
    match super::proxy::connect(backend).await {
        Ok(stream) => converse(stream, check).await,
        Err(_) => false,
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
