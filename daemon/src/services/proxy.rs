//! proxy: connect the client to a TCP or Unix-socket backend and relay bytes both
//! ways. The `+` goes out only once a backend accepted; backends are tried in the
//! order `balance` gives (failover past any that refuses or times out), each
//! under the connect timeout.

use std::io;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};

use super::{accept, refuse};
use crate::admission::own_connections;
use crate::balance::Pool;
use crate::model::{Backend, ClientInfo, Proxy};
use crate::net::proxy_protocol;
use crate::net::relay::relay;
use crate::net::stream::{Metered, Stream};
use crate::outcome::Outcome;

/// Connects to one backend (TCP_NODELAY set), for clients and health checks.
pub(super) async fn connect(backend: &Backend) -> io::Result<Stream> {
    match backend {
        Backend::Tcp { host, port } => {
            let stream = TcpStream::connect((host.as_str(), *port)).await?;
            stream.set_nodelay(true)?;
            Ok(Stream::Tcp(stream))
        }
        Backend::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path).await?)),
    }
}

/// `status`: the `+` line's message, for a TCPMUX client; `pool` the
/// service's balancing state.
pub async fn serve(
    proxy: &Proxy,
    (service, pool): (&str, &Pool),
    status: Option<&str>,
    conn: &mut Metered<Stream>,
    client: &ClientInfo,
) -> io::Result<Outcome> {
    let (mut backend, used) = match connect_first(proxy, service, pool).await {
        Ok(connected) => connected,
        Err(failure) => {
            // The client learns why in general terms; backend addresses stay in the log.
            refuse(conn, &format!("service unavailable: {}", failure.reason)).await;
            return Ok(Outcome::Refused(format!(
                "backend unavailable: {}",
                failure.detail
            )));
        }
    };
    // Held for the relay's life, for least-connections and random-two.
    let _held = pool.hold(used);
    // Known as ours before a byte reaches the backend, so that if the backend
    // is this daemon, the session there sees where its request came from.
    let _own = match (backend.local_addr(), backend.peer_addr()) {
        (Some(local), Some(remote)) => Some(own_connections().register(local, remote)),
        _ => None,
    };
    // The header goes first; what the client pipelined is still in its socket and
    // follows through the relay, in order.
    if let Some(version) = proxy.send_proxy {
        let header = proxy_protocol::encode(version, client.peer.tcp_addr(), client.local);
        backend.write_all(&header).await?;
    }
    if let Some(message) = status {
        accept(conn, message).await?;
    }

    let (relayed, result) = relay(conn.get_ref(), &backend, proxy.relay, proxy.idle_timeout).await;
    conn.bytes_in += relayed.client_to_backend;
    conn.bytes_out += relayed.backend_to_client;
    pool.relayed(used, relayed.client_to_backend, relayed.backend_to_client);
    result.map(|()| Outcome::Served {
        backend: Some(used.to_string()),
    })
}

struct ConnectFailure {
    /// For the client: what went wrong, without addresses.
    reason: &'static str,
    /// For the log: every backend and its error.
    detail: String,
}

/// Connects to the healthy backends in the pool's order, returning the first
/// that accepts; with none healthy, fails at once.
async fn connect_first<'a>(
    proxy: &'a Proxy,
    service: &str,
    pool: &Pool,
) -> Result<(Stream, &'a Backend), ConnectFailure> {
    let order = pool.order(proxy);
    if order.is_empty() {
        return Err(ConnectFailure {
            reason: "no healthy backend",
            detail: "every backend is down or ejected".into(),
        });
    }
    let mut detail = Vec::new();
    let mut reason = "no backend configured";
    for backend in order.iter().filter_map(|&i| proxy.backends.get(i)) {
        match tokio::time::timeout(proxy.connect_timeout, connect(backend)).await {
            Ok(Ok(stream)) => {
                pool.connected(backend);
                return Ok((stream, backend));
            }
            Ok(Err(e)) => {
                reason = match e.kind() {
                    io::ErrorKind::ConnectionRefused => "connection refused",
                    io::ErrorKind::NotFound => "backend socket not found",
                    _ => "backend connection failed",
                };
                detail.push(format!("{backend}: {e}"));
                pool.connect_failed(service, backend);
            }
            Err(_) => {
                reason = "backend connection timed out";
                detail.push(format!(
                    "{backend}: connect timed out after {:?}",
                    proxy.connect_timeout
                ));
                pool.connect_failed(service, backend);
            }
        }
    }
    Err(ConnectFailure {
        reason,
        detail: detail.join("; "),
    })
}
