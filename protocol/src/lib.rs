//! RFC 1078 (TCPMUX) negotiation as pure state machines: bytes in, a decision out.
//!
//! Nothing here performs I/O, spawns, allocates per byte or knows about async, so the
//! daemon, the client and the fuzzers drive the exact same code.
//!
//! The exchange is tiny: the client sends a service name ended by CRLF; the server
//! answers `+` (accepted) or `-` (refused) with an optional message and CRLF, except
//! for `HELP`, which is answered by the list of names with no status line.
//! [`RequestParser`] is the server's half, [`ReplyParser`] the client's.
//! [`proxy_header`] is the PROXY protocol header a trusted load balancer puts
//! before the request, [`handoff`] the daemon's frames to handoff backends,
//! [`upgrade`] the frames of a binary upgrade, and [`sniff`] tells other
//! protocols (TLS, SSH, HTTP) apart from a TCPMUX name; `admin` (feature
//! `admin`) is the admin socket's wire format.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

#[cfg(feature = "admin")]
pub mod admin;
pub mod handoff;
pub mod hex;
mod name;
pub mod proxy_header;
mod reply;
mod request;
pub mod sniff;
#[cfg(test)]
mod test_rng;
pub mod upgrade;

pub use name::{NameError, ServiceName, MAX_NAME_LEN};
pub use reply::{encode_reply, ReplyError, ReplyLine, ReplyParser, ReplyProgress, MAX_REPLY_LINE};
pub use request::{encode_request, Decision, Progress, RequestParser};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
