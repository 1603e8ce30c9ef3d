//! One ACME order for a slot's names, start to end: the account (loaded
//! from storage, or created and stored), the order, a TLS-ALPN-01 answer per
//! name put in the slot for the listener to serve (RFC 8737), the wait for
//! the CA's validation, the CSR, then the certificate issued (stored and
//! served by the keeper). Every request has a deadline.

use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, Order, OrderStatus, RetryPolicy,
};

use super::challenge::challenge_certificate;
use super::fleet::FleetAcme;
use super::store::{Storage, StoreError};
use crate::keys::AcmeCert;
use crate::model::AcmeSettings;

/// Why an order did not end with a certificate.
#[derive(Debug, thiserror::Error)]
pub(super) enum AcmeError {
    /// The CA refused, failed, or did not answer: where, at which step, and
    /// every cause in the chain (not just hyper's "client error (Connect)").
    #[error("{step} at {directory}: {detail}")]
    Ca {
        directory: String,
        step: &'static str,
        detail: String,
    },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("account credentials {path}: {detail}; remove the file to register a new account")]
    Credentials { path: String, detail: String },
    #[error("{0}")]
    Order(String),
}

/// How long the CA may take to validate, and to issue, before the order is
/// given up (and retried later); each request within is bounded by the
/// slot's `request_timeout` as well.
const PATIENCE: Duration = Duration::from_secs(120);

/// A certificate the CA issued: its chain and the new key, in one PEM.
pub(super) struct Issued {
    pub pem: String,
}

/// Runs one request to the CA: within `settings`' `request_timeout`, its
/// error said with its place and causes.
async fn ask<T>(
    settings: &AcmeSettings,
    step: &'static str,
    limit: Duration,
    request: impl std::future::Future<Output = Result<T, instant_acme::Error>>,
) -> Result<T, AcmeError> {
    within(settings, step, limit, request)
        .await?
        .map_err(|e| ca(settings, step, causes(&e)))
}

/// `request` within `limit`: its own result, or the timeout as the CA's
/// failure at `step`.
async fn within<T>(
    settings: &AcmeSettings,
    step: &'static str,
    limit: Duration,
    request: impl std::future::Future<Output = Result<T, instant_acme::Error>>,
) -> Result<Result<T, instant_acme::Error>, AcmeError> {
    tokio::time::timeout(limit, request).await.map_err(|_| {
        let waited = limit.as_secs_f64();
        ca(
            settings,
            step,
            format!("no answer within {waited}s (request_timeout)"),
        )
    })
}

/// The CA at `settings`' directory failed `step`, for the reason `detail`.
fn ca(settings: &AcmeSettings, step: &'static str, detail: String) -> AcmeError {
    AcmeError::Ca {
        directory: settings.directory.clone(),
        step,
        detail,
    }
}

