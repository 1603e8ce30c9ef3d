//! Where `Server::bind` gets each socket: handed over by a predecessor (an
//! upgrade), passed by systemd, or bound here; and the daemon's own Unix
//! sockets, each with the mode that says who may connect.

use std::os::fd::OwnedFd;
use std::path::Path;

use super::error::RunError;
use crate::model::{ListenAddr, ListenOptions, ListenSpec};
use crate::net::listener::{BindError, Listener, Prebound};

/// A bound TCPMUX listener: its configured address and name, the socket, and
/// its options.
pub(super) type Bound = ((ListenAddr, Option<String>), Listener, ListenOptions);

/// The descriptor of the socket configured as `addr`, if one was handed over.
pub(super) fn take(handed: &mut Vec<(ListenAddr, OwnedFd)>, addr: &ListenAddr) -> Option<OwnedFd> {
    let at = handed.iter().position(|(a, _)| a == addr)?;
    Some(handed.swap_remove(at).1)
}

/// The socket a predecessor handed over (its Unix socket file is ours now),
/// else one bound here.
pub(super) fn adopt_or_bind(
    handed: Option<OwnedFd>,
    bind: impl FnOnce() -> Result<Listener, BindError>,
) -> Result<Listener, RunError> {
    match handed {
        Some(fd) => Listener::from_inherited(fd, true).map_err(RunError::Inherited),
        None => Ok(bind()?),
    }
}

/// One of the sockets the daemon has at most one of, if `wanted`: the one
/// handed over for the same address, else a new one. One handed over for
/// another address is closed.
pub(super) fn single<A: PartialEq>(
    handed: &mut Option<(A, OwnedFd)>,
    wanted: Option<A>,
    bind: impl FnOnce(&A) -> Result<Listener, BindError>,
) -> Result<Option<(A, Listener)>, RunError> {
    let handed = handed.take();
    let Some(wanted) = wanted else {
        return Ok(None);
    };
    let fd = handed.filter(|(at, _)| *at == wanted).map(|(_, fd)| fd);
    let listener = adopt_or_bind(fd, || bind(&wanted))?;
    Ok(Some((wanted, listener)))
}

/// Listeners from systemd; each keeps the options of the configured address it
/// matches, if any.
pub(super) fn adopt(
    inherited: Vec<Prebound>,
    configured: &[ListenSpec],
) -> Result<Vec<Bound>, RunError> {
    inherited
        .into_iter()
        .map(|prebound| {
            let listener = Listener::from_inherited(prebound.fd, prebound.owns_path)
                .map_err(RunError::Inherited)?;
            let addr = listener.local_addr();
            // systemd's name for it (a listener's `name`, or the address
            // tcpmuxd stored it under), else its address.
            let named = |spec: &&ListenSpec| {
                prebound.name.as_deref().is_some_and(|name| {
                    spec.name.as_deref() == Some(name)
                        || spec.addr.to_string().replace(':', "_") == name
                })
            };
            let options = prebound.options.unwrap_or_else(|| {
                configured
                    .iter()
                    .find(named)
                    .or_else(|| configured.iter().find(|spec| spec.addr == addr))
                    .map(|spec| spec.options.clone())
                    .unwrap_or_default()
            });
            Ok(((addr, prebound.name), listener, options))
        })
        .collect()
}

/// The two Unix sockets of the daemon's own, by who may connect.
#[derive(Clone, Copy, Debug)]
pub(super) enum UnixSocket {
    /// Open to every local user: authorization is per name, by the
    /// connecting process's credentials, not by file permissions (0666).
    Control,
    /// For the daemon's own user (0600).
    Upgrade,
    /// The admin socket: 0600, or open to every local user (0666) when
    /// `admin_uids` names others, whom SO_PEERCRED then tells apart.
    Admin { others: bool },
}

impl UnixSocket {
    /// The admin socket for `settings`.
    pub(super) fn admin(settings: Option<&crate::model::AdminSettings>) -> UnixSocket {
        UnixSocket::Admin {
            others: settings.is_some_and(|s| !s.uids.is_empty()),
        }
    }
}

/// Binds one of the daemon's own Unix sockets at `path`, with its mode.
pub(super) fn bind_unix_socket(path: &Path, kind: UnixSocket) -> Result<Listener, BindError> {
    let addr = ListenAddr::Unix(path.to_owned());
    let listener = Listener::bind(&addr)?;
    set_mode(path, kind)?;
    Ok(listener)
}

/// Gives the socket file at `path` the mode of its `kind`: at bind, and at a
/// reload that keeps the admin socket but changes who may use it.
pub(super) fn set_mode(path: &Path, kind: UnixSocket) -> Result<(), BindError> {
    use std::os::unix::fs::PermissionsExt;
    let (mode, why) = match kind {
        UnixSocket::Control => (0o666, "cannot make the control socket connectable"),
        UnixSocket::Upgrade => (0o600, "cannot restrict the upgrade socket to its owner"),
        UnixSocket::Admin { others: false } => {
            (0o600, "cannot restrict the admin socket to its owner")
        }
        UnixSocket::Admin { others: true } => (0o666, "cannot make the admin socket connectable"),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| BindError {
        addr: ListenAddr::Unix(path.to_owned()),
        reason: format!("{why}: {e}"),
    })
}
