//! A TLS listener's certificates: the default one (`cert`, `key`) and the
//! extra ones (`certs = [{ cert, key }, ...]`), each served for the names in
//! its subjectAltNames (exact, or a one-label `*.` wildcard), the default for
//! every other name and for clients that send no SNI. The first listed wins
//! a name two certificates share.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::keys::AcmeCert;
use crate::model::{certificate_names, HostMap, HostPattern};

/// The certificate served for every name no other takes.
#[derive(Debug)]
pub(crate) enum Served {
    /// Read from `cert` and `key`.
    Fixed(Arc<CertifiedKey>),
    /// Whatever ACME has obtained by now (none yet: the handshake fails).
    Acme(Arc<AcmeCert>),
}

impl Served {
    fn get(&self) -> Option<Arc<CertifiedKey>> {
        match self {
            Served::Fixed(certified) => Some(Arc::clone(certified)),
            Served::Acme(slot) => slot.current(),
        }
    }
}

/// Picks a certificate by the server name a client asked for.
#[derive(Debug)]
pub(crate) struct ByName {
    default: Served,
    named: HostMap<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ByName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match hello.server_name().and_then(|name| self.named.get(name)) {
            Some(found) => Some(Arc::clone(found)),
            None => self.default.get(),
        }
    }
}

/// A resolver serving `default`, and each of `extra` for its names. A
/// certificate that names nothing is refused: its path comes back.
pub(crate) fn by_name(
    default: Served,
    extra: Vec<(PathBuf, CertifiedKey)>,
) -> Result<ByName, PathBuf> {
    let mut named = HostMap::default();
    for (path, certified) in extra {
        let (names, _) = match certified.cert.first() {
            Some(leaf) => certificate_names(leaf.as_ref()),
            None => (Vec::new(), None),
        };
        let patterns: Vec<HostPattern> = names.iter().filter_map(|n| n.parse().ok()).collect();
        if patterns.is_empty() {
            return Err(path);
        }
        let certified = Arc::new(certified);
        for pattern in &patterns {
            named.insert(pattern, Arc::clone(&certified));
        }
    }
    Ok(ByName { default, named })
}
