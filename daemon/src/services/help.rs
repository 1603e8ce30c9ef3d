//! HELP (RFC 1078): the service names, one per CRLF line, with no status line.

/// Renders the HELP answer once per registry, so serving it is a single write.
pub fn render<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut text = Vec::new();
    for name in names {
        text.extend_from_slice(name.as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    text
}
