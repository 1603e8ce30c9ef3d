//! The services a name can stand for, one file per kind.
//!
//! A service is a value ([`ServiceKind`]) that the registry stores under its names and
//! [`serve`] dispatches on; there is no trait object or class hierarchy to follow.
//! Every service receives the connection *after* the `+` line and the bytes the
//! client sent behind its request line (`pending`), which are the service's input.

mod chargen;
mod daytime;
mod discard;
mod echo;
pub mod help;
mod isotime;
mod sometext;
mod time;

use std::fmt;
use std::io;

use tokio::io::{AsyncRead, AsyncWrite};

/// Services built into the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    Echo,
    Discard,
    Chargen,
    Daytime,
    Time,
    Sometext,
    Isotime,
}

impl Builtin {
    pub const ALL: [Builtin; 7] = [
        Builtin::Echo,
        Builtin::Discard,
        Builtin::Chargen,
        Builtin::Daytime,
        Builtin::Time,
        Builtin::Sometext,
        Builtin::Isotime,
    ];

    /// The name it is configured by, and served under by default.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Echo => "echo",
            Builtin::Discard => "discard",
            Builtin::Chargen => "chargen",
            Builtin::Daytime => "daytime",
            Builtin::Time => "time",
            Builtin::Sometext => "sometext",
            Builtin::Isotime => "isotime",
        }
    }

    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a registered name does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceKind {
    Builtin(Builtin),
}

/// Runs `kind` on an accepted, negotiated connection. Returns when the service is
/// done with the connection; closing it gracefully is the caller's job.
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    kind: &ServiceKind,
    conn: &mut S,
    pending: &[u8],
) -> io::Result<()> {
    match kind {
        ServiceKind::Builtin(builtin) => match builtin {
            Builtin::Echo => echo::serve(conn, pending).await,
            Builtin::Discard => discard::serve(conn).await,
            Builtin::Chargen => chargen::serve(conn).await,
            Builtin::Daytime => daytime::serve(conn).await,
            Builtin::Time => time::serve(conn).await,
            Builtin::Sometext => sometext::serve(conn).await,
            Builtin::Isotime => isotime::serve(conn).await,
        },
    }
}

/// Errors that only mean "the client went away", the normal end of an endless
/// service such as chargen.
fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}
