//! The running sessions: the accept loop that starts one per client, and the
//! tracker that lets shutdown wait for them and end those still running once
//! the grace period is over.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::instrument::WithSubscriber;

use crate::admission::Admission;
use crate::model::ListenOptions;
use crate::net::accept_errors::AcceptErrors;
use crate::net::lingering::{sweep_period, Lingering};
use crate::net::listener::{Arrival, Listener};
use crate::session::{self, AtAccept};
use crate::state::Shared;

/// A listener's options, which a reload may change for new connections: the
/// accept loop reads them for each one.
pub(super) type SharedOptions = Arc<RwLock<Arc<ListenOptions>>>;

/// The running sessions: tracked so that shutdown can wait for them without
/// polling, and cancellable once the grace period is over.
#[derive(Clone, Default)]
pub(super) struct Sessions {
    tracker: TaskTracker,
    cancel: CancellationToken,
}

impl Sessions {
    pub(super) fn spawn(&self, session: impl Future<Output = ()> + Send + 'static) {
        self.tracker.spawn(Cancellable {
            session,
            cancelled: self.cancel.clone().cancelled_owned(),
        });
    }

    /// Waits up to `grace` for every session to end, then ends the rest.
    pub(super) async fn finish(&self, grace: std::time::Duration) {
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                sessions = self.tracker.len(),
                "grace period over; closing the remaining sessions"
            );
            self.cancel.cancel();
            self.tracker.wait().await;
        }
    }
}

/// Connections accepted before the loop lets the other tasks (and the I/O
/// events due) run: a burst of connections waits in the kernel's queue, not
/// in front of every client already served.
const ACCEPT_BATCH: u32 = 16;

/// Accepts clients and answers each at once if its answer is one line
/// (`session::at_accept`), else starts a session for it, on the runtime this
/// runs on; the clients it answered wait here for their FIN. `moved`: the
/// listener was bound on another runtime, whose reactor would otherwise
/// wake this one for every batch of clients; it is registered with this
/// runtime's first (and, failing that, served as it is).
pub(super) async fn accept_loop(
    mut listener: Listener,
    options: SharedOptions,
    shared: Arc<Shared>,
    sessions: Sessions,
    moved: bool,
) {
    if moved {
        if let Err(e) = listener.move_to_current_runtime() {
            tracing::warn!(address = %listener.local_addr(), error = %e, "cannot register the listener with the TLS threads' runtime; served as it is");
        }
    }
    let mut lingering = match Lingering::new() {
        Ok(lingering) => Some(lingering),
        Err(e) => {
            tracing::warn!(address = %listener.local_addr(), error = %e, "cannot make the set of answered sockets; every client gets a session");
            None
        }
    };
    let drain = || shared.settings().close_drain_timeout;
    let mut sweep = Box::pin(tokio::time::sleep(sweep_period(drain())));
    let mut errors = AcceptErrors::new("clients");
    let mut batch = 0u32;
    loop {
        let waiting = lingering.as_ref().is_some_and(|c| !c.is_empty());
        // Unbiased: neither a burst of clients nor of FINs holds the other up.
        let arrival = tokio::select! {
            () = std::future::poll_fn(|cx| ready(&lingering, cx)), if waiting => {
                lingering.as_mut().map(Lingering::drain_ready);
                None
            }
            () = &mut sweep, if waiting => {
                let (now, drain) = (Instant::now(), drain());
                if let Some(lingering) = lingering.as_mut() {
                    lingering.sweep(now, drain);
                }
                sweep.as_mut().reset((now + sweep_period(drain)).into());
                None
            }
            arrival = listener.arrival() => Some(arrival),
        };
        match arrival {
            None => {}
            Some(Err(e)) => {
                errors.failed(&listener.local_addr(), &e).await;
                continue;
            }
            Some(Ok(arrival)) => {
                // The options in force now: a reload may have changed them.
                let options = Arc::clone(&options.read().unwrap_or_else(|p| p.into_inner()));
                match start(arrival, &options, &shared, lingering.as_mut()) {
                    Ok(AtAccept::Answered) => {}
                    Ok(AtAccept::Session(accepted)) => {
                        let session = session::handle(Arc::clone(&shared), accepted, options);
                        spawn(&sessions, session, moved);
                    }
                    Ok(AtAccept::Unfinished(rest)) => spawn(&sessions, rest, moved),
                    Err(e) => {
                        errors.failed(&listener.local_addr(), &e).await;
                        continue;
                    }
                }
            }
        }
        // Only once the connection is its session's or answered: this loop
        // is aborted at an await when accepting stops (an upgrade's
        // hand-over, shutdown), and a connection held here would be dropped
        // with its request unread, which the kernel answers with RST.
        batch += 1;
        if batch == ACCEPT_BATCH {
            batch = 0;
            tokio::task::yield_now().await;
        }
    }
}

/// Starts a session on this loop's runtime, with the log this loop was
/// given when it was `moved` to another runtime.
fn spawn(sessions: &Sessions, session: impl Future<Output = ()> + Send + 'static, moved: bool) {
    match moved {
        true => sessions.spawn(session.with_current_subscriber()),
        false => sessions.spawn(session),
    }
}

fn ready(lingering: &Option<Lingering<Option<Admission>>>, cx: &mut Context<'_>) -> Poll<()> {
    lingering
        .as_ref()
        .map_or(Poll::Pending, |c| c.poll_ready(cx))
}

/// A new client answered now, or made a session.
fn start(
    arrival: Arrival,
    options: &ListenOptions,
    shared: &Arc<Shared>,
    closer: Option<&mut Lingering<Option<Admission>>>,
) -> std::io::Result<AtAccept> {
    match (arrival, closer) {
        (Arrival::Tcp(incoming), Some(closer)) => {
            session::answer_at_accept(shared, incoming, options, closer)
        }
        (Arrival::Tcp(incoming), None) => incoming.into_session(Vec::new()).map(AtAccept::Session),
        (Arrival::Registered(accepted), _) => Ok(AtAccept::Session(accepted)),
    }
}

pin_project_lite::pin_project! {
    /// A session that ends when shutdown's grace runs out. A struct, not an
    /// `async` block around `select!`: the block held the session future
    /// twice (captured, and pinned inside), so it was boxed, one more
    /// allocation per session; here it is held once, in its task.
    struct Cancellable<F> {
        #[pin]
        session: F,
        #[pin]
        cancelled: tokio_util::sync::WaitForCancellationFutureOwned,
    }
}

impl<F: Future<Output = ()>> Future for Cancellable<F> {
    type Output = ();

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if this.session.poll(cx).is_ready() {
            return Poll::Ready(());
        }
        this.cancelled.poll(cx)
    }
}
