//! Binding listen addresses: a TCP socket with the options every listener
//! has, the sockets bound once per worker before the event loops start
//! (`prebind`), the accept-time options a reload may change, and a failed
//! bind told in words with its fix.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::model::{ListenAddr, ListenOptions, ListenSpec};
use crate::net::datagram::{bind_udp, on_one_port};
use crate::net::unix_socket::remove_stale_socket;

/// Pending-connection queue length; the kernel caps it at net.core.somaxconn.
const BACKLOG: i32 = 1024;

pub use crate::net::bind_error::BindError;

/// A listening socket bound before the event loops start.
#[derive(Debug)]
pub struct Prebound {
    pub fd: std::os::fd::OwnedFd,
    /// `None`: take the options of the configured address it matches (systemd).
    pub options: Option<ListenOptions>,
    /// Remove the socket file on shutdown (ours, not systemd's).
    pub owns_path: bool,
    /// systemd's name for it (LISTEN_FDNAMES), matched against a listener's
    /// `name` (or its address, as tcpmuxd names the sockets it stores).
    pub name: Option<String>,
    /// A UDP socket `prebind` bound for the listen entry at this address,
    /// not a TCP listener.
    pub datagram: Option<ListenAddr>,
}

impl Prebound {
    /// A socket `prebind` bound for `spec` (a UDP one when `datagram`).
    fn ours(fd: std::os::fd::OwnedFd, spec: &ListenSpec, datagram: Option<ListenAddr>) -> Prebound {
        Prebound {
            fd,
            options: Some(spec.options.clone()),
            owns_path: false,
            name: None,
            datagram,
        }
    }
}

/// Binds the listen addresses once per worker for the multi-core mode: every
/// worker gets its own TCP socket on each address, and its own UDP socket
/// where the entry has `udp = true`, with SO_REUSEPORT so the kernel spreads
/// new connections across them, and keeps each client's datagrams on one
/// (it hashes their addresses); Unix sockets (which cannot be shared that
/// way) go to worker 0 only. A port 0 is resolved by the first bind and
/// reused by the rest, UDP on the port TCP got (one free for both).
pub fn prebind(specs: &[ListenSpec], workers: usize) -> Result<Vec<Vec<Prebound>>, BindError> {
    let mut sets: Vec<Vec<Prebound>> = (0..workers).map(|_| Vec::new()).collect();
    for spec in specs {
        let fail = |e: io::Error| BindError {
            addr: spec.addr.clone(),
            reason: explain(&spec.addr, &e),
        };
        match &spec.addr {
            ListenAddr::Tcp(addr) => {
                let mut actual = *addr;
                // Port 0 with both sides: the first worker's pair on a port
                // free for both (on_one_port), the others' on it too.
                let (mut first_tcp, mut first_udp) = (None, None);
                if addr.port() == 0 && spec.tcp && spec.options.udp.is_some() {
                    let bind_tcp = || {
                        let socket = tcp_socket(*addr, true).map_err(fail)?;
                        let at = socket.local_addr().ok().and_then(|a| a.as_socket());
                        Ok((socket, at.unwrap_or(*addr)))
                    };
                    let (tcp, udp) = on_one_port(bind_tcp, true)?;
                    actual = udp.local_addr().unwrap_or(actual);
                    (first_tcp, first_udp) = (Some(tcp), Some(udp));
                }
                for set in sets.iter_mut().filter(|_| spec.tcp) {
                    let socket = match first_tcp.take() {
                        Some(socket) => socket,
                        None => tcp_socket(actual, true).map_err(fail)?,
                    };
                    if let Some(bound) = socket.local_addr().ok().and_then(|a| a.as_socket()) {
                        actual = bound;
                    }
                    set.push(Prebound::ours(socket.into(), spec, None));
                }
                for set in sets.iter_mut().filter(|_| spec.options.udp.is_some()) {
                    let socket = match first_udp.take() {
                        Some(socket) => socket,
                        None => bind_udp(actual, true)?,
                    };
                    if let Ok(bound) = socket.local_addr() {
                        actual = bound;
                    }
                    set.push(Prebound::ours(socket.into(), spec, Some(spec.addr.clone())));
                }
            }
            ListenAddr::Unix(path) => {
                remove_stale_socket(path).map_err(|reason| BindError {
                    addr: spec.addr.clone(),
                    reason,
                })?;
                let listener = std::os::unix::net::UnixListener::bind(path).map_err(fail)?;
                sets[0].push(Prebound {
                    owns_path: true,
                    ..Prebound::ours(listener.into(), spec, None)
                });
            }
        }
    }
    Ok(sets)
}

pub(super) fn bind_tcp(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    Ok(tcp_socket(addr, false)?.into())
}

fn tcp_socket(addr: SocketAddr, reuse_port: bool) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // Restarting must not wait for old connections in TIME_WAIT to expire.
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        // `[::]:1` means IPv6 only; list `0.0.0.0:1` as well for both families.
        socket.set_only_v6(true)?;
    }
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket)
}

pub(super) fn explain(addr: &ListenAddr, e: &io::Error) -> String {
    match (addr, e.kind()) {
        (ListenAddr::Tcp(a), io::ErrorKind::PermissionDenied) if a.port() < 1024 => format!(
            "permission denied: port {} is privileged (below 1024) and needs root or \
             CAP_NET_BIND_SERVICE; pick another port, e.g. --listen 127.0.0.1:41397",
            a.port()
        ),
        (ListenAddr::Tcp(_), io::ErrorKind::AddrInUse) => {
            "address already in use: another process listens there; stop it or pick another port with --listen".to_owned()
        }
        (ListenAddr::Tcp(_), io::ErrorKind::AddrNotAvailable) => {
            "no local interface has this address".to_owned()
        }
        _ => e.to_string(),
    }
}

/// Sets a listening TCP socket's accept-time options from `options`: TCP
/// Fast Open's queue (0 turns it off) and TCP_DEFER_ACCEPT (for up to
/// `defer` seconds; 0 turns it off). Applied when a listener starts serving
/// and again when a reload changes its options.
pub fn set_accept_options(
    socket: std::os::fd::BorrowedFd<'_>,
    options: &ListenOptions,
    defer: Duration,
) -> io::Result<()> {
    let queue = options.fast_open.unwrap_or(0);
    set_int(
        socket,
        libc::TCP_FASTOPEN,
        i32::try_from(queue).unwrap_or(i32::MAX),
    )?;
    let seconds = match options.defer_accept {
        true => i32::try_from(defer.as_secs().max(1)).unwrap_or(i32::MAX),
        false => 0,
    };
    set_int(socket, libc::TCP_DEFER_ACCEPT, seconds)
}

/// An `IPPROTO_TCP` integer option; neither socket2 nor rustix has these two.
fn set_int(socket: std::os::fd::BorrowedFd<'_>, name: libc::c_int, value: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value: libc::c_int = value;
    // SAFETY: the descriptor is borrowed, so open for the call; the value is a
    // c_int on our stack and its size is the length passed.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
