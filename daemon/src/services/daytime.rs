//! daytime (RFC 867): one human-readable line with the current UTC time.

use crate::model::clock::Civil;

/// Appends the whole answer: the current time as one line.
pub fn answer(out: &mut Vec<u8>) {
    out.extend_from_slice(Civil::now().daytime().as_bytes());
    out.extend_from_slice(b"\r\n");
}
