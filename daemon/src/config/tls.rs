//! A listener's `tls = { cert, key, client_ca, client_auth }`: the PEM files
//! read and turned into the rustls server configuration it serves with.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use super::error::Source;
use super::raw::RawTls;
use crate::model::{ClientAuth, Tls};

/// The ALPN protocol a TLS listener offers (clients that send none are
/// accepted as well).
pub const ALPN: &[u8] = b"tcpmux";

/// Reads `raw`'s files; an error is a sentence naming the file and what is
/// wrong with it. Relative paths are relative to the configuration file.
pub(crate) fn load(src: Source<'_>, raw: &RawTls) -> Result<Tls, String> {
    let base = Path::new(src.origin).parent().unwrap_or(Path::new(""));
    let path = |p: &str| base.join(p);
    let (cert, key) = (path(&raw.cert), path(&raw.key));
    let client_ca = raw.client_ca.as_deref().map(path);
    let client_auth =
        match (raw.client_auth.as_deref(), &client_ca) {
            (None, None) => ClientAuth::None,
            (None | Some("required"), Some(_)) => ClientAuth::Required,
            (Some("optional"), Some(_)) => ClientAuth::Optional,
            (Some("required" | "optional"), None) => return Err(
                "tls: client_auth needs client_ca, the CA that client certificates must chain to"
                    .into(),
            ),
            (Some(other), _) => {
                return Err(format!(
                    "tls: client_auth {other:?}: expected \"required\" or \"optional\""
                ))
            }
        };
    let server = server_config(&cert, &key, client_ca.as_deref(), client_auth)?;
    Ok(Tls {
        cert,
        key,
        client_ca,
        client_auth,
        server: Arc::new(server),
    })
}

fn read(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("tls {what} {}: {e}", path.display()))
}

fn certificates(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tls {what} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "tls {what} {}: no PEM certificate in it",
            path.display()
        ));
    }
    Ok(certs)
}

fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    client_auth: ClientAuth,
) -> Result<ServerConfig, String> {
    let chain = certificates("cert", cert)?;
    let key_pem = read("key", key)?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!(
            "tls key {}: {e} (expected a PEM private key: PKCS#8, PKCS#1 or SEC1)",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("tls: {e}"))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates("client_ca", ca)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("tls client_ca {}: {e}", ca.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match client_auth {
                ClientAuth::Optional => verifier.allow_unauthenticated(),
                ClientAuth::Required | ClientAuth::None => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("tls client_ca {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, private)
        .map_err(|e| format!("tls cert {} and key {}: {e}", cert.display(), key.display()))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}
