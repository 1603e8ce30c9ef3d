//! Reading a listener's PEM files (certificate chains, private keys), and
//! the one error type for everything wrong with a listener's `tls`, so that
//! both the files and ACME (`acme.rs`) can report through it.

use std::io;
use std::path::{Path, PathBuf};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Why a listener's `tls` cannot be used; each names the file and what is
/// wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls: client_auth needs client_ca, the CA that client certificates must chain to")]
    ClientAuthWithoutCa,
    #[error("tls: client_auth {0:?}: expected \"required\" or \"optional\"")]
    ClientAuth(String),
    #[error("tls {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("tls {what} {}: {source}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("tls {what} {}: no PEM certificate in it", path.display())]
    NoCertificate { what: &'static str, path: PathBuf },
    #[error("tls key {}: {source} (expected a PEM private key: PKCS#8, PKCS#1 or SEC1)", path.display())]
    Key {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("tls client_ca {}: {reason}", path.display())]
    ClientCa { path: PathBuf, reason: String },
    #[error("tls cert {} and key {}: {source}", cert.display(), key.display())]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
    #[error("tls certs: {}: no DNS name in its subjectAltNames or CN to serve it for", .0.display())]
    NoNames(PathBuf),
    #[error("tls: client_crl needs client_ca: only client certificates are checked against it")]
    CrlWithoutCa,
    #[error("tls client_crl {}: {source}", path.display())]
    Crl {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("tls client_crl {}: no PEM X509 CRL in it", .0.display())]
    NoCrl(PathBuf),
    #[error("tls: {0}")]
    Rustls(rustls::Error),
    #[error("tls: give cert and key, or acme = {{ directory, names, ... }} to obtain them")]
    NoCertificateSource,
    #[error("tls: cert and key go together")]
    HalfPair,
    #[error("tls: acme takes the place of cert and key: give one or the other")]
    AcmeAndFiles,
    #[error("tls acme: {0}")]
    Acme(String),
}

pub(super) fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

pub(super) fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            what,
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            what,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// One certificate chain and its private key, which must match.
pub(super) fn certified(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = certificates("cert", cert)?;
    let key_pem = read("key", key)?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|source| TlsError::Key {
        path: key.to_owned(),
        source,
    })?;
    CertifiedKey::from_der(chain, private, provider).map_err(|source| TlsError::Pair {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    })
}
