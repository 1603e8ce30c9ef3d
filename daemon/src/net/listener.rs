//! Listening sockets: binding listen addresses with errors that say
//! what to do, and accepting without letting a transient error end the loop.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio::net::UnixListener;

use super::stream::Stream;
use super::unix_socket::{remove_stale_socket, FileId};
use crate::model::{ListenAddr, ListenOptions, ListenSpec, Peer};

/// Pending-connection queue length; the kernel caps it at net.core.somaxconn.
const BACKLOG: i32 = 1024;

/// A bind that failed, with the reason in words and, where there is one, the fix.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {reason}")]
pub struct BindError {
    pub addr: ListenAddr,
    pub reason: String,
}

/// A bound listening socket. A Unix socket's file is removed when it is dropped.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpAcceptor),
    Unix {
        listener: UnixListener,
        path: PathBuf,
        label: Arc<str>,
        /// The file ours to remove on drop, if it is still there (not when
        /// systemd created it, nor once another replaced it).
        file: Option<FileId>,
    },
}

impl Listener {
    /// Binds `addr`. Must run inside the tokio runtime.
    pub fn bind(addr: &ListenAddr) -> Result<Listener, BindError> {
        let fail = |e: io::Error| BindError {
            addr: addr.clone(),
            reason: explain(addr, &e),
        };
        match addr {
            ListenAddr::Tcp(socket_addr) => bind_tcp(*socket_addr)
                .and_then(TcpAcceptor::new)
                .map(Listener::Tcp)
                .map_err(fail),
            ListenAddr::Unix(path) => {
                remove_stale_socket(path).map_err(|reason| BindError {
                    addr: addr.clone(),
                    reason,
                })?;
                let listener = UnixListener::bind(path).map_err(fail)?;
                Ok(Listener::Unix {
                    listener,
                    path: path.clone(),
                    label: Arc::from(path.display().to_string()),
                    file: FileId::of(path),
                })
            }
        }
    }

    /// Adopts a listening socket bound elsewhere (by systemd, or by `prebind` for
    /// a worker). Must run inside the runtime.
    pub fn from_inherited(fd: std::os::fd::OwnedFd, owns_path: bool) -> io::Result<Listener> {
        use rustix::net::AddressFamily;
        let local = rustix::net::getsockname(&fd)?;
        if matches!(
            local.address_family(),
            AddressFamily::INET | AddressFamily::INET6
        ) {
            let listener = std::net::TcpListener::from(fd);
            listener.set_nonblocking(true)?;
            return Ok(Listener::Tcp(TcpAcceptor::new(listener)?));
        }
        let listener = std::os::unix::net::UnixListener::from(fd);
        listener.set_nonblocking(true)?;
        let path = listener
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("(inherited)"));
        Ok(Listener::Unix {
            listener: UnixListener::from_std(listener)?,
            label: Arc::from(path.display().to_string()),
            file: owns_path.then(|| FileId::of(&path)).flatten(),
            path,
        })
    }

    /// A Unix socket bound by [`super::unix_socket::bind`], its file `file`.
    pub fn from_socket_file(
        listener: std::os::unix::net::UnixListener,
        path: &Path,
        file: FileId,
    ) -> io::Result<Listener> {
        listener.set_nonblocking(true)?;
        Ok(Listener::Unix {
            listener: UnixListener::from_std(listener)?,
            label: Arc::from(path.display().to_string()),
            path: path.to_owned(),
            file: Some(file),
        })
    }

    /// Registers the socket with the current runtime's reactor instead of the
    /// one it was bound in, for an accept loop that runs on another runtime.
    pub fn move_to_current_runtime(&mut self) -> io::Result<()> {
        use std::os::fd::AsFd;
        match self {
            Listener::Tcp(acceptor) => {
                let fd = acceptor.listener.as_fd().try_clone_to_owned()?;
                acceptor.listener = registered(std::net::TcpListener::from(fd))?;
            }
            Listener::Unix { listener, .. } => {
                let fd = listener.as_fd().try_clone_to_owned()?;
                *listener = UnixListener::from_std(std::os::unix::net::UnixListener::from(fd))?;
            }
        }
        Ok(())
    }

    /// The address actually bound (the real port when 0 was asked for).
    pub fn local_addr(&self) -> ListenAddr {
        match self {
            Listener::Tcp(l) => match l.listener.get_ref().local_addr() {
                Ok(addr) => ListenAddr::Tcp(addr),
                Err(_) => ListenAddr::Tcp(SocketAddr::from(([0, 0, 0, 0], 0))),
            },
            Listener::Unix { path, .. } => ListenAddr::Unix(path.clone()),
        }
    }

    /// Accepts the next client. Errors are returned for the caller's
    /// `AcceptErrors` (net/accept_errors.rs), the one policy of every loop.
    pub async fn accept(&self) -> io::Result<Accepted> {
        match self {
            Listener::Tcp(l) => l.accept().await?.into_session(Vec::new()),
            Listener::Unix {
                listener, label, ..
            } => {
                let (stream, _) = listener.accept().await?;
                let cred = stream.peer_cred()?;
                let peer = Peer::Unix {
                    listener: Arc::clone(label),
                    uid: cred.uid(),
                    gid: cred.gid(),
                };
                Ok(Accepted {
                    stream: Stream::Unix(stream),
                    peer,
                    local: None,
                    early: Vec::new(),
                })
            }
        }
    }

    /// Accepts the next client; a TCP one comes not yet registered with the
    /// reactor, for the accept loop to answer at once if it can.
    pub async fn arrival(&self) -> io::Result<Arrival> {
        match self {
            Listener::Tcp(l) => l.accept().await.map(Arrival::Tcp),
            Listener::Unix { .. } => self.accept().await.map(Arrival::Registered),
        }
    }
}

