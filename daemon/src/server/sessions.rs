//! The running sessions: the accept loop that starts one per client, and the
//! tracker that lets shutdown wait for them and end those still running once
//! the grace period is over.

use std::future::Future;
use std::sync::{Arc, RwLock};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::instrument::WithSubscriber;

use crate::model::ListenOptions;
use crate::net::accept_errors::AcceptErrors;
use crate::net::listener::Listener;
use crate::session;
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
        let cancel = self.cancel.clone();
        // Boxed: this block would otherwise hold the session future twice, as
        // the value it captured and inside `select!`, for the session's life.
        let session = Box::pin(session);
        self.tracker.spawn(async move {
            tokio::select! {
                () = session => {}
                () = cancel.cancelled() => {}
            }
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

/// Accepts clients and starts a session for each, on the runtime this runs
/// on. `moved`: the listener was bound on another runtime, whose reactor
/// would otherwise wake this one for every batch of clients; it is
/// registered with this runtime's first (and, failing that, served as it is).
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
    let mut errors = AcceptErrors::new("clients");
    let mut batch = 0u32;
    loop {
        match listener.accept().await {
            Ok(accepted) => {
                // The options in force now: a reload may have changed them.
                let options = Arc::clone(&options.read().unwrap_or_else(|p| p.into_inner()));
                let session = session::handle(Arc::clone(&shared), accepted, options);
                match moved {
                    // The log this loop was given goes on to its sessions.
                    true => sessions.spawn(session.with_current_subscriber()),
                    false => sessions.spawn(session),
                }
                // Only once the connection is its session's: this loop is
                // aborted at an await when accepting stops (an upgrade's
                // hand-over, shutdown), and a connection held here would be
                // dropped with its request unread, which the kernel answers
                // with RST.
                batch += 1;
                if batch == ACCEPT_BATCH {
                    batch = 0;
                    tokio::task::yield_now().await;
                }
            }
            Err(e) => errors.failed(&listener.local_addr(), &e).await,
        }
    }
}
