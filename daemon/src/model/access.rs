//! Which clients a service accepts: address ranges for TCP clients, uids and
//! gids for Unix-socket clients, certificate names for TLS clients.

use super::{Cidr, ClientInfo, Peer};

/// Which clients a service accepts. TCP clients are judged by address (`deny`
/// wins over `allow`; an empty `allow` allows all), Unix-socket clients by their
/// uid/gid (empty lists allow all).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    pub allow: Vec<Cidr>,
    pub deny: Vec<Cidr>,
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
    /// `allow_cert_names`: only TLS clients whose verified certificate
    /// carries one of these names (empty: no such rule).
    pub cert_names: Vec<String>,
}

impl Access {
    /// Whether `client` passes every rule: its address or credentials, and
    /// its certificate's names when the service asks for them.
    pub fn permits_client(&self, client: &ClientInfo) -> bool {
        self.permits(&client.peer)
            && (self.cert_names.is_empty()
                || client
                    .tls
                    .as_ref()
                    .is_some_and(|tls| tls.has_any_name(&self.cert_names)))
    }

    pub fn permits(&self, peer: &Peer) -> bool {
        match peer {
            Peer::Tcp(addr) => {
                let ip = addr.ip();
                !self.deny.iter().any(|r| r.contains(ip))
                    && (self.allow.is_empty() || self.allow.iter().any(|r| r.contains(ip)))
            }
            Peer::Unix { uid, gid, .. } => {
                (self.uids.is_empty() && self.gids.is_empty())
                    || self.uids.contains(uid)
                    || self.gids.contains(gid)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tcp(ip: &str) -> Peer {
        Peer::Tcp(format!("{ip}:1000").parse().unwrap())
    }

    #[test]
    fn access_rules() {
        let access = Access {
            allow: vec!["10.0.0.0/8".parse().unwrap()],
            deny: vec!["10.0.0.66".parse().unwrap()],
            uids: vec![1000],
            gids: vec![],
            cert_names: vec![],
        };
        assert!(access.permits(&tcp("10.1.2.3")));
        assert!(!access.permits(&tcp("10.0.0.66")));
        assert!(!access.permits(&tcp("192.0.2.1")));
        let unix = |uid| Peer::Unix {
            listener: Arc::from("/x"),
            uid,
            gid: 5,
        };
        assert!(access.permits(&unix(1000)));
        assert!(!access.permits(&unix(1001)));
        assert!(Access::default().permits(&unix(1)));
    }
}
