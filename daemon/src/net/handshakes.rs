//! The TLS handshake pool: a handshake's computation (the key exchange and
//! the certificate's signature, about 0.4 ms each) runs on a few threads of
//! its own instead of the event loops, so a flood of handshakes delays no
//! other client. The sockets stay registered with their event loop, which
//! does the waiting: the pool gets a handshake once its ClientHello is
//! whole, answers it in one poll, and hands it back.
//!
//! The pool's threads are few (all cores but one); handshakes waiting for one
//! wait in its queue, never on an event loop. Their number is bounded by the
//! daemon's connection limits, not here: a handshake waiting for its client
//! holds no thread, so a bound on handshakes in flight would only let slow
//! clients lock the fast ones out.
//!
//! One pool per process, shared by every worker: that is why it is a global,
//! started on the first handshake (after the privilege drop, which needs a
//! single-threaded process).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::runtime::Runtime;
use tokio_rustls::server::TlsStream;
use tokio_rustls::Accept;

static POOL: OnceLock<Option<Runtime>> = OnceLock::new();

/// Threads for handshakes: all cores but one, which the event loop keeps.
fn threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_sub(1).clamp(1, 8)
}

fn pool() -> Option<&'static Runtime> {
    POOL.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads())
            .thread_name("tcpmuxd-tls")
            .on_thread_start(yield_to_event_loops)
            .build();
        match runtime {
            Ok(runtime) => Some(runtime),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the TLS handshake threads; handshakes run on the event loop");
                None
            }
        }
    })
    .as_ref()
}

/// A lower priority (nice 10) for a handshake thread: when it and an event
/// loop both want a core, the loop, whose clients wait on it, goes first. A
/// failure (a kernel that refuses) leaves it at the loop's priority.
fn yield_to_event_loops() {
    let me = rustix::thread::gettid();
    let _ = rustix::process::setpriority_process(Some(me), 10);
}

/// Aborts the handshake when its session gives up on it (the negotiation
/// timeout, shutdown), so the pool never works for a client that is gone.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs a server handshake whose ClientHello has arrived whole: its first
/// step (reading the ClientHello, the key exchange and the signature, the
/// server's flight written) on the pool, in one poll that does not wait for
/// the client; the rest (the client's Finished, cheap to check) here, on the
/// event loop that owns the socket. One trip to the pool and back per
/// handshake, and the pool's threads never wait on a client.
pub async fn answer_hello<IO>(mut accept: Accept<IO>) -> io::Result<TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(pool) = pool() else {
        return accept.await;
    };
    let first = async move {
        let step = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut accept).poll(cx))).await;
        (accept, step)
    };
    let mut task = AbortOnDrop(pool.spawn(first));
    match (&mut task.0).await {
        Ok((_, Poll::Ready(done))) => done,
        Ok((rest, Poll::Pending)) => rest.await,
        Err(e) => Err(io::Error::other(format!(
            "the TLS handshake task failed: {e}"
        ))),
    }
}
