//! A proxy service's settings: its backends, timeouts, the PROXY header it sends
//! and how the relay moves bytes.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A proxy service's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxy {
    /// The pool, in configured order; `balance` says in which order a
    /// client tries them.
    pub backends: Vec<Weighted>,
    pub balance: Balance,
    /// What `balance = "source"` hashes.
    pub hash_key: HashKey,
    /// Active checks of every backend, if configured.
    pub health_check: Option<HealthCheck>,
    pub connect_timeout: Duration,
    /// Close the relay after this long with no byte either way; `None`: never.
    pub idle_timeout: Option<Duration>,
    /// Send the backend a PROXY protocol header naming the real client.
    pub send_proxy: Option<ProxyVersion>,
    pub relay: RelayMode,
    /// Connect from the client's own address (`transparent = true`):
    /// IP_TRANSPARENT, so the backend sees the client without PROXY headers.
    pub transparent: bool,
    /// TLS to the backends (`backend_tls`), if set.
    pub backend_tls: Option<BackendTls>,
}

/// `backend_tls = { ca, server_name, cert, key, insecure_skip_verify }`:
/// the client side of TLS to a proxy's backends, ready to connect with.
#[derive(Clone)]
pub struct BackendTls {
    /// The name the backend's certificate must carry (and the SNI sent).
    pub server_name: rustls::pki_types::ServerName<'static>,
    pub client: std::sync::Arc<rustls::ClientConfig>,
    /// `insecure_skip_verify = true`: any certificate is taken.
    pub insecure: bool,
    /// The settings as written, so a reload can tell whether they changed.
    pub settings: String,
}

impl std::fmt::Debug for BackendTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.settings)
    }
}

impl PartialEq for BackendTls {
    fn eq(&self, other: &Self) -> bool {
        self.settings == other.settings && std::sync::Arc::ptr_eq(&self.client, &other.client)
    }
}

impl Eq for BackendTls {}

impl Proxy {
    /// What all the backends hold together when every one has its own
    /// `max_connections`: clients beyond wait in the service's queue.
    pub fn capacity(&self) -> Option<usize> {
        self.backends
            .iter()
            .map(|b| b.max_connections)
            .sum::<Option<usize>>()
    }

    /// Whether some backend needs DNS (a name, or SRV records) to be found.
    pub fn follows_dns(&self) -> bool {
        self.backends.iter().any(|b| b.backend.fixed().is_none())
    }
}

/// One configured backend and its weight (1 unless configured; an SRV
/// name's records bring their own, which this multiplies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Weighted {
    pub backend: Backend,
    pub weight: u32,
    /// Connections it may hold at once (`max_connections` in its table);
    /// only on a backend with a fixed address.
    pub max_connections: Option<usize>,
}

impl Weighted {
    /// The pool member it is by itself, when that needs no DNS.
    pub fn fixed_member(&self) -> Option<Member> {
        self.backend.fixed().map(|endpoint| Member {
            endpoint,
            weight: self.weight,
            priority: 0,
            max_connections: self.max_connections,
        })
    }

    /// A backend at the default weight.
    pub fn one(backend: Backend) -> Weighted {
        Weighted {
            backend,
            weight: 1,
            max_connections: None,
        }
    }
}

/// How backends found through DNS are followed: top-level `dns_min_ttl`,
/// `dns_max_ttl` (bounds on how long an answer stands before it is asked
/// again) and `resolvers` (instead of /etc/resolv.conf's name servers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dns {
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    pub resolvers: Vec<SocketAddr>,
}

impl Default for Dns {
    fn default() -> Self {
        Dns {
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(300),
            resolvers: Vec::new(),
        }
    }
}

/// Active health checks (`health_check = { … }`): a TCP connect every
/// `interval` within `timeout`, optionally sending `send` and waiting for
/// `expect`; `fall` failures in a row take a backend down, `rise` successes
/// bring it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    pub interval: Duration,
    pub timeout: Duration,
    pub rise: u32,
    pub fall: u32,
    pub send: Option<String>,
    pub expect: Option<String>,
}

/// How a proxy service spreads clients over its backends. A backend that
/// refuses or times out is skipped for the next in the order chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Balance {
    /// In configured order: the first that accepts (failover).
    #[default]
    First,
    /// In turn, each backend as often as its weight.
    RoundRobin,
    /// The one with the fewest connections for its weight.
    LeastConnections,
    /// The better (fewer connections for its weight) of two picked at random.
    RandomTwo,
    /// By the client's address (the announced one behind a PROXY header),
    /// hashed: a client keeps its member while that member is up, and adding
    /// or removing one of N members moves about 1/N of the clients.
    Source,
}

