//! The admin socket's wire format, version [`VERSION`]: one command line of
//! words in ([`Request`]), one JSON object per line out ([`Reply`]). The
//! daemon and `tcpmux admin` both speak it through these types, so a field
//! is spelled in one place; scripts may rely on it (docs/operations.md).
//!
//! Pure code, like the rest of the crate: text in, a typed value out.
//! Behind the `admin` feature, so that the client library's users do not
//! compile serde.

mod reply;
mod request;
mod rows;

pub use reply::{Reply, ReplyError};
pub use request::{AdminState, Request, RequestError, HELP};
pub use rows::{
    BackendRow, Check, FleetRow, HandoffRow, ListenerRow, MemberStatus, QueueRow, Scope,
    ServiceRow, ServiceState, SessionRow, SetBy, Source,
};

/// The version of this format. Replies only ever gain fields within a
/// version; a field removed or changing meaning makes the next one. `help`
/// answers it.
pub const VERSION: u32 = 1;

/// The longest command line a daemon reads; a longer one is refused.
pub const MAX_LINE: usize = 4096;
