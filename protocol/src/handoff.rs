//! The handoff control protocol between tcpmuxd and backends that take whole
//! connections (the connected socket itself, passed with SCM_RIGHTS).
//!
//! Over a Unix stream socket: the backend sends `REGISTER name...\n`; tcpmuxd
//! answers `OK\n` or `ERR reason\n`. Then, for each client of those names, tcpmuxd
//! sends one frame of exactly [`FRAME_LEN`] bytes, `CLIENT service peer local\n`
//! padded with spaces, carrying the client's socket as ancillary data. The request
//! line has been consumed and nothing else: the socket's next byte is the client's
//! first byte for the service, and tcpmuxd has already sent the client its `+`.
//! The socket arrives in blocking mode (O_NONBLOCK clear), as a socket from
//! accept(2) does; a backend that wants it non-blocking sets that itself. A
//! backend is sent its next client only once it has read the previous frame, so
//! read frames promptly. A backend unregisters by closing the socket.

use crate::name::{NameError, ServiceName};

/// Size of every client frame, so frames never merge or split ambiguously.
pub const FRAME_LEN: usize = 512;
/// Longest `REGISTER` line accepted.
pub const MAX_REGISTER_LINE: usize = 16 * 1024;

/// Why a control-socket message is malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandoffError {
    /// The registration line does not start with `REGISTER `.
    #[error("expected `REGISTER name...`")]
    NotRegister,
    /// `REGISTER` with nothing after it.
    #[error("REGISTER names no service")]
    NoNames,
    /// A name in the registration is not a valid service name.
    #[error("bad service name in REGISTER: {0}")]
    BadName(NameError),
    /// A client frame that is not `CLIENT service peer local` padded to its size.
    #[error("malformed CLIENT frame")]
    BadFrame,
}

/// The line a backend sends to register `names`.
pub fn encode_register(names: &[ServiceName]) -> Vec<u8> {
    let mut line = b"REGISTER".to_vec();
    for name in names {
        line.push(b' ');
        line.extend_from_slice(name.as_str().as_bytes());
    }
    line.push(b'\n');
    line
}

/// Parses a `REGISTER` line (without or with its line end).
pub fn parse_register(line: &[u8]) -> Result<Vec<ServiceName>, HandoffError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    if words.next() != Some(&b"REGISTER"[..]) {
        return Err(HandoffError::NotRegister);
    }
    let names = words
        .map(|w| ServiceName::from_bytes(w).map_err(HandoffError::BadName))
        .collect::<Result<Vec<_>, _>>()?;
    if names.is_empty() {
        return Err(HandoffError::NoNames);
    }
    Ok(names)
}

/// A client announced to a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientFrame {
    /// The service name the client asked for.
    pub service: String,
    /// `ip:port`, or `unix` for a client on a Unix listener.
    pub peer: String,
    /// The address the client connected to, or `-`.
    pub local: String,
}

/// Builds a frame; fields containing whitespace are replaced by `-` (they never
/// do: names are visible ASCII and addresses have no spaces).
pub fn encode_client_frame(frame: &ClientFrame) -> [u8; FRAME_LEN] {
    let field = |s: &str| {
        if s.is_empty() || s.bytes().any(|b| !b.is_ascii_graphic()) {
            "-".to_owned()
        } else {
            s.to_owned()
        }
    };
    let text = format!(
        "CLIENT {} {} {}\n",
        field(&frame.service),
        field(&frame.peer),
        field(&frame.local)
    );
    let mut out = [b' '; FRAME_LEN];
    let n = text.len().min(FRAME_LEN - 1);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out[FRAME_LEN - 1] = b'\n';
    out
}

/// Reads a client frame as [`encode_client_frame`] wrote it.
pub fn parse_client_frame(frame: &[u8]) -> Result<ClientFrame, HandoffError> {
    let line = frame
        .split(|&b| b == b'\n')
        .next()
        .ok_or(HandoffError::BadFrame)?;
    let text = std::str::from_utf8(line).map_err(|_| HandoffError::BadFrame)?;
    let mut words = text.split_whitespace();
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("CLIENT"), Some(service), Some(peer), Some(local)) => Ok(ClientFrame {
            service: service.to_owned(),
            peer: peer.to_owned(),
            local: local.to_owned(),
        }),
        _ => Err(HandoffError::BadFrame),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_round_trip() {
        let names = vec![
            ServiceName::parse("App").unwrap(),
            ServiceName::parse("b.c").unwrap(),
        ];
        let line = encode_register(&names);
        assert_eq!(line, b"REGISTER app b.c\n");
        assert_eq!(parse_register(&line), Ok(names));
        assert_eq!(parse_register(b"REGISTER\n"), Err(HandoffError::NoNames));
        assert_eq!(parse_register(b"HELLO x\n"), Err(HandoffError::NotRegister));
        assert!(matches!(
            parse_register(b"REGISTER a\x01b\n"),
            Err(HandoffError::BadName(_))
        ));
    }

    #[test]
    fn frame_round_trip() {
        let frame = ClientFrame {
            service: "app".into(),
            peer: "127.0.0.1:5000".into(),
            local: "127.0.0.1:1".into(),
        };
        let bytes = encode_client_frame(&frame);
        assert_eq!(bytes.len(), FRAME_LEN);
        assert_eq!(parse_client_frame(&bytes), Ok(frame));
        assert_eq!(
            parse_client_frame(&[b' '; FRAME_LEN]),
            Err(HandoffError::BadFrame)
        );
    }
}
