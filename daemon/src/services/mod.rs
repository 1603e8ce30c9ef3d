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
pub(crate) mod exec;
mod handoff;
pub(crate) mod help;
mod isotime;
mod proxy;
mod sometext;
mod status_line;
mod time;

use std::io;

use tcpmux_proto::encode_reply;
use tokio::io::AsyncWriteExt;

use crate::admission::{OwnConnections, ServiceCounts};
use crate::hub::Hub;
use crate::model::{Builtin, ClientInfo, Service, ServiceKind};
use crate::net::conn::Conn;
use crate::net::stream::Metered;
use crate::ops::session_table::LiveSession;
use crate::outcome::{Outcome, Refusal};

pub(crate) use status_line::{refused, send_last};

/// What a service may use of the daemon besides its connection: the handoff
/// hub, the rendered counters (for `stats`), its own name's counts and the
/// daemon's own connections.
pub(crate) struct Context<'a> {
    pub hub: &'a Hub,
    /// The counters in the Prometheus text format, for `stats`.
    pub stats: &'a (dyn Fn() -> String + Sync),
    pub counts: &'a ServiceCounts,
    /// The daemon's own outgoing connections, where a proxy registers its own.
    pub own: &'a OwnConnections,
    /// This session's row in the live-session table: a proxy records its
    /// backend there and counts its relay into it.
    pub live: &'a LiveSession,
}

/// Builds the built-ins' fixed texts (and their memfds) before the first client,
/// so no client waits for them and every descriptor the daemon keeps is open from
/// the start.
pub(crate) fn prepare() {
    sometext::prepare();
    chargen::prepare();
}

/// Runs `service` on a connection whose request named it: sends the status line
/// (a proxy only once its backend is up), then the service. A client routed by
/// a detecting listener (`tcpmux` false) speaks another protocol and gets no
/// status line. Returns when the service is done with the connection; closing
/// it gracefully is the caller's job.
pub(crate) async fn serve(
    service: &Service,
    conn: &mut Metered<Conn>,
    client: &ClientInfo,
    context: &Context<'_>,
    tcpmux: bool,
) -> io::Result<Outcome> {
    let status = tcpmux.then_some(service.message.as_str());
    match &service.kind {
        ServiceKind::Builtin(builtin) => {
            // A one-shot answer goes out in the status line's write, and
            // with the FIN: one segment, one wake-up of the client.
            let mut reply = Vec::with_capacity(128);
            if let Some(message) = status {
                encode_reply(true, message, &mut reply);
            }
            if one_shot_answer(*builtin, context, &mut reply) {
                send_last(conn, &reply).await?;
            } else {
                if !reply.is_empty() {
                    conn.write_all(&reply).await?;
                }
                // Freed before a stream that may last for hours.
                drop(reply);
                run_builtin(*builtin, conn).await?;
            }
            Ok(Outcome::Served { backend: None })
        }
        // The larger kinds are boxed, so that an echo session, say, is not
        // sized by the relay's or a child process's state.
        ServiceKind::Proxy(settings) => {
            let pool = (service.name.as_str(), &*context.counts.pool);
            Box::pin(proxy::serve(
                settings,
                pool,
                (context.own, context.live),
                status,
                conn,
                client,
            ))
            .await
        }
        ServiceKind::Handoff(_) => {
            Box::pin(handoff::serve(service, status, context.hub, conn, client)).await
        }
        ServiceKind::Exec(settings) => {
            let instances = &context.counts.instances;
            Box::pin(exec::serve(
                settings, service, status, conn, client, instances,
            ))
            .await
        }
        // The verdict refuses it first; a service never serves a stream it
        // has no backend for.
        ServiceKind::UdpOnly => Ok(Outcome::Refused(Refusal::UdpOnly(service.name.clone()))),
    }
}

/// Appends the whole answer of a built-in that sends one thing and is done, and
/// says whether it was one; the others stream (`run_builtin`).
fn one_shot_answer(builtin: Builtin, context: &Context<'_>, out: &mut Vec<u8>) -> bool {
    match (builtin, one_line_answer(builtin)) {
        (Builtin::Stats, _) => out.extend_from_slice((context.stats)().as_bytes()),
        (_, Some(answer)) => answer(out),
        (_, None) => return false,
    }
    true
}

/// Appends a one-line answer.
pub(crate) type OneLine = fn(&mut Vec<u8>);

/// How a built-in that answers with one short line and is done (the clocks)
/// appends its answer; `None` for the others. The answers the accept loop may
/// give itself (`session::at_accept`), since a new socket takes them whole.
pub(crate) fn one_line_answer(builtin: Builtin) -> Option<OneLine> {
    match builtin {
        Builtin::Daytime => Some(daytime::answer),
        Builtin::Time => Some(time::answer),
        Builtin::Isotime => Some(isotime::answer),
        Builtin::Stats
        | Builtin::Echo
        | Builtin::Discard
        | Builtin::Chargen
        | Builtin::Sometext => None,
    }
}

/// A built-in that streams, after its status line.
async fn run_builtin(builtin: Builtin, conn: &mut Metered<Conn>) -> io::Result<()> {
    match builtin {
        Builtin::Echo => echo::serve(conn).await,
        Builtin::Discard => discard::serve(conn).await,
        // Boxed: their state (a sendfile's, a line's) is 500-800 bytes that
        // would otherwise be sized into every echo or discard session.
        Builtin::Chargen => Box::pin(chargen::serve(conn)).await,
        Builtin::Sometext => Box::pin(sometext::serve(conn)).await,
        // Answered whole by `one_shot_answer`.
        Builtin::Daytime | Builtin::Time | Builtin::Isotime | Builtin::Stats => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_answers_fit_a_new_socket_whole() {
        for builtin in Builtin::ALL {
            let mut answer = Vec::new();
            if let Some(append) = one_line_answer(builtin) {
                append(&mut answer);
                // A new socket's send buffer takes it whole.
                assert!(
                    (1..128).contains(&answer.len()),
                    "{builtin:?}: {} bytes",
                    answer.len()
                );
            }
        }
    }
}
