//! The admin socket (`admin_socket`): an operator's run-time control. One
//! command per line in (`command.rs`), one JSON object per line out
//! (`run.rs`). Only root, the daemon's own user and `admin_uids` may connect
//! (SO_PEERCRED); every command is one log line naming the uid. The same
//! data, read-only, feeds the dashboard (`status.rs`).

mod command;
mod run;
mod status;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::task::JoinSet;

pub use command::MAX_LINE;
pub use run::ListenerRow;
pub use status::status;

use crate::model::Peer;
use crate::net::accept_errors::AcceptErrors;
use crate::net::listener::{Accepted, Listener};
use crate::net::stream::Stream;
use crate::state::Shared;

/// The sockets in service, kept current by the server for `show listeners`.
pub type Listening = Arc<Mutex<Vec<ListenerRow>>>;

/// Operators connected at once; more are turned away.
const MAX_CONNECTIONS: usize = 16;
/// A connection with no command for this long is closed.
const IDLE: Duration = Duration::from_secs(300);

/// Serves the admin socket until the task is dropped.
pub async fn serve(listener: Listener, shared: Arc<Shared>, listening: Listening) {
    let mut errors = AcceptErrors::new("admin");
    let mut operators = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(Accepted { stream: Stream::Unix(stream), peer: Peer::Unix { uid, .. }, .. }) => {
                    if operators.len() >= MAX_CONNECTIONS {
                        // No task for it: what fits in the socket buffer now, then close.
                        let _ = stream.try_write(line(&refusal("too many admin connections")).as_slice());
                        continue;
                    }
                    if !allowed(&shared, uid) {
                        tracing::warn!(uid, "admin connection refused: uid not allowed (admin_uids)");
                        operators.spawn(reply_once(stream, refusal("uid not allowed: ask for admin_uids")));
                        continue;
                    }
                    let (shared, listening) = (Arc::clone(&shared), Arc::clone(&listening));
                    operators.spawn(operator(stream, uid, shared, listening));
                }
                Ok(_) => {}
                Err(e) => errors.failed(&listener.local_addr(), &e).await,
            },
            Some(_) = operators.join_next() => {}
        }
    }
}

/// Root, the daemon's own user, and the configured `admin_uids`.
fn allowed(shared: &Shared, uid: u32) -> bool {
    uid == 0
        || uid == rustix::process::geteuid().as_raw()
        || shared.settings().admin_uids.contains(&uid)
}

fn refusal(error: &str) -> Value {
    json!({ "ok": false, "error": error })
}

fn line(reply: &Value) -> Vec<u8> {
    let mut line = reply.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// Sends `reply` and ends the connection, reading what the client sent
/// until it closes too (bounded): closing with its command unread would
/// reset the connection and could lose the reply.
async fn reply_once(mut stream: UnixStream, reply: Value) {
    if stream.write_all(&line(&reply)).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 1024];
    let drain = async {
        let mut total = 0;
        // EOF, an error, or more than a command line: done.
        while let Ok(n @ 1..) = stream.read(&mut sink).await {
            total += n;
            if total > MAX_LINE {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
}

/// One operator's connection: a command a line until EOF, a reset, an
/// over-long line or `IDLE` without one.
async fn operator(mut stream: UnixStream, uid: u32, shared: Arc<Shared>, listening: Listening) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let reply = answer(&line, uid, &shared, &listening);
            if stream.write_all(&self::line(&reply)).await.is_err() {
                return;
            }
        }
        if pending.len() > MAX_LINE {
            reply_once(stream, refusal("command line too long")).await;
            return;
        }
        match tokio::time::timeout(IDLE, stream.read(&mut buf)).await {
            // EOF, a reset, or idle: the conversation is over.
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
            Ok(Ok(n)) => pending.extend_from_slice(&buf[..n]),
        }
    }
}

/// The reply to one line, logged with who sent it.
fn answer(line: &[u8], uid: u32, shared: &Shared, listening: &Listening) -> Value {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    let result = command::parse(text)
        .map_err(|e| e.to_string())
        .and_then(|command| {
            let rows = listening.lock().unwrap_or_else(|p| p.into_inner()).clone();
            run::run(&command, shared, &rows)
        });
    let shown = crate::ops::log_format::clipped(text);
    match result {
        Ok(Value::Object(mut fields)) => {
            tracing::info!(uid, command = %shown, "admin command");
            fields.insert("ok".into(), Value::Bool(true));
            Value::Object(fields)
        }
        Ok(other) => json!({ "ok": true, "result": other }),
        Err(error) => {
            tracing::info!(uid, command = %shown, %error, "admin command refused");
            refusal(&error)
        }
    }
}