/// An error and every cause under it, as one line.
fn causes(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// Orders a certificate for `slot`'s names with `account`: the chain and
/// its key, not yet stored nor served.
pub(super) async fn obtain(
    slot: &AcmeCert,
    account: &Account,
    fleet: Option<&dyn FleetAcme>,
) -> Result<Issued, AcmeError> {
    let settings = &slot.settings;
    let limit = settings.request_timeout;
    let identifiers: Vec<Identifier> = settings
        .names
        .iter()
        .map(|name| Identifier::Dns(name.clone()))
        .collect();
    let new = NewOrder::new(&identifiers);
    let mut order = ask(settings, "a new order", limit, account.new_order(&new)).await?;
    let issued = issue(&mut order, slot, fleet).await;
    // Answered or not, the challenges are over.
    slot.clear_challenges();
    if let Some(fleet) = fleet {
        fleet.withdraw(&settings.names).await;
    }
    let (key_pem, chain_pem) = issued?;
    Ok(Issued {
        pem: format!("{chain_pem}{key_pem}"),
    })
}

/// Answers the order's challenges, waits for it, finalizes it: the new key
/// and the chain, both PEM.
async fn issue(
    order: &mut Order,
    slot: &AcmeCert,
    fleet: Option<&dyn FleetAcme>,
) -> Result<(String, String), AcmeError> {
    let settings = &slot.settings;
    let limit = settings.request_timeout;
    let mut authorizations = order.authorizations();
    while let Some(authorization) = ask(settings, "the authorizations", limit, async {
        authorizations.next().await.transpose()
    })
    .await?
    {
        let mut authorization = authorization;
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
        let digest = challenge.key_authorization().digest();
        let answer = challenge_certificate(&name, digest.as_ref()).map_err(AcmeError::Order)?;
        slot.set_challenge(&name, Arc::new(answer));
        // The CA's validation may reach any instance of a fleet.
        if let Some(fleet) = fleet {
            fleet
                .challenge(&name, digest.as_ref())
                .await
                .map_err(|e| AcmeError::Order(format!("the fleet's challenge for {name}: {e}")))?;
        }
        ask(settings, "the challenge", limit, challenge.set_ready()).await?;
    }
    let retries = RetryPolicy::new().timeout(PATIENCE);
    let wait = PATIENCE + limit;
    let status = ask(settings, "the validation", wait, order.poll_ready(&retries)).await?;
    if status != OrderStatus::Ready {
        let why = order
            .state()
            .error
            .as_ref()
            .map_or_else(|| format!("{status:?}"), |problem| problem.to_string());
        return Err(AcmeError::Order(format!("the CA did not validate: {why}")));
    }
    let key_pem = ask(settings, "the finalization", limit, order.finalize()).await?;
    let chain_pem = ask(
        settings,
        "the certificate",
        wait,
        order.poll_certificate(&retries),
    )
    .await?;
    Ok((key_pem, chain_pem))
}

/// The account for the settings' directory: in a fleet the fleet's; else
/// the stored one (given to the fleet), or a new one, stored before it is
/// used so a crash does not lose it (the keeper keeps it in memory too, so a
/// failed store costs no second registration), and given to the fleet.
pub(super) async fn account(
    settings: &AcmeSettings,
    storage: &Storage,
    fleet: Option<&dyn FleetAcme>,
) -> Result<Account, AcmeError> {
    let name = settings.account_name();
    if let Some(fleet) = fleet {
        match fleet.account(&name).await {
            Ok(Some(json)) => return load(settings, &json, "the fleet's account").await,
            Ok(None) => {}
            Err(e) => tracing::warn!("acme: cannot read the fleet's account: {e}"),
        }
    }
    let path = settings.storage.join(&name).display().to_string();
    if let Some(bytes) = storage.read(&name)? {
        let account = load(settings, &bytes, &path).await?;
        share(fleet, &name, &bytes).await;
        return Ok(account);
    }
    let limit = settings.request_timeout;
    let contact = settings.email.as_ref().map(|e| format!("mailto:{e}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contacts,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let creating = builder(settings)?.create(&new, settings.directory.clone(), None);
    let (account, credentials) = ask(settings, "a new account", limit, creating).await?;
    match serde_json::to_vec_pretty(&credentials) {
        Ok(json) => {
            if let Err(e) = storage.write(&name, &json) {
                tracing::error!(error = %e, "acme: cannot store the new account's credentials; using it from memory until the daemon stops");
            }
            share(fleet, &name, &json).await;
        }
        Err(e) => tracing::error!(error = %e, "acme: cannot write the new account's credentials"),
    }
    tracing::info!(directory = %settings.directory, account = %account.id(), "acme: account created");
    Ok(account)
}

/// An ACME client for the settings' directory.
fn builder(settings: &AcmeSettings) -> Result<instant_acme::AccountBuilder, AcmeError> {
    let made = match &settings.directory_ca {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    };
    made.map_err(|e| ca(settings, "the HTTPS client", causes(&e)))
}

/// The account whose credentials are `bytes` (from `origin`, which an
/// error names).
async fn load(settings: &AcmeSettings, bytes: &[u8], origin: &str) -> Result<Account, AcmeError> {
    let bad = |detail: String| AcmeError::Credentials {
        path: origin.to_owned(),
        detail,
    };
    let credentials: AccountCredentials =
        serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let loading = builder(settings)?.from_credentials(credentials);
    // Credentials that parse but hold a bad key name where they came from.
    match within(settings, "the directory", settings.request_timeout, loading).await? {
        Ok(account) => Ok(account),
        Err(
            e @ (instant_acme::Error::KeyRejected
            | instant_acme::Error::Crypto
            | instant_acme::Error::Json(_)),
        ) => Err(bad(causes(&e))),
        Err(e) => Err(ca(settings, "the directory", causes(&e))),
    }
}

/// Gives the fleet (if any) the account `name` unless it has one.
async fn share(fleet: Option<&dyn FleetAcme>, name: &str, json: &[u8]) {
    if let Some(fleet) = fleet {
        if let Err(e) = fleet.publish_account(name, json).await {
            tracing::warn!("acme: cannot give the fleet the account: {e}");
        }
    }
}
