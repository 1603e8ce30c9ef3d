//! A listener's `tls = { acme = { ... } }`: the settings checked, the
//! certificate stored for them read, and the rustls configuration that
//! answers TLS-ALPN-01. The slot serving the certificate is the daemon's
//! (`keys`), one per set of settings.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use rustls::pki_types::pem::PemObject;

use super::pem::{certified, TlsError};
use super::raw::RawAcme;
use crate::keys::{AcmeCert, Keys};
use crate::model::{
    certificate_expiry, certificate_names, AcmeSettings, HostPattern, ACME_TLS_ALPN,
};

/// Where certificates and the account key are kept unless `storage` says.
pub const DEFAULT_STORAGE: &str = "/var/lib/tcpmuxd/acme";
/// How long before its end a certificate is renewed unless `renew_before` says.
pub const DEFAULT_RENEW_BEFORE: Duration = Duration::from_secs(30 * 86400);
/// How long one request to the CA may take unless `request_timeout` says.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The settings of `raw` (relative paths from `base`), and the slot `keys`
/// holds for them.
pub(crate) fn load(base: &Path, raw: &RawAcme, keys: &Keys) -> Result<Arc<AcmeCert>, TlsError> {
    let settings = settings(base, raw)?;
    Ok(keys.acme_slot(settings, |settings| stored(settings).ok()))
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
    let request_timeout = raw.request_timeout.map_or(DEFAULT_REQUEST_TIMEOUT, |d| d.0);
    if request_timeout.is_zero() {
        return fault("request_timeout must be greater than zero".into());
    }
    let storage = base.join(raw.storage.as_deref().unwrap_or(DEFAULT_STORAGE));
    if let Some(why) = unsafe_storage(&storage) {
        return fault(why);
    }
    Ok(AcmeSettings {
        directory: raw.directory.clone(),
        email,
        names,
        storage,
        renew_before,
        directory_ca: raw.directory_ca.as_deref().map(|p| base.join(p)),
        request_timeout,
    })
}

/// The certificate stored for `settings` and its notAfter, if it is usable
/// and carries every name; else why not (the keeper then orders one). Read
/// from the pair file, else from the two files older releases wrote.
pub fn stored(settings: &AcmeSettings) -> Result<(CertifiedKey, i64), TlsError> {
    let pair = settings.storage.join(settings.pair_name());
    let (cert, key) = match pair.exists() {
        true => (pair.clone(), pair),
        false => {
            let (cert, key) = settings.legacy_names();
            (settings.storage.join(cert), settings.storage.join(key))
        }
    };
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let certified = certified(&cert, &key, &provider)?;
    checked(settings, certified, &cert.display().to_string())
}

/// An issued certificate chain and its key (`pem`, both in one), as served.
pub fn issued(settings: &AcmeSettings, pem: &[u8]) -> Result<(CertifiedKey, i64), TlsError> {
    let what = "the issued certificate";
    let bad = |e: String| TlsError::Acme(format!("{what}: {e}"));
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    let key =
        rustls::pki_types::PrivateKeyDer::from_pem_slice(pem).map_err(|e| bad(e.to_string()))?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let certified =
        CertifiedKey::from_der(chain, key, &provider).map_err(|e| bad(e.to_string()))?;
    checked(settings, certified, what)
}

/// `certified` with its notAfter, if its leaf carries every name.
fn checked(
    settings: &AcmeSettings,
    certified: CertifiedKey,
    what: &str,
) -> Result<(CertifiedKey, i64), TlsError> {
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
        return Err(TlsError::Acme(format!("{what}: does not carry {missing}")));
    }
    let expiry =
        certificate_expiry(leaf).ok_or_else(|| TlsError::Acme(format!("{what}: no notAfter")))?;
    Ok((certified, expiry))
}

/// Why a storage directory may not hold keys, if it may not (see
/// [`storage_fault`]). Only looks: a missing directory is fine (it is made
/// 0700), and at load, before the daemon drops to its `user`, the owner is
/// not yet known.
pub fn unsafe_storage(dir: &Path) -> Option<String> {
    storage_fault(dir, &rustix::fs::stat(dir).ok()?, None)
}

/// Why the directory at `dir` whose metadata is `stat` may not hold keys:
/// writable by group or others, or (with `owners`, the daemon's uids) owned
/// by another user than those or root.
pub fn storage_fault(
    dir: &Path,
    stat: &rustix::fs::Stat,
    owners: Option<&[u32]>,
) -> Option<String> {
    let mode = stat.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "storage {} may be written by {} (mode {mode:04o}): another user could plant the files a key is written to; make it the daemon's alone (chmod 700)",
            dir.display(),
            if mode & 0o002 != 0 { "every user" } else { "its group" },
        ));
    }
    if owners.is_some_and(|owners| stat.st_uid != 0 && !owners.contains(&stat.st_uid)) {
        return Some(format!(
            "storage {} belongs to uid {}, not to the daemon's user: chown it to the user tcpmuxd runs as",
            dir.display(),
            stat.st_uid
        ));
    }
    None
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
