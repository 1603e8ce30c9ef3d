//! A listener's `tls = { cert, key, acme, certs, client_ca, client_auth }`:
//! the PEM files read (or the ACME slot, `acme.rs`) and turned into the
//! rustls server configurations it serves with (`certs.rs` picks a
//! certificate by SNI).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer};
use rustls::server::{ProducesTickets, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig};

use super::certs::Served;
use super::error::Source;
use super::pem::{certificates, certified, read, TlsError};
use super::raw::{RawCertPair, RawTls};
use crate::keys::{AcmeCert, Keys};
use crate::model::{CertPair, ClientAuth, DefaultCert, HostMap, ServerConfigs, Tls};
use crate::registry::Registry;

/// The ALPN protocol a TLS listener offers (clients that send none are
/// accepted as well).
pub(super) const ALPN: &[u8] = b"tcpmux";

/// Reads `raw`'s files. Relative paths are relative to the configuration file.
pub(crate) fn load(src: Source<'_>, raw: &RawTls, keys: &Keys) -> Result<Tls, TlsError> {
    let base = Path::new(src.origin).parent().unwrap_or(Path::new(""));
    let path = |p: &str| base.join(p);
    let first = match (&raw.cert, &raw.key, &raw.acme) {
        (Some(cert), Some(key), None) => First::Files(path(cert), path(key)),
        (None, None, Some(acme)) => First::Acme(super::acme::load(base, acme, keys)?),
        (_, _, Some(_)) => return Err(TlsError::AcmeAndFiles),
        (None, None, None) => return Err(TlsError::NoCertificateSource),
        _ => return Err(TlsError::HalfPair),
    };
    let client_ca = raw.client_ca.as_deref().map(path);
    let client_auth = match (raw.client_auth.as_deref(), &client_ca) {
        (None, None) => ClientAuth::None,
        (None | Some("required"), Some(_)) => ClientAuth::Required,
        (Some("optional"), Some(_)) => ClientAuth::Optional,
        (Some("required" | "optional"), None) => return Err(TlsError::ClientAuthWithoutCa),
        (Some(other), _) => return Err(TlsError::ClientAuth(other.to_owned())),
    };
    let pair = |raw: &RawCertPair| CertPair {
        cert: path(&raw.cert),
        key: path(&raw.key),
    };
    let certs: Vec<CertPair> = raw.certs.iter().flatten().map(pair).collect();
    let client_crl: Vec<PathBuf> = raw.client_crl.iter().flatten().map(|p| path(p)).collect();
    if !client_crl.is_empty() && client_ca.is_none() {
        return Err(TlsError::CrlWithoutCa);
    }
    let client = (client_ca.as_deref(), client_auth, &client_crl[..]);
    let tickets = match raw.tickets.unwrap_or(true) {
        true => Some(keys.tickets().map_err(TlsError::Rustls)?),
        false => None,
    };
    let (server, expiries) = server_config(&first, &certs, client, tickets)?;
    let mut server = ServerConfigs::new(server);
    let default = match first {
        First::Files(cert, key) => DefaultCert::Files { cert, key },
        First::Acme(slot) => {
            server.challenge = Some(super::acme::challenge_config(&slot)?);
            DefaultCert::Acme(slot.settings.clone())
        }
    };
    Ok(Tls {
        default,
        client_ca,
        client_auth,
        client_crl,
        certs,
        expiries,
        server,
    })
}

/// Sets what a TLS listener offers in ALPN: `tcpmux`, then the services'
/// protocols, so a client that asks for one of them is routed by it; for
/// the names a service's `sni_terminate` takes, that service's own.
pub(crate) fn offer_alpn(tls: &mut Tls, registry: &Registry) {
    let base = &tls.server.default;
    let offering = |protocols: &mut dyn Iterator<Item = &[u8]>| {
        let mut server = (**base).clone();
        server.alpn_protocols = protocols.map(<[u8]>::to_vec).collect();
        Arc::new(server)
    };
    let protocols = registry.alpn_protocols();
    let mut terminated = HostMap::default();
    for service in registry.services().filter(|s| !s.sni_terminate.is_empty()) {
        let server = offering(&mut service.alpn.iter().map(|p| p.as_bytes()));
        for pattern in &service.sni_terminate {
            terminated.insert(pattern, Arc::clone(&server));
        }
    }
    if !protocols.is_empty() {
        let mut all = std::iter::once(ALPN).chain(protocols.iter().map(|p| p.as_bytes()));
        tls.server.default = offering(&mut all);
    }
    tls.server.terminated = Arc::new(terminated);
}

