//! tcpmuxd: a TCPMUX (RFC 1078) daemon. It listens on one port, reads a service
//! name, and connects the client to the service registered under that name.
//!
//! Reading order: [`config`] (what to run) → [`listener`] (sockets) → `session`
//! (one connection) → [`registry`] and [`services`] (what a name does).

pub mod cidr;
pub mod config;
pub mod listener;
pub mod proxy_protocol;
pub mod registry;
pub mod relay;
pub mod services;

mod clock;
mod close;
mod session;
mod stream;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::listener::{accept_backoff, BindError, ListenOptions, Listener};
use crate::registry::Registry;

/// What every connection needs to know, shared read-only by all of them.
#[derive(Debug)]
pub struct Daemon {
    pub registry: Registry,
    pub negotiation_timeout: Duration,
    pub close_drain_timeout: Duration,
}

/// Binds every listen address of `config`, then serves until `shutdown` resolves.
///
/// All addresses are bound before any is served, so a bad one fails the start
/// instead of leaving a half-listening daemon. Must run inside a tokio runtime.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), BindError> {
    let listeners = config
        .listen
        .iter()
        .map(|spec| Ok((Listener::bind(&spec.addr)?, Arc::new(spec.options.clone()))))
        .collect::<Result<Vec<_>, BindError>>()?;
    let daemon = Arc::new(Daemon {
        registry: config.registry,
        negotiation_timeout: config.negotiation_timeout,
        close_drain_timeout: config.close_drain_timeout,
    });
    let mut accepting = tokio::task::JoinSet::new();
    for (listener, options) in listeners {
        tracing::info!(
            address = %listener.local_addr(),
            services = daemon.registry.len(),
            accept_proxy_from = ?options.accept_proxy_from.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "listening"
        );
        accepting.spawn(accept_loop(listener, options, Arc::clone(&daemon)));
    }
    shutdown.await;
    tracing::info!("shutting down");
    // Dropping the accept loops drops the listeners, which removes Unix socket files.
    accepting.shutdown().await;
    Ok(())
}

async fn accept_loop(listener: Listener, options: Arc<ListenOptions>, daemon: Arc<Daemon>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(session::handle(
                    Arc::clone(&daemon),
                    stream,
                    peer,
                    Arc::clone(&options),
                ));
            }
            Err(e) => {
                let pause = accept_backoff(&e);
                tracing::warn!(address = %listener.local_addr(), error = %e, "accept failed");
                if let Some(pause) = pause {
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}
