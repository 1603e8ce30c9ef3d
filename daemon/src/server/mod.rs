//! The server: binds what the configuration asks for (where each socket comes
//! from: `bind.rs`), then accepts connections and hands each to a session until
//! told to stop; reloads the configuration when told to, listeners included
//! (`listeners.rs`); the accept loop and the sessions it starts are in
//! `sessions.rs`. Signals are not its business:
//! `main.rs` turns them into the shutdown future and the reload channel, and
//! tests pass their own.

mod bind;
mod error;
mod listeners;
mod once;
mod roles;
mod sessions;
#[cfg(test)]
mod tests;
mod udp_listeners;
pub mod upgrade;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::Config;
use crate::model::ListenAddr;
use crate::net::listener::{BindError, Listener, Prebound};
use crate::ops::privileges::drop_privileges;
use crate::ops::{logging, systemd};
pub use crate::state::DaemonState;
use crate::state::Shared;
use bind::{adopt, take, Bound};
pub use error::RunError;
use listeners::{ChosenBy, Live};
use once::{chores, once_per_daemon, pool_tasks};
use roles::{Place, Role};
use sessions::Sessions;
pub use upgrade::{take_over, Handed, UpgradeError};

/// A daemon whose sockets are bound and that serves nobody yet.
pub struct Server {
    shared: Arc<Shared>,
    /// Each with the address as configured (port 0 stays 0) and its options.
    listeners: Vec<Bound>,
    /// The `listen` list's UDP sockets.
    udp: Vec<udp_listeners::BoundUdp>,
    /// Each role's socket (by `Role::index`), with where it was configured.
    singles: [Option<(Place, Listener)>; 4],
    /// What a reload reads.
    config_path: Option<PathBuf>,
    /// Who chose the TCPMUX listeners, and so what a reload applies to them.
    chosen_by: ChosenBy,
    /// The predecessor waiting for this one's READY, when started by `--upgrade`.
    predecessor: Option<std::os::unix::net::UnixStream>,
    /// Handoff registrations the predecessor handed over.
    adopted: Vec<crate::hub::Adopted>,
    /// UDP flows the predecessor handed over.
    udp_flows: Vec<crate::model::HandedFlow>,
    /// Which of the daemon's event loops this is (0 when it has one).
    worker: usize,
    /// One of several workers (`--workers`).
    several: bool,
    /// This instance in its fleet (`cluster`), for worker 0 to join.
    fleet: Option<crate::fleet::Instance>,
}

impl Server {
    /// Binds every listen address of `config` (or adopts `inherited`, the sockets
    /// of systemd socket activation, which then replace the TCPMUX addresses),
    /// the control socket and the metrics endpoint, and drops privileges if the
    /// configuration says so. All addresses are bound before any is served, so a
    /// bad one fails the start instead of leaving a half-listening daemon.
    /// `config_path` is what a reload reads. `daemon` is the state `config`
    /// was parsed with ([`DaemonState::keys`]); one of several workers of a
    /// daemon gets a clone of the one they share, so that the limits, the
    /// per-service caps, the metrics and the keys are the daemon's. Must run
    /// inside a tokio runtime, on the process's only thread if privileges are
    /// to be dropped.
    pub fn bind(
        config: Config,
        inherited: Vec<Prebound>,
        config_path: Option<PathBuf>,
        daemon: DaemonState,
    ) -> Result<Server, RunError> {
        let handed = Handed::default();
        Server::bind_all(config, inherited, handed, None, config_path, daemon)
    }

    /// [`Server::bind`] for a successor (`--upgrade`): the sockets `handed` over
    /// by the running daemon are reused where the configuration names the same
    /// addresses, the rest are bound; `predecessor` is told READY once this
    /// server serves ([`upgrade::take_over`] gives both).
    pub fn bind_upgrading(
        config: Config,
        handed: Handed,
        predecessor: std::os::unix::net::UnixStream,
        config_path: Option<PathBuf>,
        daemon: DaemonState,
    ) -> Result<Server, RunError> {
        Server::bind_all(
            config,
            Vec::new(),
            handed,
            Some(predecessor),
            config_path,
            daemon,
        )
    }

