//! Sockets: listening and accepting, the connected stream type, the PROXY
//! protocol header, the zero-copy relay and sendfile, and the graceful close.

pub mod close;
pub mod listener;
pub mod proxy_protocol;
pub mod relay;
pub mod sendfile;
pub mod stream;
