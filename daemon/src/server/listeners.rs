//! The daemon's live listening sockets, in two tables: the client listeners
//! (the `listen` list, one `ClientListener` per address: TCPMUX, detecting
//! or TLS) and the sockets it has one of, by `Role` (roles.rs); and applying
//! a configuration to them on reload:
//! everything new is bound first, and only if all of it binds does anything
//! change; removed sockets are closed, so new connects to them are refused,
//! while the sessions they accepted go on.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, RwLock};

use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tracing::instrument::WithSubscriber;

use super::roles::{encoded, restage, Place, Role, Single, Socket};
use super::sessions::{accept_loop, Sessions, SharedOptions};
use super::udp_listeners::{BoundUdp, UdpListeners};
use crate::config::Config;
use crate::hub::Adopted;
use crate::model::{ListenAddr, ListenOptions, ListenSpec};
use crate::net::listener::{BindError, Listener};
use crate::net::tls_threads;
use crate::ops::{lag, metrics_endpoint};
use crate::state::Shared;
use tcpmux_proto::upgrade::Frame;

/// One of the `listen` list's sockets, where clients connect (TCPMUX,
/// detecting or TLS).
struct ClientListener {
    /// As configured (port 0 stays 0), to compare with a new file.
    configured: ListenAddr,
    options: SharedOptions,
    task: AbortHandle,
    /// A second descriptor of the socket, to hand to a successor, and the
    /// address it is bound to (which the successor matches its file against).
    fd: Option<OwnedFd>,
    bound: ListenAddr,
    /// Its `name`, for systemd's descriptor store.
    name: Option<String>,
}

impl ClientListener {
    /// Puts `options` in force for the connections accepted from now on.
    fn update(&self, options: &ListenOptions, shared: &Shared) {
        if let Some(fd) = &self.fd {
            apply_accept_options(&self.bound, fd.as_fd(), options, shared);
        }
        *self.options.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(options.clone());
    }
}

/// Every socket the daemon serves now.
pub(super) struct Live {
    accepting: JoinSet<()>,
    clients: Vec<ClientListener>,
    /// Each role's socket, by `Role::index`.
    singles: [Option<Single>; 4],
    /// What `show listeners` on the admin socket reports, kept current.
    listening: crate::admin::Listening,
    /// Where successors on any upgrade socket are passed (the run loop).
    upgrade_requests: Option<mpsc::Sender<UnixStream>>,
    /// Who chose the TCPMUX listeners, and so what a reload applies to them.
    chosen_by: ChosenBy,
    /// The `listen` list's UDP sockets.
    udp: UdpListeners,
}

/// Who chose the TCPMUX listeners' sockets, which says what a reloaded
/// file's `listen` does to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ChosenBy {
    /// The file: its `listen` applies, sockets and options.
    File,
    /// systemd or `--workers`, which bound them: they stay, and their
    /// options follow the file (a renewed certificate, a new upstream).
    Inheritance,
    /// `--listen`: plain addresses, nothing of the file's applies.
    CommandLine,
}

impl ChosenBy {
    /// For a daemon given `inherited` sockets (systemd, `--workers`) or not;
    /// `--listen` is [`super::Server::listen_from_command_line`].
    pub(super) fn of(inherited: bool) -> ChosenBy {
        match inherited {
            true => ChosenBy::Inheritance,
            false => ChosenBy::File,
        }
    }
}

/// Sockets bound for a new configuration and not serving yet; dropping them
/// closes them (and removes their Unix socket files).
pub(super) struct Staged {
    clients: Vec<(ListenSpec, Listener)>,
    /// By `Role::index`: `None` keeps the socket, `Some(None)` closes it,
    /// `Some(Some(..))` replaces it.
    singles: [Option<Option<Listener>>; 4],
    udp: Vec<BoundUdp>,
}

impl Live {
    /// Whether this loop is one worker of several, whose UDP sockets were
    /// bound for it before it started: a reload adds none.
    pub(super) fn share_udp_ports(&mut self, several: bool) {
        if several {
            self.udp.share_ports();
        }
    }

    pub(super) fn new(chosen_by: ChosenBy) -> Live {
        Live {
            accepting: JoinSet::new(),
            clients: Vec::new(),
            singles: [None, None, None, None],
            listening: crate::admin::Listening::default(),
            upgrade_requests: None,
            chosen_by,
            udp: UdpListeners::default(),
        }
    }

