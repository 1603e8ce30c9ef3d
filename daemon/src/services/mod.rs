//! The services a name can stand for, one file per kind.
//!
//! A service is a value ([`ServiceKind`]) that the registry stores under its names and
//! [`serve`] dispatches on; there is no trait object or class hierarchy to follow.
//! Every service receives the connection with the request line consumed and not a
//! byte more: whatever the client sent behind it is still in the socket.

mod chargen;
mod daytime;
mod discard;
mod echo;
pub mod exec;
pub mod handoff;
pub mod help;
mod isotime;
pub mod proxy;
mod sometext;
mod time;

use std::fmt;
use std::io;
use std::sync::Arc;

use tcpmux_proto::encode_reply;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::registry::Service;
use crate::stream::{ClientInfo, Metered, Stream};

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
    Stats,
}

impl Builtin {
    pub const ALL: [Builtin; 8] = [
        Builtin::Echo,
        Builtin::Discard,
        Builtin::Chargen,
        Builtin::Daytime,
        Builtin::Time,
        Builtin::Sometext,
        Builtin::Isotime,
        Builtin::Stats,
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
            Builtin::Stats => "stats",
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
    Proxy(Arc<proxy::Proxy>),
    Exec(Arc<exec::Exec>),
    Handoff(Arc<crate::handoff::HandoffRule>),
}

/// How a service ended, for the log.
#[derive(Debug)]
pub enum Ended {
    /// The service ran; `backend` names the proxy backend that served it.
    Served { backend: Option<String> },
    /// The service answered `-` for the reason given.
    Refused(String),
    /// The program exec'd on the socket ended.
    Exited { pid: u32, status: String },
    /// The socket went to a handoff backend: tcpmuxd must not touch it again.
    HandedOff,
}

/// Builds the built-ins' fixed texts (and their memfds) before the first client,
/// so no client waits for them and every descriptor the daemon keeps is open from
/// the start.
pub fn prepare() {
    sometext::prepare();
    chargen::prepare();
}

/// Runs `service` on a connection whose request named it: sends the status line
/// (a proxy only once its backend is up), then the service. Returns when the
/// service is done with the connection; closing it gracefully is the caller's job.
pub async fn serve(
    service: &Service,
    conn: &mut Metered<Stream>,
    client: &ClientInfo,
    daemon: &crate::Daemon,
) -> io::Result<Ended> {
    match &service.kind {
        ServiceKind::Builtin(builtin) => {
            // A one-shot answer goes out in the status line's write: one
            // segment, and one wake-up of the client instead of two.
            let mut reply = Vec::with_capacity(128);
            encode_reply(true, &service.message, &mut reply);
            let answered = one_shot_answer(*builtin, daemon, &mut reply);
            conn.write_all(&reply).await?;
            if !answered {
                run_builtin(*builtin, conn).await?;
            }
            Ok(Ended::Served { backend: None })
        }
        ServiceKind::Proxy(settings) => {
            proxy::serve(settings, &service.message, conn, client).await
        }
        ServiceKind::Handoff(_) => handoff::serve(service, &daemon.hub, conn, client).await,
        ServiceKind::Exec(settings) => {
            exec::serve(
                settings,
                service.name.as_str(),
                &service.message,
                conn,
                client,
            )
            .await
        }
    }
}

/// Sends the `+` line.
async fn accept<S: AsyncWrite + Unpin>(conn: &mut S, message: &str) -> io::Result<()> {
    let mut line = Vec::new();
    encode_reply(true, message, &mut line);
    conn.write_all(&line).await
}

/// Sends a `-` line. A failure means the client is already gone; nothing to do.
pub async fn refuse<S: AsyncWrite + Unpin>(conn: &mut S, reason: &str) {
    let mut line = Vec::new();
    encode_reply(false, reason, &mut line);
    let _ = conn.write_all(&line).await;
}

/// Appends the whole answer of a built-in that sends one thing and is done, and
/// says whether it was one; the others stream (`run_builtin`).
fn one_shot_answer(builtin: Builtin, daemon: &crate::Daemon, out: &mut Vec<u8>) -> bool {
    match builtin {
        Builtin::Daytime => daytime::answer(out),
        Builtin::Time => time::answer(out),
        Builtin::Isotime => isotime::answer(out),
        Builtin::Stats => out.extend_from_slice(daemon.render_metrics().as_bytes()),
        Builtin::Echo | Builtin::Discard | Builtin::Chargen | Builtin::Sometext => return false,
    }
    true
}

/// A built-in that streams, after its status line.
async fn run_builtin(builtin: Builtin, conn: &mut Metered<Stream>) -> io::Result<()> {
    match builtin {
        Builtin::Echo => echo::serve(conn).await,
        Builtin::Discard => discard::serve(conn).await,
        Builtin::Chargen => chargen::serve(conn).await,
        Builtin::Sometext => sometext::serve(conn).await,
        // Answered whole by `one_shot_answer`.
        Builtin::Daytime | Builtin::Time | Builtin::Isotime | Builtin::Stats => Ok(()),
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