    fn bind_all(
        config: Config,
        inherited: Vec<Prebound>,
        mut handed: Handed,
        predecessor: Option<std::os::unix::net::UnixStream>,
        config_path: Option<PathBuf>,
        daemon: DaemonState,
    ) -> Result<Server, RunError> {
        let chosen_by = ChosenBy::of(!inherited.is_empty());
        // `--workers` bound each worker a UDP socket of its own too.
        let (datagram, inherited): (Vec<_>, Vec<_>) =
            inherited.into_iter().partition(|p| p.datagram.is_some());
        let mut udp = Vec::new();
        for prebound in datagram {
            let spec = config
                .listen
                .iter()
                .find(|spec| Some(&spec.addr) == prebound.datagram.as_ref());
            if let Some(spec) = spec {
                udp.extend(udp_listeners::adopt(spec, prebound.fd)?);
            }
        }
        // With the UDP sides bound with their TCP side, on the port it got.
        let (listeners, mut paired) = if inherited.is_empty() && udp.is_empty() {
            bind::clients(&config.listen, &mut handed.clients)?
        } else {
            (adopt(inherited, &config.listen)?, Vec::new())
        };
        // A UDP side at its TCP side's bound address: one port for both.
        let prebound_udp = !udp.is_empty();
        for spec in config.listen.iter().filter(|_| !prebound_udp) {
            let tcp_side = listeners
                .iter()
                .find(|((configured, _), _, _)| *configured == spec.addr);
            let at = tcp_side.and_then(|(_, listener, _)| match listener.local_addr() {
                ListenAddr::Tcp(addr) => Some(addr),
                ListenAddr::Unix(_) => None,
            });
            match take(&mut paired, &spec.addr) {
                Some(fd) => udp.extend(udp_listeners::adopt(spec, fd)?),
                None => udp.extend(udp_listeners::bind(spec, at, &mut handed.udp)?),
            }
        }
        let mut singles = [None, None, None, None];
        let mut bind = |role: Role, handed: &mut Handed| -> Result<(), RunError> {
            let predecessors = handed.singles[role.index()].take();
            singles[role.index()] = roles::adopt_or_bind(role, predecessors, &config)?;
            Ok(())
        };
        for role in [Role::Control, Role::Upgrade, Role::Admin] {
            bind(role, &mut handed)?;
        }
        // Everything privileged (binding port 1, creating sockets in /run) is done.
        if let Some((uid, gid)) = config.run_as {
            drop_privileges(uid, gid, config.registry.has_transparent_proxy())?;
        }
        // Only now may the process have a second thread.
        logging::start_writer();
        bind(Role::Metrics, &mut handed)?;
        let fleet = config
            .cluster
            .clone()
            .map(|cluster| crate::fleet::Instance {
                cluster,
                address: listeners
                    .first()
                    .map(|(_, listener, _)| listener.local_addr().to_string())
                    .unwrap_or_default(),
                started: crate::model::clock::unix_seconds(),
            });
        let shared = Arc::new(Shared::new(config, daemon));
        upgrade::restore(&shared, std::mem::take(&mut handed.carried));
        // What the predecessor served and this configuration does not is
        // closed with `handed`.
        Ok(Server {
            shared,
            listeners,
            udp,
            singles,
            config_path,
            chosen_by,
            predecessor,
            adopted: std::mem::take(&mut handed.backends),
            udp_flows: std::mem::take(&mut handed.udp_flows),
            worker: 0,
            several: false,
            fleet,
        })
    }

    /// Marks this server as event loop `index` of a daemon with several
    /// (`--workers`): its lag is reported under that index, and only loop 0
    /// runs the tasks the daemon needs once (health checks, DNS).
    pub fn worker(mut self, index: usize) -> Server {
        self.worker = index;
        self.several = true;
        self
    }

    /// Marks the TCPMUX addresses as given on the command line (`--listen`)
    /// instead of by the file: a reload leaves them and their options alone.
    pub fn listen_from_command_line(mut self) -> Server {
        self.chosen_by = ChosenBy::CommandLine;
        self
    }

