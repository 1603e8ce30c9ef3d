//! The relay between a client and a proxy's backend: both directions at once, each
//! direction's EOF carried across as a half-close, an optional idle timeout, and on
//! Linux zero-copy transfer with splice(2) through a pipe.
//!
//! Both engines run on tokio's readiness (`Stream::async_io`), so a
//! relay costs no thread and no task beyond the session's own.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use rustix::pipe::{splice, SpliceFlags};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest};

use super::buffers;
use super::sendfile::zero_copy_unsupported;
use super::stream::Stream;
use crate::model::RelayMode;

/// Bytes moved each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Relayed {
    pub client_to_backend: u64,
    pub backend_to_client: u64,
    /// The backend's direction ended (EOF or a read error) before it sent a
    /// byte, while the client's was still open.
    pub backend_quit: bool,
    /// The client's direction reached its EOF.
    pub client_finished: bool,
    /// The backend's direction failed (its TLS ended without close_notify,
    /// or it reset): a cut, to be passed on as one.
    pub backend_cut: bool,
}

impl Relayed {
    /// Whether the backend accepted and then failed the client: it closed or
    /// reset before its first byte while the client was still there
    /// (HAProxy's `observe layer4` counts that a failure too). A reset often
    /// surfaces first as an error writing to the backend, so a relay that
    /// failed with nothing from the backend asks `backend_ended`.
    pub(crate) fn backend_failed(
        &self,
        failed: bool,
        backend_ended: impl FnOnce() -> bool,
    ) -> bool {
        let silent = self.backend_to_client == 0 && !self.client_finished;
        self.backend_quit || (silent && failed && backend_ended())
    }
}

/// Bytes moved each way, counted as they move, so that someone else (the
/// live-session table) can read a running relay's progress.
#[derive(Debug, Default)]
pub struct Traffic {
    /// From the client to the backend.
    pub up: AtomicU64,
    /// From the backend to the client.
    pub down: AtomicU64,
}

impl Traffic {
    /// Both directions' bytes so far.
    pub fn moved(&self) -> u64 {
        self.up.load(Ordering::Relaxed) + self.down.load(Ordering::Relaxed)
    }
}

/// Pipe size asked for, and most bytes one splice moves. The kernel allocates pipe
/// pages only as data flows, so an idle relay does not hold this much; on a
/// 2-core loopback, 1 MiB moved 1.6x what 64 KiB did (docs/benchmarks.md).
const PIPE_SIZE: usize = 1024 * 1024;
/// The copy engine's buffer per direction, lent while bytes are in flight
/// (`buffers`); smaller than the pipe, as it is user memory.
const COPY_BUFFER: usize = 256 * 1024;

/// Relays until both directions have seen EOF, an error, or `idle` passes with no
/// byte moving either way. Each direction's EOF becomes a `shutdown(SHUT_WR)` of
/// the other socket, so half-closing protocols work end to end. The byte counts
/// are returned whatever the result, for the log, and counted into `traffic`
/// as they move.
pub(crate) async fn relay(
    client: &Stream,
    backend: &Stream,
    mode: RelayMode,
    idle: Option<Duration>,
    traffic: &Traffic,
) -> (Relayed, io::Result<()>) {
    let activity = Activity::new(traffic);
    let both = async {
        // Built inside the blocks, so that each direction's future is stored
        // once (an async fn taking it as an argument would hold two slots).
        tokio::try_join!(
            async {
                let result = one_way(client, backend, mode, &activity, activity.up).await;
                activity.client_ended(&result);
                result
            },
            async {
                let result = one_way(backend, client, mode, &activity, activity.down).await;
                activity.backend_ended();
                result
            }
        )
        .map(|_| ())
    };
    activity.finish(both, idle).await
}

/// The same relay for streams that are not plain sockets (a TLS session, whose
/// bytes must pass through the daemon to be encrypted): `a` and `b` copied both
/// ways through a 64 KiB buffer each, lent only while bytes are in flight
/// (four TLS records written in one call: 2-4 % more throughput than one),
/// EOF carried across as a shutdown (for TLS, close_notify then FIN).
pub(crate) async fn relay_streams<A, B>(
    a: &mut A,
    b: &mut B,
    idle: Option<Duration>,
    traffic: &Traffic,
) -> (Relayed, io::Result<()>)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let activity = Activity::new(traffic);
    let (a_read, a_write) = tokio::io::split(a);
    let (b_read, b_write) = tokio::io::split(b);
    let both = async {
        tokio::try_join!(
            async {
                let result = pass_on(a_read, b_write, |n| {
                    activity.up.fetch_add(n as u64, Ordering::Relaxed);
                    activity.touch();
                })
                .await;
                activity.client_ended(&result);
                result
            },
            async {
                let result = pass_on(b_read, a_write, |n| {
                    activity.down.fetch_add(n as u64, Ordering::Relaxed);
                    activity.touch();
                })
                .await;
                activity.backend_ended();
                // An end without close_notify (rustls's UnexpectedEof), a
                // reset: not a clean end. (A failed write means the client
                // is gone, to whom nothing more can be said anyway.)
                activity
                    .backend_cut
                    .store(result.is_err(), Ordering::Relaxed);
                result
            }
        )
        .map(|_| ())
    };
    activity.finish(both, idle).await
}

