//! This instance as its fleet knows it: its settings, its address, when it
//! started.

use std::sync::Arc;

use crate::model::Cluster;

/// What the task knows of this instance, for its membership.
pub(crate) struct Instance {
    pub cluster: Arc<Cluster>,
    /// Its first listening address.
    pub address: String,
    /// Unix time it started (`model::clock::unix_seconds`).
    pub started: i64,
}
