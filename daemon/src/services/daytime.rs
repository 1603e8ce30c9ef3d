//! daytime (RFC 867): one human-readable line with the current UTC time.

use std::io::Write;

use crate::model::clock::Civil;

/// Appends the whole answer: the current time as one line.
pub(super) fn answer(out: &mut Vec<u8>) {
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{}\r\n", Civil::now().daytime());
}
