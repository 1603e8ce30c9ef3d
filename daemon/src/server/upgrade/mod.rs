//! Binary upgrades with no refused connection: the running daemon hands every
//! listening socket to its successor over `upgrade_socket`, the successor
//! serves on them, says READY, and only then does the old one stop accepting
//! and drain its sessions. Both accept from the same sockets in between, so a
//! client connecting during the upgrade is served by one or the other.
//!
//! The exchange, over a Unix stream socket: the successor sends `UPGRADE\n`;
//! the running daemon answers with one frame per socket, each carrying it
//! (SCM_RIGHTS), then an `END` frame with the exchange's version (the frames
//! are pure code in `tcpmux_proto::upgrade`); the successor answers
//! `READY\n` once it serves. What an operator set on the admin socket (a
//! disabled service, a member's state or weight) follows the sockets, as
//! frames without one, and the successor puts it back in force.

use std::io::{self, IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Interest};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use tcpmux_proto::upgrade::{self, Frame, FrameError, FRAME, VERSION};

mod carried;

use super::roles::{encoded, Place, Role, Socket};
use crate::hub::{Adopted, Hub};
use crate::model::{HandedFlow, ListenAddr};
use crate::net::accept_errors::AcceptErrors;
use crate::net::listener::{Accepted, Listener};
use crate::net::stream::Stream;
use crate::state::Shared;
use carried::{carried, carried_frames, flow_frame, handed_flow};
pub(super) use carried::{restore, Carried};

/// How long a successor may take to ask, and to say it serves.
const PATIENCE: Duration = Duration::from_secs(30);

/// Why a takeover failed (the successor exits with it).
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("no running tcpmuxd at {path}: {source} (is upgrade_socket set in its configuration, and is it running?)")]
    Connect { path: PathBuf, source: io::Error },
    #[error("the upgrade exchange with the running tcpmuxd failed: {0}")]
    Exchange(#[from] io::Error),
    #[error("the running tcpmuxd sent an upgrade frame this one cannot read: {0}")]
    Protocol(#[from] FrameError),
    #[error("the running tcpmuxd speaks upgrade exchange version {0}; this binary knows up to {VERSION}: upgrade to a newer one")]
    Version(u32),
    #[error("the running tcpmuxd sent a {0} frame without its socket")]
    NoSocket(&'static str),
}

/// The sockets a running daemon handed over: TCPMUX listeners by the address
/// they are bound to (a configuration naming that address takes them), the
/// others by their configured address or path.
#[derive(Default)]
pub struct Handed {
    pub(super) clients: Vec<(ListenAddr, OwnedFd)>,
    /// The listeners' UDP sockets, by the address each is bound to.
    pub(super) udp: Vec<(std::net::SocketAddr, OwnedFd)>,
    /// Each role's socket (by `Role::index`), with where it was configured.
    pub(super) singles: [Option<(Place, OwnedFd)>; 4],
    /// Handoff backends' registrations, with their control connections.
    pub(super) backends: Vec<Adopted>,
    /// What an operator set at run time in the running daemon.
    pub(super) carried: Vec<Carried>,
    /// The running daemon's UDP flows, each with its backend socket.
    pub(super) udp_flows: Vec<HandedFlow>,
}

/// A successor's side: asks the daemon at `path` for its sockets. The returned
/// stream is kept to say READY once the successor serves.
pub fn take_over(path: &Path) -> Result<(StdUnixStream, Handed), UpgradeError> {
    let mut stream = StdUnixStream::connect(path).map_err(|source| UpgradeError::Connect {
        path: path.to_owned(),
        source,
    })?;
    stream.set_read_timeout(Some(PATIENCE))?;
    stream.write_all(b"UPGRADE\n")?;
    let mut handed = Handed::default();
    loop {
        let (bytes, fd) = receive_frame(&stream)?;
        let frame = upgrade::parse(&bytes)?;
        if let Some(setting) = carried(&frame)? {
            handed.carried.push(setting);
            continue;
        }
        let fd = match (&frame, fd) {
            (Frame::End(version), _) if *version > VERSION => {
                return Err(UpgradeError::Version(*version))
            }
            (Frame::End(_), _) => return Ok((stream, handed)),
            (_, Some(fd)) => fd,
            (_, None) => return Err(UpgradeError::NoSocket(frame.kind())),
        };
        let bad = || UpgradeError::Protocol(FrameError::Malformed);
        if let Some((role, at)) = Role::of_frame(&frame) {
            handed.singles[role.index()] = Some((role.place(at).ok_or_else(bad)?, fd));
            continue;
        }
        match frame {
            Frame::Listen(addr) => handed.clients.push((addr.parse().map_err(|_| bad())?, fd)),
            Frame::ListenUdp(addr) => handed.udp.push((addr.parse().map_err(|_| bad())?, fd)),
            Frame::Flow(flow) => handed.udp_flows.push(handed_flow(flow, fd)?),
            Frame::Backend(r) => handed.backends.push(Adopted {
                names: r.names.iter().map(|n| (*n).to_owned()).collect(),
                uid: r.uid,
                gid: r.gid,
                pid: r.pid,
                control: fd,
                acks: r.acks,
            }),
            Frame::Metrics(_) | Frame::Control(_) | Frame::Upgrade(_) | Frame::Admin(_) => {}
            Frame::Disabled(_) | Frame::Member(_) => {}
            Frame::End(_) => return Ok((stream, handed)),
        }
    }
}

/// Tells the old daemon that the successor serves.
pub fn ready(mut stream: StdUnixStream) {
    let _ = stream.write_all(b"READY\n");
}

/// One frame and the descriptor that came with its first bytes.
fn receive_frame(stream: &StdUnixStream) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut frame = vec![0u8; FRAME];
    let mut filled = 0;
    let mut fd = None;
    while filled < FRAME {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut ancillary = RecvAncillaryBuffer::new(&mut space);
        let got = recvmsg(
            stream,
            &mut [IoSliceMut::new(&mut frame[filled..])],
            &mut ancillary,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        if got.bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "upgrade socket closed",
            ));
        }
        for message in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(mut fds) = message {
                fd = fd.or(fds.next());
            }
        }
        filled += got.bytes;
    }
    Ok((frame, fd))
}