/// A client as the accept loop receives it.
#[derive(Debug)]
pub enum Arrival {
    /// A TCP client's socket, in no reactor yet.
    Tcp(Incoming),
    Registered(Accepted),
}

/// A TCP client the kernel has accepted, not registered with the runtime's
/// reactor: one the accept loop answers on the spot never is (no epoll_ctl
/// to add it, none to remove it).
#[derive(Debug)]
pub struct Incoming {
    pub socket: std::net::TcpStream,
    pub peer: SocketAddr,
    pub local: Option<SocketAddr>,
}

impl Incoming {
    /// Registers the socket with the current runtime, for a session; `early`
    /// are bytes already read from it.
    pub fn into_session(self, early: Vec<u8>) -> io::Result<Accepted> {
        Ok(Accepted {
            stream: Stream::Tcp(tokio::net::TcpStream::from_std(self.socket)?),
            peer: Peer::Tcp(self.peer),
            local: self.local,
            early,
        })
    }
}

/// An accepted client, and the address it connected to (`None` for Unix).
#[derive(Debug)]
pub struct Accepted {
    pub stream: Stream,
    pub peer: Peer,
    pub local: Option<SocketAddr>,
    /// Bytes already read from the socket, ahead of what is still in it.
    pub early: Vec<u8>,
}

/// A listening TCP socket set up so that accepting costs no system call
/// beyond accept4 itself.
#[derive(Debug)]
pub struct TcpAcceptor {
    listener: AsyncFd<std::net::TcpListener>,
    /// The bound address, when it is one address: then it is every client's
    /// local address, and asking each socket (getsockname) would be wasted.
    fixed_local: Option<SocketAddr>,
}

impl TcpAcceptor {
    fn new(listener: std::net::TcpListener) -> io::Result<TcpAcceptor> {
        // Replies are written whole; without TCP_NODELAY, a reply written as two
        // segments (status line, then data) waits on the client's delayed ACK.
        // Linux copies it from the listening socket to every accepted one.
        socket2::SockRef::from(&listener).set_tcp_nodelay(true)?;
        let fixed_local = listener.local_addr()?;
        Ok(TcpAcceptor {
            listener: registered(listener)?,
            fixed_local: (!fixed_local.ip().is_unspecified()).then_some(fixed_local),
        })
    }

    /// accept4, as tokio's would, but without registering the socket.
    async fn accept(&self) -> io::Result<Incoming> {
        use rustix::net::SocketFlags;
        let (socket, peer) = loop {
            let mut ready = self.listener.readable().await?;
            let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
            let accepted =
                ready.try_io(|l| rustix::net::acceptfrom_with(l, flags).map_err(io::Error::from));
            if let Ok(accepted) = accepted {
                break accepted?;
            }
        };
        let socket = std::net::TcpStream::from(socket);
        if !cfg!(target_os = "linux") {
            socket.set_nodelay(true)?;
        }
        let peer = match peer.map(SocketAddr::try_from) {
            Some(Ok(peer)) => peer,
            _ => socket.peer_addr()?,
        };
        let local = match self.fixed_local {
            Some(addr) => Some(addr),
            None => Some(socket.local_addr()?),
        };
        Ok(Incoming {
            socket,
            peer,
            local,
        })
    }
}