/// What a sticky balance (`balance = "source"`) hashes (`hash_key`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HashKey {
    /// The client's address (the announced one behind a PROXY header).
    #[default]
    Source,
    /// The TLS server name the client asked for (its SNI, passed through or
    /// terminated): every client of one name goes to one member. A client
    /// without one is hashed by its address.
    Sni,
}

/// Which PROXY protocol header to send.
pub use tcpmux_proto::proxy_header::Version as ProxyVersion;

/// How the relay moves the bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RelayMode {
    /// splice(2): socket → pipe → socket inside the kernel, no copy to user space.
    /// A direction where the kernel refuses it falls back to `Copy`.
    #[default]
    Splice,
    /// read(2)/send(2) through a buffer per direction.
    Copy,
}

/// A proxy's backend as configured: an address (an IP, or a name whose A/AAAA
/// records are followed), a DNS SRV name whose records list the pool's members,
/// or a Unix socket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Tcp {
        host: String,
        port: u16,
    },
    Unix(PathBuf),
    /// `srv:_service._tcp.domain`: each SRV record (priority, weight, port,
    /// target) becomes members.
    Srv(String),
}

impl Backend {
    /// The one place it connects to, when that needs no DNS.
    pub fn fixed(&self) -> Option<Endpoint> {
        match self {
            Backend::Tcp { host, port } => host
                .parse::<IpAddr>()
                .ok()
                .map(|ip| Endpoint::Tcp(SocketAddr::new(ip, *port))),
            Backend::Unix(path) => Some(Endpoint::Unix(path.clone())),
            Backend::Srv(_) => None,
        }
    }
}

/// One address a pool connects to: what DNS made of a backend, or the backend
/// itself when it is an IP address or a Unix socket.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(addr) => write!(f, "{addr}"),
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl FromStr for Endpoint {
    type Err = BackendError;

    /// What `Display` writes: `IP:port`, `[IPv6]:port` or `unix:/path`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.strip_prefix("unix:") {
            Some(path) if !path.is_empty() => Ok(Endpoint::Unix(path.into())),
            Some(_) => Err(BackendError(text.to_owned())),
            None => text
                .parse()
                .map(Endpoint::Tcp)
                .map_err(|_| BackendError(text.to_owned())),
        }
    }
}

/// One member of a pool: an endpoint with its weight and SRV priority (lower
/// first; 0 for backends that are not SRV records).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub endpoint: Endpoint,
    pub weight: u32,
    pub priority: u16,
    /// Connections it may hold at once (its backend's `max_connections`;
    /// DNS-found members have none).
    pub max_connections: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid backend {0:?}: expected host:port, [IPv6]:port, srv:_service._tcp.domain or unix:/path")]
pub struct BackendError(String);

impl FromStr for Backend {
    type Err = BackendError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || BackendError(text.to_owned());
        if let Some(path) = text.strip_prefix("unix:") {
            return if path.is_empty() {
                Err(error())
            } else {
                Ok(Backend::Unix(PathBuf::from(path)))
            };
        }
        if let Some(name) = text.strip_prefix("srv:") {
            return if is_dns_name(name) {
                Ok(Backend::Srv(name.to_owned()))
            } else {
                Err(error())
            };
        }
        let (host, port) = text.rsplit_once(':').ok_or_else(error)?;
        let port: u16 = port.parse().ok().filter(|&p| p != 0).ok_or_else(error)?;
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) if v6.parse::<std::net::Ipv6Addr>().is_ok() => v6,
            Some(_) => return Err(error()),
            None if !is_dns_name(host) => return Err(error()),
            None => host,
        };
        Ok(Backend::Tcp {
            host: host.to_owned(),
            port,
        })
    }
}

/// Letters, digits, `-`, `_` and dots, as DNS names (and IPv4 addresses) are.
fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Backend::Tcp { host, port } => write!(f, "{host}:{port}"),
            Backend::Unix(path) => write!(f, "unix:{}", path.display()),
            Backend::Srv(name) => write!(f, "srv:{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_addresses() {
        assert_eq!(
            "db.internal:5432".parse::<Backend>().unwrap(),
            Backend::Tcp {
                host: "db.internal".into(),
                port: 5432
            }
        );
        let v6: Backend = "[::1]:22".parse().unwrap();
        assert_eq!(v6.to_string(), "[::1]:22");
        assert_eq!(
            "srv:_pg._tcp.db.internal".parse::<Backend>().unwrap(),
            Backend::Srv("_pg._tcp.db.internal".into())
        );
        assert_eq!(
            "unix:/run/app.sock".parse::<Backend>().unwrap(),
            Backend::Unix("/run/app.sock".into())
        );
        for bad in [
            "nohost",
            ":80",
            "host:0",
            "host:99999",
            "::1:22",
            "[nothex]:1",
            "unix:",
            "srv:",
            "srv:a b",
            "host name:80",
        ] {
            assert!(bad.parse::<Backend>().is_err(), "{bad}");
        }
    }
}