/// What [`pass_on`] reads at a time.
const STREAM_COPY: usize = 64 * 1024;

/// Copies `from` to `to` until EOF, then ends `to`'s side (FIN, or
/// close_notify over TLS); `moved` hears of each chunk passed on. The buffer
/// is lent only while bytes are in flight, so a relay that waits holds none.
pub(crate) async fn pass_on(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut moved: impl FnMut(usize),
) -> io::Result<()> {
    loop {
        let (buf, n) = buffers::read_lent(&mut from, STREAM_COPY).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&buf[..n]).await?;
        // A TLS session may hold records back when the socket is full; they
        // must leave before this waits for more input.
        to.flush().await?;
        moved(n);
    }
}

async fn one_way(
    from: &Stream,
    to: &Stream,
    mode: RelayMode,
    activity: &Activity<'_>,
    moved: &AtomicU64,
) -> io::Result<()> {
    match mode {
        RelayMode::Splice => {
            if copy_until_bulk(from, to, activity, moved).await? {
                match Pipe::new() {
                    Ok(pipe) => splice_one_way(from, to, &pipe, activity, moved).await?,
                    Err(e) => {
                        tracing::debug!(error = %e, "no pipe for splice; copying instead");
                        copy_one_way(from, to, activity, moved).await?
                    }
                }
            }
        }
        RelayMode::Copy => copy_one_way(from, to, activity, moved).await?,
    }
    // EOF from `from`: pass it on, while the other direction may still run.
    // The second direction to end skips it: `to` sent its EOF already and
    // all it sent was read, so the close that follows the relay sends the
    // FIN (a shutdown would be one more system call for the same segment).
    if activity.ended.fetch_add(1, Ordering::AcqRel) > 0 {
        return Ok(());
    }
    match to.shutdown_write() {
        Err(e) if e.kind() != io::ErrorKind::NotConnected => Err(e),
        _ => Ok(()),
    }
}

/// What a splice relay moves through a small user-space buffer before it sets
/// up its pipe: short exchanges (a banner, a request, a small answer) never pay
/// for a pipe and its descriptors; a read that fills it marks a bulk direction,
/// which then switches to splice.
const FIRST_COPY: usize = 16 * 1024;

/// Copies until EOF (returns `false`) or until one read fills the buffer
/// (returns `true`: the direction is bulk, splice the rest).
async fn copy_until_bulk(
    from: &Stream,
    to: &Stream,
    activity: &Activity<'_>,
    moved: &AtomicU64,
) -> io::Result<bool> {
    loop {
        match copy_once(from, to, FIRST_COPY, activity, moved).await? {
            0 => return Ok(false),
            FIRST_COPY => return Ok(true),
            _ => {}
        }
    }
}

struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        // A failure leaves the default 64 KiB, which still works.
        let _ = rustix::pipe::fcntl_setpipe_size(&write, PIPE_SIZE);
        Ok(Pipe { read, write })
    }
}

