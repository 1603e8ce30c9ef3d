//! One ACME order for a slot's names, start to end: the account (loaded
//! from storage, or created and stored), the order, a TLS-ALPN-01 answer per
//! name put in the slot for the listener to serve (RFC 8737), the wait for
//! the CA's validation, the CSR, then the certificate stored and installed.

use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, Order, OrderStatus, RetryPolicy,
};
use rcgen::{CertificateParams, CustomExtension, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use super::store::{self, StoreError};
use crate::model::{AcmeCert, AcmeSettings};

/// Why an order did not end with a certificate.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("{0}")]
    Protocol(#[from] instant_acme::Error),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("account credentials {path}: {source}")]
    Credentials {
        path: String,
        source: serde_json::Error,
    },
    #[error("{0}")]
    Order(String),
}

/// How long the CA may take to validate, and to issue, before the order is
/// given up (and retried later).
const PATIENCE: Duration = Duration::from_secs(120);

/// Orders a certificate for `slot`'s names, stores it and serves it from
/// now on; returns its notAfter (Unix seconds).
pub async fn obtain(slot: &AcmeCert) -> Result<i64, AcmeError> {
    let settings = &slot.settings;
    let account = account(settings).await?;
    let identifiers: Vec<Identifier> = settings
        .names
        .iter()
        .map(|name| Identifier::Dns(name.clone()))
        .collect();
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let issued = issue(&mut order, slot).await;
    // Answered or not, the challenges are over.
    slot.clear_challenges();
    let (key_pem, chain_pem) = issued?;
    store::write_private(&settings.key_path(), key_pem.as_bytes())?;
    store::write_private(&settings.cert_path(), chain_pem.as_bytes())?;
    // Read back as a restart will read it: what is served is what is stored.
    let (certified, expiry) = crate::config::acme::stored(settings)
        .map_err(|e| AcmeError::Order(format!("the issued certificate: {e}")))?;
    slot.install(Arc::new(certified), expiry);
    Ok(expiry)
}

/// Answers the order's challenges, waits for it, finalizes it: the new key
/// and the chain, both PEM.
async fn issue(order: &mut Order, slot: &AcmeCert) -> Result<(String, String), AcmeError> {
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization?;
        match authorization.status {
            AuthorizationStatus::Pending => {}
            // Validated by an earlier order, and still valid.
            AuthorizationStatus::Valid => continue,
            other => {
                return Err(AcmeError::Order(format!(
                    "authorization for {} is {other:?}",
                    authorization.identifier()
                )))
            }
        }
        let mut challenge = authorization
            .challenge(ChallengeType::TlsAlpn01)
            .ok_or_else(|| AcmeError::Order("the CA offers no tls-alpn-01 challenge".into()))?;
        let name = challenge.identifier().to_string();
        let answer = challenge_certificate(&name, challenge.key_authorization().digest().as_ref())?;
        slot.set_challenge(&name, Arc::new(answer));
        challenge.set_ready().await?;
    }
    let retries = RetryPolicy::new().timeout(PATIENCE);
    let status = order.poll_ready(&retries).await?;
    if status != OrderStatus::Ready {
        let why = order
            .state()
            .error
            .as_ref()
            .map_or_else(|| format!("{status:?}"), |problem| problem.to_string());
        return Err(AcmeError::Order(format!("the CA did not validate: {why}")));
    }
    let key_pem = order.finalize().await?;
    let chain_pem = order.poll_certificate(&retries).await?;
    Ok((key_pem, chain_pem))
}

/// The account for the settings' directory: the stored one, or a new one
/// (stored before it is used, so a crash does not lose it).
async fn account(settings: &AcmeSettings) -> Result<Account, AcmeError> {
    let builder = || match &settings.directory_ca {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    };
    let path = settings.account_path();
    let bad = |source| AcmeError::Credentials {
        path: path.display().to_string(),
        source,
    };
    if let Some(bytes) = store::read(&path)? {
        let credentials: AccountCredentials = serde_json::from_slice(&bytes).map_err(bad)?;
        return Ok(builder()?.from_credentials(credentials).await?);
    }
    let contact = settings.email.as_ref().map(|e| format!("mailto:{e}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contacts,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let (account, credentials) = builder()?
        .create(&new, settings.directory.clone(), None)
        .await?;
    let json = serde_json::to_vec_pretty(&credentials).map_err(bad)?;
    store::write_private(&path, &json)?;
    tracing::info!(directory = %settings.directory, account = %account.id(), "acme: account created");
    Ok(account)
}

/// The TLS-ALPN-01 certificate for `name`: self-signed, with the
/// acmeIdentifier extension holding the key authorization's SHA-256.
fn challenge_certificate(name: &str, digest: &[u8]) -> Result<CertifiedKey, AcmeError> {
    let failed = |e: rcgen::Error| AcmeError::Order(format!("challenge certificate: {e}"));
    let mut params = CertificateParams::new(vec![name.to_owned()]).map_err(failed)?;
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    let key = KeyPair::generate().map_err(failed)?;
    let cert = params.self_signed(&key).map_err(failed)?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    // Not CertifiedKey::from_der: its check that key and certificate match
    // parses the certificate, and webpki refuses the critical acmeIdentifier.
    let signing = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| AcmeError::Order(format!("challenge key: {e}")))?;
    Ok(CertifiedKey::new(vec![cert.der().clone()], signing))
}
