//! The TLS-ALPN-01 answer (RFC 8737): a self-signed certificate for the
//! name with the key authorization's digest in its acmeIdentifier
//! extension. Made from the digest alone, so every instance of a fleet can
//! make its own.

use rcgen::{CertificateParams, CustomExtension, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

/// The TLS-ALPN-01 certificate for `name`: self-signed, with the
/// acmeIdentifier extension holding the key authorization's SHA-256.
pub(super) fn challenge_certificate(name: &str, digest: &[u8]) -> Result<CertifiedKey, String> {
    let failed = |e: rcgen::Error| format!("challenge certificate: {e}");
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
        .map_err(|e| format!("challenge key: {e}"))?;
    Ok(CertifiedKey::new(vec![cert.der().clone()], signing))
}