    /// The UDP listeners' flows, for an upgrade to hand over.
    pub(super) fn udp_handover(&self) -> Arc<crate::udp::Handover> {
        Arc::clone(&self.udp.handover)
    }

    /// Flows a predecessor handed over, for the UDP listeners about to serve.
    pub(super) fn adopt_udp_flows(&self, flows: Vec<crate::model::HandedFlow>) {
        self.udp.handover.adopt(flows);
    }

    /// Starts serving a UDP socket of the `listen` list.
    pub(super) fn serve_udp(&mut self, bound: BoundUdp, shared: &Arc<Shared>) {
        self.udp.serve(bound, &mut self.accepting, shared);
    }

    pub(super) fn follows_file(&self) -> bool {
        self.chosen_by == ChosenBy::File
    }

    /// Starts serving a TCPMUX listener configured as `configured`.
    pub(super) fn serve_client(
        &mut self,
        (configured, name): (ListenAddr, Option<String>),
        listener: Listener,
        options: ListenOptions,
        shared: &Arc<Shared>,
        sessions: &Sessions,
    ) {
        let bound = listener.local_addr();
        tracing::info!(
            address = %bound,
            services = shared.settings().registry.len(),
            accept_proxy_from = ?options.accept_proxy_from.iter().map(ToString::to_string).collect::<Vec<_>>(),
            detect = options.detect.is_some(),
            tls = options.tls.is_some(),
            "listening"
        );
        apply_accept_options(&bound, listener.as_fd(), &options, shared);
        if let ListenAddr::Tcp(addr) = &bound {
            shared.own.listening_on(addr.port());
        }
        // A `tls` listener's sessions run whole on the TLS threads' runtime,
        // so that a handshake crosses no thread; a detecting listener's stay
        // here, since most of its clients may be plain.
        let runtime = (options.tls.is_some() && options.detect.is_none())
            .then(tls_threads::tls_runtime)
            .flatten();
        let options: SharedOptions = Arc::new(RwLock::new(Arc::new(options)));
        let fd = listener.as_fd().try_clone_to_owned().ok();
        let moved = runtime.is_some();
        let accepting = accept_loop(
            listener,
            Arc::clone(&options),
            Arc::clone(shared),
            sessions.clone(),
            moved,
        );
        if let Some(runtime) = runtime.as_ref() {
            let lag = &shared.metrics.lag;
            if lag.first_to_watch_tls() {
                let watch = lag::watch(Arc::clone(lag), lag::Loop::Tls);
                self.accepting
                    .spawn_on(watch.with_current_subscriber(), runtime);
            }
        }
        let task = match runtime {
            // With this thread's log: a server in process logs to its own.
            Some(runtime) => self
                .accepting
                .spawn_on(accepting.with_current_subscriber(), &runtime),
            None => self.accepting.spawn(accepting),
        };
        self.clients.push(ClientListener {
            configured,
            options,
            task,
            fd,
            bound,
            name,
        });
    }

    /// Hands every TCPMUX listener to systemd's descriptor store (under its
    /// `name`, else its address), so a restart gets them back.
    pub(super) fn store_in_systemd(&self) {
        for live in &self.clients {
            if let Some(fd) = &live.fd {
                let name = live.name.clone().unwrap_or_else(|| live.bound.to_string());
                crate::ops::systemd::store_fd(fd.as_fd(), &name);
            }
        }
    }

    /// Starts serving `role`'s socket, configured at `place`; `adopted` are
    /// the handoff registrations a predecessor handed over (for the
    /// control socket).
    pub(super) fn serve(
        &mut self,
        role: Role,
        place: Place,
        listener: Listener,
        shared: &Arc<Shared>,
        adopted: Vec<Adopted>,
    ) {
        let fd = listener.as_fd().try_clone_to_owned().ok();
        let task = match role {
            Role::Metrics => self.serve_metrics(listener, shared),
            Role::Control => self.serve_control(listener, shared, adopted),
            Role::Upgrade => match self.serve_upgrades(listener) {
                Some(task) => task,
                None => return,
            },
            Role::Admin => self.serve_admin(listener, shared),
        };
        self.singles[role.index()] = Some(Single {
            configured: place,
            task,
            fd,
        });
        if role == Role::Admin {
            self.publish();
        }
    }

