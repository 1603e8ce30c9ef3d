//! Certificates that renew themselves (`tls = { acme = { ... } }`): one
//! keeper task per ACME slot, on the daemon's first event loop, orders a
//! certificate when none is stored (`order.rs`, every request with a
//! deadline), renews it `renew_before` its end, retries a failure with
//! backoff, stores it with its key as one file (`store.rs`) or serves it
//! from memory until it can, and, on a clock of its own, warns once a day
//! in the certificate's last week while it is not renewed. Whatever
//! happens, the certificate in hand stays served.

mod challenge;
pub(crate) mod fleet;
mod order;
pub(crate) mod store;

use fleet::FleetAcme;
use instant_acme::Account;
use order::AcmeError;
use store::Storage;

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::keys::AcmeCert;
use crate::model::clock::{jitter, unix_seconds};

const DAY: i64 = 86_400;

/// The keepers of the slots the configuration in force names. A slot that
/// stays across a reload keeps its keeper (an order under way goes on).
#[derive(Default)]
pub(crate) struct Keepers {
    kept: Vec<(Arc<AcmeCert>, JoinHandle<()>)>,
    /// The fleet the orders are shared with (`cluster`), if any.
    fleet: Option<Arc<dyn FleetAcme>>,
}

impl Keepers {
    /// Keepers that order once for the fleet.
    pub(crate) fn in_fleet(fleet: Option<Arc<dyn FleetAcme>>) -> Keepers {
        Keepers {
            kept: Vec::new(),
            fleet,
        }
    }

    /// Keeps exactly `slots`: stops the keepers of slots no longer named,
    /// starts one for each new slot.
    pub(crate) fn follow(&mut self, slots: &[Arc<AcmeCert>]) {
        self.kept.retain(|(slot, task)| {
            let named = slots.iter().any(|s| Arc::ptr_eq(s, slot));
            if !named {
                task.abort();
            }
            named
        });
        for slot in slots {
            if !self.kept.iter().any(|(kept, _)| Arc::ptr_eq(kept, slot)) {
                let task = tokio::spawn(keep(Arc::clone(slot), self.fleet.clone()));
                self.kept.push((Arc::clone(slot), task));
            }
        }
    }
}

impl Drop for Keepers {
    fn drop(&mut self) {
        for (_, task) in &self.kept {
            task.abort();
        }
    }
}

/// Keeps `slot`'s certificate obtained and renewed, for ever. The account
/// and a certificate not yet stored (a full disk) are kept in memory across
/// attempts, so a retry neither registers a new account nor orders again.
async fn keep(slot: Arc<AcmeCert>, fleet: Option<Arc<dyn FleetAcme>>) {
    let settings = &slot.settings;
    let names = settings.names.join(",");
    // On its own clock: a hung CA or an order that never ends cannot
    // silence it.
    let _watch = Aborting(tokio::spawn(watch_expiry(Arc::clone(&slot))));
    starting(&slot, fleet.as_deref()).await;
    let mut account = None;
    // An issued certificate, served, until it is stored.
    let mut unsaved: Option<String> = None;
    let (mut failures, mut store_failures) = (0u32, 0u32);
    loop {
        if let Some(pem) = &unsaved {
            if let Err(e) = store::store_pair(settings, pem) {
                store_failures += 1;
                let delay = retry_delay(store_failures);
                tracing::error!(
                    names,
                    retry_in_s = delay.as_secs(),
                    "acme: the certificate is served from memory but cannot be stored: {e}"
                );
                tokio::time::sleep(delay).await;
                continue;
            }
            if store_failures > 0 {
                tracing::info!(
                    names,
                    "acme: the certificate served from memory is stored now"
                );
            }
            (unsaved, store_failures) = (None, 0);
            let due = slot
                .expiry()
                .map(|x| renewal_wait(x, settings.renew_before, unix_seconds()));
            if due.is_some_and(|wait| wait.is_zero()) {
                tracing::warn!(names, "acme: renew_before is longer than the certificate's lifetime: renewing again in a day, not at once");
                tokio::time::sleep(Duration::from_secs(DAY as u64)).await;
            }
        }
        if let Some(expiry) = slot.expiry() {
            let wait = renewal_wait(expiry, settings.renew_before, unix_seconds());
            if !wait.is_zero() {
                tracing::info!(
                    names,
                    expires = expiry,
                    renew_in_s = wait.as_secs(),
                    "acme: certificate in hand"
                );
                // Spread renewals of many daemons (and names) apart.
                let spread = (wait / 100).min(Duration::from_secs(3600));
                tokio::time::sleep(wait + jitter(spread)).await;
            }
        }
        // In a fleet, one instance orders; the others take its certificate.
        let lock = match fleet.as_deref() {
            Some(fleet) => match claim(fleet, &slot).await {
                Some(lock) => Some(lock),
                None => continue,
            },
            None => None,
        };
        tracing::info!(names, directory = %settings.directory, "acme: ordering a certificate");
        match order(&slot, &mut account, fleet.as_deref()).await {
            Ok((pem, expiry)) => {
                failures = 0;
                tracing::info!(
                    names,
                    expires = expiry,
                    "acme: certificate obtained and served"
                );
                if let Some(fleet) = fleet.as_deref() {
                    if let Err(e) = fleet.publish(&settings.pair_name(), &pem).await {
                        tracing::warn!(names, "acme: the certificate could not be given to the fleet (the others order when theirs is due): {e}");
                    }
                }
                unsaved = Some(pem);
            }
            Err(e) => {
                failures += 1;
                slot.order_failed();
                let delay = retry_delay(failures);
                tracing::warn!(
                    names,
                    attempt = failures,
                    retry_in_s = delay.as_secs(),
                    "acme: could not obtain a certificate: {e}"
                );
                drop(lock);
                tokio::time::sleep(delay + jitter(delay / 10)).await;
            }
        }
    }
}

