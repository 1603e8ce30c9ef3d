//! time (RFC 868): four bytes, seconds since 1900-01-01 UTC, big-endian.

use crate::model::clock::{rfc868, unix_seconds};

/// Appends the whole answer: the four bytes for now.
pub(super) fn answer(out: &mut Vec<u8>) {
    out.extend_from_slice(&rfc868(unix_seconds()));
}