/// A listening socket registered with the current runtime's reactor.
fn registered(listener: std::net::TcpListener) -> io::Result<AsyncFd<std::net::TcpListener>> {
    // SAFETY: the listener owns its descriptor for as long as the AsyncFd
    // owns the listener, and always reports that same descriptor.
    Ok(unsafe { AsyncFd::register(listener) }?)
}

/// Set once this process has handed its sockets to a successor: the Unix
/// socket files are the successor's now and must survive our listeners.
///
/// Global on purpose: it is a fact about the process, set once and never
/// unset, and it must reach listeners no server state can reach any more:
/// those owned by accept-loop tasks being aborted and a reload's staged
/// sockets. Passing a flag to each would only add ways to miss one.
static HANDED_OVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keeps the Unix socket files of every listener dropped from now on.
pub fn keep_socket_files() {
    HANDED_OVER.store(true, std::sync::atomic::Ordering::Release);
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix {
            path,
            file: Some(file),
            ..
        } = self
        {
            if !HANDED_OVER.load(std::sync::atomic::Ordering::Acquire) {
                file.remove(path);
            }
        }
    }
}

impl std::os::fd::AsFd for Listener {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Listener::Tcp(l) => l.listener.as_fd(),
            Listener::Unix { listener, .. } => listener.as_fd(),
        }
    }
}

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
}

/// Binds the listen addresses once per worker for the multi-core mode: every
/// worker gets its own TCP socket on each address, with SO_REUSEPORT so the
/// kernel spreads new connections across them; Unix sockets (which cannot be
/// shared that way) go to worker 0 only. A port 0 is resolved by the first bind
/// and reused by the rest.
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
                for set in sets.iter_mut() {
                    let socket = tcp_socket(actual, true).map_err(fail)?;
                    if let Some(bound) = socket.local_addr().ok().and_then(|a| a.as_socket()) {
                        actual = bound;
                    }
                    set.push(Prebound {
                        fd: socket.into(),
                        options: Some(spec.options.clone()),
                        owns_path: false,
                        name: None,
                    });
                }
            }
            ListenAddr::Unix(path) => {
                remove_stale_socket(path).map_err(|reason| BindError {
                    addr: spec.addr.clone(),
                    reason,
                })?;
                let listener = std::os::unix::net::UnixListener::bind(path).map_err(fail)?;
                sets[0].push(Prebound {
                    fd: listener.into(),
                    options: Some(spec.options.clone()),
                    owns_path: true,
                    name: None,
                });
            }
        }
    }
    Ok(sets)
}

fn bind_tcp(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
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

fn explain(addr: &ListenAddr, e: &io::Error) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn accept_one(bind: &str, connect_ip: &str) -> Accepted {
        let listener = Listener::bind(&ListenAddr::Tcp(bind.parse().unwrap())).unwrap();
        let ListenAddr::Tcp(bound) = listener.local_addr() else {
            panic!("a TCP listener")
        };
        let target = SocketAddr::new(connect_ip.parse().unwrap(), bound.port());
        let client = tokio::net::TcpStream::connect(target).await.unwrap();
        let accepted = listener.accept().await.unwrap();
        assert_eq!(accepted.local, Some(client.peer_addr().unwrap()));
        accepted
    }

    #[tokio::test]
    async fn accepted_sockets_have_nodelay_without_a_call_each() {
        let accepted = accept_one("127.0.0.1:0", "127.0.0.1").await;
        let Stream::Tcp(stream) = &accepted.stream else {
            panic!("a TCP stream")
        };
        assert!(stream.nodelay().unwrap());
    }

    #[tokio::test]
    async fn a_wildcard_listener_reports_the_address_the_client_reached() {
        let accepted = accept_one("0.0.0.0:0", "127.0.0.2").await;
        assert_eq!(accepted.local.map(|a| a.ip()), Some([127, 0, 0, 2].into()));
    }
}