/// Says what a keeper starts with; in a fleet, gives the fleet its
/// certificate if the fleet has none or an older one.
async fn starting(slot: &AcmeCert, fleet: Option<&dyn FleetAcme>) {
    if slot.expiry().is_none() {
        let why = match crate::config::acme::stored(&slot.settings) {
            Err(e) => e.to_string(),
            Ok(_) => "none".into(),
        };
        let names = slot.settings.names.join(",");
        tracing::info!(names, "acme: no usable certificate stored ({why})");
    }
    if let Some(fleet) = fleet {
        fleet::share_ours(fleet, slot).await;
    }
}

/// In a fleet, before an order: the fleet's certificate if it holds a
/// newer one (then no order), else the fleet's lock, and then the fleet's
/// certificate again (another instance may have renewed while this one
/// waited). `None`: no order now. Without etcd, no lock and no order.
async fn claim(fleet: &dyn FleetAcme, slot: &AcmeCert) -> Option<fleet::OrderLock> {
    let settings = &slot.settings;
    let (names, pair) = (settings.names.join(","), settings.pair_name());
    let due = || {
        slot.expiry().map_or(true, |x| {
            renewal_wait(x, settings.renew_before, unix_seconds()).is_zero()
        })
    };
    let adopt_fleets = || async {
        match fleet.certificate(&pair).await {
            Ok(Some(pem)) => {
                fleet::adopt(slot, &pem);
                true
            }
            Ok(None) => true,
            Err(e) => {
                tracing::warn!(names, "acme: cannot read the fleet's certificate: {e}");
                false
            }
        }
    };
    let wait_and_retry = || tokio::time::sleep(retry_delay(1));
    if !adopt_fleets().await {
        wait_and_retry().await;
        return None;
    }
    if !due() {
        return None;
    }
    let lock = match tokio::time::timeout(fleet::LOCK_WAIT, fleet.lock(&pair)).await {
        Ok(Ok(lock)) => lock,
        Ok(Err(e)) => {
            tracing::warn!(names, "acme: no order without the fleet's lock: {e}");
            wait_and_retry().await;
            return None;
        }
        Err(_) => return None,
    };
    let order = adopt_fleets().await && due();
    if order {
        tracing::info!(names, "acme: this instance orders for the fleet");
    }
    order.then_some(lock)
}

