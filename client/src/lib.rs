//! Client side of TCPMUX (RFC 1078): connect to a server, ask for a service by name,
//! and get back the ordinary stream, positioned at the service's first byte.
//!
//! The status line is read with `MSG_PEEK` and consumed exactly, so data the service
//! sends right behind its `+` line stays in the socket for the caller; nothing is
//! read ahead into a buffer that the caller would have to know about.
//!
//! ```no_run
//! use std::io::Read;
//! let mut stream = tcpmux::connect("127.0.0.1:41397", "daytime")?;
//! let mut text = String::new();
//! stream.read_to_string(&mut text)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

mod blocking;
mod error;
pub mod handoff;
#[cfg(feature = "async")]
mod nonblocking;
mod stream;
#[cfg(feature = "tls")]
pub mod tls;

pub use blocking::{
    connect, connect_unix, connect_unix_with, connect_with, list, negotiate, open, Socket,
};
pub use error::Error;
#[cfg(feature = "async")]
pub use nonblocking::{connect_async, connect_unix_async, negotiate_async, AsyncPeek};
pub use stream::Stream;
pub use tcpmux_proto::{ReplyLine, ServiceName};

use std::time::Duration;

/// How long each step of a connection may take; `None` waits as long as the OS does.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Limit on establishing the TCP connection, per address tried.
    pub connect_timeout: Option<Duration>,
    /// Limit on waiting for the server's status line.
    pub reply_timeout: Option<Duration>,
    /// TCP Fast Open: the request line rides in the SYN (one round trip
    /// less), where the kernel allows it; a normal handshake otherwise. The
    /// connect timeout does not apply (the connect returns at once).
    pub fast_open: bool,
}

fn parse_name(name: &str) -> Result<ServiceName, Error> {
    ServiceName::parse(name).map_err(|source| Error::InvalidName {
        name: name.to_owned(),
        source,
    })
}

/// The status line as a result: `-` is the server's refusal.
fn accepted(reply: ReplyLine) -> Result<ReplyLine, Error> {
    if reply.accepted {
        Ok(reply)
    } else {
        Err(Error::Refused {
            message: reply.message,
        })
    }
}

/// Splits a HELP answer into names, accepting CRLF or bare LF line ends.
fn help_lines(text: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(text)
        .lines()
        .map(|line| line.trim_end_matches('\r').to_owned())
        .filter(|line| !line.is_empty())
        .collect()
}