/// Accepts successors on the upgrade socket (only the daemon's own uid, or
/// root) and passes each to the run loop.
pub(super) async fn accept_upgrades(listener: Listener, requests: mpsc::Sender<UnixStream>) {
    let me = rustix::process::geteuid().as_raw();
    let mut errors = AcceptErrors::new("upgrade");
    loop {
        let Accepted { stream, peer, .. } = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                errors.failed(&listener.local_addr(), &e).await;
                continue;
            }
        };
        let Stream::Unix(stream) = stream else {
            continue;
        };
        match peer {
            crate::model::Peer::Unix { uid, .. } if uid == me || uid == 0 => {
                if requests.send(stream).await.is_err() {
                    return;
                }
            }
            _ => tracing::warn!(peer = %peer, "upgrade request from another user refused"),
        }
    }
}

/// A running exchange with a successor.
pub(super) type Exchange = tokio::task::JoinHandle<io::Result<bool>>;

/// Starts handing `sockets` (the listeners', from `Live::sockets`) and every
/// handoff registration in `hub` to `successor`, as a task of its own beside
/// the serving loop, so a successor that stalls holds up no signal, reload or
/// watchdog ping. `None`, logged, when the sockets cannot be shared.
pub(super) fn start(
    successor: UnixStream,
    (sockets, flows): (io::Result<Vec<Socket>>, Arc<crate::udp::Handover>),
    shared: &Shared,
) -> Option<Exchange> {
    let sockets = sockets.and_then(|mut sockets| {
        sockets.extend(backend_sockets(&shared.hub)?);
        Ok(sockets)
    });
    // Frozen before it is read: a change acknowledged after this point
    // would be missing in the successor.
    shared.changes.freeze();
    let state = carried_frames(shared);
    match sockets {
        Ok(sockets) => {
            tracing::info!(
                sockets = sockets.len(),
                "upgrade: a successor connected; handing over"
            );
            Some(tokio::spawn(hand_over(successor, sockets, (state, flows))))
        }
        Err(e) => {
            tracing::warn!(error = %e, "upgrade failed: cannot share the sockets; still serving");
            shared.changes.thaw();
            None
        }
    }
}

/// Whether the exchange ended with the successor serving (then this daemon
/// stops, leaving the Unix socket files to it); anything else is logged.
pub(super) fn taken_over(done: Result<io::Result<bool>, tokio::task::JoinError>) -> bool {
    match done.map_err(io::Error::other).and_then(|served| served) {
        Ok(true) => {
            tracing::info!("upgrade: the new daemon serves; stopping this one");
            crate::net::listener::keep_socket_files();
            true
        }
        Ok(false) => {
            tracing::warn!("upgrade: the new daemon did not take over; still serving");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "upgrade failed; still serving");
            false
        }
    }
}

