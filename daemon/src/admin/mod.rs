//! The admin socket (`admin_socket`): an operator's run-time control. One
//! command per line in, one JSON object per line out, as
//! `tcpmux_proto::admin` writes them; `run.rs` does what each asks. Only root, the daemon's own user and `admin_uids` may connect
//! (SO_PEERCRED); every command is one log line naming the uid. The same
//! data, read-only, feeds the dashboard (`dashboard.rs`).

mod backends;
mod change;
mod dashboard;
mod fleet;
mod refusal;
mod run;
mod slots;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tcpmux_proto::admin::{Reply, Request, MAX_LINE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::task::JoinSet;

pub(crate) use dashboard::status;
pub(crate) use tcpmux_proto::admin::ListenerRow;

use crate::model::Peer;
use crate::net::accept_errors::AcceptErrors;
use crate::net::listener::{Accepted, Listener};
use crate::net::stream::Stream;
use crate::state::Shared;
use refusal::Refusal;
use slots::{Refusals, Slots};

/// The sockets in service, kept current by the server for `show listeners`.
pub(crate) type Listening = Arc<Mutex<Vec<ListenerRow>>>;

/// A reply the client has not taken in this long ends its connection, so a
/// client that never reads holds neither a slot nor its reply for long.
const WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// A connection with no command for this long is closed.
const IDLE: Duration = Duration::from_secs(300);

/// Serves the admin socket until the task is dropped. A uid that may not
/// use it is answered and closed at once, without a task or a slot.
pub(crate) async fn serve(listener: Listener, shared: Arc<Shared>, listening: Listening) {
    let mut errors = AcceptErrors::new("admin");
    let mut operators = JoinSet::new();
    // Whose each running task is, so that its slot goes back even if it
    // panicked.
    let mut owners = std::collections::HashMap::new();
    let mut slots = Slots::default();
    let mut refusals = Refusals::default();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(Accepted { stream: Stream::Unix(stream), peer: Peer::Unix { uid, .. }, .. }) => {
                    if !allowed(&shared, uid) {
                        if refusals.answer(uid) {
                            tracing::warn!(uid, "admin connection refused: uid not allowed (admin_uids)");
                            refuse(&stream, &Refusal::UidNotAllowed);
                        }
                        continue;
                    }
                    if let Err(full) = slots.take(uid) {
                        refuse(&stream, &full);
                        continue;
                    }
                    let (shared, listening) = (Arc::clone(&shared), Arc::clone(&listening));
                    let task = operators.spawn(operator(stream, uid, shared, listening));
                    owners.insert(task.id(), uid);
                }
                Ok(_) => {}
                Err(e) => errors.failed(&listener.local_addr(), &e).await,
            },
            Some(ended) = operators.join_next_with_id() => {
                let id = ended.map_or_else(|e| e.id(), |(id, ())| id);
                if let Some(uid) = owners.remove(&id) {
                    slots.give_back(uid);
                }
            }
        }
    }
}

/// Root, the daemon's own user, and the configured `admin_uids`.
fn allowed(shared: &Shared, uid: u32) -> bool {
    uid == 0
        || uid == rustix::process::geteuid().as_raw()
        || shared.settings().admin_uids.contains(&uid)
}

fn refusal(refusal: &Refusal) -> Vec<u8> {
    Reply::Refused(refusal.to_string()).encode()
}

/// Answers `error` with what fits in the socket's buffer now (all of it, on
/// a fresh connection) and closes. A Unix socket delivers the reply before
/// telling the client its unread command was dropped.
fn refuse(stream: &UnixStream, why: &Refusal) {
    let _ = stream.try_write(&refusal(why));
}

/// One operator's connection: a command a line until EOF, a reset, an
/// over-long line, `IDLE` without one, or a reply not taken within
/// `WRITE_DEADLINE`. Each reply is made off the event loop: `show sessions`
/// at thousands of sessions takes milliseconds that no client should wait.
async fn operator(mut stream: UnixStream, uid: u32, shared: Arc<Shared>, listening: Listening) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let (shared, listening) = (Arc::clone(&shared), Arc::clone(&listening));
            // Its log line goes where this task's would (a test's daemon
            // logs to a subscriber of its own thread).
            let log = tracing::dispatcher::get_default(Clone::clone);
            let made = tokio::task::spawn_blocking(move || {
                tracing::dispatcher::with_default(&log, || {
                    answer(&line, uid, &shared, &listening).encode()
                })
            });
            let reply = match made.await {
                Ok(reply) => reply,
                Err(e) => {
                    tracing::error!(uid, error = %e, "admin command failed");
                    refusal(&Refusal::Internal)
                }
            };
            if !send(&mut stream, &reply, uid).await {
                return;
            }
        }
        if pending.len() > MAX_LINE {
            let _ = send(&mut stream, &refusal(&Refusal::TooLong), uid).await;
            return;
        }
        match tokio::time::timeout(IDLE, stream.read(&mut buf)).await {
            // EOF, a reset, or idle: the conversation is over.
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
            Ok(Ok(n)) => pending.extend_from_slice(&buf[..n]),
        }
    }
}

/// Writes `reply` within `WRITE_DEADLINE`; false when the connection is done.
async fn send(stream: &mut UnixStream, reply: &[u8], uid: u32) -> bool {
    match tokio::time::timeout(WRITE_DEADLINE, stream.write_all(reply)).await {
        Ok(Ok(())) => true,
        Ok(Err(_)) => false,
        Err(_) => {
            tracing::warn!(
                uid,
                bytes = reply.len(),
                "admin connection closed: its client did not read the reply within {}s",
                WRITE_DEADLINE.as_secs()
            );
            false
        }
    }
}

/// The reply to one line, logged with who sent it.
fn answer(line: &[u8], uid: u32, shared: &Shared, listening: &Listening) -> Reply {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    let result = Request::parse(text)
        .map_err(Refusal::from)
        .and_then(|request| {
            let rows = listening.lock().unwrap_or_else(|p| p.into_inner()).clone();
            run::run(&request, shared, &rows)
        });
    let shown = crate::ops::log_format::clipped(text);
    match result {
        Ok(reply) => {
            tracing::info!(uid, command = %shown, "admin command");
            reply
        }
        Err(error) => {
            tracing::info!(uid, command = %shown, %error, "admin command refused");
            Reply::Refused(error.to_string())
        }
    }
}
