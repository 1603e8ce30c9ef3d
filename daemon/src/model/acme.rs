//! ACME (RFC 8555) for a TLS listener (`tls = { acme = { ... } }`): the
//! settings, where their files live, and the one live slot per set of
//! settings that holds the certificate served now and the TLS-ALPN-01
//! (RFC 8737) answers pending. The slot is filled by `acme/`, read by rustls.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::sign::CertifiedKey;

/// The ALPN protocol of TLS-ALPN-01 validation (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// A listener's `acme` table.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AcmeSettings {
    /// The directory URL (Let's Encrypt's, its staging one, a test server's).
    pub directory: String,
    /// The account's contact, `mailto:` added.
    pub email: Option<String>,
    /// The DNS names the certificate carries, lower case; the first names
    /// its files.
    pub names: Vec<String>,
    /// Where the account key and the certificates are kept (0600 files).
    pub storage: PathBuf,
    /// How long before its notAfter a certificate is renewed.
    pub renew_before: Duration,
    /// A CA to trust for the directory's HTTPS (a test server's), instead
    /// of the system's store.
    pub directory_ca: Option<PathBuf>,
    /// How long one request to the CA may take (`request_timeout`).
    pub request_timeout: Duration,
}

impl AcmeSettings {
    /// The file holding the certificate chain and its private key together,
    /// so that they are replaced as one.
    pub fn pair_name(&self) -> String {
        format!("{}.pem", self.file_stem())
    }

    /// The chain's and the key's files as releases before 0.2 kept them,
    /// read when there is no pair file.
    pub fn legacy_names(&self) -> (String, String) {
        let stem = self.file_stem();
        (format!("{stem}.crt.pem"), format!("{stem}.key.pem"))
    }

    /// The account's credentials, one account per directory.
    pub fn account_name(&self) -> String {
        let directory: String = self
            .directory
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!("account-{directory}.json")
    }

    fn file_stem(&self) -> String {
        let first = self.names.first().map_or("certificate", String::as_str);
        first.replace('*', "_wildcard_")
    }
}

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
}

impl AcmeCert {
    pub fn new(settings: AcmeSettings) -> Self {
        AcmeCert {
            settings,
            current: RwLock::default(),
            expiry: AtomicI64::new(0),
            challenges: RwLock::default(),
        }
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

    pub fn clear_challenges(&self) {
        self.challenges
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}