/// One order with the kept account (registered or loaded first if there is
/// none), its certificate served at once: the chain and key, and its end.
async fn order(
    slot: &AcmeCert,
    account: &mut Option<Account>,
    fleet: Option<&dyn FleetAcme>,
) -> Result<(String, i64), AcmeError> {
    let settings = &slot.settings;
    let kept = match account {
        Some(kept) => kept.clone(),
        None => {
            let storage = Storage::open(&settings.storage)?;
            account
                .insert(order::account(settings, &storage, fleet).await?)
                .clone()
        }
    };
    let issued = order::obtain(slot, &kept, fleet).await?;
    let (certified, expiry) = crate::config::acme::issued(settings, issued.pem.as_bytes())
        .map_err(|e| AcmeError::Order(e.to_string()))?;
    slot.install(Arc::new(certified), expiry);
    Ok((issued.pem, expiry))
}

/// Once an hour, whatever the orders are doing: a certificate past its
/// renewal and in its last week is an error in the log, once a day.
async fn watch_expiry(slot: Arc<AcmeCert>) {
    let names = slot.settings.names.join(",");
    let mut warned = None;
    loop {
        let now = unix_seconds();
        if let Some(expiry) = slot.expiry() {
            let overdue = renewal_wait(expiry, slot.settings.renew_before, now).is_zero();
            if overdue && expiry_warning_due(expiry, now, warned) {
                warned = Some(now);
                let state = if expiry <= now {
                    "has expired"
                } else {
                    "expires within a week"
                };
                tracing::error!(
                    names,
                    expires = expiry,
                    "acme: the certificate {state} and has not been renewed (the acme lines before say why)"
                );
            }
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

/// A task that ends with its owner.
struct Aborting(JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long until a certificate that ends at `expiry` is due for renewal
/// (zero: now).
fn renewal_wait(expiry: i64, renew_before: Duration, now: i64) -> Duration {
    let due = expiry.saturating_sub(i64::try_from(renew_before.as_secs()).unwrap_or(i64::MAX));
    Duration::from_secs(u64::try_from(due.saturating_sub(now)).unwrap_or(0))
}

/// The wait after the `failures`th failure in a row: soon at first (a
/// directory that was restarting), then backing off to six hours, under the
/// CAs' limits on failed validations (Let's Encrypt: 5 an hour per name).
fn retry_delay(failures: u32) -> Duration {
    const MINUTES: [u64; 11] = [0, 1, 2, 5, 10, 20, 30, 60, 120, 240, 360];
    let step = usize::try_from(failures.saturating_sub(1)).unwrap_or(usize::MAX);
    let minutes = MINUTES[step.min(MINUTES.len() - 1)];
    Duration::from_secs(if minutes == 0 { 10 } else { minutes * 60 })
}

/// Whether a certificate ending at `expiry` that cannot be renewed gets its
/// warning now: in its last week, once a day (`warned`: the last one).
fn expiry_warning_due(expiry: i64, now: i64, warned: Option<i64>) -> bool {
    expiry - now <= 7 * DAY && warned.map_or(true, |at| now - at >= DAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_is_due_renew_before_the_end() {
        let month = Duration::from_secs(30 * DAY as u64);
        let expiry = 100 * DAY;
        assert_eq!(
            renewal_wait(expiry, month, 0),
            Duration::from_secs(70 * DAY as u64)
        );
        assert_eq!(renewal_wait(expiry, month, 70 * DAY), Duration::ZERO);
        assert_eq!(renewal_wait(expiry, month, 99 * DAY), Duration::ZERO);
        // Longer than the lifetime: due at once.
        assert_eq!(renewal_wait(expiry, month * 10, 0), Duration::ZERO);
    }

    #[test]
    fn retries_back_off_to_six_hours() {
        let delays: Vec<u64> = (1..=13).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays[..3], [10, 60, 120]);
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
        assert_eq!(delays[12], 6 * 3600);
    }

    #[test]
    fn expiry_warnings_come_once_a_day_in_the_last_week() {
        let expiry = 30 * DAY;
        assert!(!expiry_warning_due(expiry, 20 * DAY, None));
        assert!(expiry_warning_due(expiry, 23 * DAY, None));
        assert!(!expiry_warning_due(expiry, 23 * DAY + 3600, Some(23 * DAY)));
        assert!(expiry_warning_due(expiry, 24 * DAY, Some(23 * DAY)));
    }
}
