//! AES-256-GCM with a fresh random nonce per message: what a fleet keeps
//! in etcd is sealed under a key derived from its `secret` (HKDF-SHA256,
//! one key per purpose), and its session tickets under the shared ticket
//! keys. A sealed message is `nonce (12) || ciphertext || tag (16)`; the
//! associated data binds it to where it belongs (a key's name).

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::hkdf::{Salt, HKDF_SHA256};

/// What the fleet's keys are derived under: a new scheme gets a new salt.
const SALT: &[u8] = b"tcpmuxd fleet v1";

pub(crate) struct SealingKey(LessSafeKey);

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingKey")
    }
}

impl SealingKey {
    /// A key of 32 bytes.
    pub(crate) fn new(key: &[u8; 32]) -> SealingKey {
        // AES-256 takes any 32 bytes: the error cannot happen.
        let unbound = UnboundKey::new(&AES_256_GCM, key).unwrap_or_else(|_| unreachable!());
        SealingKey(LessSafeKey::new(unbound))
    }

    /// The key for `purpose` derived from a fleet's `secret`.
    pub(crate) fn derive(secret: &[u8], purpose: &str) -> SealingKey {
        let prk = Salt::new(HKDF_SHA256, SALT).extract(secret);
        let mut key = [0u8; 32];
        let info = [purpose.as_bytes()];
        // 32 bytes is within HKDF-SHA256's output: neither step can fail.
        prk.expand(&info, HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut key))
            .unwrap_or_else(|_| unreachable!());
        SealingKey::new(&key)
    }

    /// `plain` sealed, bound to `aad`.
    pub(crate) fn seal(&self, aad: &[u8], plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        random(&mut nonce);
        let mut sealed = Vec::with_capacity(NONCE_LEN + plain.len() + 16);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(plain);
        let mut body = sealed.split_off(NONCE_LEN);
        // Sealing only fails on a message longer than GCM allows (64 GiB).
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut body,
            )
            .unwrap_or_else(|_| unreachable!());
        sealed.extend_from_slice(&body);
        sealed
    }

    /// What `sealed` holds, if it was sealed under this key with `aad`.
    pub(crate) fn open(&self, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        let (nonce, body) = sealed.split_at_checked(NONCE_LEN)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plain = self
            .0
            .open_in_place(nonce, Aad::from(aad), &mut body)
            .ok()?;
        Some(plain.to_vec())
    }
}

/// `buf` filled from the system's random source.
pub(crate) fn random(buf: &mut [u8]) {
    // The kernel's generator does not fail once booted; were it to, a
    // zero nonce is still unique under a fresh key only, so stop.
    aws_lc_rs::rand::fill(buf).unwrap_or_else(|_| panic!("no random numbers from the system"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_sealed_opens_only_with_its_key_and_place() {
        let key = SealingKey::derive(&[7u8; 32], "tickets");
        let sealed = key.seal(b"/p/tickets", b"the keys");
        assert_eq!(
            key.open(b"/p/tickets", &sealed).as_deref(),
            Some(&b"the keys"[..])
        );
        assert!(
            !sealed.windows(8).any(|w| w == b"the keys"),
            "plaintext inside"
        );
        assert_eq!(key.open(b"/p/other", &sealed), None, "moved elsewhere");
        let other = SealingKey::derive(&[8u8; 32], "tickets");
        assert_eq!(other.open(b"/p/tickets", &sealed), None, "another secret");
        let purpose = SealingKey::derive(&[7u8; 32], "acme");
        assert_eq!(
            purpose.open(b"/p/tickets", &sealed),
            None,
            "another purpose"
        );
        let mut flipped = sealed.clone();
        flipped[20] ^= 1;
        assert_eq!(key.open(b"/p/tickets", &flipped), None, "changed");
        assert_eq!(key.open(b"/p/tickets", &sealed[..11]), None, "short");
        assert_ne!(
            key.seal(b"a", b"x"),
            key.seal(b"a", b"x"),
            "a fresh nonce each time"
        );
    }
}
