//! ACME once per fleet: what the keepers need of a `cluster`, as a trait
//! the fleet's etcd task implements (so this module knows nothing of
//! etcd), and what that task does with what the fleet shares. One instance
//! at a time orders a certificate (a lock whose holder's death frees it);
//! the certificate and its key reach every instance sealed; every instance
//! answers the order's TLS-ALPN-01 challenges, so the CA's validation may
//! reach any of them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::keys::{AcmeCert, Keys};

pub(crate) type Fut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Held while this instance orders for the fleet; dropping it releases the
/// lock (so does this instance's death, when its lease runs out).
pub(crate) struct OrderLock(pub Option<Box<dyn FnOnce() + Send>>);

impl Drop for OrderLock {
    fn drop(&mut self) {
        if let Some(release) = self.0.take() {
            release();
        }
    }
}

/// What the fleet offers the keepers.
pub(crate) trait FleetAcme: Send + Sync {
    /// The chain and key the fleet holds for the pair `pair` (PEM).
    fn certificate<'a>(&'a self, pair: &'a str) -> Fut<'a, Result<Option<String>, String>>;
    /// Waits to be the only instance ordering `pair`.
    fn lock<'a>(&'a self, pair: &'a str) -> Fut<'a, Result<OrderLock, String>>;
    /// The ACME account the fleet uses with a directory (`name`: its
    /// credentials file's name), as its JSON credentials.
    fn account<'a>(&'a self, name: &'a str) -> Fut<'a, Result<Option<Vec<u8>>, String>>;
    /// Gives the fleet the account `name`, unless it has one.
    fn publish_account<'a>(&'a self, name: &'a str, json: &'a [u8]) -> Fut<'a, Result<(), String>>;
    /// Gives the fleet a new certificate for `pair`.
    fn publish<'a>(&'a self, pair: &'a str, pem: &'a str) -> Fut<'a, Result<(), String>>;
    /// Asks every instance to answer TLS-ALPN-01 for `name` with `digest`,
    /// and waits (boundedly) until they say they do.
    fn challenge<'a>(&'a self, name: &'a str, digest: &'a [u8]) -> Fut<'a, Result<(), String>>;
    /// The challenges of `names` are over.
    fn withdraw<'a>(&'a self, names: &'a [String]) -> Fut<'a, ()>;
}

/// How long an instance waits for another's order before it tries again.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(600);

/// Serves the fleet's certificate for `slot` if it is newer than the one in
/// hand (and stores it, this instance's copy for a restart without etcd);
/// whether it did.
pub(super) fn adopt(slot: &AcmeCert, pem: &str) -> bool {
    let settings = &slot.settings;
    let names = settings.names.join(",");
    let (certified, expiry) = match crate::config::acme::issued(settings, pem.as_bytes()) {
        Ok(issued) => issued,
        Err(e) => {
            tracing::warn!(
                names,
                "acme: the fleet's certificate is not usable here: {e}"
            );
            return false;
        }
    };
    if slot.expiry().is_some_and(|mine| mine >= expiry) {
        return false;
    }
    slot.install(Arc::new(certified), expiry);
    if let Err(e) = super::store::store_pair(settings, pem) {
        tracing::warn!(
            names,
            "acme: the fleet's certificate is served but cannot be stored: {e}"
        );
    }
    tracing::info!(
        names,
        expires = expiry,
        "acme: serving the fleet's certificate"
    );
    true
}

/// Gives the fleet the certificate this instance holds, when the fleet has
/// none or an older one: an instance that joins brings its certificates,
/// which is how a single instance moves into a fleet (just add `cluster`).
pub(super) async fn share_ours(fleet: &dyn FleetAcme, slot: &AcmeCert) {
    let settings = &slot.settings;
    let (Some(mine), pair) = (slot.expiry(), settings.pair_name()) else {
        return;
    };
    let Ok(theirs) = fleet.certificate(&pair).await else {
        return;
    };
    if let Some(pem) = &theirs {
        let theirs = crate::config::acme::issued(settings, pem.as_bytes()).map(|(_, x)| x);
        if theirs.is_ok_and(|theirs| theirs >= mine) {
            adopt(slot, pem);
            return;
        }
    }
    let stored = super::store::Storage::open(&settings.storage)
        .ok()
        .and_then(|storage| storage.read(&pair).ok().flatten());
    let Some(pem) = stored else {
        return;
    };
    match fleet.publish(&pair, &String::from_utf8_lossy(&pem)).await {
        Ok(()) => {
            tracing::info!(names = %settings.names.join(","), expires = mine, "acme: gave the fleet this instance's certificate")
        }
        Err(e) => {
            tracing::warn!(names = %settings.names.join(","), "acme: cannot give the fleet this instance's certificate: {e}")
        }
    }
}

/// The fleet's certificate for the pair `pair`, from etcd: every slot of
/// this daemon with that pair serves it if it is newer.
pub(crate) fn take(keys: &Keys, pair: &str, pem: &str) {
    for slot in keys.acme_slots() {
        if slot.settings.pair_name() == pair {
            adopt(&slot, pem);
        }
    }
}

/// Answers TLS-ALPN-01 for `name` with `digest` on every slot that has the
/// name; whether any does.
pub(crate) fn answer(keys: &Keys, name: &str, digest: &[u8]) -> bool {
    let mut answered = false;
    for slot in keys.acme_slots() {
        if slot
            .settings
            .names
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
        {
            match super::challenge::challenge_certificate(name, digest) {
                Ok(certified) => {
                    slot.set_challenge(name, Arc::new(certified));
                    answered = true;
                }
                Err(e) => tracing::warn!(name, "acme: cannot answer the fleet's challenge: {e}"),
            }
        }
    }
    answered
}

/// The challenge for `name` is over.
pub(crate) fn withdraw(keys: &Keys, name: &str) {
    for slot in keys.acme_slots() {
        slot.clear_challenge(name);
    }
}
