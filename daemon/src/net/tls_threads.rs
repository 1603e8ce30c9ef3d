//! The TLS threads: a runtime of its own, where a `tls` listener's sessions
//! run whole (accept, handshake, service) and where every other server
//! handshake (a detecting listener's) is sent to run, from the ClientHello to
//! the client's Finished. Neither a handshake's computation (the key exchange
//! and the certificate's signature, about 0.1 ms) nor its churn (2,000
//! half-done handshakes that the clients reset at once) then delays a client
//! of an event loop. A `tls` listener's handshakes cross no thread (a fifth
//! of their CPU went to the crossings when the loop accepted them); a sent
//! handshake's socket stays registered with its event loop, whose reactor
//! wakes the task, and only established sessions go back to the loop.
//!
//! The threads are few (all cores but one); work waiting for one waits in
//! its queue, never on an event loop. Handshakes are bounded by the
//! daemon's connection limits, not here: one waiting for its client holds
//! no thread, so a bound on handshakes in flight would only let slow clients
//! lock the fast ones out.
//!
//! One runtime per process, shared by every worker: that is why it is a
//! global, started on the first TLS listener or handshake (after the
//! privilege drop, which needs a single-threaded process).

use std::io;
use std::sync::OnceLock;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::runtime::Runtime;
use tokio_rustls::server::TlsStream;
use tokio_rustls::Accept;

static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();

thread_local! {
    /// Whether this thread is one of the TLS threads.
    static ON_TLS_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The cores this process may run on (its affinity mask, its cgroup quota).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The TLS threads: all cores but one, which the event loop keeps.
fn threads() -> usize {
    cores().saturating_sub(1).clamp(1, 8)
}

fn runtime() -> Option<&'static Runtime> {
    RUNTIME.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads())
            .thread_name("tcpmuxd-tls")
            .enable_all()
            .on_thread_start(|| {
                ON_TLS_THREAD.set(true);
                share_the_loops_core();
            })
            .build();
        match runtime {
            Ok(runtime) => Some(runtime),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the TLS threads; TLS sessions and handshakes run on the event loop");
                None
            }
        }
    })
    .as_ref()
}

/// The runtime a `tls` listener's accept loop and sessions run on (`None`:
/// the TLS threads could not start; then the event loop's).
pub(crate) fn tls_runtime() -> Option<tokio::runtime::Handle> {
    runtime().map(|runtime| runtime.handle().clone())
}

/// On a single core the TLS thread and the event loop share it: the
/// thread takes a lower priority (nice 10) so that the loop, whose clients
/// wait on it, goes first (an echo's p99 during a burst of handshakes: 1-3 ms
/// at nice 10, 4-5 ms at the loop's priority). With more cores the threads
/// have cores of their own and keeps the daemon's priority: at nice 10 any other
/// busy process on the machine would take the handshakes' CPU (17 % fewer
/// handshakes per second beside a load generator). A kernel that refuses
/// leaves it at the loop's priority.
fn share_the_loops_core() {
    if cores() == 1 {
        let me = rustix::thread::gettid();
        let _ = rustix::process::setpriority_process(Some(me), 10);
    }
}

/// Aborts the handshake when its session gives up on it (the negotiation
/// timeout, shutdown), so the TLS threads never work for a client that is gone.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs a server handshake whose ClientHello has arrived whole, to its end,
/// on the TLS threads (in place when called there): the waiting for the
/// client's Finished included, and a failure's cleanup (the reset read, the session's buffers freed, the socket
/// closed), which done on the loop cost it 13 µs per client, 25 ms in one
/// stretch when a burst's clients all gave up at once.
pub(crate) async fn run<IO>(accept: Accept<IO>) -> io::Result<TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(threads) = runtime().filter(|_| !ON_TLS_THREAD.get()) else {
        return accept.await;
    };
    let mut task = AbortOnDrop(threads.spawn(accept));
    match (&mut task.0).await {
        Ok(done) => done,
        Err(e) => Err(io::Error::other(format!(
            "the TLS handshake task failed: {e}"
        ))),
    }
}
