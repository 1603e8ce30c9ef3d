//! Who is on the other end of a client connection, as the services and the log
//! see it.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

/// The client's address: an IP and port, or for a Unix socket the listener and
/// the client's credentials.
#[derive(Clone, Debug)]
pub enum Peer {
    Tcp(SocketAddr),
    /// Unix peers have no useful address: the listener path says where they came
    /// in, SO_PEERCRED who they are.
    Unix {
        listener: Arc<str>,
        uid: u32,
        gid: u32,
    },
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix { listener, uid, .. } => write!(f, "unix:{listener}(uid {uid})"),
        }
    }
}

impl Peer {
    /// The client's IP address and port, if it came over TCP.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match self {
            Peer::Tcp(addr) => Some(*addr),
            Peer::Unix { .. } => None,
        }
    }
}

/// The two ends of a client connection as the services should see them: after a
/// trusted PROXY header, the addresses it announced rather than the upstream's.
#[derive(Clone, Debug)]
pub struct ClientInfo {
    pub peer: Peer,
    /// The address the client connected to (`None` on a Unix listener).
    pub local: Option<SocketAddr>,
    /// On a TLS listener, what the handshake established.
    pub tls: Option<super::TlsClient>,
    /// The server name of a ClientHello passed through by a detecting
    /// listener (a terminated one's is in `tls`). Lower case.
    pub sni: Option<String>,
}

impl ClientInfo {
    /// The TLS server name the client asked for, passed through or terminated.
    pub fn server_name(&self) -> Option<&str> {
        let terminated = || self.tls.as_ref()?.server_name.as_deref();
        self.sni.as_deref().or_else(terminated)
    }
}