/// Each handoff backend's registration with its control connection. One too
/// long for a frame cannot travel: its control connection is closed, so the
/// backend registers again (its library reconnects) rather than being lost.
fn backend_sockets(hub: &Hub) -> io::Result<Vec<Socket>> {
    let mut sockets = Vec::new();
    for r in hub.registrations() {
        let names: Vec<&str> = r.names.iter().map(|n| n.as_str()).collect();
        let count = names.len();
        let frame = Frame::Backend(upgrade::Registration {
            uid: r.uid,
            gid: r.gid,
            pid: r.pid,
            names,
            acks: r.acks.is_some(),
        });
        match upgrade::encode(&frame) {
            Ok(bytes) => sockets.push((bytes, r.control.as_fd().try_clone_to_owned()?)),
            Err(e) => {
                tracing::warn!(pid = r.pid, names = count, error = %e, "upgrade: a registration that cannot travel; closing its control connection so the backend registers again");
                let _ = rustix::net::shutdown(&r.control, rustix::net::Shutdown::Both);
            }
        }
    }
    Ok(sockets)
}

/// How long each step of the old daemon's side may take: the request, each
/// frame, and the successor's READY (which waits for it to bind and start).
const REQUEST_WAIT: Duration = Duration::from_secs(5);
const FRAME_WAIT: Duration = Duration::from_secs(5);
const READY_WAIT: Duration = PATIENCE;

/// The old daemon's side: reads the request, hands `sockets` over, then the
/// run-time `state`, and waits for the successor's READY. `Ok(true)`: the
/// successor serves. Every step is bounded, and it runs as a task of its own
/// beside the serving loop.
pub(super) async fn hand_over(
    mut stream: UnixStream,
    sockets: Vec<Socket>,
    (state, flows): (Vec<[u8; FRAME]>, Arc<crate::udp::Handover>),
) -> io::Result<bool> {
    let mut request = [0u8; 8];
    step(
        REQUEST_WAIT,
        "the upgrade request",
        stream.read_exact(&mut request),
    )
    .await?;
    if &request != b"UPGRADE\n" {
        return Ok(false);
    }
    for (frame, fd) in &sockets {
        step(
            FRAME_WAIT,
            "a frame",
            send_frame(&stream, frame, Some(fd.as_fd())),
        )
        .await?;
    }
    for frame in &state {
        step(FRAME_WAIT, "a frame", send_frame(&stream, frame, None)).await?;
    }
    // Last, so that they stop here as late as can be: from now on, a
    // client's next datagram starts a new flow here until the successor
    // serves (if it never does, the clients' next datagrams start anew).
    let flows = flows.hand_over_all();
    let count = flows.len();
    for flow in flows {
        let Some(frame) = flow_frame(&flow) else {
            continue;
        };
        step(
            FRAME_WAIT,
            "a frame",
            send_frame(&stream, &frame, Some(flow.socket.as_fd())),
        )
        .await?;
    }
    if count > 0 {
        tracing::info!(flows = count, "upgrade: UDP flows handed over");
    }
    let end = encoded(&Frame::End(VERSION))?;
    step(FRAME_WAIT, "a frame", send_frame(&stream, &end, None)).await?;
    let mut lines = BufReader::new(stream).lines();
    let answer = step(READY_WAIT, "READY", lines.next_line()).await?;
    Ok(answer.as_deref() == Some("READY"))
}

/// `io` within `limit`, else a timeout naming `what` was awaited.
async fn step<T>(
    limit: Duration,
    what: &str,
    io: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match tokio::time::timeout(limit, io).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the successor sent or took nothing for {limit:?} (waiting for {what})"),
        )),
    }
}

/// One frame of exactly [`FRAME`] bytes, `fd` passed with its first bytes.
async fn send_frame(
    stream: &UnixStream,
    frame: &[u8; FRAME],
    fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
    let mut sent = stream
        .async_io(Interest::WRITABLE, || {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if !fds.is_empty() {
                control.push(SendAncillaryMessage::ScmRights(&fds));
            }
            let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
            sendmsg(stream, &[IoSlice::new(frame)], &mut control, flags).map_err(io::Error::from)
        })
        .await?;
    // The descriptor went with the first bytes; the rest of the frame follows.
    while sent < FRAME {
        sent += stream
            .async_io(Interest::WRITABLE, || {
                let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
                rustix::net::send(stream, &frame[sent..], flags).map_err(io::Error::from)
            })
            .await?;
    }
    Ok(())
}
