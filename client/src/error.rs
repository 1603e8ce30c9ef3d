//! The one error type of the client library.

use std::io;
use tcpmux_proto::{NameError, ReplyError};

/// Why a TCPMUX connection did not reach its service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name can never be sent (empty, too long, spaces or control bytes).
    #[error("invalid service name {name:?}: {source}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        source: NameError,
    },
    /// No address accepted the connection.
    #[error("cannot connect: {0}")]
    Connect(#[source] io::Error),
    /// The server answered `-`; `message` is its reason, possibly empty.
    #[error("service refused by server: {}", if message.is_empty() { "(no reason given)" } else { message })]
    Refused {
        /// The text after the `-`.
        message: String,
    },
    /// The server's first line is not a TCPMUX status line.
    #[error("not a TCPMUX server: {0}")]
    Protocol(#[from] ReplyError),
    /// The server closed the connection before sending a status line.
    #[error("server closed the connection before replying")]
    NoReply,
    /// The status line did not arrive within `Options::reply_timeout`.
    #[error("no reply from server within the timeout")]
    ReplyTimeout,
    /// The server's certificate was refused (expired, not for this name, not
    /// signed by a trusted CA).
    #[error("the server's certificate was refused: {0}")]
    Certificate(String),
    /// TLS could not be set up: a certificate or key file, or the handshake.
    #[error("TLS: {0}")]
    Tls(String),
    /// The socket failed after connecting.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

impl Error {
    /// The server's message if it refused the service.
    pub fn refusal(&self) -> Option<&str> {
        match self {
            Error::Refused { message } => Some(message),
            _ => None,
        }
    }
}
