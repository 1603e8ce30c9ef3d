//! The binary-upgrade exchange's frames, as pure code: the running daemon
//! sends its successor one frame of exactly [`FRAME`] bytes per socket (`KIND
//! VALUE`, padded with spaces, ended by a newline; the socket itself travels
//! beside it as SCM_RIGHTS), then `END VERSION`. The version is on the last
//! frame because a successor of the first version ignored its value: a new
//! daemon can still hand over to an old binary (a rollback), and a successor
//! learns the exchange's version before it serves, refusing one it does not
//! know. A frame from a daemon before versions says `END` alone: version 0,
//! the same frames. What an operator set at run time travels too, as frames
//! without a socket (`DISABLED`, `MEMBER`); a daemon with none sends none, so
//! the exchange an older successor reads is unchanged. So do UDP sockets
//! (`LISTEN_UDP`): only a daemon with UDP listeners sends them, and its
//! UDP flows (`FLOW`, each with its backend socket; flow.rs).

mod flow;

pub use flow::Flow;

/// Every frame's size, so frames never merge or split ambiguously.
pub const FRAME: usize = 512;
/// The exchange this code speaks.
pub const VERSION: u32 = 1;
/// The longest `KIND VALUE` text a frame holds (the rest is padding and the
/// newline).
pub const MAX_TEXT: usize = FRAME - 1;

