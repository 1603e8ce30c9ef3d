//! proxy: connect the client to a TCP or Unix-socket backend and relay bytes both
//! ways. The `+` goes out only once a backend accepted; backends are tried in the
//! order `balance` gives (failover past any that refuses or times out), each
//! under the connect timeout.

use std::io;

use tokio::io::AsyncWriteExt;

use super::status_line::{accept, refused};
use crate::admission::{Own, OwnConnections};
use crate::model::{Balance, ClientInfo, Endpoint, HashKey, Proxy};
use crate::net::conn::Conn;
use crate::net::proxy_protocol;
use crate::net::relay::{relay, relay_streams, Relayed};
use crate::net::stream::{Metered, Stream};
use crate::ops::session_table::LiveSession;
use crate::outcome::{Outcome, Refusal};
use crate::pool::{Held, Pool};

/// `status`: the `+` line's message, for a TCPMUX client; `pool` the
/// service's balancing state; `own` the daemon's own connections (where this
/// one registers) and `live` the session's row (its backend and bytes).
pub(super) async fn serve(
    proxy: &Proxy,
    (service, pool): (&str, &Pool),
    (own, live): (&OwnConnections, &LiveSession),
    status: Option<&str>,
    conn: &mut Metered<Conn>,
    client: &ClientInfo,
) -> io::Result<Outcome> {
    // `_held` counts the connection against its backend for the relay's life
    // (least-connections, random-two, a backend's max_connections); `_own`
    // keeps it known as ours.
    let (mut leg, used, _held, _own) =
        match open(proxy, (service, pool), (own, live), client).await? {
            Ok(opened) => opened,
            Err(refusal) => return Ok(refused(conn, refusal).await),
        };
    if let Some(message) = status {
        accept(conn, message).await?;
    }
    // Bytes the negotiation read past the request line go first; then the
    // client's socket is whole again for splice.
    let early = conn.get_mut().take_early();
    if !early.is_empty() {
        before_relay(leg.send(&early), pool, service, &used).await?;
        conn.bytes_in += early.len() as u64;
    }
    // splice needs two sockets; a TLS session's bytes (either side's) pass
    // through us.
    let (idle, traffic) = (proxy.idle_timeout, &live.traffic);
    let (relayed, result) = match (conn.get_ref().plain(), &mut leg) {
        (Some(socket), Leg::Plain(backend)) => {
            relay(socket, backend, proxy.relay, idle, traffic).await
        }
        (_, Leg::Plain(backend)) => relay_streams(conn.get_mut(), backend, idle, traffic).await,
        (_, Leg::Tls(session)) => relay_streams(conn.get_mut(), session, idle, traffic).await,
    };
    conn.bytes_in += relayed.client_to_backend;
    conn.bytes_out += relayed.backend_to_client;
    // A backend's cut reaches a TLS client as a cut, not a clean end.
    conn.finished = result.is_ok() || (relayed.backend_cut && conn.get_mut().cut().await);
    let failed = relayed.backend_failed(result.is_err(), || leg.socket().has_ended());
    pool.relayed(service, &used, &relayed, failed);
    result.map(|()| Outcome::Served {
        backend: Some(used),
    })
}

/// The backend leg, opened: the member that accepted, its hold, and the
/// registration that tells this connection for ours if it comes back.
type Opened<'o> = (Leg, Endpoint, Held, Option<Own<'o>>);