/// socket → pipe, then pipe → socket until the pipe is empty, and again. The pipe is
/// always emptied before it is refilled, so an EAGAIN from the socket → pipe splice
/// can only mean the socket has nothing, never that the pipe is full; that keeps
/// tokio's readiness bookkeeping true.
async fn splice_one_way(
    from: &Stream,
    to: &Stream,
    pipe: &Pipe,
    activity: &Activity<'_>,
    moved: &AtomicU64,
) -> io::Result<()> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    let mut first = true;
    loop {
        let attempt = from
            .async_io(Interest::READABLE, || {
                splice(from.as_fd(), None, &pipe.write, None, PIPE_SIZE, flags)
                    .map_err(io::Error::from)
            })
            .await;
        let filled = match attempt {
            Ok(n) => n,
            // This kernel or socket type cannot splice: move the bytes by copying.
            Err(e) if first && zero_copy_unsupported(&e) => {
                tracing::debug!(error = %e, "splice not supported here; copying instead");
                return copy_one_way(from, to, activity, moved).await;
            }
            Err(e) => return Err(e),
        };
        if filled == 0 {
            return Ok(());
        }
        first = false;
        activity.touch();
        let mut in_pipe = filled;
        while in_pipe > 0 {
            let n = to
                .async_io(Interest::WRITABLE, || {
                    splice(&pipe.read, None, to.as_fd(), None, in_pipe, flags)
                        .map_err(io::Error::from)
                })
                .await?;
            in_pipe -= n;
            moved.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

/// read → send through a user-space buffer.
async fn copy_one_way(
    from: &Stream,
    to: &Stream,
    activity: &Activity<'_>,
    moved: &AtomicU64,
) -> io::Result<()> {
    while copy_once(from, to, COPY_BUFFER, activity, moved).await? != 0 {}
    Ok(())
}

/// One read from `from` and all of it sent to `to`; returns the bytes moved
/// (0: EOF). The buffer (`len` bytes) is lent only once `from` has input, so
/// an idle relay holds none. Bytes read with `from`'s FIN already behind
/// them go on with ours behind them, in one segment: a backend's short
/// answer and its close reach the client as one packet.
async fn copy_once(
    from: &Stream,
    to: &Stream,
    len: usize,
    activity: &Activity<'_>,
    moved: &AtomicU64,
) -> io::Result<usize> {
    let (buf, n, ending) = from.read_lent_to_fin(len).await?;
    if n > 0 {
        activity.touch();
    }
    let mut sent = 0;
    while sent < n {
        let m = to.send(&buf[sent..n], ending).await?;
        sent += m;
        moved.fetch_add(m as u64, Ordering::Relaxed);
    }
    Ok(n)
}

/// When a byte last moved and how many moved each way, shared by the two
/// directions of one relay (atomics only because the session future must be Send).
struct Activity<'a> {
    start: Instant,
    last_ms: AtomicU64,
    /// The caller's counters, and what they held when this relay began.
    up: &'a AtomicU64,
    down: &'a AtomicU64,
    before: (u64, u64),
    /// The client's direction reached EOF.
    client_done: AtomicBool,
    /// Directions that reached EOF (`one_way`).
    ended: AtomicU8,
    backend_quit: AtomicBool,
    backend_cut: AtomicBool,
}

impl<'a> Activity<'a> {
    fn new(traffic: &'a Traffic) -> Self {
        Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            up: &traffic.up,
            down: &traffic.down,
            before: (
                traffic.up.load(Ordering::Relaxed),
                traffic.down.load(Ordering::Relaxed),
            ),
            client_done: AtomicBool::new(false),
            ended: AtomicU8::new(0),
            backend_quit: AtomicBool::new(false),
            backend_cut: AtomicBool::new(false),
        }
    }

    /// The client-to-backend direction ended: at the client's EOF, the
    /// client has finished.
    fn client_ended(&self, result: &io::Result<()>) {
        if result.is_ok() {
            self.client_done.store(true, Ordering::Relaxed);
        }
    }

    /// The backend-to-client direction ended (EOF or an error): before its
    /// first byte, with the client still open, the backend quit.
    fn backend_ended(&self) {
        let silent = self.down.load(Ordering::Relaxed) == self.before.1;
        if silent && !self.client_done.load(Ordering::Relaxed) {
            self.backend_quit.store(true, Ordering::Relaxed);
        }
    }

    fn touch(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Runs both directions (`both`) to their end, or until nothing has moved
    /// for `idle`; the bytes moved each way, and how it ended.
    async fn finish(
        &self,
        both: impl std::future::Future<Output = io::Result<()>>,
        idle: Option<Duration>,
    ) -> (Relayed, io::Result<()>) {
        let result = match idle {
            None => both.await,
            Some(limit) => tokio::select! {
                result = both => result,
                () = self.idle_for(limit) => {
                    Err(io::Error::new(io::ErrorKind::TimedOut, format!("idle timeout ({limit:?})")))
                }
            },
        };
        let relayed = Relayed {
            client_to_backend: self.up.load(Ordering::Relaxed) - self.before.0,
            backend_to_client: self.down.load(Ordering::Relaxed) - self.before.1,
            backend_quit: self.backend_quit.load(Ordering::Relaxed),
            client_finished: self.client_done.load(Ordering::Relaxed),
            backend_cut: self.backend_cut.load(Ordering::Relaxed),
        };
        (relayed, result)
    }

    /// Resolves once nothing has moved for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let quiet = last.elapsed();
            if quiet >= limit {
                return;
            }
            tokio::time::sleep(limit - quiet).await;
        }
    }
}

#[cfg(test)]
mod tests;
