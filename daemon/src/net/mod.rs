//! Sockets: listening and accepting, the connected stream type, peeking at a
//! client's opening, the client connection (plain or TLS), the PROXY protocol
//! header, the zero-copy relay and sendfile, the socketpair for bytes that
//! pass through the daemon, and the graceful close (a session's own, or the
//! accept loop's for the clients it answered itself).

pub(crate) mod accept_errors;
pub(crate) mod ahead;
pub mod bind_error;
pub(crate) mod buffers;
pub(crate) mod close;
pub(crate) mod conn;
pub(crate) mod datagram;
pub(crate) mod epoll;
pub(crate) mod lingering;
pub mod listener;
pub(crate) mod pair;
pub(crate) mod peek;
pub(crate) mod proxy_protocol;
pub(crate) mod relay;
#[doc(hidden)]
pub mod segments;
pub(crate) mod sendfile;
pub(crate) mod stream;
pub(crate) mod tls;
pub(crate) mod tls_threads;
pub(crate) mod unix_socket;

/// A connected TCP pair for unit tests: our end as the daemon sees it, and
/// the peer's end.
#[cfg(test)]
pub(crate) async fn test_pair() -> (stream::Stream, tokio::net::TcpStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peer = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (ours, _) = listener.accept().await.unwrap();
    (stream::Stream::Tcp(ours), peer)
}
