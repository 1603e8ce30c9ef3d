//! Listening sockets: a bound one as the accept loop uses it, accepting
//! without letting a transient error end the loop; `bind.rs` binds them,
//! with errors that say what to do.

mod bind;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::net::UnixListener;

use super::stream::Stream;
use super::unix_socket::{remove_stale_socket, FileId};
use crate::model::{ListenAddr, Peer};

use bind::{bind_tcp, explain};
pub use bind::{prebind, set_accept_options, BindError, Prebound};

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
