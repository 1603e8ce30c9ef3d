//! Log output that cannot stall the event loop: each formatted event is
//! appended to one bounded buffer, and one writer thread swaps the buffer out
//! and copies it to stderr, a batch per write. When stderr stops draining (a
//! paused pager, a stuck journald), lines beyond the bound are counted and
//! dropped, never waited for, and the count is logged once it drains.
//!
//! A line costs a copy under an uncontended lock: no allocation and no
//! message per line, and the writer is woken once per batch.
//!
//! The writer thread starts only after the privilege drop, which needs the
//! process to have one thread; lines logged before that wait in the buffer.

use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, Once, OnceLock, PoisonError};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// Bytes held while stderr is slow: some 13,000 connection lines.
const QUEUE_BYTES: usize = 2 * 1024 * 1024;

/// Lines waiting for the writer, and the flushes asked for and done.
#[derive(Default)]
struct Pending {
    lines: Vec<u8>,
    dropped: u64,
    flushes_asked: u64,
    flushes_done: u64,
}

#[derive(Default)]
struct Queue {
    pending: Mutex<Pending>,
    /// Lines arrived in an empty buffer, or a flush was asked for.
    wake_writer: Condvar,
    /// A flush was done.
    flushed: Condvar,
}

fn queue() -> &'static Queue {
    static QUEUE: OnceLock<Queue> = OnceLock::new();
    QUEUE.get_or_init(Queue::default)
}

/// The pending lines, even if a thread panicked holding them: they are
/// bytes, always whole lines, so still worth writing.
fn pending() -> MutexGuard<'static, Pending> {
    queue()
        .pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The `MakeWriter` for `tracing_subscriber::fmt().with_writer(...)`.
pub struct QueuedStderr;

impl<'a> MakeWriter<'a> for QueuedStderr {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> EventWriter {
        EventWriter(Vec::new())
    }
}

/// Collects one formatted event and queues it whole when dropped, so lines from
/// different events never interleave.
pub struct EventWriter(Vec<u8>);

impl Write for EventWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            queue_line(&self.0);
        }
    }
}

/// Queues one whole line (or several) for stderr; counted and dropped when
/// the buffer is full.
pub fn queue_line(line: &[u8]) {
    let mut pending = pending();
    if pending.lines.len() + line.len() > QUEUE_BYTES {
        pending.dropped += 1;
        return;
    }
    let first = pending.lines.is_empty();
    pending.lines.extend_from_slice(line);
    drop(pending);
    if first {
        queue().wake_writer.notify_one();
    }
}

/// Starts the writer thread (once; later calls do nothing). Call it when the
/// process may have a second thread, that is after any privilege drop.
pub fn start_writer() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("tcpmuxd-log".into())
            .spawn(write_out);
        if let Err(e) = spawned {
            // Nothing else can carry the message: the buffer has no reader.
            eprintln!("tcpmuxd: cannot start the log writer, logs are lost: {e}");
        }
    });
}

/// How long the writer lets lines gather before writing them out together: the
/// event loop then seldom has to wake it, and a busy daemon's log costs one
/// write per batch, not one per line. Lines reach stderr at most this late.
const GATHER: Duration = Duration::from_millis(5);

/// The writer's buffer is given back memory once it has held this much.
const BATCH_BYTES: usize = 64 * 1024;

fn write_out() {
    let queue = queue();
    let mut stderr = std::io::stderr();
    let mut batch = Vec::with_capacity(BATCH_BYTES);
    loop {
        let idle = |p: &mut Pending| {
            p.lines.is_empty() && p.dropped == 0 && p.flushes_asked == p.flushes_done
        };
        let mut state = queue
            .wake_writer
            .wait_while(pending(), idle)
            .unwrap_or_else(PoisonError::into_inner);
        if state.flushes_asked == state.flushes_done {
            // Lets the next lines gather.
            drop(state);
            std::thread::sleep(GATHER);
            state = pending();
        }
        std::mem::swap(&mut state.lines, &mut batch);
        let dropped = std::mem::take(&mut state.dropped);
        let flush = state.flushes_asked;
        drop(state);
        // The lines were dropped after those in the buffer: the count sits
        // where the gap is.
        if dropped > 0 {
            let note = format!("tcpmuxd: {dropped} log lines dropped: stderr was not keeping up\n");
            batch.extend_from_slice(note.as_bytes());
        }
        let _ = stderr.write_all(&batch);
        batch.clear();
        if batch.capacity() > BATCH_BYTES {
            batch = Vec::with_capacity(BATCH_BYTES);
        }
        let mut state = pending();
        if state.flushes_done != flush {
            let _ = stderr.flush();
            state.flushes_done = flush;
            queue.flushed.notify_all();
        }
    }
}

/// Waits, at most `limit`, until every line logged so far is on stderr: before
/// the process exits, and before anything else writes to stderr directly.
pub fn flush(limit: Duration) {
    start_writer();
    let queue = queue();
    let mut state = pending();
    state.flushes_asked += 1;
    let asked = state.flushes_asked;
    queue.wake_writer.notify_one();
    let waited = queue
        .flushed
        .wait_timeout_while(state, limit, |p| p.flushes_done < asked);
    drop(waited);
}
