//! A listener's `tls = { acme = { ... } }`: the settings checked, and the
//! slot that serves their certificate. There is one slot per set of
//! settings in the process, so every worker and every reload shares one
//! order flow; a new slot starts with the certificate an earlier run stored,
//! so a restart orders nothing.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use super::pem::{certified, TlsError};
use super::raw::RawAcme;
use crate::model::{
    certificate_expiry, certificate_names, AcmeCert, AcmeSettings, HostPattern, ACME_TLS_ALPN,
};

/// Where certificates and the account key are kept unless `storage` says.
pub const DEFAULT_STORAGE: &str = "/var/lib/tcpmuxd/acme";
/// How long before its end a certificate is renewed unless `renew_before` says.
pub const DEFAULT_RENEW_BEFORE: Duration = Duration::from_secs(30 * 86400);

/// The settings of `raw` (relative paths from `base`), and their slot.
pub(crate) fn load(base: &Path, raw: &RawAcme) -> Result<Arc<AcmeCert>, TlsError> {
    let settings = settings(base, raw)?;
    static SLOTS: OnceLock<Mutex<HashMap<AcmeSettings, Arc<AcmeCert>>>> = OnceLock::new();
    let mut slots = SLOTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(slot) = slots.get(&settings) {
        return Ok(Arc::clone(slot));
    }
    let slot = Arc::new(AcmeCert::new(settings.clone()));
    if let Ok((certified, expiry)) = stored(&settings) {
        slot.install(Arc::new(certified), expiry);
    }
    slots.insert(settings, Arc::clone(&slot));
    Ok(slot)
}

fn settings(base: &Path, raw: &RawAcme) -> Result<AcmeSettings, TlsError> {
    let fault = |why: String| Err(TlsError::Acme(why));
    if !raw.directory.starts_with("https://") {
        return fault(format!(
            "directory {:?} must be an https:// URL, such as https://acme-staging-v02.api.letsencrypt.org/directory",
            raw.directory
        ));
    }
    if raw.names.is_empty() {
        return fault("names needs at least one DNS name, e.g. [\"example.com\"]".into());
    }
    let mut names = Vec::new();
    for name in &raw.names {
        match name.parse::<HostPattern>() {
            Ok(HostPattern::Exact(host)) if !names.contains(&host) => names.push(host),
            Ok(HostPattern::Exact(_)) => return fault(format!("names lists {name} twice")),
            Ok(HostPattern::Wildcard(_)) => {
                return fault(format!(
                    "{name}: a wildcard name needs the DNS-01 challenge; tcpmuxd answers TLS-ALPN-01, which validates one name at a time"
                ))
            }
            Err(e) => return fault(format!("names: {e}")),
        }
    }
    let email = match raw.email.as_deref() {
        Some(email) if !email.contains('@') || email.contains(char::is_whitespace) => {
            return fault(format!("email {email:?} is not an e-mail address"))
        }
        email => email.map(str::to_owned),
    };
    let renew_before = raw.renew_before.map_or(DEFAULT_RENEW_BEFORE, |d| d.0);
    if renew_before.is_zero() {
        return fault("renew_before must be greater than zero".into());
    }
    Ok(AcmeSettings {
        directory: raw.directory.clone(),
        email,
        names,
        storage: base.join(raw.storage.as_deref().unwrap_or(DEFAULT_STORAGE)),
        renew_before,
        directory_ca: raw.directory_ca.as_deref().map(|p| base.join(p)),
    })
}

/// The certificate stored for `settings` and its notAfter, if it is usable
/// and carries every name; else why not (the keeper then orders one).
pub fn stored(settings: &AcmeSettings) -> Result<(CertifiedKey, i64), TlsError> {
    let (cert, key) = (settings.cert_path(), settings.key_path());
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let certified = certified(&cert, &key, &provider)?;
    let leaf = certified
        .cert
        .first()
        .map(|c| c.as_ref())
        .unwrap_or_default();
    let (carried, _) = certificate_names(leaf);
    let missing = settings
        .names
        .iter()
        .find(|name| !carried.iter().any(|c| c.eq_ignore_ascii_case(name)));
    if let Some(missing) = missing {
        return Err(TlsError::Acme(format!(
            "{}: does not carry {missing}",
            cert.display()
        )));
    }
    let expiry = certificate_expiry(leaf)
        .ok_or_else(|| TlsError::Acme(format!("{}: no notAfter", cert.display())))?;
    Ok((certified, expiry))
}

/// The rustls configuration that answers ACME's TLS-ALPN-01 validation on
/// the listener itself: ALPN `acme-tls/1` only, the challenge certificate
/// for the name being validated, nothing else.
pub(crate) fn challenge_config(slot: &Arc<AcmeCert>) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Rustls)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Challenges(Arc::clone(slot))));
    config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// Serves the pending challenge certificate for the name asked, if any.
#[derive(Debug)]
struct Challenges(Arc<AcmeCert>);

impl ResolvesServerCert for Challenges {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.challenge(hello.server_name()?)
    }
}
