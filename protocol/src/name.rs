//! Service names: what bytes a name may hold and its case-folded form.

use std::fmt;
use std::sync::Arc;

/// RFC 1078 does not bound the name; we do, so a client cannot make us buffer forever.
pub const MAX_NAME_LEN: usize = 256;

/// A validated service name, folded to lower case (names are case-insensitive).
///
/// A name is 1 to [`MAX_NAME_LEN`] bytes of visible ASCII (0x21..=0x7e). Spaces and
/// control bytes are refused rather than trimmed, so `"echo "` is never silently `echo`.
///
/// Shared, so a clone (a session's log line, its row in `show sessions`)
/// costs no allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceName(Arc<str>);

/// Why a byte string is not a service name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// No byte before the line end.
    #[error("empty service name")]
    Empty,
    /// More than [`MAX_NAME_LEN`] bytes.
    #[error("service name longer than {MAX_NAME_LEN} bytes")]
    TooLong,
    /// A byte outside visible ASCII (space, control, or 8-bit).
    #[error("byte 0x{0:02x} in service name (only visible ASCII is allowed)")]
    InvalidByte(u8),
}

impl ServiceName {
    /// Validates and case-folds `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, NameError> {
        if bytes.is_empty() {
            return Err(NameError::Empty);
        }
        if bytes.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong);
        }
        if let Some(&bad) = bytes.iter().find(|&&b| !is_name_byte(b)) {
            return Err(NameError::InvalidByte(bad));
        }
        let mut folded = [0u8; MAX_NAME_LEN];
        let folded = &mut folded[..bytes.len()];
        folded.copy_from_slice(bytes);
        folded.make_ascii_lowercase();
        // Every byte is ASCII, so this cannot fail; map instead of unwrap anyway.
        let text = std::str::from_utf8(folded).map_err(|_| NameError::InvalidByte(bytes[0]))?;
        Ok(Self(Arc::from(text)))
    }

    /// Validates and case-folds `text`.
    pub fn parse(text: &str) -> Result<Self, NameError> {
        Self::from_bytes(text.as_bytes())
    }

    /// The name, in lower case.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `HELP` is the one name RFC 1078 reserves.
    pub fn is_help(&self) -> bool {
        &*self.0 == "help"
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ServiceName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

pub(crate) fn is_name_byte(b: u8) -> bool {
    (0x21..=0x7e).contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_case() {
        assert_eq!(ServiceName::parse("EcHo").unwrap().as_str(), "echo");
        assert!(ServiceName::parse("HELP").unwrap().is_help());
    }

    #[test]
    fn bounds_length() {
        assert!(ServiceName::from_bytes(&[b'a'; MAX_NAME_LEN]).is_ok());
        assert_eq!(
            ServiceName::from_bytes(&[b'a'; MAX_NAME_LEN + 1]),
            Err(NameError::TooLong)
        );
        assert_eq!(ServiceName::from_bytes(b""), Err(NameError::Empty));
    }

    #[test]
    fn refuses_spaces_controls_and_non_ascii() {
        assert_eq!(
            ServiceName::parse("echo "),
            Err(NameError::InvalidByte(b' '))
        );
        assert_eq!(
            ServiceName::from_bytes(b"a\0b"),
            Err(NameError::InvalidByte(0))
        );
        assert_eq!(
            ServiceName::from_bytes("é".as_bytes()),
            Err(NameError::InvalidByte(0xc3))
        );
    }
}
