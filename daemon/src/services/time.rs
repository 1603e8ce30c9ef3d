//! time (RFC 868): four bytes, seconds since 1900-01-01 UTC, big-endian.

use crate::clock::{rfc868, unix_seconds};

/// The whole answer: the four bytes for now.
pub fn answer() -> Vec<u8> {
    rfc868(unix_seconds()).to_vec()
}
