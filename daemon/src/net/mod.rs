//! Sockets: listening and accepting, the connected stream type, peeking at a
//! client's opening, the client connection (plain or TLS), the PROXY protocol
//! header, the zero-copy relay and sendfile, the socketpair for bytes that
//! pass through the daemon, and the graceful close.

pub(crate) mod accept_errors;
pub(crate) mod buffers;
pub(crate) mod close;
pub(crate) mod conn;
pub(crate) mod handshakes;
pub mod listener;
pub(crate) mod pair;
pub(crate) mod peek;
pub(crate) mod proxy_protocol;
pub(crate) mod relay;
pub(crate) mod sendfile;
pub(crate) mod stream;
pub(crate) mod tls;
