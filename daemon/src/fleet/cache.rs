//! This instance's copy of what the fleet set (the run-time changes and the
//! sealed ticket keys, as etcd holds them), so that a restart while etcd
//! is unreachable serves with the fleet's state, not the file's. One file,
//! `state`, in `cache`, sealed under the secret and written as the ACME
//! storage writes (a random name, O_EXCL, synced, renamed): a crash or a
//! full disk leaves the previous copy whole.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::acme::store::Storage;
use crate::keys::sealed::SealingKey;
use crate::model::Cluster;

const FILE: &str = "state";

pub(super) struct Cache {
    dir: Option<PathBuf>,
    sealing: SealingKey,
    /// Each kept key of etcd and its value.
    held: BTreeMap<String, Vec<u8>>,
    /// Whether a write failed, so that the next failure is not logged again.
    failing: bool,
}

impl Cache {
    pub(super) fn new(cluster: &Cluster) -> Cache {
        Cache {
            dir: cluster.cache.clone(),
            sealing: SealingKey::derive(&cluster.secret.0, "local copy"),
            held: BTreeMap::new(),
            failing: false,
        }
    }

    /// The keys and values kept by the last run, if any.
    pub(super) fn load(&mut self) -> Vec<(String, Vec<u8>)> {
        let Some(dir) = &self.dir else {
            return Vec::new();
        };
        let read = Storage::open(dir).and_then(|storage| storage.read(FILE));
        let sealed = match read {
            Ok(Some(sealed)) => sealed,
            Ok(None) => return Vec::new(),
            Err(e) => {
                tracing::warn!("fleet: cannot read the local copy of the fleet's state: {e}");
                return Vec::new();
            }
        };
        let opened = self.sealing.open(FILE.as_bytes(), &sealed);
        let held: Option<BTreeMap<String, Vec<u8>>> =
            opened.and_then(|plain| serde_json::from_slice(&plain).ok());
        let Some(held) = held else {
            tracing::warn!(dir = %dir.display(), "fleet: the local copy of the fleet's state does not open with this secret; ignored");
            return Vec::new();
        };
        self.held = held;
        self.held
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Every kept key and its value.
    pub(super) fn entries(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.held.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// Keeps `key`'s new value (`None`: gone), without writing yet.
    pub(super) fn keep(&mut self, key: &[u8], value: Option<&[u8]>) {
        let Ok(key) = std::str::from_utf8(key) else {
            return;
        };
        match value {
            Some(value) => self.held.insert(key.to_owned(), value.to_vec()),
            None => self.held.remove(key),
        };
    }

    /// Writes what is kept.
    pub(super) fn save(&mut self) {
        let Some(dir) = &self.dir else {
            return;
        };
        let plain = serde_json::to_vec(&self.held).unwrap_or_default();
        let sealed = self.sealing.seal(FILE.as_bytes(), &plain);
        let written = Storage::open(dir).and_then(|storage| storage.write(FILE, &sealed));
        match written {
            Ok(()) => self.failing = false,
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!("fleet: cannot keep a local copy of the fleet's state (a restart without etcd starts from the file): {e}");
            }
            Err(_) => {}
        }
    }
}
