//! Where the admin socket meets the fleet's etcd task: a change to share
//! (sent to the task, answered once etcd took it) and the fleet as the task
//! last saw it. The admin socket never talks to etcd itself.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use super::change::Change;

/// The daemon's link, set once by the first event loop that starts the
/// fleet's task; empty without `cluster`.
pub(crate) type FleetSlot = Arc<OnceLock<Arc<FleetLink>>>;

/// How long an operator's change waits for etcd to take it.
const PUBLISH_WAIT: Duration = Duration::from_secs(5);
/// Changes waiting for the task; an operator sends one at a time.
const QUEUE: usize = 64;

/// etcd took the change, or why not.
pub(crate) type Published = Result<(), String>;

/// A change for the fleet, and where to say whether etcd took it.
pub(crate) struct Publish {
    pub change: Change,
    pub done: std::sync::mpsc::SyncSender<Published>,
}

/// One instance of the fleet, as its membership key last said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub node: String,
    pub address: String,
    pub version: String,
    /// Unix time it started and last reported, in seconds.
    pub started: i64,
    pub updated: i64,
    pub sessions: u64,
}

pub(crate) struct FleetLink {
    /// This instance's `node`.
    pub node: String,
    publish: mpsc::Sender<Publish>,
    view: Mutex<View>,
    /// Raised when a reload or DNS gave this instance services or members:
    /// the fleet's state for them is to be put in force.
    added: Notify,
}

#[derive(Default)]
struct View {
    etcd: String,
    members: Vec<Member>,
}

impl FleetLink {
    /// A link for `node`, and the receiving end the etcd task reads.
    pub(crate) fn new(node: String) -> (Arc<FleetLink>, mpsc::Receiver<Publish>) {
        let (publish, receive) = mpsc::channel(QUEUE);
        let view = View {
            etcd: "not connected yet".into(),
            members: Vec::new(),
        };
        let link = FleetLink {
            node,
            publish,
            view: Mutex::new(view),
            added: Notify::new(),
        };
        (Arc::new(link), receive)
    }

    /// Shares `change` with the fleet, waiting at most `PUBLISH_WAIT` for
    /// etcd to take it. Blocks: for the admin socket's worker threads.
    pub(crate) fn publish(&self, change: Change) -> Published {
        let (done, answer) = std::sync::mpsc::sync_channel(1);
        self.publish
            .try_send(Publish { change, done })
            .map_err(|_| "the fleet's etcd task is not taking changes".to_owned())?;
        answer.recv_timeout(PUBLISH_WAIT).unwrap_or_else(|_| {
            Err(format!(
                "etcd did not take the change within {}s",
                PUBLISH_WAIT.as_secs()
            ))
        })
    }

    /// Says that a reload or DNS gave this instance services or members
    /// it may not have had; the fleet's task puts the fleet's state for
    /// them in force. Several before the task looks count as one.
    pub(crate) fn targets_added(&self) {
        self.added.notify_one();
    }

    /// Until [`FleetLink::targets_added`] was said.
    pub(crate) async fn added(&self) {
        self.added.notified().await;
    }

    /// How this instance stands with etcd, in a sentence.
    pub(crate) fn set_etcd(&self, status: String) {
        lock(&self.view).etcd = status;
    }

    /// The instances with a live membership now.
    pub(crate) fn set_members(&self, members: Vec<Member>) {
        lock(&self.view).members = members;
    }

    /// The etcd sentence and the members, sorted by node.
    pub(crate) fn view(&self) -> (String, Vec<Member>) {
        let view = lock(&self.view);
        let mut members = view.members.clone();
        members.sort_by(|a, b| a.node.cmp(&b.node));
        (view.etcd.clone(), members)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
