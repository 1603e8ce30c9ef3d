//! The fleet's TLS session-ticket keys in etcd: one value, `tickets`,
//! sealed under the fleet's secret, holding when the newest key was made
//! and the keys, newest first. An instance that finds the newest older than
//! `ROTATE_EVERY` (or none) writes a new set in a transaction that succeeds
//! only if nobody wrote since it read, so one rotates; every instance puts
//! what its watch brings in force. etcd never holds a key in the clear.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};

use crate::keys::sealed::{random, SealingKey};
use crate::keys::{Keys, TICKET_KEY_LEN};
use crate::model::Cluster;

/// How long a key is the newest; the previous one still opens tickets.
const ROTATE_EVERY: Duration = Duration::from_secs(6 * 3600);
/// The newest and the one before it.
const KEEP: usize = 2;

type Key = [u8; TICKET_KEY_LEN];

/// What this instance holds of the fleet's ticket keys.
pub(super) struct TicketKeys {
    /// The etcd key, `PREFIX/tickets`.
    at: String,
    sealing: SealingKey,
    /// The `mod_revision` of the value held; 0 for none.
    revision: i64,
    made: i64,
    keys: Vec<Key>,
}

impl TicketKeys {
    pub(super) fn new(cluster: &Cluster) -> TicketKeys {
        TicketKeys {
            at: format!("{}/tickets", cluster.prefix),
            sealing: SealingKey::derive(&cluster.secret.0, "session tickets"),
            revision: 0,
            made: 0,
            keys: Vec::new(),
        }
    }

    pub(super) fn is_ours(&self, key: &[u8]) -> bool {
        key == self.at.as_bytes()
    }

    /// Puts the value etcd holds (at `revision`) in force; a value that
    /// does not open (another secret) is logged and left.
    pub(super) fn take(&mut self, value: &[u8], revision: i64, keys: &Keys) {
        let Some((made, set)) = self.sealing.open(self.at.as_bytes(), value).and_then(parse) else {
            tracing::warn!("fleet: the session-ticket keys in etcd do not open with this instance's secret; is `secret` the same on every instance?");
            return;
        };
        let Ok(tickets) = keys.ticket_keys() else {
            return;
        };
        tickets.use_fleet_keys(&set);
        let newest = set
            .first()
            .map(|k| tcpmux_proto::hex::encode(&k[..4]))
            .unwrap_or_default();
        tracing::info!(key = %newest, made, keys = set.len(), "fleet: session-ticket keys in force");
        (self.revision, self.made, self.keys) = (revision, made, set);
    }

    /// Whether a new key is due at `now` (Unix seconds).
    pub(super) fn due(&self, now: i64) -> bool {
        self.keys.is_empty() || now.saturating_sub(self.made) >= ROTATE_EVERY.as_secs() as i64
    }

    /// Writes a new set (a fresh key, then the newest held) unless another
    /// instance wrote since this one read; the watch brings either.
    pub(super) async fn rotate(&self, client: &mut Client, now: i64) -> Result<(), String> {
        let mut fresh = [0u8; TICKET_KEY_LEN];
        random(&mut fresh);
        let set: Vec<Key> = std::iter::once(fresh)
            .chain(self.keys.iter().copied())
            .take(KEEP)
            .collect();
        let mut plain = now.to_be_bytes().to_vec();
        for key in &set {
            plain.extend_from_slice(key);
        }
        let sealed = self.sealing.seal(self.at.as_bytes(), &plain);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                self.at.clone(),
                CompareOp::Equal,
                self.revision,
            )])
            .and_then([TxnOp::put(self.at.clone(), sealed, None::<PutOptions>)]);
        let answer = super::deadline::within("rotate the ticket keys", client.txn(txn)).await?;
        if answer.succeeded() {
            tracing::info!(key = %tcpmux_proto::hex::encode(&fresh[..4]), "fleet: made new session-ticket keys");
        }
        Ok(())
    }
}

/// `made (8, big-endian) || keys (48 each)`.
fn parse(plain: Vec<u8>) -> Option<(i64, Vec<Key>)> {
    let (made, keys) = plain.split_at_checked(8)?;
    let made = i64::from_be_bytes(made.try_into().ok()?);
    if keys.is_empty() || keys.len() % TICKET_KEY_LEN != 0 {
        return None;
    }
    let set = keys
        .chunks_exact(TICKET_KEY_LEN)
        .filter_map(|k| k.try_into().ok())
        .collect();
    Some((made, set))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_set_reads_back_and_a_bad_one_does_not() {
        let mut plain = 42i64.to_be_bytes().to_vec();
        plain.extend([1u8; TICKET_KEY_LEN]);
        plain.extend([2u8; TICKET_KEY_LEN]);
        let (made, set) = parse(plain.clone()).unwrap();
        assert_eq!((made, set.len(), set[1][0]), (42, 2, 2));
        assert_eq!(parse(plain[..8].to_vec()), None, "no key");
        assert_eq!(parse(plain[..60].to_vec()), None, "a key cut short");
        assert_eq!(parse(vec![1, 2]), None);
    }
}
