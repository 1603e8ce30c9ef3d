//! tcpmuxd: a TCPMUX (RFC 1078) daemon. It listens on one port, reads a service
//! name, and connects the client to the service registered under that name.
//!
//! Reading order: [`config`] (what to run) → [`listener`] (sockets) → `session`
//! (one connection) → [`registry`] and [`services`] (what a name does).

pub mod cidr;
pub mod config;
pub mod handoff;
pub mod listener;
pub mod proxy_protocol;
pub mod registry;
pub mod relay;
pub mod services;

mod clock;
mod close;
mod session;
mod stream;

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::handoff::Hub;
use crate::listener::{accept_backoff, BindError, ListenAddr, ListenOptions, Listener};
use crate::registry::Registry;
use crate::services::{help, ServiceKind};

/// What every connection needs to know, shared by all of them.
pub struct Daemon {
    pub registry: Arc<Registry>,
    pub negotiation_timeout: Duration,
    pub close_drain_timeout: Duration,
    /// Live handoff registrations.
    pub hub: Arc<Hub>,
}

impl Daemon {
    /// The HELP answer. Handoff names are listed only while a backend serves them.
    pub fn help_text(&self) -> Cow<'_, [u8]> {
        if !self.registry.has_handoff() {
            return Cow::Borrowed(self.registry.help_text());
        }
        let live = self.registry.services().filter(|s| match s.kind {
            ServiceKind::Handoff(_) => self.hub.is_live(&s.name),
            _ => true,
        });
        Cow::Owned(help::render(live.map(|s| s.name.as_str())))
    }
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
    let control = match &config.handoff_socket {
        Some(path) => Some(bind_control_socket(path)?),
        None => None,
    };
    let daemon = Arc::new(Daemon {
        registry: Arc::new(config.registry),
        negotiation_timeout: config.negotiation_timeout,
        close_drain_timeout: config.close_drain_timeout,
        hub: Arc::new(Hub::default()),
    });
    let mut accepting = tokio::task::JoinSet::new();
    if let Some(control) = control {
        tracing::info!(address = %control.local_addr(), "handoff control socket");
        accepting.spawn(handoff::control_loop(
            control,
            Arc::clone(&daemon.hub),
            Arc::clone(&daemon.registry),
            daemon.negotiation_timeout,
        ));
    }
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

/// The control socket is open to every local user: authorization is per name, by
/// the connecting process's credentials, not by file permissions.
fn bind_control_socket(path: &std::path::Path) -> Result<Listener, BindError> {
    use std::os::unix::fs::PermissionsExt;
    let addr = ListenAddr::Unix(path.to_owned());
    let listener = Listener::bind(&addr)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(|e| {
        BindError {
            addr,
            reason: format!("cannot make the control socket connectable: {e}"),
        }
    })?;
    Ok(listener)
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