    /// Closes `role`'s socket, if it has one.
    fn close(&mut self, role: Role) {
        if let Some(old) = self.singles[role.index()].take() {
            tracing::info!(address = %old.configured.shown(), "{} closed", role.what());
            old.task.abort();
        }
    }

    fn serve_metrics(&mut self, listener: Listener, shared: &Arc<Shared>) -> AbortHandle {
        tracing::info!(address = %listener.local_addr(), "metrics endpoint");
        let (counters, state, hosts) = (Arc::clone(shared), Arc::clone(shared), Arc::clone(shared));
        let (alive, ready) = (Arc::clone(shared), Arc::clone(shared));
        let listening = Arc::clone(&self.listening);
        let pages = Arc::new(metrics_endpoint::Pages {
            metrics: Box::new(move || counters.render_metrics()),
            status: Box::new(move || crate::admin::status(&state, &listening).to_string()),
            hosts: Box::new(move || hosts.settings().metrics_hosts.clone()),
            health: Box::new(move || alive.health()),
            ready: Box::new(move || ready.readiness()),
        });
        self.accepting
            .spawn(metrics_endpoint::serve(listener, pages))
    }

    /// Serves the handoff control socket; `adopted` are registrations handed
    /// over by a predecessor.
    fn serve_control(
        &mut self,
        listener: Listener,
        shared: &Arc<Shared>,
        adopted: Vec<Adopted>,
    ) -> AbortHandle {
        tracing::info!(address = %listener.local_addr(), "handoff control socket");
        let source = Arc::clone(shared);
        let current = move || {
            let settings = source.settings();
            (Arc::clone(&settings.registry), settings.control_limits)
        };
        let hub = Arc::clone(&shared.hub);
        // In the hub before this daemon says it serves.
        let adopted = crate::hub::adopt_all(adopted, &shared.settings().registry, &hub);
        self.accepting
            .spawn(crate::hub::control_loop(listener, hub, current, adopted))
    }

    /// Where successors are to be passed, on this upgrade socket and any a
    /// reload opens.
    pub(super) fn pass_upgrades_to(&mut self, requests: mpsc::Sender<UnixStream>) {
        self.upgrade_requests = Some(requests);
    }

    /// Serves successors on the upgrade socket, passing them to the run
    /// loop; `None` before the run loop said where.
    fn serve_upgrades(&mut self, listener: Listener) -> Option<AbortHandle> {
        let requests = self.upgrade_requests.clone()?;
        tracing::info!(address = %listener.local_addr(), "upgrade socket");
        Some(
            self.accepting
                .spawn(super::upgrade::accept_upgrades(listener, requests)),
        )
    }

    /// Serves the admin socket.
    fn serve_admin(&mut self, listener: Listener, shared: &Arc<Shared>) -> AbortHandle {
        tracing::info!(address = %listener.local_addr(), "admin socket");
        let serving =
            crate::admin::serve(listener, Arc::clone(shared), Arc::clone(&self.listening));
        self.accepting.spawn(serving)
    }

    /// Puts the sockets in service where `show listeners` reads them.
    pub(super) fn publish(&self) {
        let row = |kind: &str, address: String| crate::admin::ListenerRow {
            kind: kind.to_owned(),
            address,
            name: None,
            detect: false,
            tls: false,
            accept_proxy_from: Vec::new(),
        };
        let mut rows: Vec<_> = self
            .clients
            .iter()
            .map(|live| {
                let options = live.options.read().unwrap_or_else(|p| p.into_inner());
                crate::admin::ListenerRow {
                    name: live.name.clone(),
                    detect: options.detect.is_some(),
                    tls: options.tls.is_some(),
                    accept_proxy_from: options
                        .accept_proxy_from
                        .iter()
                        .map(ToString::to_string)
                        .collect(),
                    ..row("tcpmux", live.bound.to_string())
                }
            })
            .collect();
        rows.extend(self.udp.rows().map(|address| row("udp", address)));
        for role in Role::ALL {
            if let Some(single) = &self.singles[role.index()] {
                rows.push(row(role.kind(), single.configured.shown()));
            }
        }
        *self.listening.lock().unwrap_or_else(|p| p.into_inner()) = rows;
    }

