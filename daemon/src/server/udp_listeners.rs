//! The UDP sockets of the `listen` list (`udp = true`), one per address,
//! beside the TCP one or alone: bound at start and by a reload that adds
//! them, their routes replaced by a reload that keeps them, closed by one
//! that removes them (their flows end).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, RwLock};

use tokio::task::{AbortHandle, JoinSet};

use super::roles::{encoded, Socket};
use crate::config::Config;
use crate::model::{ListenAddr, ListenSpec, UdpRoutes};
use crate::net::datagram::bind_udp;
use crate::net::listener::BindError;
use crate::state::Shared;
use crate::udp::SharedRoutes;
use tcpmux_proto::upgrade::Frame;

/// A UDP socket bound for a listen entry and not serving yet.
pub(super) struct BoundUdp {
    /// The entry's address as configured (port 0 stays 0).
    configured: ListenAddr,
    socket: std::net::UdpSocket,
    routes: UdpRoutes,
}

/// Binds the UDP side of `spec`, at `at` (the TCP side's bound address,
/// so a port 0 gives both the same port), if it has one; or adopts the
/// socket a predecessor bound there, from `handed`.
pub(super) fn bind(
    spec: &ListenSpec,
    at: Option<SocketAddr>,
    handed: &mut Vec<(SocketAddr, OwnedFd)>,
) -> Result<Option<BoundUdp>, BindError> {
    let (Some(routes), ListenAddr::Tcp(configured)) = (&spec.options.udp, &spec.addr) else {
        return Ok(None);
    };
    let addr = at.unwrap_or(*configured);
    if let Some(at) = handed.iter().position(|(bound, _)| *bound == addr) {
        return adopt(spec, handed.swap_remove(at).1);
    }
    Ok(Some(BoundUdp {
        configured: spec.addr.clone(),
        socket: bind_udp(addr, false)?,
        routes: routes.clone(),
    }))
}

/// The UDP socket bound for `spec` before this event loop started: by
/// `prebind` (`--workers`, each worker its own on the same address) or by
/// the daemon this one replaces.
pub(super) fn adopt(spec: &ListenSpec, fd: OwnedFd) -> Result<Option<BoundUdp>, BindError> {
    let Some(routes) = &spec.options.udp else {
        return Ok(None);
    };
    let socket = std::net::UdpSocket::from(fd);
    socket.set_nonblocking(true).map_err(|e| BindError {
        addr: spec.addr.clone(),
        reason: format!("the UDP socket bound before this event loop started: {e}"),
    })?;
    Ok(Some(BoundUdp {
        configured: spec.addr.clone(),
        socket,
        routes: routes.clone(),
    }))
}

struct Serving {
    configured: ListenAddr,
    bound: SocketAddr,
    /// A second descriptor of the socket, to hand to a successor.
    fd: Option<OwnedFd>,
    routes: SharedRoutes,
    task: AbortHandle,
}

/// The UDP sockets in service.
#[derive(Default)]
pub(super) struct UdpListeners {
    serving: Vec<Serving>,
    /// One of several workers (`--workers`): the sockets were bound before
    /// the workers started, and a reload adds none.
    shared_port: bool,
    /// Their flows, for a binary upgrade to hand over, and those handed
    /// to this daemon.
    pub(super) handover: Arc<crate::udp::Handover>,
}

impl UdpListeners {
    /// Marks these as one worker's of several (`--workers`).
    pub(super) fn share_ports(&mut self) {
        self.shared_port = true;
    }

    /// Starts serving `bound`'s socket.
    pub(super) fn serve(&mut self, bound: BoundUdp, tasks: &mut JoinSet<()>, shared: &Arc<Shared>) {
        let socket = match tokio::net::UdpSocket::from_std(bound.socket) {
            Ok(socket) => socket,
            Err(e) => {
                tracing::error!(address = %bound.configured, error = %e, "cannot serve a UDP socket");
                return;
            }
        };
        let Ok(local) = socket.local_addr() else {
            return;
        };
        tracing::info!(
            udp = %local,
            probes = ?bound.routes.probes.iter().map(|(p, s)| format!("{}={s}", p.name())).collect::<Vec<_>>(),
            udp_default = bound.routes.default.as_ref().map(tracing::field::display),
            "listening for datagrams"
        );
        let fd = socket.as_fd().try_clone_to_owned().ok();
        let routes: SharedRoutes = Arc::new(RwLock::new(Arc::new(bound.routes)));
        let task = tasks.spawn(crate::udp::serve(
            socket,
            Arc::clone(&routes),
            Arc::clone(shared),
            Arc::clone(&self.handover),
        ));
        self.serving.push(Serving {
            configured: bound.configured,
            bound: local,
            fd,
            routes,
            task,
        });
    }

    /// Binds the UDP sockets `config` adds, changing nothing.
    pub(super) fn stage(&self, config: &Config) -> Result<Vec<BoundUdp>, BindError> {
        let mut staged = Vec::new();
        for spec in &config.listen {
            if self.serving.iter().any(|s| s.configured == spec.addr) {
                continue;
            }
            if self.shared_port && spec.options.udp.is_some() {
                // As for TCP: the sockets of `--workers` were bound before
                // the workers started, each worker's own.
                tracing::warn!(address = %spec.addr, "a UDP side added by a reload is not bound under --workers: restart the daemon to serve it");
                continue;
            }
            staged.extend(bind(spec, None, &mut Vec::new())?);
        }
        Ok(staged)
    }

    /// Serves `staged`, updates the routes of the sockets `config` keeps and
    /// closes the others.
    pub(super) fn commit(
        &mut self,
        staged: Vec<BoundUdp>,
        config: &Config,
        tasks: &mut JoinSet<()>,
        shared: &Arc<Shared>,
    ) {
        self.serving.retain(|serving| {
            let spec = config.listen.iter().find(|s| s.addr == serving.configured);
            match spec.and_then(|spec| spec.options.udp.as_ref()) {
                Some(routes) => {
                    *serving.routes.write().unwrap_or_else(|p| p.into_inner()) =
                        Arc::new(routes.clone());
                    true
                }
                None => {
                    tracing::info!(udp = %serving.bound, "UDP listener closed");
                    serving.task.abort();
                    false
                }
            }
        });
        for bound in staged {
            self.serve(bound, tasks, shared);
        }
    }

    /// Every socket in service, for a successor: its frame and a
    /// descriptor of its own.
    pub(super) fn sockets(&self) -> io::Result<Vec<Socket>> {
        let mut sockets = Vec::new();
        for serving in &self.serving {
            if let Some(fd) = &serving.fd {
                let frame = encoded(&Frame::ListenUdp(&serving.bound.to_string()))?;
                sockets.push((frame, fd.try_clone()?));
            }
        }
        Ok(sockets)
    }

    /// The bound addresses, for `show listeners`' `udp` rows.
    pub(super) fn rows(&self) -> impl Iterator<Item = String> + '_ {
        self.serving.iter().map(|s| s.bound.to_string())
    }
}
