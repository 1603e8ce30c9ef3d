//! The live slot of one set of ACME settings: the certificate served now and
//! the TLS-ALPN-01 (RFC 8737) answers pending. Filled by `acme/`, read by
//! rustls through the resolvers config/ builds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use rustls::sign::CertifiedKey;

use crate::model::AcmeSettings;

/// The certificate kept for one set of settings: shared by every listener
/// and worker that names them, and across reloads, so that the daemon has
/// one order flow for them.
#[derive(Debug)]
pub struct AcmeCert {
    pub settings: AcmeSettings,
    current: RwLock<Option<Arc<CertifiedKey>>>,
    /// The current certificate's notAfter (Unix seconds), 0 without one.
    expiry: AtomicI64,
    /// TLS-ALPN-01 certificates by the name being validated.
    challenges: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    /// Orders that failed so far, for `tcpmuxd_acme_order_failures_total`.
    order_failures: std::sync::atomic::AtomicU64,
}

impl AcmeCert {
    pub fn new(settings: AcmeSettings) -> Self {
        AcmeCert {
            settings,
            current: RwLock::default(),
            expiry: AtomicI64::new(0),
            challenges: RwLock::default(),
            order_failures: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// One more order failed.
    pub fn order_failed(&self) {
        self.order_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// How many orders have failed.
    pub fn order_failures(&self) -> u64 {
        self.order_failures.load(Ordering::Relaxed)
    }

    /// The certificate served now, if one has been obtained.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// When the current certificate expires (Unix seconds).
    pub fn expiry(&self) -> Option<i64> {
        Some(self.expiry.load(Ordering::Acquire)).filter(|&e| e != 0)
    }

    /// Serves `certified`, which expires at `expiry`, from now on.
    pub fn install(&self, certified: Arc<CertifiedKey>, expiry: i64) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(certified);
        self.expiry.store(expiry, Ordering::Release);
    }

    /// The TLS-ALPN-01 answer for `name`, while one is pending.
    pub fn challenge(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let challenges = self.challenges.read().unwrap_or_else(|p| p.into_inner());
        challenges.get(&name.to_ascii_lowercase()).cloned()
    }

    /// Answers TLS-ALPN-01 for `name` with `certified` until cleared.
    pub fn set_challenge(&self, name: &str, certified: Arc<CertifiedKey>) {
        let mut challenges = self.challenges.write().unwrap_or_else(|p| p.into_inner());
        challenges.insert(name.to_ascii_lowercase(), certified);
    }

    /// Stops answering TLS-ALPN-01 for `name`.
    pub fn clear_challenge(&self, name: &str) {
        let mut challenges = self.challenges.write().unwrap_or_else(|p| p.into_inner());
        challenges.remove(&name.to_ascii_lowercase());
    }

    pub fn clear_challenges(&self) {
        self.challenges
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}
