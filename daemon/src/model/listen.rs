//! Where the daemon listens (`IP:PORT`, `[IPv6]:PORT`, `unix:/path`) and each
//! listener's options, as configured.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use super::Cidr;

/// Where the daemon listens: `IP:PORT`, `[IPv6]:PORT` or `unix:/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

#[derive(Debug, thiserror::Error)]
#[error("invalid listen address {0:?}: expected IP:PORT, [IPv6]:PORT or unix:/path")]
pub struct ListenAddrError(String);

impl FromStr for ListenAddr {
    type Err = ListenAddrError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(ListenAddrError(text.to_owned()));
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        text.parse()
            .map(ListenAddr::Tcp)
            .map_err(|_| ListenAddrError(text.to_owned()))
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(addr) => write!(f, "{addr}"),
            ListenAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// Per-listener behaviour.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListenOptions {
    /// Peers in these ranges must start with a PROXY protocol header (v1 or v2),
    /// whose addresses then stand for the client. Others are plain TCPMUX clients,
    /// so nobody else can claim to be someone they are not.
    pub accept_proxy_from: Vec<Cidr>,
    /// Tell TLS, SSH, HTTP and silent clients apart from TCPMUX names, and
    /// route them (`detect = true`).
    pub detect: Option<super::Detect>,
    /// Terminate TLS before the TCPMUX negotiation (`tls = { … }`).
    pub tls: Option<super::Tls>,
    /// TCP Fast Open's queue of pending SYN-with-data connections
    /// (`fast_open = true` or a length): the name rides in the SYN.
    pub fast_open: Option<u32>,
    /// TCP_DEFER_ACCEPT: the kernel hands over a connection only once its
    /// first bytes (the name) have arrived.
    pub defer_accept: bool,
    /// A UDP socket at the same address, and how its flows are routed
    /// (`udp = true`).
    pub udp: Option<super::UdpRoutes>,
}

impl ListenOptions {
    pub fn trusts_proxy(&self, ip: std::net::IpAddr) -> bool {
        self.accept_proxy_from
            .iter()
            .any(|range| range.contains(ip))
    }
}

/// A listen address with its options, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenSpec {
    pub addr: ListenAddr,
    pub options: ListenOptions,
    /// The listener's name (`name = "public"`): under systemd, the socket
    /// passed with that name in LISTEN_FDNAMES gets this listener's options.
    pub name: Option<String>,
    /// Whether a TCP socket is bound at the address (`tcp = false` with
    /// `udp = true`: datagrams only).
    pub tcp: bool,
}

impl From<ListenAddr> for ListenSpec {
    fn from(addr: ListenAddr) -> Self {
        ListenSpec {
            addr,
            options: ListenOptions::default(),
            name: None,
            tcp: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(
            "127.0.0.1:41397".parse::<ListenAddr>().unwrap(),
            ListenAddr::Tcp("127.0.0.1:41397".parse().unwrap())
        );
        assert_eq!(
            "[::1]:1".parse::<ListenAddr>().unwrap(),
            ListenAddr::Tcp("[::1]:1".parse().unwrap())
        );
        assert_eq!(
            "unix:/run/tcpmux.sock".parse::<ListenAddr>().unwrap(),
            ListenAddr::Unix("/run/tcpmux.sock".into())
        );
        for bad in ["localhost:1", "1", "unix:", "127.0.0.1", "::1:1"] {
            assert!(bad.parse::<ListenAddr>().is_err(), "{bad}");
        }
    }
}
