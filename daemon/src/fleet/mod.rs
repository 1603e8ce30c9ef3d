//! A fleet (`cluster`): this instance's membership and the run-time state
//! it shares with the others, kept in etcd by one task per daemon. The task
//! connects, registers, reads what the fleet set and watches for more; when
//! etcd fails it keeps what it had, answers changes that etcd is not there,
//! backs off and tries again. No connection ever waits on it.

mod acme;
mod cache;
mod deadline;
mod instance;
mod keys;
mod session;
mod tickets;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::acme::fleet::FleetAcme;
use crate::runtime::{FleetLink, Publish};
use crate::state::Shared;

pub(crate) use instance::Instance;

/// The first wait after a failure; it doubles up to `MAX_BACK_OFF`.
const FIRST_BACK_OFF: Duration = Duration::from_secs(1);
const MAX_BACK_OFF: Duration = Duration::from_secs(30);
/// After the first warning of an outage, at most one a minute.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Starts the fleet's task on this event loop, once per daemon: the first
/// event loop to call it sets `shared.fleet`; later calls do nothing. What
/// the ACME keepers share through it.
pub(crate) fn start(instance: Instance, shared: &Arc<Shared>) -> Option<Arc<dyn FleetAcme>> {
    let (link, publish) = FleetLink::new(instance.cluster.node.clone());
    if shared.fleet.set(Arc::clone(&link)).is_err() {
        return None;
    }
    let orders = Arc::new(acme::FleetOrders::new(&instance.cluster, Arc::clone(&link)));
    let task = run(
        instance,
        Arc::clone(shared),
        link,
        Arc::clone(&orders),
        publish,
    );
    tokio::spawn(task);
    Some(orders)
}

async fn run(
    instance: Instance,
    shared: Arc<Shared>,
    link: Arc<FleetLink>,
    orders: Arc<acme::FleetOrders>,
    mut publish: mpsc::Receiver<Publish>,
) {
    let mut back_off = FIRST_BACK_OFF;
    let mut outage: Option<Outage> = None;
    let mut tickets = tickets::TicketKeys::new(&instance.cluster);
    let mut cache = cache::Cache::new(&instance.cluster);
    restore(&instance, &shared, &mut cache, &mut tickets);
    loop {
        let mut cx = session::Context {
            instance: &instance,
            shared: &shared,
            link: &link,
            tickets: &mut tickets,
            orders: &orders,
            cache: &mut cache,
        };
        let ended = session::serve(&mut cx, &mut publish).await;
        let error = match ended {
            session::Ended::Closed => return,
            session::Ended::Served(error) => {
                // It was connected: a new outage, starting with a short wait.
                back_off = FIRST_BACK_OFF;
                outage = None;
                error
            }
            session::Ended::NotConnected(error) => error,
        };
        let outage = outage.get_or_insert_with(Outage::new);
        outage.warn(&error, &instance.cluster.etcd);
        link.set_etcd(format!(
            "unreachable for {}s: {error}",
            outage.since.elapsed().as_secs()
        ));
        // Changes asked for meanwhile are answered at once.
        let wait = jittered(back_off);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                asked = publish.recv() => match asked {
                    Some(asked) => {
                        let _ = asked.done.send(Err(format!("etcd is unreachable: {error}")));
                    }
                    None => return,
                },
                () = link.added() => session::put_added_in_force(&instance, &shared, &cache),
            }
        }
        back_off = (back_off * 2).min(MAX_BACK_OFF);
    }
}

/// Puts in force what the last run kept of the fleet's state, before etcd
/// is reached (it may not be): its changes and its ticket keys.
fn restore(
    instance: &Instance,
    shared: &Shared,
    cache: &mut cache::Cache,
    tickets: &mut tickets::TicketKeys,
) {
    let kept = cache.load();
    if kept.is_empty() {
        return;
    }
    for (key, value) in &kept {
        if tickets.is_ours(key.as_bytes()) {
            tickets.take(value, 0, &shared.keys);
        } else if let Some(keys::Entry::Change(change, node)) =
            keys::read(&instance.cluster.prefix, key.as_bytes(), value)
        {
            session::put_in_force(shared, &change, node, false);
        }
    }
    tracing::info!(
        kept = kept.len(),
        "fleet: the fleet's state kept by the last run is in force until etcd answers"
    );
}

/// An outage's warnings: the first at once, then one a minute.
struct Outage {
    since: Instant,
    warned: Option<Instant>,
}

impl Outage {
    fn new() -> Outage {
        Outage {
            since: Instant::now(),
            warned: None,
        }
    }

    fn warn(&mut self, error: &str, endpoints: &[String]) {
        if self.warned.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            return;
        }
        self.warned = Some(Instant::now());
        tracing::warn!(
            etcd = %endpoints.join(","),
            error,
            down_for = self.since.elapsed().as_secs(),
            "fleet: etcd unreachable; serving with the state last known, trying again"
        );
    }
}

/// `wait` give or take a quarter, so that a fleet restarted together does
/// not knock on etcd in step.
fn jittered(wait: Duration) -> Duration {
    wait - wait / 4 + crate::model::clock::jitter(wait / 2)
}