    /// The TCPMUX addresses actually bound (real ports where 0 was asked for).
    pub fn local_addrs(&self) -> Vec<ListenAddr> {
        self.listeners
            .iter()
            .map(|(_, l, _)| l.local_addr())
            .collect()
    }

    /// The metrics endpoint's address, if there is one.
    pub fn metrics_addr(&self) -> Option<ListenAddr> {
        let metrics = self.singles[Role::Metrics.index()].as_ref();
        metrics.map(|(_, l)| l.local_addr())
    }

    /// Serves until `shutdown` completes, reloading the configuration file on
    /// each message on `reload`. On shutdown, accepting stops at once and running
    /// sessions get `shutdown_grace` to finish; those still running then are
    /// closed.
    pub async fn run(self, shutdown: impl Future<Output = ()>, mut reload: mpsc::Receiver<()>) {
        crate::services::prepare();
        let shared = self.shared;
        let sessions = Sessions::default();
        let mut live = Live::new(self.chosen_by);
        live.share_udp_ports(self.several);
        let (upgrade_requests, mut upgrades) = mpsc::channel(1);
        live.pass_upgrades_to(upgrade_requests);
        let mut adopted = Some(self.adopted);
        for (role, single) in Role::ALL.into_iter().zip(self.singles) {
            if let Some((place, listener)) = single {
                let adopted = adopted.take().filter(|_| role == Role::Control);
                live.serve(role, place, listener, &shared, adopted.unwrap_or_default());
            }
        }
        for (configured, listener, options) in self.listeners {
            live.serve_client(configured, listener, options, &shared, &sessions);
        }
        live.adopt_udp_flows(self.udp_flows);
        for bound in self.udp {
            live.serve_udp(bound, &shared);
        }
        live.publish();
        let took_over = self.predecessor.is_some();
        if let Some(predecessor) = self.predecessor {
            // Serving on every socket now: the old daemon may stop accepting.
            upgrade::ready(predecessor);
            tracing::info!("upgrade: took over from the running daemon");
        }

        let first = self.worker == 0;
        let (mut pools, mut acme) = once_per_daemon(first, &shared, self.fleet);
        let chores = chores(&shared, self.worker);
        live.store_in_systemd();
        announce_ready(took_over);
        shared.phase.serving();
        let mut watchdog = systemd::watchdog_interval().map(tokio::time::interval);
        let mut handing: Option<upgrade::Exchange> = None;
        let mut handed_over = false;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                // The loop turning is what systemd's watchdog is to see.
                Some(_) = async { Some(watchdog.as_mut()?.tick().await) }, if watchdog.is_some() => {
                    systemd::notify("WATCHDOG=1");
                }
                Some(()) = reload.recv() => {
                    systemd::notify_reloading();
                    let path = self.config_path.as_deref();
                    reload_config(&shared, &mut live, &sessions, path, self.worker).await;
                    // Checks and lookups follow the configuration in force.
                    pools.abort_all();
                    if first {
                        pools = pool_tasks(&shared);
                        acme.follow(&shared.settings().acme);
                    }
                    systemd::notify("READY=1");
                }
                Some(successor) = upgrades.recv(), if handing.is_none() => {
                    handing = upgrade::start(successor, (live.sockets(), live.udp_handover()), &shared);
                }
                Some(done) = async { Some(handing.as_mut()?.await) }, if handing.is_some() => {
                    handing = None;
                    if upgrade::taken_over(done) {
                        handed_over = true;
                        break;
                    }
                    shared.changes.thaw();
                }
            }
        }
        if let Some(exchange) = handing {
            exchange.abort();
        }
        // After a handover the service goes on in the successor: telling
        // systemd STOPPING would have it stop the successor too.
        if !handed_over {
            systemd::notify("STOPPING=1");
            stop_delayed(&shared).await;
        }

        let grace = shared.settings().shutdown_grace;
        tracing::info!(active = shared.gate.active.get(), grace = ?grace, "shutting down");
        // Dropping the accept loops drops the listeners, which removes Unix socket files.
        live.shutdown().await;
        sessions.finish(grace).await;
        drop(chores);
    }
}

