//! proxy: connect the client to a TCP or Unix-socket backend and relay bytes both
//! ways. The `+` goes out only once a backend accepted; backends are tried in order
//! (failover), each under the connect timeout.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};

use super::{accept, refuse, Ended};
use crate::proxy_protocol::{self, ProxyVersion};
use crate::relay::{relay, RelayMode};
use crate::stream::{ClientInfo, Metered, Stream};

pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A proxy service's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxy {
    /// Tried in order; the first that accepts serves the client.
    pub backends: Vec<Backend>,
    pub connect_timeout: Duration,
    /// Close the relay after this long with no byte either way; `None`: never.
    pub idle_timeout: Option<Duration>,
    /// Send the backend a PROXY protocol header naming the real client.
    pub send_proxy: Option<ProxyVersion>,
    pub relay: RelayMode,
}

/// Where a proxy connects: `host:port` (name or IP, resolved per connection) or
/// `unix:/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
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

impl Backend {
    async fn connect(&self) -> io::Result<Stream> {
        match self {
            Backend::Tcp { host, port } => {
                let stream = TcpStream::connect((host.as_str(), *port)).await?;
                stream.set_nodelay(true)?;
                Ok(Stream::Tcp(stream))
            }
            Backend::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path).await?)),
        }
    }
}

pub async fn serve(
    proxy: &Proxy,
    message: &str,
    conn: &mut Metered<Stream>,
    client: &ClientInfo,
) -> io::Result<Ended> {
    let (mut backend, name) = match connect_first(proxy).await {
        Ok(connected) => connected,
        Err(failure) => {
            // The client learns why in general terms; backend addresses stay in the log.
            refuse(conn, &format!("service unavailable: {}", failure.reason)).await;
            return Ok(Ended::Refused(format!(
                "backend unavailable: {}",
                failure.detail
            )));
        }
    };
    // The header goes first; what the client pipelined is still in its socket and
    // follows through the relay, in order.
    if let Some(version) = proxy.send_proxy {
        let header = proxy_protocol::encode(version, client.peer.tcp_addr(), client.local);
        backend.write_all(&header).await?;
    }
    accept(conn, message).await?;

    let (relayed, result) = relay(conn.get_ref(), &backend, proxy.relay, proxy.idle_timeout).await;
    conn.bytes_in += relayed.client_to_backend;
    conn.bytes_out += relayed.backend_to_client;
    result.map(|()| Ended::Served {
        backend: Some(name),
    })
}

struct ConnectFailure {
    /// For the client: what went wrong, without addresses.
    reason: &'static str,
    /// For the log: every backend and its error.
    detail: String,
}

async fn connect_first(proxy: &Proxy) -> Result<(Stream, String), ConnectFailure> {
    let mut detail = Vec::new();
    let mut reason = "no backend configured";
    for backend in &proxy.backends {
        match tokio::time::timeout(proxy.connect_timeout, backend.connect()).await {
            Ok(Ok(stream)) => return Ok((stream, backend.to_string())),
            Ok(Err(e)) => {
                reason = match e.kind() {
                    io::ErrorKind::ConnectionRefused => "connection refused",
                    io::ErrorKind::NotFound => "backend socket not found",
                    _ => "backend connection failed",
                };
                detail.push(format!("{backend}: {e}"));
            }
            Err(_) => {
                reason = "backend connection timed out";
                detail.push(format!(
                    "{backend}: connect timed out after {:?}",
                    proxy.connect_timeout
                ));
            }
        }
    }
    Err(ConnectFailure {
        reason,
        detail: detail.join("; "),
    })
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
