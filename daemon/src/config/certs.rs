//! A TLS listener's certificates: the default one (`cert`, `key`) and the
//! extra ones (`certs = [{ cert, key }, ...]`), each served for the names in
//! its subjectAltNames (exact, or a one-label `*.` wildcard), the default for
//! every other name and for clients that send no SNI. The first listed wins
//! a name two certificates share.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::model::certificate_names;

/// Picks a certificate by the server name a client asked for.
#[derive(Debug)]
pub(crate) struct ByName {
    default: Arc<CertifiedKey>,
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// By the suffix after `*.`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
}

impl ResolvesServerCert for ByName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = hello.server_name().map(str::to_ascii_lowercase) else {
            return Some(Arc::clone(&self.default));
        };
        let parent = name.split_once('.').map(|(_, parent)| parent);
        let found = self.exact.get(&name).or_else(|| self.wildcard.get(parent?));
        Some(Arc::clone(found.unwrap_or(&self.default)))
    }
}

/// A resolver serving `default`, and each of `extra` for its names. A
/// certificate that names nothing is refused: its path comes back.
pub(crate) fn by_name(
    default: CertifiedKey,
    extra: Vec<(PathBuf, CertifiedKey)>,
) -> Result<ByName, PathBuf> {
    let mut resolver = ByName {
        default: Arc::new(default),
        exact: HashMap::new(),
        wildcard: HashMap::new(),
    };
    for (path, certified) in extra {
        let (names, _) = match certified.cert.first() {
            Some(leaf) => certificate_names(leaf.as_ref()),
            None => (Vec::new(), None),
        };
        if names.is_empty() {
            return Err(path);
        }
        let certified = Arc::new(certified);
        for name in names.iter().map(|n| n.to_ascii_lowercase()) {
            let (map, key) = match name.strip_prefix("*.") {
                Some(suffix) => (&mut resolver.wildcard, suffix.to_owned()),
                None => (&mut resolver.exact, name),
            };
            map.entry(key).or_insert_with(|| Arc::clone(&certified));
        }
    }
    Ok(resolver)
}