/// Connects to the first member that accepts, registers the connection as
/// the daemon's own, sends the PROXY header and makes the TLS handshake a
/// member needs: the leg ready for the client's bytes, or why the client
/// is refused. An I/O error is a backend failing after it accepted.
async fn open<'o>(
    proxy: &Proxy,
    (service, pool): (&str, &Pool),
    (own, live): (&'o OwnConnections, &LiveSession),
    client: &ClientInfo,
) -> io::Result<Result<Opened<'o>, Refusal>> {
    // A client behind a PROXY header is the address it announced.
    let source = client.peer.tcp_addr().filter(|_| proxy.transparent);
    let (mut backend, used, held) = match connect_first(proxy, service, pool, client, source).await
    {
        Ok(connected) => connected,
        // The client learns why in general terms; backend addresses stay in the log.
        Err(failure) => {
            return Ok(Err(Refusal::BackendUnavailable {
                reason: failure.reason,
                detail: failure.detail,
            }))
        }
    };
    live.update(|d| d.backend = Some(used.clone()));
    // Known as ours before a byte reaches the backend, so that if the backend
    // is this daemon, the session there sees where its request came from.
    // Only a backend on one of our listening ports can be us; the others
    // cost no lock and no getsockname. The address connected to is the
    // peer's (one system call fewer), unless it was a wildcard the kernel
    // made concrete.
    let remote = match &used {
        Endpoint::Tcp(addr) if !own.may_loop(addr.port()) => None,
        Endpoint::Tcp(addr) if !addr.ip().is_unspecified() => Some(*addr),
        _ => backend.peer_addr(),
    };
    let ours = remote.and_then(|remote| Some(own.register(backend.local_addr()?, remote)));
    // The header goes first; what the client pipelined follows, in order:
    // what the negotiation read with the line, then the relay.
    if let Some(version) = proxy.send_proxy {
        let (source, destination) = (client.peer.tcp_addr(), client.local);
        let header = match &client.tls {
            Some(tls) => proxy_protocol::encode_tls(version, source, destination, tls),
            None => proxy_protocol::encode(version, source, destination),
        };
        before_relay(backend.write_all(&header), pool, service, &used).await?;
    }
    // TLS to the backend starts after the PROXY header, which goes in clear.
    let Some(tls) = &proxy.backend_tls else {
        return Ok(Ok((Leg::Plain(backend), used, held, ours)));
    };
    let handshake = crate::net::tls::connect_backend(backend, tls);
    match tokio::time::timeout(proxy.connect_timeout, handshake).await {
        Ok(Ok(session)) => Ok(Ok((Leg::Tls(Box::new(session)), used, held, ours))),
        failed => {
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => format!("timed out after {:?}", proxy.connect_timeout),
            };
            pool.connect_failed(service, &used);
            Ok(Err(Refusal::BackendTls { backend: used, why }))
        }
    }
}

/// Writes what goes to the backend ahead of the relay (a PROXY header, the
/// bytes the client sent with its request line). A backend that fails it
/// (its reset, arriving before these bytes) failed the client as one that
/// quits before its first byte does, and counts toward its ejection.
async fn before_relay(
    write: impl std::future::Future<Output = io::Result<()>>,
    pool: &Pool,
    service: &str,
    used: &Endpoint,
) -> io::Result<()> {
    let written = write.await;
    if written.is_err() {
        pool.relayed(service, used, &Relayed::default(), true);
    }
    written
}

/// The connection to the backend: the socket, or a TLS session over it
/// (`backend_tls`, boxed: rustls's state is large beside a socket).
enum Leg {
    Plain(Stream),
    Tls(Box<tokio_rustls::client::TlsStream<Stream>>),
}

impl Leg {
    fn socket(&self) -> &Stream {
        match self {
            Leg::Plain(stream) => stream,
            Leg::Tls(session) => session.get_ref().0,
        }
    }

    /// Writes `bytes` and sees them leave (a TLS session may hold records
    /// back until flushed).
    async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Leg::Plain(stream) => stream.write_all(bytes).await,
            Leg::Tls(session) => {
                session.write_all(bytes).await?;
                session.flush().await
            }
        }
    }
}

struct ConnectFailure {
    /// For the client: what went wrong, without addresses.
    reason: &'static str,
    /// For the log: every backend and its error.
    detail: String,
}

/// What `balance = "source"` hashes for this client: its SNI with
/// `hash_key = "sni"` (when it sent one), else its address; empty for a
/// Unix-socket client, and under any other `balance`, which hashes nothing.
fn sticky(proxy: &Proxy, client: &ClientInfo) -> Vec<u8> {
    if proxy.balance != Balance::Source {
        return Vec::new();
    }
    let name = client
        .server_name()
        .filter(|_| proxy.hash_key == HashKey::Sni);
    match (name, client.peer.tcp_addr().map(|a| a.ip())) {
        (Some(name), _) => name.as_bytes().to_vec(),
        (None, Some(std::net::IpAddr::V4(ip))) => ip.octets().to_vec(),
        (None, Some(std::net::IpAddr::V6(ip))) => ip.octets().to_vec(),
        (None, None) => Vec::new(),
    }
}

