//! tcpmuxd: a TCPMUX (RFC 1078) daemon. It listens on one port, reads a service
//! name, and connects the client to the service registered under that name.
//!
//! Reading order: [`config`] (what to run) → [`listener`] (sockets) → `session`
//! (one connection) → [`registry`] and [`services`] (what a name does).

pub mod cidr;
pub mod config;
pub mod handoff;
pub mod limits;
pub mod listener;
pub mod logging;
pub mod metrics;
pub mod proxy_protocol;
pub mod registry;
pub mod relay;
mod sendfile;
pub mod services;

pub mod systemd;

mod clock;
mod close;
mod session;
mod stream;

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::config::Config;
use crate::handoff::Hub;
use crate::limits::{Gate, Limits};
use crate::listener::{accept_backoff, BindError, ListenAddr, ListenOptions, Listener};
use crate::registry::Registry;
use crate::services::{help, ServiceKind};

/// The part of the configuration a reload replaces. A session takes a snapshot
/// when it starts and keeps it to the end, so a reload never changes a running
/// session.
pub struct Settings {
    pub registry: Arc<Registry>,
    pub negotiation_timeout: Duration,
    pub close_drain_timeout: Duration,
    pub shutdown_grace: Duration,
    pub limits: Limits,
}

impl Settings {
    fn from_config(config: Config) -> Settings {
        Settings {
            registry: Arc::new(config.registry),
            negotiation_timeout: config.negotiation_timeout,
            close_drain_timeout: config.close_drain_timeout,
            shutdown_grace: config.shutdown_grace,
            limits: config.limits,
        }
    }
}

/// What every connection shares.
pub struct Daemon {
    settings: RwLock<Arc<Settings>>,
    /// Live handoff registrations.
    pub hub: Arc<Hub>,
    /// Connections admitted and not yet closed, daemon-wide and per address.
    pub gate: Arc<Gate>,
    pub metrics: metrics::Metrics,
}

impl Daemon {
    /// The settings in force now.
    pub fn settings(&self) -> Arc<Settings> {
        Arc::clone(&self.settings.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn replace_settings(&self, settings: Settings) {
        *self.settings.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(settings);
    }

    /// The counters in the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        self.metrics
            .render(self.gate.active.get(), &self.hub.counts())
    }

    /// The HELP answer for `registry`. Handoff names are listed only while a
    /// backend serves them.
    pub fn help_text<'a>(&self, registry: &'a Registry) -> Cow<'a, [u8]> {
        if !registry.has_handoff() {
            return Cow::Borrowed(registry.help_text());
        }
        let live = registry.services().filter(|s| match s.kind {
            ServiceKind::Handoff(_) => self.hub.is_live(&s.name),
            _ => true,
        });
        Cow::Owned(help::render(live.map(|s| s.name.as_str())))
    }
}

/// Binds every listen address of `config`, then serves until SIGTERM or SIGINT,
/// reloading `config_path` on SIGHUP.
///
/// All addresses are bound before any is served, so a bad one fails the start
/// instead of leaving a half-listening daemon. On shutdown, accepting stops at
/// once and running sessions get `shutdown_grace` to finish. Must run inside a
/// tokio runtime.
///
/// `inherited` are listening sockets from systemd socket activation; when there
/// are any, they replace the configured TCPMUX listen addresses.
pub async fn run(
    config: Config,
    config_path: Option<PathBuf>,
    inherited: Vec<listener::Prebound>,
) -> Result<(), BindError> {
    use tokio::signal::unix::{signal, SignalKind};
    let signal_error = |e: std::io::Error| BindError {
        addr: ListenAddr::Unix(PathBuf::from("-")),
        reason: format!("cannot install signal handlers: {e}"),
    };
    let mut hangup = signal(SignalKind::hangup()).map_err(signal_error)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(signal_error)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(signal_error)?;

    let listeners = if inherited.is_empty() {
        config
            .listen
            .iter()
            .map(|spec| Ok((Listener::bind(&spec.addr)?, Arc::new(spec.options.clone()))))
            .collect::<Result<Vec<_>, BindError>>()?
    } else {
        adopt(inherited, &config.listen)?
    };
    let control = match &config.handoff_socket {
        Some(path) => Some(bind_control_socket(path)?),
        None => None,
    };
    // Everything privileged (binding port 1, creating sockets in /run) is done.
    if let Some((uid, gid)) = config.run_as {
        drop_privileges(uid, gid).map_err(|reason| BindError {
            addr: ListenAddr::Unix(PathBuf::from("-")),
            reason,
        })?;
    }
    // Only now may the process have a second thread.
    logging::start_writer();
    let metrics_listener = match &config.metrics_listen {
        Some(addr) => Some(Listener::bind(&ListenAddr::Tcp(*addr))?),
        None => None,
    };
    services::prepare();
    let mut accepting = tokio::task::JoinSet::new();
    // What a reload compares its file with: nothing when the command line chose.
    let listen = (!config.listen_from_command_line).then(|| config.listen.clone());
    let handoff_socket = config.handoff_socket.clone();
    let daemon = Arc::new(Daemon {
        settings: RwLock::new(Arc::new(Settings::from_config(config))),
        hub: Arc::new(Hub::default()),
        gate: Arc::new(Gate::default()),
        metrics: metrics::Metrics::default(),
    });
    if let Some(listener) = metrics_listener {
        tracing::info!(address = %listener.local_addr(), "metrics endpoint");
        accepting.spawn(serve_metrics(listener, Arc::clone(&daemon)));
    }
    if let Some(control) = control {
        tracing::info!(address = %control.local_addr(), "handoff control socket");
        accepting.spawn(handoff::control_loop(control, Arc::clone(&daemon)));
    }
    for (listener, options) in listeners {
        tracing::info!(
            address = %listener.local_addr(),
            services = daemon.settings().registry.len(),
            accept_proxy_from = ?options.accept_proxy_from.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "listening"
        );
        accepting.spawn(accept_loop(listener, options, Arc::clone(&daemon)));
    }

    systemd::notify("READY=1");
    loop {
        tokio::select! {
            _ = hangup.recv() => {
                systemd::notify_reloading();
                reload(&daemon, config_path.as_deref(), listen.as_deref(), handoff_socket.as_deref());
                systemd::notify("READY=1");
            }
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        }
    }
    systemd::notify("STOPPING=1");

    let grace = daemon.settings().shutdown_grace;
    tracing::info!(active = daemon.gate.active.get(), grace = ?grace, "shutting down");
    // Dropping the accept loops drops the listeners, which removes Unix socket files.
    accepting.shutdown().await;
    let deadline = tokio::time::Instant::now() + grace;
    while daemon.gate.active.get() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = daemon.gate.active.get();
    if left > 0 {
        tracing::warn!(
            sessions = left,
            "grace period over; closing the remaining sessions"
        );
    }
    Ok(())
}

