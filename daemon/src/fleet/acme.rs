//! The fleet's half of ACME once per fleet (`acme/fleet.rs` says what the
//! keepers need). Under `PREFIX/acme/`: `cert/PAIR`, the chain and key
//! sealed under the secret; `lock/PAIR`, etcd's lock on this instance's
//! lease; `challenge/NAME`, a TLS-ALPN-01 digest on the orderer's lease;
//! `ack/NAME/NODE`, an instance that answers it, on its own lease.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, LockOptions, PutOptions, Txn, TxnOp,
};
use tokio::sync::watch;

use super::deadline::within;
use super::keys::{escape, unescape};
use crate::acme::fleet::{FleetAcme, Fut, OrderLock};
use crate::keys::sealed::SealingKey;
use crate::keys::Keys;
use crate::model::Cluster;
use crate::runtime::FleetLink;

/// How long an order waits for the other instances to answer its
/// challenge before it asks the CA anyway.
const ACK_WAIT: Duration = Duration::from_secs(10);
/// How long a keeper waits for the fleet's session to join.
const JOIN_WAIT: Duration = Duration::from_secs(10);

pub(crate) struct FleetOrders {
    prefix: String,
    node: String,
    sealing: SealingKey,
    link: Arc<FleetLink>,
    /// The session's client and lease while joined.
    connected: watch::Sender<Option<(Client, i64)>>,
}

/// A challenge an instance now answers, to acknowledge.
pub(super) struct Ack {
    key: String,
    digest: Vec<u8>,
}

impl FleetOrders {
    pub(super) fn new(cluster: &Cluster, link: Arc<FleetLink>) -> FleetOrders {
        FleetOrders {
            prefix: format!("{}/acme", cluster.prefix),
            node: cluster.node.clone(),
            sealing: SealingKey::derive(&cluster.secret.0, "acme certificates"),
            link,
            connected: watch::Sender::new(None),
        }
    }

    /// The session joined with `client` and `lease`, or ended (`None`).
    pub(super) fn set_connected(&self, connected: Option<(Client, i64)>) {
        self.connected.send_replace(connected);
    }

    /// The session's client and lease, waiting a little for a session
    /// that is joining (a keeper starts with the daemon, as the fleet's
    /// task does).
    async fn client(&self) -> Result<(Client, i64), String> {
        let mut connected = self.connected.subscribe();
        let held = match tokio::time::timeout(JOIN_WAIT, connected.wait_for(Option::is_some)).await
        {
            Ok(Ok(held)) => held.clone(),
            _ => None,
        };
        held.ok_or_else(|| "etcd is unreachable".into())
    }

    fn cert_key(&self, pair: &str) -> String {
        format!("{}/cert/{}", self.prefix, escape(pair))
    }

    /// What `key` holds, opened.
    async fn fetch(&self, key: String) -> Result<Option<Vec<u8>>, String> {
        let (mut client, _) = self.client().await?;
        let read = within("read from the fleet", client.get(key.clone(), None)).await?;
        let Some(kv) = read.kvs().first() else {
            return Ok(None);
        };
        let opened = self.sealing.open(key.as_bytes(), kv.value());
        opened
            .map(Some)
            .ok_or_else(|| format!("{key} does not open with this instance's secret"))
    }

