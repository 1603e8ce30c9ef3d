//! This instance as its fleet knows it: its settings, its address, when it
//! started.

use std::sync::Arc;
use std::time::SystemTime;

use crate::model::Cluster;

/// What the task knows of this instance, for its membership.
pub(crate) struct Instance {
    pub cluster: Arc<Cluster>,
    /// Its first listening address.
    pub address: String,
    /// Unix time it started.
    pub started: u64,
}

/// Unix time now, in seconds.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
