//! The sockets a daemon has at most one of (the metrics endpoint, the
//! handoff control, upgrade and admin sockets), each a `Role` with one
//! definition: where the configuration puts it, how it is bound, the frame
//! that hands it to a successor, and its name in the log and in `show
//! listeners`. Reload, upgrade and `show listeners` loop over `Role::ALL`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use tcpmux_proto::upgrade::Frame;
use tokio::task::AbortHandle;

use super::bind::{bind_unix_socket, UnixSocket};
use super::upgrade::encoded;
use crate::config::Config;
use crate::model::ListenAddr;
use crate::net::listener::{BindError, Listener};

/// One of the sockets a daemon has at most one of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    Metrics,
    Control,
    Upgrade,
    Admin,
}

/// Where a role's socket is, as configured: an address for the metrics
/// endpoint, a path for the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Place {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Place {
    /// As the log, its frame and `show listeners` write it.
    pub(super) fn shown(&self) -> String {
        match self {
            Place::Tcp(addr) => addr.to_string(),
            Place::Unix(path) => path.display().to_string(),
        }
    }
}

impl Role {
    /// Every role, in the order they are served and shown.
    pub(super) const ALL: [Role; 4] = [Role::Metrics, Role::Control, Role::Upgrade, Role::Admin];

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// Its kind in `show listeners`.
    pub(super) fn kind(self) -> &'static str {
        match self {
            Role::Metrics => "metrics",
            Role::Control => "handoff control",
            Role::Upgrade => "upgrade",
            Role::Admin => "admin",
        }
    }

    /// What the log calls it.
    pub(super) fn what(self) -> &'static str {
        match self {
            Role::Metrics => "metrics endpoint",
            Role::Control => "handoff control socket",
            Role::Upgrade => "upgrade socket",
            Role::Admin => "admin socket",
        }
    }

    /// Where `config` wants it, if anywhere.
    pub(super) fn wanted(self, config: &Config) -> Option<Place> {
        match self {
            Role::Metrics => config.metrics_listen.map(Place::Tcp),
            Role::Control => config.handoff_socket.clone().map(Place::Unix),
            Role::Upgrade => config.upgrade_socket.clone().map(Place::Unix),
            Role::Admin => config.admin.as_ref().map(|a| Place::Unix(a.socket.clone())),
        }
    }

    /// Whether the socket in service at `place` must make way for a new one
    /// although `config` names the same place: the admin socket whose file
    /// lacks the mode `admin_uids` asks for (files are never chmodded).
    pub(super) fn replaced_in_place(self, place: &Place, config: &Config) -> bool {
        match (self, place) {
            (Role::Admin, Place::Unix(path)) => {
                UnixSocket::admin(config.admin.as_ref()).differs_at(path)
            }
            _ => false,
        }
    }

    /// Binds it at `place` for `config`; `replacing`: our own socket is in
    /// service there and the new one takes its place.
    pub(super) fn bind(
        self,
        place: &Place,
        config: &Config,
        replacing: bool,
    ) -> Result<Listener, BindError> {
        let (path, kind, owner) = match (self, place) {
            (_, Place::Tcp(addr)) => return Listener::bind(&ListenAddr::Tcp(*addr)),
            (Role::Control, Place::Unix(path)) => (path, UnixSocket::Control, None),
            (Role::Upgrade, Place::Unix(path)) => (path, UnixSocket::Upgrade, None),
            // The admin socket is the daemon's user's, whoever binds it.
            (Role::Admin, Place::Unix(path)) => (
                path,
                UnixSocket::admin(config.admin.as_ref()),
                config.run_as,
            ),
            (Role::Metrics, Place::Unix(path)) => {
                return Err(BindError {
                    addr: ListenAddr::Unix(path.clone()),
                    reason: "the metrics endpoint takes an IP:PORT".into(),
                })
            }
        };
        bind_unix_socket(path, kind, owner, replacing)
    }

    /// The frame that hands its socket at `shown` to a successor.
    pub(super) fn frame(self, shown: &str) -> Frame<'_> {
        match self {
            Role::Metrics => Frame::Metrics(shown),
            Role::Control => Frame::Control(shown),
            Role::Upgrade => Frame::Upgrade(shown),
            Role::Admin => Frame::Admin(shown),
        }
    }
}

/// A role's socket in service.
pub(super) struct Single {
    pub(super) configured: Place,
    pub(super) task: AbortHandle,
    /// A second descriptor, to hand to a successor.
    pub(super) fd: Option<OwnedFd>,
}

impl Single {
    /// Its frame and a descriptor of its own, for a successor.
    pub(super) fn handed(&self, role: Role) -> io::Result<Option<super::upgrade::Socket>> {
        let Some(fd) = &self.fd else {
            return Ok(None);
        };
        let shown = self.configured.shown();
        Ok(Some((encoded(&role.frame(&shown))?, fd.try_clone()?)))
    }
}

/// What a reload does to a role's socket: `None` keeps it, `Some(None)`
/// closes it, `Some(Some(..))` replaces it with one bound for `wanted`.
pub(super) fn restage(
    role: Role,
    current: Option<&Place>,
    config: &Config,
) -> Result<Option<Option<Listener>>, BindError> {
    let wanted = role.wanted(config);
    let same = current.is_some() && current == wanted.as_ref();
    let replacing = same && current.is_some_and(|place| role.replaced_in_place(place, config));
    if same && !replacing {
        return Ok(None);
    }
    Ok(Some(
        wanted
            .map(|place| role.bind(&place, config, replacing))
            .transpose()?,
    ))
}
