//! isotime: the seed server's own time service, one ISO 8601 UTC line
//! (`2026-12-02T13:31:13Z`). The seed printed `2004-FEB-11T23:45:29`, which is not
//! ISO 8601; we print the standard form.

use std::io::Write;

use crate::model::clock::Civil;

/// Appends the whole answer: the current time as one line.
pub(super) fn answer(out: &mut Vec<u8>) {
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{}\r\n", Civil::now().iso8601());
}