/// `/readyz` says 503 from now on; for `shutdown_delay` the listeners still
/// accept (their loops are tasks of their own), so that a load balancer or
/// an orchestrator that polls readiness stops sending before they close.
async fn stop_delayed(shared: &Shared) {
    shared.phase.stopping();
    let delay = shared.settings().shutdown_delay;
    if !delay.is_zero() {
        tracing::info!(delay = ?delay, "stopping: /readyz says 503; still accepting for shutdown_delay");
        tokio::time::sleep(delay).await;
    }
}

/// Tells systemd this daemon serves.
fn announce_ready(took_over: bool) {
    if took_over {
        // The service's main process from now on: systemd follows it
        // (the unit needs NotifyAccess=all to hear a second process).
        systemd::notify(&format!("MAINPID={}\nREADY=1", std::process::id()));
    } else {
        systemd::notify("READY=1");
    }
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
enum ReloadError {
    #[error("{0}")]
    Config(crate::config::ConfigError),
    #[error("{0}")]
    Bind(BindError),
    #[error("the task reading the file failed: {0}")]
    Loader(tokio::task::JoinError),
}

/// Load the file again: new connections get the new services, running
/// sessions keep theirs; added listen addresses are bound and removed ones
/// closed (as are a changed metrics endpoint and control socket). Nothing
/// changes unless all of it succeeds: a bad file or an address that cannot
/// be bound keeps the running configuration, with one error line.
async fn reload_config(
    shared: &Arc<Shared>,
    live: &mut Live,
    sessions: &Sessions,
    path: Option<&Path>,
    worker: usize,
) {
    let Some(path) = path else {
        tracing::warn!("reload ignored: started without --config, nothing to reload");
        return;
    };
    // Off the event loop: reading the file, its certificates and NSS lookups
    // (an LDAP user) may block.
    let (owned, keys) = (path.to_owned(), shared.keys.clone());
    let started = std::time::Instant::now();
    let loaded = tokio::task::spawn_blocking(move || {
        let mut config = Config::load(&owned, &keys)?;
        if worker != 0 {
            config.leave_daemon_sockets();
        }
        // Here, off the loop: a raised max_connections grows the table now.
        crate::ops::descriptors::grow_ahead(&config.limits);
        Ok(config)
    })
    .await;
    let staged = match loaded {
        Ok(Ok(config)) => live
            .stage(&config)
            .map(|staged| (config, staged))
            .map_err(ReloadError::Bind),
        Ok(Err(e)) => Err(ReloadError::Config(e)),
        Err(e) => Err(ReloadError::Loader(e)),
    };
    let (mut config, staged) = match staged {
        Ok(staged) => staged,
        Err(e) => {
            tracing::error!("reload failed, keeping the running configuration: {e}");
            return;
        }
    };
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    // The new settings are made off the loop too (counting 100,000 names
    // takes a tenth of a second), then put in force with the listeners at
    // once, and the old ones freed off the loop.
    let settings = {
        let shared = Arc::clone(shared);
        // The loop's subscriber, for what it logs (a forgotten setting).
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        tokio::task::spawn_blocking(move || {
            let settings =
                tracing::dispatcher::with_default(&dispatch, || shared.settings_for(&mut config));
            (config, settings)
        })
        .await
    };
    let Ok((config, settings)) = settings else {
        tracing::error!(
            "reload failed, keeping the running configuration: its settings could not be made"
        );
        return;
    };
    let replaced = shared.install(settings);
    // Services and members the reload added take what the fleet set for them.
    if let Some(fleet) = shared.fleet.get() {
        fleet.targets_added();
    }
    live.commit(staged, &config, shared, sessions);
    let services = shared.settings().registry.len();
    let listen = live.follows_file().then_some(config.listen.len());
    let ms = started.elapsed().as_millis() as u64;
    tracing::info!(path = %path.display(), services, listen, ms, "configuration reloaded");
    tokio::task::spawn_blocking(move || {
        drop((replaced, config));
        crate::ops::trim::release_free_memory();
    });
}
