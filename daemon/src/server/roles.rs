//! The sockets a daemon has at most one of (the metrics endpoint, the
//! handoff control, upgrade and admin sockets), each a `Role` with one
//! definition: where the configuration puts it, how it is bound, the frame
//! that hands it to a successor, and its name in the log and in `show
//! listeners`. Reload, upgrade and `show listeners` loop over `Role::ALL`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use tcpmux_proto::upgrade::{self, Frame, FRAME};
use tokio::task::AbortHandle;

use super::bind::{bind_unix_socket, UnixSocket};
use super::error::RunError;
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

    /// The role a successor's `frame` hands over, and where its socket was
    /// configured (as shown), if the frame is one of these.
    pub(super) fn of_frame<'f>(frame: &Frame<'f>) -> Option<(Role, &'f str)> {
        match *frame {
            Frame::Metrics(at) => Some((Role::Metrics, at)),
            Frame::Control(at) => Some((Role::Control, at)),
            Frame::Upgrade(at) => Some((Role::Upgrade, at)),
            Frame::Admin(at) => Some((Role::Admin, at)),
            _ => None,
        }
    }

    /// Its place as `shown` writes it; `None` for an address that is none.
    pub(super) fn place(self, shown: &str) -> Option<Place> {
        match self {
            Role::Metrics => shown.parse().ok().map(Place::Tcp),
            _ => Some(Place::Unix(shown.into())),
        }
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

/// One socket for a successor: its frame, and a descriptor of it.
pub(super) type Socket = ([u8; FRAME], OwnedFd);

/// `frame`'s bytes, or an I/O error where it cannot be made (a path too long).
pub(super) fn encoded(frame: &Frame<'_>) -> io::Result<[u8; FRAME]> {
    upgrade::encode(frame).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
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
    pub(super) fn handed(&self, role: Role) -> io::Result<Option<Socket>> {
        let Some(fd) = &self.fd else {
            return Ok(None);
        };
        let shown = self.configured.shown();
        Ok(Some((encoded(&role.frame(&shown))?, fd.try_clone()?)))
    }
}

/// `role`'s socket for `config`, if it wants one: the one a predecessor
/// `handed` over for the same place (unless the role must replace it
/// there: an admin socket for other users than this file's), else a new
/// one. One handed over for another place is closed.
pub(super) fn adopt_or_bind(
    role: Role,
    handed: Option<(Place, OwnedFd)>,
    config: &Config,
) -> Result<Option<(Place, Listener)>, RunError> {
    let Some(wanted) = role.wanted(config) else {
        return Ok(None);
    };
    let here = handed.filter(|(at, _)| *at == wanted).map(|(_, fd)| fd);
    let replacing = here.is_some() && role.replaced_in_place(&wanted, config);
    let adopted = here.filter(|_| !replacing);
    let listener = super::bind::adopt_or_bind(adopted, || role.bind(&wanted, config, replacing))?;
    Ok(Some((wanted, listener)))
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