/// Connects to the usable members in the pool's order, returning the first
/// that accepts; with none usable, fails at once.
async fn connect_first(
    proxy: &Proxy,
    service: &str,
    pool: &Pool,
    client: &ClientInfo,
    source: Option<std::net::SocketAddr>,
) -> Result<(Stream, Endpoint, Held), ConnectFailure> {
    let sticky = sticky(proxy, client);
    let Some(members) = pool.members(proxy, proxy.connect_timeout).await else {
        return Err(ConnectFailure {
            reason: "backends not resolved yet",
            detail: "no DNS answer yet for its backends".into(),
        });
    };
    let order = pool.order(proxy.balance, &members, &sticky);
    if order.is_empty() {
        let (reason, detail) = if members.list.is_empty() {
            ("no backend found", "DNS gave no address for its backends")
        } else {
            ("no healthy backend", "every backend is down or ejected")
        };
        return Err(ConnectFailure {
            reason,
            detail: detail.into(),
        });
    }
    let mut detail = Vec::new();
    let mut reason = "every backend is full";
    for member in order.filter_map(|i| members.list.get(i)) {
        let endpoint = &member.endpoint;
        let Some(held) = pool.try_hold(endpoint, member.max_connections) else {
            detail.push(format!("{endpoint}: at its max_connections"));
            continue;
        };
        let connect = Stream::connect_from(endpoint, source);
        match tokio::time::timeout(proxy.connect_timeout, connect).await {
            Ok(Ok(stream)) => {
                pool.connected(endpoint);
                return Ok((stream, endpoint.clone(), held));
            }
            Ok(Err(e)) => {
                reason = match e.kind() {
                    io::ErrorKind::ConnectionRefused => "connection refused",
                    io::ErrorKind::NotFound => "backend socket not found",
                    io::ErrorKind::PermissionDenied if source.is_some() => {
                        "transparent connect not permitted (needs CAP_NET_ADMIN)"
                    }
                    _ => "backend connection failed",
                };
                detail.push(format!("{endpoint}: {e}"));
                pool.connect_failed(service, endpoint);
            }
            Err(_) => {
                reason = "backend connection timed out";
                detail.push(format!(
                    "{endpoint}: connect timed out after {:?}",
                    proxy.connect_timeout
                ));
                pool.connect_failed(service, endpoint);
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
    use crate::model::{Peer, TlsClient};

    #[tokio::test]
    async fn a_backend_that_fails_what_goes_before_the_relay_is_ejected_after_three() {
        let proxy = Proxy {
            backends: vec![crate::model::Weighted {
                backend: "127.0.0.1:1000".parse().unwrap(),
                weight: 1,
                max_connections: None,
            }],
            ..test_proxy()
        };
        let pool = Pool::default();
        pool.configure(&std::sync::Arc::new(proxy.clone()));
        let members = pool
            .current(&proxy)
            .expect("an IP backend is ready at once");
        let used = members.list[0].endpoint.clone();
        let reset = || async { Err(io::Error::from(io::ErrorKind::ConnectionReset)) };
        for failures in 1..=3 {
            assert_eq!(
                pool.order_list(proxy.balance, &members, &[]),
                [0],
                "after {failures}"
            );
            let written = before_relay(reset(), &pool, "s", &used).await;
            assert!(written.is_err());
        }
        assert!(
            pool.order_list(proxy.balance, &members, &[]).is_empty(),
            "ejected"
        );
    }

    fn test_proxy() -> Proxy {
        Proxy {
            backends: Vec::new(),
            balance: crate::model::Balance::RoundRobin,
            hash_key: HashKey::Source,
            health_check: None,
            connect_timeout: std::time::Duration::from_secs(1),
            idle_timeout: None,
            send_proxy: None,
            relay: Default::default(),
            transparent: false,
            backend_tls: None,
        }
    }

    #[test]
    fn sticky_keys_are_the_sni_passed_or_terminated_else_the_address() {
        let mut proxy = Proxy {
            balance: crate::model::Balance::Source,
            ..test_proxy()
        };
        let mut client = ClientInfo {
            peer: Peer::Tcp(([10, 0, 0, 7], 5000).into()),
            local: None,
            tls: None,
            sni: None,
        };
        assert_eq!(sticky(&proxy, &client), [10, 0, 0, 7]);
        client.sni = Some("db.example.com".into());
        assert_eq!(sticky(&proxy, &client), [10, 0, 0, 7], "hash_key = source");
        proxy.hash_key = HashKey::Sni;
        assert_eq!(sticky(&proxy, &client), b"db.example.com");
        client.sni = None;
        client.tls = Some(TlsClient {
            server_name: Some("app.example.com".into()),
            ..TlsClient::default()
        });
        assert_eq!(sticky(&proxy, &client), b"app.example.com");
        client.tls = Some(TlsClient::default());
        assert_eq!(
            sticky(&proxy, &client),
            [10, 0, 0, 7],
            "no SNI: the address"
        );
        proxy.balance = crate::model::Balance::RoundRobin;
        assert!(sticky(&proxy, &client).is_empty(), "nothing hashes it");
    }
}
