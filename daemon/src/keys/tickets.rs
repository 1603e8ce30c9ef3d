//! The TLS session-ticket keys: rustls's own ticketer (a new key every 6
//! hours, the previous one still accepted) until this instance is in a
//! fleet; then the fleet's keys, which one instance rotates and every
//! instance uses, so a ticket made by one resumes on another. A ticket
//! made before the fleet's keys arrived still resumes.

use std::sync::{Arc, RwLock};

use rustls::server::ProducesTickets;

use super::sealed::SealingKey;

/// A fleet ticket key: a 16-byte name (sent in each ticket, so that the
/// right key opens it) and a 32-byte AES-256-GCM key.
pub(crate) const TICKET_KEY_LEN: usize = 48;
const NAME_LEN: usize = 16;

pub(crate) struct Tickets {
    local: Arc<dyn ProducesTickets>,
    /// The fleet's keys, newest first: the first seals, any opens.
    fleet: RwLock<Vec<FleetKey>>,
}

struct FleetKey {
    name: [u8; NAME_LEN],
    key: SealingKey,
}

impl std::fmt::Debug for Tickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fleet = self.fleet.read().map_or(0, |keys| keys.len());
        write!(f, "Tickets {{ fleet keys: {fleet} }}")
    }
}

impl Tickets {
    pub(crate) fn new() -> Result<Tickets, rustls::Error> {
        Ok(Tickets {
            local: rustls::crypto::aws_lc_rs::Ticketer::new()?,
            fleet: RwLock::new(Vec::new()),
        })
    }

    /// Puts the fleet's keys (newest first) in force.
    pub(crate) fn use_fleet_keys(&self, keys: &[[u8; TICKET_KEY_LEN]]) {
        let keys = keys
            .iter()
            .map(|material| FleetKey {
                name: std::array::from_fn(|i| material[i]),
                key: SealingKey::new(&std::array::from_fn(|i| material[NAME_LEN + i])),
            })
            .collect();
        *self.fleet.write().unwrap_or_else(|p| p.into_inner()) = keys;
    }
}

impl ProducesTickets for Tickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.local.lifetime()
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let fleet = self.fleet.read().unwrap_or_else(|p| p.into_inner());
        let Some(newest) = fleet.first() else {
            return self.local.encrypt(plain);
        };
        let mut ticket = newest.name.to_vec();
        ticket.extend(newest.key.seal(&newest.name, plain));
        Some(ticket)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if let Some((name, sealed)) = ticket.split_at_checked(NAME_LEN) {
            let fleet = self.fleet.read().unwrap_or_else(|p| p.into_inner());
            if let Some(key) = fleet.iter().find(|k| k.name == name) {
                return key.key.open(name, sealed);
            }
        }
        self.local.decrypt(ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn material(byte: u8) -> [u8; TICKET_KEY_LEN] {
        [byte; TICKET_KEY_LEN]
    }

    #[test]
    fn a_ticket_from_one_instance_opens_on_another_with_the_same_keys() {
        let a = Tickets::new().unwrap();
        let b = Tickets::new().unwrap();
        let before = a.encrypt(b"session").unwrap();
        assert_eq!(b.decrypt(&before), None, "each its own local keys");
        a.use_fleet_keys(&[material(1)]);
        b.use_fleet_keys(&[material(1)]);
        let ticket = a.encrypt(b"session").unwrap();
        assert_eq!(b.decrypt(&ticket).as_deref(), Some(&b"session"[..]));
        assert_eq!(
            a.decrypt(&before).as_deref(),
            Some(&b"session"[..]),
            "made before"
        );
        // Rotated: the previous key still opens, a key dropped does not.
        b.use_fleet_keys(&[material(2), material(1)]);
        assert_eq!(b.decrypt(&ticket).as_deref(), Some(&b"session"[..]));
        b.use_fleet_keys(&[material(3), material(2)]);
        assert_eq!(b.decrypt(&ticket), None);
        assert_eq!(b.decrypt(b"short"), None);
    }
}
