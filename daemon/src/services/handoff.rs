//! handoff: the client's socket itself goes to a backend process that registered
//! the name (see `crate::hub`); tcpmuxd keeps no copy and moves no byte.
//!
//! The `+` goes out before the socket, in the same step of the event loop and
//! only to a backend whose control socket has room: before, because once the
//! backend has the socket it may write at once, and its bytes must follow our
//! `+`; in the same step, so that no other session can fill that backend in
//! between. A backend's control socket has room only once it has read what it
//! was last given (`hub/control.rs` keeps its send buffer minimal), so a backend
//! that stops reading is skipped after one client; when no backend has room
//! within [`DELIVERY_TIMEOUT`], the client gets `-service unavailable`, never
//! `+` and silence.
//!
//! A client that sent bytes behind its request line before the `+` (the
//! negotiation's read took them) cannot be passed as it is: the backend gets
//! one end of a socketpair, and the daemon relays (`net/pair.rs`).

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use rustix::io::Errno;
use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use tcpmux_proto::encode_reply;
use tcpmux_proto::handoff::{encode_client_frame, ClientFrame, FRAME_LEN};
use tokio::io::Interest;
use tokio::net::UnixStream;

use super::status_line::refused;
use crate::hub::{Acks, Hub, Registration};
use crate::model::{ClientInfo, Service};
use crate::net::conn::Conn;
use crate::net::pair;
use crate::net::stream::Metered;
use crate::outcome::{Outcome, Refusal};

/// How long a client waits for a backend with room for it, and an
/// acknowledging backend may take to acknowledge it.
pub(super) const DELIVERY_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a waiting client looks again while every backend is full.
const RETRY: Duration = Duration::from_millis(5);

/// What offering the client to one backend did.
enum Offer {
    Delivered,
    /// Its control socket has no room now: try another, or later.
    Full,
    /// It is gone (its socket failed): try another.
    Gone,
}

/// `status`: the `+` line's message, for a TCPMUX client.
pub(super) async fn serve(
    service: &Service,
    status: Option<&str>,
    hub: &Hub,
    conn: &mut Metered<Conn>,
    client: &ClientInfo,
) -> io::Result<Outcome> {
    // Passing a TLS session to another process needs kernel TLS; the
    // configuration refuses handoff services beside TLS listeners.
    if conn.get_ref().socket().is_none() {
        return Ok(refused(conn, Refusal::HandoffOverTls).await);
    }
    let pair = match conn.get_ref().plain() {
        Some(_) => None,
        None => Some(pair::pair()?),
    };
    let frame = ClientFrame {
        service: service.name.to_string(),
        peer: client
            .peer
            .tcp_addr()
            .map_or_else(|| "unix".to_owned(), |a| a.to_string()),
        local: client
            .local
            .map_or_else(|| "-".to_owned(), |a| a.to_string()),
        seq: None,
    };
    let mut line = Vec::new();
    if let Some(message) = status {
        encode_reply(true, message, &mut line);
    }
    let status = line;
    let deadline = tokio::time::Instant::now() + DELIVERY_TIMEOUT;
    let mut accepted = false;
    let mut tried_any = false;
    loop {
        let candidates = hub.candidates(&service.name);
        tried_any |= !candidates.is_empty();
        for backend in &candidates {
            let passed = pair.as_ref().map(|(theirs, _)| theirs.as_fd());
            let offer = offer(backend, conn, passed, (&status, &frame), &mut accepted)?;
            match offer {
                Offer::Delivered => {
                    conn.bytes_out += status.len() as u64;
                    let Some((theirs, ours)) = pair else {
                        return Ok(Outcome::HandedOff { relayed: false });
                    };
                    // The backend holds the other end now; ours must not
                    // keep it open, or the relay would never see its EOF.
                    drop(theirs);
                    pair::relay(conn, ours).await?;
                    return Ok(Outcome::HandedOff { relayed: true });
                }
                Offer::Full | Offer::Gone => {}
            }
        }
        if candidates.is_empty() || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(RETRY).await;
    }
    if accepted {
        // Every backend vanished between its `+` and the send: rare, and all
        // that is left is to close.
        return Ok(Outcome::Refused(Refusal::HandoffFailedAfterAccept));
    }
    if !tried_any {
        let refusal = Refusal::NoHandoffBackend(service.name.clone());
        return Ok(refused(conn, refusal).await);
    }
    let refusal = Refusal::HandoffUndelivered(DELIVERY_TIMEOUT);
    Ok(refused(conn, refusal).await)
}

