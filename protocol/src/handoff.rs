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
//!
//! Acknowledgements: a backend that registers with `REGISTER-ACK name...\n`
//! instead gets a fifth field in each frame, a sequence number, and answers
//! `ACK seq\n` on the control connection once it holds the socket. A socket
//! not acknowledged within the daemon's delivery timeout is shut down (both
//! ways: the backend's copy sees it too), so a backend that stops reading
//! cannot keep a client waiting after its `+`. A daemon from before
//! acknowledgements answers `REGISTER-ACK` with `ERR`; a backend then
//! registers again with plain `REGISTER`.

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
    /// A line from the backend that is not `ACK seq`.
    #[error("expected `ACK seq`")]
    BadAck,
}

/// What a `REGISTER` (or `REGISTER-ACK`) line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The names to serve.
    pub names: Vec<ServiceName>,
    /// Whether the backend acknowledges each client (`REGISTER-ACK`).
    pub acks: bool,
}

/// The line a backend sends to register `names`.
pub fn encode_register(names: &[ServiceName]) -> Vec<u8> {
    register_line(b"REGISTER", names)
}

/// The line a backend that acknowledges each client sends to register `names`.
pub fn encode_register_with_acks(names: &[ServiceName]) -> Vec<u8> {
    register_line(b"REGISTER-ACK", names)
}

fn register_line(verb: &[u8], names: &[ServiceName]) -> Vec<u8> {
    let mut line = verb.to_vec();
    for name in names {
        line.push(b' ');
        line.extend_from_slice(name.as_str().as_bytes());
    }
    line.push(b'\n');
    line
}

/// Parses a `REGISTER` line (without or with its line end); `REGISTER-ACK`
/// is refused here (see [`parse_registration`]).
pub fn parse_register(line: &[u8]) -> Result<Vec<ServiceName>, HandoffError> {
    match parse_registration(line)? {
        Registration { acks: true, .. } => Err(HandoffError::NotRegister),
        Registration { names, .. } => Ok(names),
    }
}

/// Parses a `REGISTER` or `REGISTER-ACK` line (without or with its line end).
pub fn parse_registration(line: &[u8]) -> Result<Registration, HandoffError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let acks = match words.next() {
        Some(b"REGISTER") => false,
        Some(b"REGISTER-ACK") => true,
        _ => return Err(HandoffError::NotRegister),
    };
    let names = words
        .map(|w| ServiceName::from_bytes(w).map_err(HandoffError::BadName))
        .collect::<Result<Vec<_>, _>>()?;
    if names.is_empty() {
        return Err(HandoffError::NoNames);
    }
    Ok(Registration { names, acks })
}

/// The line a backend sends once it holds the socket of frame `seq`.
pub fn encode_ack(seq: u64) -> Vec<u8> {
    format!("ACK {seq}\n").into_bytes()
}

/// Reads an `ACK seq` line (without its line end).
pub fn parse_ack(line: &[u8]) -> Result<u64, HandoffError> {
    let text = std::str::from_utf8(line).map_err(|_| HandoffError::BadAck)?;
    let seq = text.strip_prefix("ACK ").ok_or(HandoffError::BadAck)?;
    seq.parse().map_err(|_| HandoffError::BadAck)
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
    /// For a backend that acknowledges: the number to acknowledge it by.
    pub seq: Option<u64>,
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
    let seq = frame.seq.map(|n| format!(" {n}")).unwrap_or_default();
    let text = format!(
        "CLIENT {} {} {}{seq}\n",
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
    let frame = match (words.next(), words.next(), words.next(), words.next()) {
        (Some("CLIENT"), Some(service), Some(peer), Some(local)) => ClientFrame {
            service: service.to_owned(),
            peer: peer.to_owned(),
            local: local.to_owned(),
            seq: None,
        },
        _ => return Err(HandoffError::BadFrame),
    };
    let seq = match words.next() {
        None => None,
        Some(n) => Some(n.parse().map_err(|_| HandoffError::BadFrame)?),
    };
    Ok(ClientFrame { seq, ..frame })
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
    fn acknowledging_backends_register_and_ack() {
        let names = vec![ServiceName::parse("app").unwrap()];
        let line = encode_register_with_acks(&names);
        assert_eq!(line, b"REGISTER-ACK app\n");
        let registration = Registration {
            names: names.clone(),
            acks: true,
        };
        assert_eq!(parse_registration(&line), Ok(registration));
        // What a daemon from before acknowledgements makes of it: an error.
        assert_eq!(parse_register(&line), Err(HandoffError::NotRegister));
        let ack = encode_ack(42);
        assert_eq!(parse_ack(ack.strip_suffix(b"\n").unwrap()), Ok(42));
        for bad in [&b"ACK"[..], b"ACK x", b"NACK 1", b"ACK 1 2"] {
            assert_eq!(parse_ack(bad), Err(HandoffError::BadAck), "{bad:?}");
        }
    }

    #[test]
    fn frame_round_trip() {
        let frame = ClientFrame {
            service: "app".into(),
            peer: "127.0.0.1:5000".into(),
            local: "127.0.0.1:1".into(),
            seq: None,
        };
        let bytes = encode_client_frame(&frame);
        assert_eq!(bytes.len(), FRAME_LEN);
        assert_eq!(parse_client_frame(&bytes), Ok(frame.clone()));
        let acked = ClientFrame {
            seq: Some(7),
            ..frame
        };
        assert_eq!(parse_client_frame(&encode_client_frame(&acked)), Ok(acked));
        assert_eq!(
            parse_client_frame(&[b' '; FRAME_LEN]),
            Err(HandoffError::BadFrame)
        );
    }
}
