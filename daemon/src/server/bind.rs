//! Where `Server::bind` gets each socket: handed over by a predecessor (an
//! upgrade), passed by systemd, or bound here; and the daemon's own Unix
//! sockets, each with the mode that says who may connect.

use std::os::fd::OwnedFd;
use std::path::Path;

use super::error::RunError;
use crate::model::{ListenAddr, ListenOptions, ListenSpec};
use crate::net::listener::{BindError, Listener, Prebound};
use crate::net::unix_socket::{self, remove_stale_socket};

/// A bound TCPMUX listener: its configured address and name, the socket, and
/// its options.
pub(super) type Bound = ((ListenAddr, Option<String>), Listener, ListenOptions);

/// Each TCP listener `listen` asks for, handed over by a predecessor or
/// bound here; and the UDP sides bound here with theirs (`bind_with_udp`),
/// by configured address.
pub(super) fn clients(
    listen: &[ListenSpec],
    handed: &mut ByAddress,
) -> Result<(Vec<Bound>, ByAddress), RunError> {
    let mut paired = Vec::new();
    let listeners = listen
        .iter()
        .filter(|spec| spec.tcp)
        .map(|spec| {
            let listener = adopt_or_bind(take(handed, &spec.addr), || {
                let (listener, udp) = bind_with_udp(spec)?;
                paired.extend(udp.map(|fd| (spec.addr.clone(), fd)));
                Ok(listener)
            })?;
            let key = (spec.addr.clone(), spec.name.clone());
            Ok((key, listener, spec.options.clone()))
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    Ok((listeners, paired))
}

/// A listener for `spec`, and when it asks for port 0 with a UDP side too,
/// that side's socket on the same port, found as `on_one_port` says.
fn bind_with_udp(spec: &ListenSpec) -> Result<(Listener, Option<OwnedFd>), BindError> {
    let ListenAddr::Tcp(configured) = &spec.addr else {
        return Ok((Listener::bind(&spec.addr)?, None));
    };
    if configured.port() != 0 || spec.options.udp.is_none() {
        return Ok((Listener::bind(&spec.addr)?, None));
    }
    let bind_tcp = || {
        let listener = Listener::bind(&spec.addr)?;
        let at = match listener.local_addr() {
            ListenAddr::Tcp(at) => at,
            ListenAddr::Unix(_) => *configured,
        };
        Ok((listener, at))
    };
    let (listener, udp) = crate::net::datagram::on_one_port(bind_tcp, false)?;
    Ok((listener, Some(udp.into())))
}

/// Sockets by the address they were configured as.
pub(super) type ByAddress = Vec<(ListenAddr, OwnedFd)>;

/// The descriptor of the socket configured as `addr`, if one was handed over.
pub(super) fn take(handed: &mut ByAddress, addr: &ListenAddr) -> Option<OwnedFd> {
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

/// The daemon's own Unix sockets, by who may connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UnixSocket {
    /// Open to every local user: authorization is per name, by the
    /// connecting process's credentials, not by file permissions (0666).
    Control,
    /// For the daemon's own user (0600).
    Upgrade,
    /// The admin socket, owned by the daemon's user: 0600, or open to every
    /// local user (0666) when `admin_uids` names others, whom SO_PEERCRED
    /// then tells apart.
    Admin { others: bool },
}

impl UnixSocket {
    /// The admin socket for `settings`.
    pub(super) fn admin(settings: Option<&crate::model::AdminSettings>) -> UnixSocket {
        UnixSocket::Admin {
            others: settings.is_some_and(|s| !s.uids.is_empty()),
        }
    }

    fn mode(self) -> u32 {
        match self {
            UnixSocket::Control | UnixSocket::Admin { others: true } => 0o666,
            UnixSocket::Upgrade | UnixSocket::Admin { others: false } => 0o600,
        }
    }

    /// Whether the file at `path` lacks this kind's mode (or is not a
    /// socket at all): then a reload that keeps the path replaces the socket.
    /// Read only: the file is never changed by its path.
    pub(super) fn differs_at(self, path: &Path) -> bool {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        std::fs::symlink_metadata(path).map_or(true, |meta| {
            !meta.file_type().is_socket() || meta.permissions().mode() & 0o777 != self.mode()
        })
    }
}

/// Binds one of the daemon's own Unix sockets at `path`, its file complete
/// with its mode (and, for the admin socket, `owner`: the daemon's user when
/// root binds it before dropping privileges) before anyone can see it.
/// `replacing`: the path is our own socket in service, which the new one
/// replaces in place (a reload that changes who may connect); otherwise a
/// live socket there is another daemon's and refused.
pub(super) fn bind_unix_socket(
    path: &Path,
    kind: UnixSocket,
    owner: Option<(u32, u32)>,
    replacing: bool,
) -> Result<Listener, BindError> {
    let fail = |reason: String| BindError {
        addr: ListenAddr::Unix(path.to_owned()),
        reason,
    };
    if !replacing {
        remove_stale_socket(path).map_err(fail)?;
    }
    let owner = match kind {
        UnixSocket::Admin { .. } if rustix::process::geteuid().is_root() => owner,
        _ => None,
    };
    let file = unix_socket::SocketFile {
        mode: kind.mode(),
        owner,
    };
    let what = match kind {
        UnixSocket::Control => "the handoff control socket",
        UnixSocket::Upgrade => "the upgrade socket",
        UnixSocket::Admin { .. } => "the admin socket",
    };
    let (listener, id) = unix_socket::bind(path, file).map_err(|e| {
        fail(format!(
            "cannot make {what}: {e} (its directory must exist and be writable by the daemon's user)"
        ))
    })?;
    Listener::from_socket_file(listener, path, id).map_err(|e| fail(e.to_string()))
}
