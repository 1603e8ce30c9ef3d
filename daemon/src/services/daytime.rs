//! daytime (RFC 867): one human-readable line with the current UTC time.

use crate::clock::Civil;

/// The whole answer: the current time as one line.
pub fn answer() -> Vec<u8> {
    format!("{}\r\n", Civil::now().daytime()).into_bytes()
}