/// Offers the client to `registered`, without an await: sends the `+` (once)
/// and the frame with the socket (or `passed`, a socketpair's end) if the
/// backend has room right now. A backend that acknowledges gets a numbered
/// frame, and a duplicate of what was passed is kept until it does
/// (`hub/acks.rs`).
fn offer(
    registered: &Registration,
    conn: &Metered<Conn>,
    passed: Option<BorrowedFd<'_>>,
    (status, frame): (&[u8], &ClientFrame),
    accepted: &mut bool,
) -> io::Result<Offer> {
    let backend = &registered.control;
    if !writable_now(backend.as_fd())? {
        return Ok(Offer::Full);
    }
    // Only a plain socket can be passed (services/mod.rs keeps TLS away).
    let Some(socket) = conn.get_ref().socket() else {
        return Ok(Offer::Gone);
    };
    let passed = passed.unwrap_or(socket.as_fd());
    if !*accepted && !status.is_empty() {
        // A few bytes into a connection that has sent nothing yet: the send
        // buffer is empty, so they go whole.
        let sent = rustix::net::send(socket, status, SendFlags::DONTWAIT | SendFlags::NOSIGNAL)?;
        if sent != status.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the client's socket took only part of the status line",
            ));
        }
        *accepted = true;
    }
    let seq = registered.acks.as_ref().map(Acks::next_seq);
    let kept = match seq {
        Some(_) => Some(passed.try_clone_to_owned()?),
        None => None,
    };
    let frame = encode_client_frame(&ClientFrame {
        seq,
        ..frame.clone()
    });
    // Backends get the socket in blocking mode, as the handoff protocol says.
    // The mode belongs to the open file we share, so it is put back if the
    // socket does not leave.
    let flags = fcntl_getfl(passed)?;
    fcntl_setfl(passed, flags - OFlags::NONBLOCK)?;
    match send_frame(backend, passed, &frame) {
        Ok(sent) => {
            if sent < FRAME_LEN {
                finish_frame(backend, &frame[sent..]);
            }
            if let (Some(acks), Some(seq), Some(kept)) = (&registered.acks, seq, kept) {
                acks.expect(seq, kept, DELIVERY_TIMEOUT);
            }
            Ok(Offer::Delivered)
        }
        Err(e) => {
            fcntl_setfl(passed, flags | OFlags::NONBLOCK)?;
            Ok(if e == Errno::AGAIN {
                Offer::Full
            } else {
                Offer::Gone
            })
        }
    }
}

/// Whether a send to `fd` would not block now.
fn writable_now(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let ready = poll(&mut fds, Some(&zero))?;
    Ok(ready == 1 && fds[0].revents().contains(PollFlags::OUT))
}

/// The frame with the client's socket attached; returns the bytes sent (the
/// socket travels with the first of them).
fn send_frame(
    backend: &UnixStream,
    socket: BorrowedFd<'_>,
    frame: &[u8; FRAME_LEN],
) -> Result<usize, Errno> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [socket];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let flags = SendFlags::DONTWAIT | SendFlags::NOSIGNAL;
    sendmsg(backend, &[IoSlice::new(frame)], &mut control, flags)
}

/// The rest of a frame whose start (and socket) already went: the backend
/// waits for it, so it follows as soon as there is room, on a task of its own.
fn finish_frame(backend: &Arc<UnixStream>, rest: &[u8]) {
    let (backend, mut rest) = (Arc::clone(backend), rest.to_vec());
    tokio::spawn(async move {
        while !rest.is_empty() {
            let sent = backend
                .async_io(Interest::WRITABLE, || {
                    rustix::net::send(&*backend, &rest, SendFlags::NOSIGNAL)
                        .map_err(io::Error::from)
                })
                .await;
            match sent {
                Ok(n) => drop(rest.drain(..n)),
                Err(_) => return,
            }
        }
    });
}