/// One frame of the exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A TCPMUX listening socket, by the address it is bound to.
    Listen(&'a str),
    /// A listener's UDP socket (`udp = true`), by the address it is bound
    /// to.
    ListenUdp(&'a str),
    /// The metrics endpoint's socket, by its configured address.
    Metrics(&'a str),
    /// The handoff control socket, by its path.
    Control(&'a str),
    /// The upgrade socket itself, by its path.
    Upgrade(&'a str),
    /// The admin socket, by its path.
    Admin(&'a str),
    /// A handoff backend's registration; its control connection travels
    /// with it.
    Backend(Registration<'a>),
    /// A service an operator turned off at run time (no socket).
    Disabled(&'a str),
    /// A proxy member's state or weight an operator set at run time (no
    /// socket).
    Member(Member<'a>),
    /// A UDP flow; its backend socket travels with it.
    Flow(Flow<'a>),
    /// The last frame: the exchange's version (0 from a daemon before
    /// versions).
    End(u32),
}

impl Frame<'_> {
    /// The frame's kind, as it is written.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Listen(_) => "LISTEN",
            Frame::ListenUdp(_) => "LISTEN_UDP",
            Frame::Metrics(_) => "METRICS",
            Frame::Control(_) => "CONTROL",
            Frame::Upgrade(_) => "UPGRADE",
            Frame::Admin(_) => "ADMIN",
            Frame::Backend(_) => "BACKEND",
            Frame::Disabled(_) => "DISABLED",
            Frame::Member(_) => "MEMBER",
            Frame::Flow(_) => "FLOW",
            Frame::End(_) => "END",
        }
    }
}

/// A handoff backend's registration as it travels in a `BACKEND` frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration<'a> {
    /// The backend process's credentials, from SO_PEERCRED.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
    /// Its process id.
    pub pid: i32,
    /// The names it registered, in order.
    pub names: Vec<&'a str>,
    /// Whether it acknowledges each client (`REGISTER-ACK`), written as a
    /// last field `ack`.
    pub acks: bool,
}

/// A proxy member's run-time settings as they travel in a `MEMBER` frame:
/// `MEMBER SERVICE STATE WEIGHT|- BACKEND`, the backend last so that a Unix
/// socket path may hold spaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member<'a> {
    /// The proxy service's name.
    pub service: &'a str,
    /// `ready`, `drain` or `maint`.
    pub state: &'a str,
    /// The weight set in place of the configured one, if any.
    pub weight: Option<u32>,
    /// The member as the daemon writes it (`10.0.0.1:80`, `unix:/path`).
    pub backend: &'a str,
}

/// The administrative states a `MEMBER` frame may carry.
pub const MEMBER_STATES: [&str; 3] = ["ready", "drain", "maint"];

/// Why a frame cannot be made or read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The text does not fit in one frame.
    #[error("an upgrade frame of {0} bytes, more than {MAX_TEXT} fit")]
    TooLong(usize),
    /// A value holds a byte a frame cannot carry (a newline, a control
    /// byte, a space inside a name list).
    #[error("an upgrade frame value holds a byte it cannot carry")]
    BadValue,
    /// Not [`FRAME`] bytes, or not text ending in a newline.
    #[error("a malformed upgrade frame")]
    Malformed,
    /// A kind this version does not know.
    #[error("an upgrade frame of unknown kind {0:?}")]
    UnknownKind(String),
    /// A `BACKEND` frame whose fields do not parse.
    #[error("a malformed BACKEND upgrade frame")]
    BadBackend,
    /// A `MEMBER` or `DISABLED` frame whose fields do not parse.
    #[error("a malformed run-time state upgrade frame")]
    BadState,
    /// A `FLOW` frame whose fields do not parse.
    #[error("a malformed FLOW upgrade frame")]
    BadFlow,
}

/// The frame's bytes: `KIND VALUE`, spaces, and a newline at the end.
pub fn encode(frame: &Frame<'_>) -> Result<[u8; FRAME], FrameError> {
    let kind = frame.kind();
    let text = match frame {
        Frame::Listen(v)
        | Frame::ListenUdp(v)
        | Frame::Metrics(v)
        | Frame::Control(v)
        | Frame::Upgrade(v)
        | Frame::Admin(v) => {
            format!("{kind} {}", checked(v)?)
        }
        Frame::Backend(r) => {
            if r.names.is_empty()
                || r.names
                    .iter()
                    .any(|n| n.is_empty() || n.contains([' ', ',']))
            {
                return Err(FrameError::BadValue);
            }
            let names = checked(&r.names.join(","))?.to_owned();
            let acks = if r.acks { " ack" } else { "" };
            format!("{kind} {} {} {} {names}{acks}", r.uid, r.gid, r.pid)
        }
        Frame::Disabled(name) => format!("{kind} {}", word(name)?),
        Frame::Member(m) => {
            if !MEMBER_STATES.contains(&m.state) {
                return Err(FrameError::BadValue);
            }
            let weight = m.weight.map_or_else(|| "-".to_owned(), |w| w.to_string());
            let (service, backend) = (word(m.service)?, checked(m.backend)?);
            format!("{kind} {service} {} {weight} {backend}", m.state)
        }
        Frame::Flow(flow) => format!("{kind} {}", flow.value()?),
        Frame::End(version) => format!("{kind} {version}"),
    };
    if text.len() > MAX_TEXT {
        return Err(FrameError::TooLong(text.len()));
    }
    let mut bytes = [b' '; FRAME];
    bytes[..text.len()].copy_from_slice(text.as_bytes());
    bytes[FRAME - 1] = b'\n';
    Ok(bytes)
}

/// A value as it may go in a frame: printable text, not empty.
fn checked(value: &str) -> Result<&str, FrameError> {
    let printable = !value.is_empty() && !value.chars().any(char::is_control);
    // Leading or trailing spaces would not survive the padding.
    if !printable || value.trim() != value {
        return Err(FrameError::BadValue);
    }
    Ok(value)
}

/// A value that must be one word: [`checked`], and no space.
fn word(value: &str) -> Result<&str, FrameError> {
    checked(value).and_then(|v| match v.contains(' ') {
        true => Err(FrameError::BadValue),
        false => Ok(v),
    })
}

/// Reads one whole frame.
pub fn parse(bytes: &[u8]) -> Result<Frame<'_>, FrameError> {
    if bytes.len() != FRAME || bytes[FRAME - 1] != b'\n' {
        return Err(FrameError::Malformed);
    }
    let text = std::str::from_utf8(&bytes[..FRAME - 1]).map_err(|_| FrameError::Malformed)?;
    let text = text.trim_end_matches(' ');
    let (kind, value) = text.split_once(' ').unwrap_or((text, ""));
    let value = checked(value);
    Ok(match kind {
        "LISTEN" => Frame::Listen(value?),
        "LISTEN_UDP" => Frame::ListenUdp(value?),
        "METRICS" => Frame::Metrics(value?),
        "CONTROL" => Frame::Control(value?),
        "UPGRADE" => Frame::Upgrade(value?),
        "ADMIN" => Frame::Admin(value?),
        "BACKEND" => Frame::Backend(registration(value?)?),
        "DISABLED" => Frame::Disabled(word(value?).map_err(|_| FrameError::BadState)?),
        "MEMBER" => Frame::Member(member(value?)?),
        "FLOW" => Frame::Flow(flow::flow(value?)?),
        // `END` alone: a daemon from before versions.
        "END" if value.is_err() => Frame::End(0),
        "END" => Frame::End(value?.parse().map_err(|_| FrameError::Malformed)?),
        other => return Err(FrameError::UnknownKind(other.chars().take(32).collect())),
    })
}

/// `service state weight|- backend`.
fn member(value: &str) -> Result<Member<'_>, FrameError> {
    let mut fields = value.splitn(4, ' ');
    let mut field = || fields.next().ok_or(FrameError::BadState);
    let (service, state, weight, backend) = (field()?, field()?, field()?, field()?);
    let weight = match weight {
        "-" => None,
        w => Some(w.parse().map_err(|_| FrameError::BadState)?),
    };
    let state = MEMBER_STATES
        .into_iter()
        .find(|s| *s == state)
        .ok_or(FrameError::BadState)?;
    Ok(Member {
        service: word(service).map_err(|_| FrameError::BadState)?,
        state,
        weight,
        backend: checked(backend).map_err(|_| FrameError::BadState)?,
    })
}

/// `uid gid pid name,name…`.
fn registration(value: &str) -> Result<Registration<'_>, FrameError> {
    let mut fields = value.split(' ');
    let mut number = || fields.next().and_then(|f| f.parse::<i64>().ok());
    let (uid, gid, pid) = (number(), number(), number());
    // What `encode` would refuse is refused here too (a name list that
    // starts or ends with Unicode white space, say): a frame read can
    // always be written back.
    let names = fields
        .next()
        .and_then(|names| checked(names).ok())
        .ok_or(FrameError::BadBackend)?;
    let acks = match fields.next() {
        None => false,
        Some("ack") => true,
        Some(_) => return Err(FrameError::BadBackend),
    };
    if fields.next().is_some() {
        return Err(FrameError::BadBackend);
    }
    let id = |n: Option<i64>| n.and_then(|n| u32::try_from(n).ok());
    let names: Vec<&str> = names.split(',').collect();
    if names.iter().any(|n| n.is_empty()) {
        return Err(FrameError::BadBackend);
    }
    Ok(Registration {
        uid: id(uid).ok_or(FrameError::BadBackend)?,
        gid: id(gid).ok_or(FrameError::BadBackend)?,
        pid: pid
            .and_then(|p| i32::try_from(p).ok())
            .ok_or(FrameError::BadBackend)?,
        names,
        acks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the fuzzer: a name list starting with U+202F (narrow
    /// no-break space) was read, and `encode` refused to write it back.
    #[test]
    fn a_name_list_encode_would_refuse_is_not_read() {
        let mut frame = [b' '; FRAME];
        let text = "BACKEND 0 0 5 \u{202f}app".as_bytes();
        frame[..text.len()].copy_from_slice(text);
        frame[FRAME - 1] = b'\n';
        assert_eq!(parse(&frame), Err(FrameError::BadBackend));
    }

    #[test]
    fn every_kind_reads_back_as_written() {
        let frames = [
            Frame::Listen("127.0.0.1:41397"),
            Frame::ListenUdp("[::1]:443"),
            Frame::Metrics("[::1]:9100"),
            Frame::Control("/run/tcpmuxd/handoff.sock"),
            Frame::Upgrade("/run/tcpmuxd/upgrade sock with spaces"),
            Frame::Admin("/run/tcpmuxd/admin.sock"),
            Frame::Backend(Registration {
                uid: 1000,
                gid: 100,
                pid: 4242,
                names: vec!["app", "app-admin"],
                acks: false,
            }),
            Frame::Backend(Registration {
                uid: 0,
                gid: 0,
                pid: 1,
                names: vec!["acked"],
                acks: true,
            }),
            Frame::Disabled("web"),
            Frame::Member(Member {
                service: "web",
                state: "drain",
                weight: None,
                backend: "10.0.0.1:80",
            }),
            Frame::Member(Member {
                service: "web",
                state: "ready",
                weight: Some(5),
                backend: "unix:/run/app sock",
            }),
            Frame::End(VERSION),
        ];
        for frame in frames {
            let bytes = encode(&frame).unwrap();
            assert_eq!(bytes.len(), FRAME);
            assert_eq!(parse(&bytes), Ok(frame));
        }
    }

    #[test]
    fn a_daemon_before_versions_ends_with_end_alone() {
        let mut bytes = [b' '; FRAME];
        bytes[..3].copy_from_slice(b"END");
        bytes[FRAME - 1] = b'\n';
        assert_eq!(parse(&bytes), Ok(Frame::End(0)));
    }

    #[test]
    fn what_cannot_travel_is_refused() {
        let long = "x".repeat(FRAME);
        assert!(matches!(
            encode(&Frame::Listen(&long)),
            Err(FrameError::TooLong(_))
        ));
        assert_eq!(encode(&Frame::Control("a\nb")), Err(FrameError::BadValue));
        assert_eq!(
            encode(&Frame::Control(" padded")),
            Err(FrameError::BadValue)
        );
        let spaced = Registration {
            uid: 0,
            gid: 0,
            pid: 1,
            names: vec!["a b"],
            acks: false,
        };
        assert_eq!(encode(&Frame::Backend(spaced)), Err(FrameError::BadValue));
    }

    #[test]
    fn malformed_frames_are_errors() {
        assert_eq!(parse(b"LISTEN x\n"), Err(FrameError::Malformed));
        let frame = |text: &str| {
            let mut bytes = [b' '; FRAME];
            bytes[..text.len()].copy_from_slice(text.as_bytes());
            bytes[FRAME - 1] = b'\n';
            bytes
        };
        assert_eq!(parse(&frame("LISTEN")), Err(FrameError::BadValue));
        assert_eq!(
            parse(&frame("NEWKIND x")),
            Err(FrameError::UnknownKind("NEWKIND".into()))
        );
        for bad in [
            "BACKEND 1 2",
            "BACKEND -1 2 3 a",
            "BACKEND 1 2 3 a,,b",
            "BACKEND 1 2 3 a b",
        ] {
            assert_eq!(parse(&frame(bad)), Err(FrameError::BadBackend), "{bad}");
        }
        assert_eq!(parse(&frame("END soon")), Err(FrameError::Malformed));
        for bad in [
            "MEMBER web drain -",
            "MEMBER web sleepy - a:1",
            "MEMBER web drain x a:1",
            "MEMBER web drain -1 a:1",
            "DISABLED a b",
        ] {
            assert_eq!(parse(&frame(bad)), Err(FrameError::BadState), "{bad}");
        }
    }
}