/// A minimal HTTP/1.0 responder for Prometheus: `GET /metrics` gets the counters,
/// anything else 404; one request per connection, bounded in size and time.
async fn serve_metrics(listener: Listener, daemon: Arc<Daemon>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let daemon = Arc::clone(&daemon);
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
            });
            if read.await.is_err() {
                return;
            }
            let response = if request.starts_with(b"GET /metrics ")
                || request.starts_with(b"GET / ")
            {
                let body = daemon.render_metrics();
                format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.0 404 Not Found\r\nContent-Length: 10\r\n\r\nnot found\n".to_owned()
            };
            let _ = stream.write_all(response.as_bytes()).await;
            close::close_gracefully(&mut stream, Duration::from_secs(1)).await;
        });
    }
}

/// Listeners from systemd; each keeps the options of the configured address it
/// matches, if any.
fn adopt(
    inherited: Vec<listener::Prebound>,
    configured: &[listener::ListenSpec],
) -> Result<Vec<(Listener, Arc<ListenOptions>)>, BindError> {
    inherited
        .into_iter()
        .map(|prebound| {
            let listener =
                Listener::from_inherited(prebound.fd, prebound.owns_path).map_err(|e| {
                    BindError {
                        addr: ListenAddr::Unix(PathBuf::from("(inherited)")),
                        reason: format!("cannot use an inherited listening socket: {e}"),
                    }
                })?;
            let addr = listener.local_addr();
            let options = prebound.options.unwrap_or_else(|| {
                configured
                    .iter()
                    .find(|spec| spec.addr == addr)
                    .map(|spec| spec.options.clone())
                    .unwrap_or_default()
            });
            Ok((listener, Arc::new(options)))
        })
        .collect()
}

/// Switches to `uid`/`gid` for good (saved ids too) and drops supplementary
/// groups. The kernel changes credentials per thread, so this must run while the
/// process has its only thread; every later thread inherits the new ones.
pub fn drop_privileges(uid: u32, gid: u32) -> Result<(), String> {
    use rustix::process::{Gid, Uid};
    let threads = std::fs::read_dir("/proc/self/task")
        .map(Iterator::count)
        .unwrap_or(1);
    if threads != 1 {
        return Err(format!(
            "cannot drop privileges with {threads} threads running"
        ));
    }
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    rustix::thread::set_thread_groups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(|e| format!("setresgid: {e}"))?;
    rustix::thread::set_thread_res_uid(uid, uid, uid).map_err(|e| format!("setresuid: {e}"))?;
    if rustix::process::geteuid() != uid || rustix::process::getegid() != gid {
        return Err("credentials did not change".into());
    }
    tracing::info!(uid = uid.as_raw(), gid = gid.as_raw(), "dropped privileges");
    Ok(())
}

/// SIGHUP: load the file again; new connections get the new services, running
/// sessions keep theirs. A bad file keeps the old configuration.
fn reload(
    daemon: &Daemon,
    path: Option<&std::path::Path>,
    listen: Option<&[listener::ListenSpec]>,
    handoff: Option<&std::path::Path>,
) {
    let Some(path) = path else {
        tracing::warn!("SIGHUP ignored: started without --config, nothing to reload");
        return;
    };
    match Config::load(path) {
        Ok(config) => {
            if listen.is_some_and(|listen| config.listen != listen) {
                tracing::warn!("`listen` changes only on restart; keeping the current addresses");
            }
            if config.handoff_socket.as_deref() != handoff {
                tracing::warn!("`handoff_socket` changes only on restart; keeping the current one");
            }
            let services = config.registry.len();
            daemon.replace_settings(Settings::from_config(config));
            tracing::info!(path = %path.display(), services, "configuration reloaded");
        }
        Err(e) => tracing::error!("reload failed, keeping the running configuration: {e}"),
    }
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
