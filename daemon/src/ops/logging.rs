//! Log output that cannot stall the event loop: each formatted event goes into a
//! bounded queue, and one writer thread copies the queue to stderr, a batch per
//! write. When stderr stops draining (a paused pager, a stuck journald), lines
//! beyond the queue are counted and dropped, never waited for, and the count is
//! logged once it drains.
//!
//! The writer thread starts only after the privilege drop, which needs the
//! process to have one thread; lines logged before that wait in the queue.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// Lines held while stderr is slow: a few MiB at most.
const QUEUE_LINES: usize = 16 * 1024;

enum Entry {
    Line(Vec<u8>),
    /// Answered once every line queued before it has been written.
    Flush(mpsc::Sender<()>),
}

struct Queue {
    sender: SyncSender<Entry>,
    receiver: Mutex<Option<Receiver<Entry>>>,
    dropped: AtomicU64,
}

fn queue() -> &'static Queue {
    static QUEUE: OnceLock<Queue> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (sender, receiver) = mpsc::sync_channel(QUEUE_LINES);
        Queue {
            sender,
            receiver: Mutex::new(Some(receiver)),
            dropped: AtomicU64::new(0),
        }
    })
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
            queue_line(std::mem::take(&mut self.0));
        }
    }
}

/// Queues one whole line (or several) for stderr; counted and dropped when
/// the queue is full.
pub fn queue_line(line: Vec<u8>) {
    let queue = queue();
    if let Err(TrySendError::Full(_)) = queue.sender.try_send(Entry::Line(line)) {
        queue.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts the writer thread (once; later calls do nothing). Call it when the
/// process may have a second thread, that is after any privilege drop.
pub fn start_writer() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let receiver = queue().receiver.lock().ok().and_then(|mut r| r.take());
        let Some(receiver) = receiver else { return };
        let spawned = std::thread::Builder::new()
            .name("tcpmuxd-log".into())
            .spawn(move || write_out(receiver));
        if let Err(e) = spawned {
            // Nothing else can carry the message: the queue has no reader.
            eprintln!("tcpmuxd: cannot start the log writer, logs are lost: {e}");
        }
    });
}

/// How long the writer lets lines gather before writing them out together: the
/// event loop then seldom has to wake it, and a busy daemon's log costs one
/// write per batch, not one per line. Lines reach stderr at most this late.
const GATHER: Duration = Duration::from_millis(5);

/// A batch is written out once it holds this much.
const BATCH_BYTES: usize = 64 * 1024;

fn write_out(receiver: Receiver<Entry>) {
    let mut stderr = std::io::stderr();
    let mut batch = Vec::with_capacity(BATCH_BYTES);
    // Blocks only when the queue is empty; then lets the next lines gather.
    while let Ok(first) = receiver.recv() {
        std::thread::sleep(GATHER);
        let mut next = Some(first);
        while let Some(entry) = next.take() {
            match entry {
                Entry::Line(line) => {
                    // Said before the next line, so the count sits where the gap is.
                    note_drops(&mut batch);
                    batch.extend_from_slice(&line);
                    if batch.len() >= BATCH_BYTES {
                        write_batch(&mut stderr, &mut batch);
                    }
                }
                Entry::Flush(done) => {
                    note_drops(&mut batch);
                    write_batch(&mut stderr, &mut batch);
                    let _ = stderr.flush();
                    let _ = done.send(());
                }
            }
            next = receiver.try_recv().ok();
        }
        write_batch(&mut stderr, &mut batch);
    }
}

fn note_drops(batch: &mut Vec<u8>) {
    let dropped = queue().dropped.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        let note = format!("tcpmuxd: {dropped} log lines dropped: stderr was not keeping up\n");
        batch.extend_from_slice(note.as_bytes());
    }
}

fn write_batch(stderr: &mut std::io::Stderr, batch: &mut Vec<u8>) {
    if !batch.is_empty() {
        let _ = stderr.write_all(batch);
        batch.clear();
    }
}

/// Waits, at most `limit`, until every line logged so far is on stderr: before
/// the process exits, and before anything else writes to stderr directly.
pub fn flush(limit: Duration) {
    start_writer();
    let deadline = Instant::now() + limit;
    let (done, flushed) = mpsc::channel();
    let mut entry = Entry::Flush(done);
    loop {
        match queue().sender.try_send(entry) {
            Ok(()) => break,
            Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                entry = back;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return,
        }
    }
    let _ = flushed.recv_timeout(deadline.saturating_duration_since(Instant::now()));
}