    /// Every socket in service, for a successor: its frame (what it was
    /// configured as) and a descriptor of its own, for the exchange that
    /// runs beside this loop.
    pub(super) fn sockets(&self) -> io::Result<Vec<Socket>> {
        let mut sockets = Vec::new();
        for live in &self.clients {
            if let Some(fd) = &live.fd {
                let addr = live.bound.to_string();
                sockets.push((encoded(&Frame::Listen(&addr))?, fd.try_clone()?));
            }
        }
        sockets.extend(self.udp.sockets()?);
        for role in Role::ALL {
            if let Some(single) = &self.singles[role.index()] {
                sockets.extend(single.handed(role)?);
            }
        }
        Ok(sockets)
    }

    /// Binds what `config` adds to the sockets in service, changing nothing.
    pub(super) fn stage(&self, config: &Config) -> Result<Staged, BindError> {
        let mut clients = Vec::new();
        if self.follows_file() {
            for spec in config.listen.iter().filter(|spec| spec.tcp) {
                if !self.clients.iter().any(|live| live.configured == spec.addr) {
                    clients.push((spec.clone(), Listener::bind(&spec.addr)?));
                }
            }
        }
        let mut singles = [None, None, None, None];
        for role in Role::ALL {
            let current = self.singles[role.index()].as_ref().map(|s| &s.configured);
            singles[role.index()] = restage(role, current, config)?;
        }
        let udp = match self.chosen_by {
            ChosenBy::CommandLine => Vec::new(),
            _ => self.udp.stage(config)?,
        };
        Ok(Staged {
            clients,
            singles,
            udp,
        })
    }

    /// Puts `staged` in service and closes what `config` no longer has.
    pub(super) fn commit(
        &mut self,
        staged: Staged,
        config: &Config,
        shared: &Arc<Shared>,
        sessions: &Sessions,
    ) {
        self.commit_clients(staged.clients, config, shared, sessions);
        if self.chosen_by != ChosenBy::CommandLine {
            self.udp
                .commit(staged.udp, config, &mut self.accepting, shared);
        }
        for (role, staged) in Role::ALL.into_iter().zip(staged.singles) {
            let Some(replacement) = staged else {
                continue;
            };
            self.close(role);
            if let (Some(listener), Some(place)) = (replacement, role.wanted(config)) {
                self.serve(role, place, listener, shared, Vec::new());
            }
        }
        self.publish();
    }

    fn commit_clients(
        &mut self,
        staged: Vec<(ListenSpec, Listener)>,
        config: &Config,
        shared: &Arc<Shared>,
        sessions: &Sessions,
    ) {
        if self.follows_file() {
            self.clients.retain(|live| {
                let spec = config
                    .listen
                    .iter()
                    .find(|s| s.tcp && s.addr == live.configured);
                match spec {
                    Some(spec) => live.update(&spec.options, shared),
                    None => {
                        tracing::info!(address = %live.configured, "listener closed");
                        live.task.abort();
                    }
                }
                spec.is_some()
            });
            for (spec, listener) in staged {
                let options = spec.options;
                self.serve_client((spec.addr, spec.name), listener, options, shared, sessions);
            }
        } else if self.chosen_by == ChosenBy::Inheritance {
            // The sockets stay (systemd or --workers chose them), but
            // their options follow the file: a renewed certificate, a new
            // upstream to trust.
            for live in &self.clients {
                let by_name = |s: &&ListenSpec| live.name.is_some() && s.name == live.name;
                let spec = config
                    .listen
                    .iter()
                    .find(by_name)
                    .or_else(|| config.listen.iter().find(|s| s.addr == live.configured));
                if let Some(spec) = spec {
                    live.update(&spec.options, shared);
                }
            }
        }
    }

    /// Closes every socket: accepting stops at once.
    pub(super) async fn shutdown(mut self) {
        self.accepting.shutdown().await;
    }
}

/// Fast Open and deferred accept on a TCP listener; a failure (an old kernel)
/// is logged and the listener serves without them.
fn apply_accept_options(
    addr: &ListenAddr,
    socket: std::os::fd::BorrowedFd<'_>,
    options: &ListenOptions,
    shared: &Shared,
) {
    if !matches!(addr, ListenAddr::Tcp(_)) {
        return;
    }
    let defer = shared.settings().negotiation_timeout;
    if let Err(e) = crate::net::listener::set_accept_options(socket, options, defer) {
        tracing::warn!(address = %addr, error = %e, "cannot set fast_open or defer_accept; serving without them");
    }
}
