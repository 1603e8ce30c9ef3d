//! A fleet's settings (`cluster`): the etcd cluster the instances share
//! their run-time state through, where under it, and this instance's name.

use std::fmt;

/// `cluster = { etcd = [...], prefix, node, secret, ... }`.
#[derive(Clone, PartialEq, Eq)]
pub struct Cluster {
    /// etcd's client URLs (`http://` or `https://`).
    pub etcd: Vec<String>,
    /// Every key of this fleet begins with it (`/tcpmuxd` unless set); no
    /// trailing slash.
    pub prefix: String,
    /// This instance's name in the fleet (the host name unless set).
    pub node: String,
    /// The fleet's shared secret (`secret`, a 0600 file): what its private
    /// keys are encrypted with before they leave the process.
    pub secret: Secret,
    /// etcd's TLS: its CA and this client's certificate, when it asks.
    pub tls: Option<EtcdTls>,
    /// etcd's user and password, when it has authentication on.
    pub user: Option<(String, String)>,
    /// Where this instance keeps its copy of the fleet's state (`cache`).
    pub cache: Option<std::path::PathBuf>,
}

/// The bytes of the `secret` file; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// PEM text for etcd's TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// The CA that signed etcd's certificates (`ca`).
    pub ca: Vec<u8>,
    /// This client's certificate and key (`cert`, `key`), if etcd asks.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("etcd", &self.etcd)
            .field("prefix", &self.prefix)
            .field("node", &self.node)
            .field("secret", &self.secret)
            .field("tls", &self.tls.is_some())
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .field("cache", &self.cache)
            .finish()
    }
}
