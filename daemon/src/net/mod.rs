//! Sockets: listening and accepting, the connected stream type, peeking at a
//! client's opening, the client connection (plain or TLS), the PROXY protocol
//! header, the zero-copy relay and sendfile, the socketpair for bytes that
//! pass through the daemon, and the graceful close (a session's own, or the
//! accept loop's for the clients it answered itself).

pub(crate) mod accept_errors;
pub(crate) mod buffers;
pub(crate) mod close;
pub(crate) mod conn;
pub(crate) mod lingering;
pub mod listener;
pub(crate) mod pair;
pub(crate) mod peek;
pub(crate) mod proxy_protocol;
pub(crate) mod relay;
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

/// TCP segments a socket has received (TCP_INFO's tcpi_segs_in, at byte 140
/// of the kernel's struct since Linux 4.2), for tests that count packets.
#[cfg(test)]
pub(crate) fn segments_in(socket: &impl std::os::fd::AsRawFd) -> u32 {
    let mut info = [0u8; 256];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert!(rc == 0 && len >= 144, "TCP_INFO: rc {rc}, {len} bytes");
    u32::from_ne_bytes(info[140..144].try_into().expect("4 bytes"))
}
