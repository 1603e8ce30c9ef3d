//! A proxy service's settings: its backends, timeouts, the PROXY header it sends
//! and how the relay moves bytes.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A proxy service's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxy {
    /// The pool; `balance` says in which order a client tries them.
    pub backends: Vec<Backend>,
    /// Each backend's weight (same order), 1 unless configured.
    pub weights: Vec<u32>,
    pub balance: Balance,
    /// Active checks of every backend, if configured.
    pub health_check: Option<HealthCheck>,
    pub connect_timeout: Duration,
    /// Close the relay after this long with no byte either way; `None`: never.
    pub idle_timeout: Option<Duration>,
    /// Send the backend a PROXY protocol header naming the real client.
    pub send_proxy: Option<ProxyVersion>,
    pub relay: RelayMode,
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

/// Where a proxy connects: `host:port` (name or IP, resolved per connection) or
/// `unix:/path`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

#[derive(Debug, thiserror::Error)]
#[error("invalid backend {0:?}: expected host:port, [IPv6]:port or unix:/path")]
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
        let (host, port) = text.rsplit_once(':').ok_or_else(error)?;
        let port: u16 = port.parse().ok().filter(|&p| p != 0).ok_or_else(error)?;
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) if v6.parse::<std::net::Ipv6Addr>().is_ok() => v6,
            Some(_) => return Err(error()),
            None if host.is_empty() || host.contains(':') => return Err(error()),
            None => host,
        };
        Ok(Backend::Tcp {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Backend::Tcp { host, port } => write!(f, "{host}:{port}"),
            Backend::Unix(path) => write!(f, "unix:{}", path.display()),
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
        ] {
            assert!(bad.parse::<Backend>().is_err(), "{bad}");
        }
    }
}