    /// A watched (or read) key under the prefix put in force: a
    /// certificate served, a challenge answered (then acknowledged) or
    /// withdrawn (`value` is `None` for a deletion).
    pub(super) fn watched(&self, key: &[u8], value: Option<&[u8]>, keys: &Keys) -> Option<Ack> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix('/')?;
        let (kind, name) = rest.split_once('/')?;
        let name = unescape(name)?;
        match (kind, value) {
            ("cert", Some(sealed)) => {
                let Some(pem) = self.sealing.open(key.as_bytes(), sealed) else {
                    tracing::warn!(pair = %name, "fleet: a certificate in etcd does not open with this instance's secret");
                    return None;
                };
                crate::acme::fleet::take(keys, &name, &String::from_utf8_lossy(&pem));
                None
            }
            ("challenge", Some(digest)) => {
                crate::acme::fleet::answer(keys, &name, digest).then(|| Ack {
                    key: format!(
                        "{}/ack/{}/{}",
                        self.prefix,
                        escape(&name),
                        escape(&self.node)
                    ),
                    digest: digest.to_vec(),
                })
            }
            ("challenge", None) => {
                crate::acme::fleet::withdraw(keys, &name);
                None
            }
            _ => None,
        }
    }

    /// Says, on this instance's lease, that it answers a challenge.
    pub(super) async fn acknowledge(
        &self,
        client: &mut Client,
        lease: i64,
        ack: Ack,
    ) -> Result<(), String> {
        let put = client.put(
            ack.key,
            ack.digest,
            Some(PutOptions::new().with_lease(lease)),
        );
        within("acknowledge a challenge", put).await.map(drop)
    }

    /// Waits until every other member acknowledged `digest` for `name`.
    async fn acknowledged(
        &self,
        client: &mut Client,
        name: &str,
        digest: &[u8],
    ) -> Result<(), String> {
        let prefix = format!("{}/ack/{}/", self.prefix, escape(name));
        let deadline = Instant::now() + ACK_WAIT;
        loop {
            let (_, members) = self.link.view();
            let others: HashSet<String> = members
                .into_iter()
                .map(|m| m.node)
                .filter(|n| *n != self.node)
                .collect();
            let read = within(
                "read the acknowledgements",
                client.get(prefix.clone(), Some(GetOptions::new().with_prefix())),
            )
            .await?;
            let acked: HashSet<String> = read
                .kvs()
                .iter()
                .filter(|kv| kv.value() == digest)
                .filter_map(|kv| {
                    std::str::from_utf8(kv.key())
                        .ok()?
                        .strip_prefix(&prefix)
                        .and_then(unescape)
                })
                .collect();
            if others.is_subset(&acked) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let missing: Vec<String> = others.difference(&acked).cloned().collect();
                tracing::warn!(name, missing = %missing.join(","), "acme: not every instance answers the challenge; asking the CA anyway");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl FleetAcme for FleetOrders {
    fn certificate<'a>(&'a self, pair: &'a str) -> Fut<'a, Result<Option<String>, String>> {
        Box::pin(async move {
            let pem = self.fetch(self.cert_key(pair)).await?;
            Ok(pem.map(|pem| String::from_utf8_lossy(&pem).into_owned()))
        })
    }

    fn account<'a>(&'a self, name: &'a str) -> Fut<'a, Result<Option<Vec<u8>>, String>> {
        Box::pin(self.fetch(format!("{}/account/{}", self.prefix, escape(name))))
    }

    fn publish_account<'a>(&'a self, name: &'a str, json: &'a [u8]) -> Fut<'a, Result<(), String>> {
        Box::pin(async move {
            let (mut client, _) = self.client().await?;
            let key = format!("{}/account/{}", self.prefix, escape(name));
            let sealed = self.sealing.seal(key.as_bytes(), json);
            // Only if none is there: of two instances that made one at
            // once, the first's is the fleet's.
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, sealed, None)]);
            within("give the fleet the account", client.txn(txn))
                .await
                .map(drop)
        })
    }

    fn lock<'a>(&'a self, pair: &'a str) -> Fut<'a, Result<OrderLock, String>> {
        Box::pin(async move {
            let (mut client, lease) = self.client().await?;
            let name = format!("{}/lock/{}", self.prefix, escape(pair));
            let options = LockOptions::new().with_lease(lease);
            // Waits for as long as another instance holds it; the caller
            // bounds the wait.
            let held = client
                .lock(name, Some(options))
                .await
                .map_err(|e| format!("lock: {e}"))?;
            let key = held.key().to_vec();
            tracing::debug!(pair, "acme: holding the fleet's lock");
            let release = move || {
                tokio::spawn(async move {
                    let _ = within("unlock", client.unlock(key)).await;
                });
            };
            Ok(OrderLock(Some(Box::new(release))))
        })
    }

    fn publish<'a>(&'a self, pair: &'a str, pem: &'a str) -> Fut<'a, Result<(), String>> {
        Box::pin(async move {
            let (mut client, _) = self.client().await?;
            let key = self.cert_key(pair);
            let sealed = self.sealing.seal(key.as_bytes(), pem.as_bytes());
            within(
                "give the fleet the certificate",
                client.put(key, sealed, None),
            )
            .await
            .map(drop)
        })
    }

    fn challenge<'a>(&'a self, name: &'a str, digest: &'a [u8]) -> Fut<'a, Result<(), String>> {
        Box::pin(async move {
            let (mut client, lease) = self.client().await?;
            let key = format!("{}/challenge/{}", self.prefix, escape(name));
            let put = client.put(
                key,
                digest.to_vec(),
                Some(PutOptions::new().with_lease(lease)),
            );
            within("publish the challenge", put).await?;
            self.acknowledged(&mut client, name, digest).await
        })
    }

    fn withdraw<'a>(&'a self, names: &'a [String]) -> Fut<'a, ()> {
        Box::pin(async move {
            let Ok((mut client, _)) = self.client().await else {
                return;
            };
            for name in names {
                let challenge = format!("{}/challenge/{}", self.prefix, escape(name));
                let _ = within("withdraw the challenge", client.delete(challenge, None)).await;
                let acks = format!("{}/ack/{}/", self.prefix, escape(name));
                let prefix = Some(DeleteOptions::new().with_prefix());
                let _ = within("withdraw the challenge", client.delete(acks, prefix)).await;
            }
        })
    }
}