/// The default certificate's source, as `server_config` serves it.
enum First {
    Files(PathBuf, PathBuf),
    Acme(Arc<AcmeCert>),
}

/// The rustls configuration: the certificates to serve, and how client
/// certificates are checked (the CA, whether one is required, the CRLs);
/// with each served certificate's name and expiry, read from the same parse.
fn server_config(
    first: &First,
    certs: &[CertPair],
    (client_ca, client_auth, client_crl): (Option<&Path>, ClientAuth, &[PathBuf]),
    tickets: Option<Arc<dyn ProducesTickets>>,
) -> Result<(ServerConfig, Vec<(String, i64)>), TlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let default = match first {
        First::Files(cert, key) => Served::Fixed(Arc::new(certified(cert, key, &provider)?)),
        First::Acme(slot) => Served::Acme(Arc::clone(slot)),
    };
    let extra = certs
        .iter()
        .map(|pair| {
            Ok((
                pair.cert.clone(),
                certified(&pair.cert, &pair.key, &provider)?,
            ))
        })
        .collect::<Result<Vec<_>, TlsError>>()?;
    // An ACME certificate's expiry is read from its slot, as it renews.
    let fixed = match &default {
        Served::Fixed(certified) => Some(&**certified),
        Served::Acme(_) => None,
    };
    let leaves = fixed.into_iter().chain(extra.iter().map(|(_, c)| c));
    let expiries = leaves
        .filter_map(|c| c.cert.first().and_then(expiry))
        .collect();
    let resolver = super::certs::by_name(default, extra).map_err(TlsError::NoNames)?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Rustls)?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let unusable = |reason: String| TlsError::ClientCa {
                path: ca.to_owned(),
                reason,
            };
            let mut roots = RootCertStore::empty();
            for cert in certificates("client_ca", ca)? {
                roots.add(cert).map_err(|e| unusable(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .with_crls(revocation_lists(client_crl)?)
                // As HAProxy's crl-file: the client's own certificate is
                // checked, and one whose CA has no CRL listed passes.
                .only_check_end_entity_revocation()
                .allow_unknown_revocation_status();
            let verifier = match client_auth {
                ClientAuth::Optional => verifier.allow_unauthenticated(),
                ClientAuth::Required | ClientAuth::None => verifier,
            };
            let verifier = verifier.build().map_err(|e| unusable(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![ALPN.to_vec()];
    match tickets {
        Some(tickets) => config.ticketer = tickets,
        None => {
            config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
    }
    Ok((config, expiries))
}

/// Every CRL in `paths` (PEM; a file may hold several).
fn revocation_lists(
    paths: &[PathBuf],
) -> Result<Vec<CertificateRevocationListDer<'static>>, TlsError> {
    let mut all = Vec::new();
    for path in paths {
        let pem = read("client_crl", path)?;
        let found = CertificateRevocationListDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| TlsError::Crl {
                path: path.clone(),
                source,
            })?;
        if found.is_empty() {
            return Err(TlsError::NoCrl(path.clone()));
        }
        all.extend(found);
    }
    Ok(all)
}

/// A leaf's first name and when it expires.
fn expiry(leaf: &CertificateDer<'_>) -> Option<(String, i64)> {
    let (names, _) = crate::model::certificate_names(leaf.as_ref());
    Some((
        names.into_iter().next()?,
        crate::model::certificate_expiry(leaf.as_ref())?,
    ))
}
