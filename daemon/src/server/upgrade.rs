//! Binary upgrades with no refused connection: the running daemon hands every
//! listening socket to its successor over `upgrade_socket`, the successor
//! serves on them, says READY, and only then does the old one stop accepting
//! and drain its sessions. Both accept from the same sockets in between, so a
//! client connecting during the upgrade is served by one or the other.
//!
//! The exchange, over a Unix stream socket: the successor sends `UPGRADE\n`;
//! the running daemon answers with frames of exactly [`FRAME`] bytes, `KIND
//! VALUE\n` padded with spaces, each of `LISTEN addr`, `METRICS addr`,
//! `CONTROL path` and `UPGRADE path` carrying its socket (SCM_RIGHTS), then an
//! `END` frame; the successor answers `READY\n` once it serves.

use std::io::{self, IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Interest};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::hub::Adopted;
use crate::model::ListenAddr;
use crate::net::listener::{Accepted, Listener};
use crate::net::stream::Stream;

/// Size of every frame, so frames never merge or split ambiguously.
const FRAME: usize = 512;
/// The longest value a frame holds after its kind.
pub(super) const MAX_VALUE: usize = FRAME - 16;
/// How long a successor may take to ask, and to say it serves.
const PATIENCE: Duration = Duration::from_secs(30);

/// Why a takeover failed (the successor exits with it).
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("no running tcpmuxd at {path}: {source} (is upgrade_socket set in its configuration, and is it running?)")]
    Connect { path: PathBuf, source: io::Error },
    #[error("the upgrade exchange with the running tcpmuxd failed: {0}")]
    Exchange(#[from] io::Error),
    #[error("the running tcpmuxd sent a malformed upgrade frame")]
    Protocol,
}

/// The sockets a running daemon handed over: TCPMUX listeners by the address
/// they are bound to (a configuration naming that address takes them), the
/// others by their configured address or path.
#[derive(Default)]
pub struct Handed {
    pub(super) tcpmux: Vec<(ListenAddr, OwnedFd)>,
    pub(super) metrics: Option<(SocketAddr, OwnedFd)>,
    pub(super) control: Option<(PathBuf, OwnedFd)>,
    pub(super) upgrade: Option<(PathBuf, OwnedFd)>,
    /// Handoff backends' registrations, with their control connections.
    pub(super) backends: Vec<Adopted>,
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
        let (frame, fd) = receive_frame(&stream)?;
        let text = std::str::from_utf8(&frame).map_err(|_| UpgradeError::Protocol)?;
        let (kind, value) = text
            .trim_end()
            .split_once(' ')
            .unwrap_or((text.trim_end(), ""));
        match (kind, fd) {
            ("END", _) => return Ok((stream, handed)),
            ("LISTEN", Some(fd)) => {
                let addr = value.parse().map_err(|_| UpgradeError::Protocol)?;
                handed.tcpmux.push((addr, fd));
            }
            ("METRICS", Some(fd)) => {
                let addr = value.parse().map_err(|_| UpgradeError::Protocol)?;
                handed.metrics = Some((addr, fd));
            }
            ("CONTROL", Some(fd)) => handed.control = Some((value.into(), fd)),
            ("UPGRADE", Some(fd)) => handed.upgrade = Some((value.into(), fd)),
            ("BACKEND", Some(fd)) => handed.backends.push(backend(value, fd)?),
            _ => return Err(UpgradeError::Protocol),
        }
    }
}

/// A `BACKEND uid gid pid name,name…` frame's registration.
fn backend(value: &str, control: OwnedFd) -> Result<Adopted, UpgradeError> {
    let mut fields = value.split(' ');
    let mut number = || {
        fields
            .next()
            .and_then(|f| f.parse::<i64>().ok())
            .ok_or(UpgradeError::Protocol)
    };
    let (uid, gid, pid) = (number()?, number()?, number()?);
    let names = fields.next().ok_or(UpgradeError::Protocol)?;
    Ok(Adopted {
        names: names.split(',').map(str::to_owned).collect(),
        uid: u32::try_from(uid).map_err(|_| UpgradeError::Protocol)?,
        gid: u32::try_from(gid).map_err(|_| UpgradeError::Protocol)?,
        pid: i32::try_from(pid).map_err(|_| UpgradeError::Protocol)?,
        control,
    })
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
    loop {
        let Ok(Accepted { stream, peer, .. }) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
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

/// One socket for a successor: its frame kind, its value, and a descriptor.
pub(super) type Socket = (&'static str, String, OwnedFd);

/// How long each step of the old daemon's side may take: the request, each
/// frame, and the successor's READY (which waits for it to bind and start).
const REQUEST_WAIT: Duration = Duration::from_secs(5);
const FRAME_WAIT: Duration = Duration::from_secs(5);
const READY_WAIT: Duration = PATIENCE;

/// The old daemon's side: reads the request, hands `sockets` over, and waits
/// for the successor's READY. `Ok(true)`: the successor serves. Every step is
/// bounded, and it runs as a task of its own beside the serving loop.
pub(super) async fn hand_over(mut stream: UnixStream, sockets: Vec<Socket>) -> io::Result<bool> {
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
    for (kind, value, fd) in &sockets {
        let frame = format!("{kind} {value}");
        step(
            FRAME_WAIT,
            "a frame",
            send_frame(&stream, &frame, Some(fd.as_fd())),
        )
        .await?;
    }
    step(FRAME_WAIT, "a frame", send_frame(&stream, "END", None)).await?;
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
async fn send_frame(stream: &UnixStream, text: &str, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    if text.len() >= FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "upgrade frame too long",
        ));
    }
    let mut frame = [b' '; FRAME];
    frame[..text.len()].copy_from_slice(text.as_bytes());
    frame[FRAME - 1] = b'\n';
    let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
    let mut sent = stream
        .async_io(Interest::WRITABLE, || {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if !fds.is_empty() {
                control.push(SendAncillaryMessage::ScmRights(&fds));
            }
            let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
            sendmsg(stream, &[IoSlice::new(&frame)], &mut control, flags).map_err(io::Error::from)
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
