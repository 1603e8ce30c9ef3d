//! The backend side of tcpmuxd's handoff: register service names on the daemon's
//! control socket, then receive each client's connection as an ordinary stream.
//! tcpmuxd has already answered `+` and keeps no copy of the socket.
//!
//! ```no_run
//! use std::io::Write;
//! let mut backend = tcpmux::handoff::Backend::register("/run/tcpmuxd/handoff.sock", &["myapp"])?;
//! loop {
//!     let mut client = backend.accept()?;
//!     writeln!(client.stream, "hello {}", client.peer)?;
//! }
//! # Ok::<(), tcpmux::handoff::HandoffError>(())
//! ```

use std::io::{self, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::Stream;

use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use tcpmux_proto::handoff::{
    encode_ack, encode_register, encode_register_with_acks, parse_client_frame, ClientFrame,
    FRAME_LEN,
};
use tcpmux_proto::ServiceName;

#[cfg(feature = "async")]
mod nonblocking;
#[cfg(feature = "async")]
pub use nonblocking::AsyncBackend;

/// Why registering or receiving failed.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// A name to register is not a valid service name.
    #[error("invalid service name {name:?}: {source}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        source: tcpmux_proto::NameError,
    },
    /// tcpmuxd answered `ERR`: the names are not handoff services, or this
    /// process's uid/gid may not serve them.
    #[error("tcpmuxd refused the registration: {0}")]
    Refused(String),
    /// tcpmuxd closed the control connection (it stopped, or dropped us).
    #[error("tcpmuxd closed the control connection")]
    Closed,
    /// A frame from tcpmuxd that does not parse, or came without a socket.
    #[error("malformed handoff frame from tcpmuxd")]
    Protocol,
    /// The control socket failed.
    #[error("i/o error on the control socket: {0}")]
    Io(#[from] io::Error),
}

/// A connection handed over by tcpmuxd.
#[derive(Debug)]
pub struct Handoff<S> {
    /// The client's connection, positioned after its request line and our `+`.
    pub stream: S,
    /// The service name the client asked for (lower case).
    pub service: String,
    /// The client's `ip:port`, or `unix`.
    pub peer: String,
    /// The address the client connected to, or `-`.
    pub local: String,
}

impl<S> Handoff<S> {
    fn new(stream: S, frame: ClientFrame) -> Handoff<S> {
        Handoff {
            stream,
            service: frame.service,
            peer: frame.peer,
            local: frame.local,
        }
    }
}

fn names(list: &[&str]) -> Result<Vec<ServiceName>, HandoffError> {
    list.iter()
        .map(|n| {
            ServiceName::parse(n).map_err(|source| HandoffError::InvalidName {
                name: (*n).to_owned(),
                source,
            })
        })
        .collect()
}

fn check_answer(answer: &[u8]) -> Result<(), HandoffError> {
    match answer {
        b"OK" => Ok(()),
        other => Err(HandoffError::Refused(
            String::from_utf8_lossy(other.strip_prefix(b"ERR ").unwrap_or(other)).into_owned(),
        )),
    }
}

/// One frame from `fd` by recvmsg: the bytes read and the descriptor, if any.
fn receive(fd: impl AsFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = recvmsg(
        fd,
        &mut [IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut received = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            // Exactly one is sent; any extra would be closed as it is dropped.
            for fd in fds {
                received.get_or_insert(fd);
            }
        }
    }
    Ok((msg.bytes, received))
}

/// A registered backend (blocking).
pub struct Backend {
    control: UnixStream,
}

impl Backend {
    /// Connects to tcpmuxd's `handoff_socket` and registers `names`,
    /// acknowledging each client it receives (a tcpmuxd from before
    /// acknowledgements gets a plain registration).
    pub fn register(control: impl AsRef<Path>, names: &[&str]) -> Result<Backend, HandoffError> {
        let names = self::names(names)?;
        let path = control.as_ref();
        match Backend::register_once(path, &encode_register_with_acks(&names)) {
            Err(HandoffError::Refused(reason)) if is_old_daemon(&reason) => {
                Backend::register_once(path, &encode_register(&names))
            }
            other => other,
        }
    }

    fn register_once(path: &Path, line: &[u8]) -> Result<Backend, HandoffError> {
        let mut control = UnixStream::connect(path)?;
        control.write_all(line)?;
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            if control.read(&mut byte)? == 0 {
                return Err(HandoffError::Closed);
            }
            if byte[0] == b'\n' {
                break;
            }
            answer.push(byte[0]);
        }
        check_answer(&answer)?;
        Ok(Backend { control })
    }

    /// Waits for the next client. `Err(Closed)` means tcpmuxd went away.
    pub fn accept(&mut self) -> Result<Handoff<Stream>, HandoffError> {
        let mut frame = [0u8; FRAME_LEN];
        let (mut filled, fd) = loop {
            match receive(&self.control, &mut frame) {
                Ok(got) => break got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        };
        if filled == 0 {
            return Err(HandoffError::Closed);
        }
        while filled < FRAME_LEN {
            let n = self.control.read(&mut frame[filled..])?;
            if n == 0 {
                return Err(HandoffError::Closed);
            }
            filled += n;
        }
        let (fd, frame) = decode(&frame, fd)?;
        if let Some(seq) = frame.seq {
            // We hold the socket: tcpmuxd may let go of its copy.
            self.control.write_all(&encode_ack(seq))?;
        }
        Ok(Handoff::new(Stream::from_fd(fd)?, frame))
    }
}

/// Whether an `ERR` answer to `REGISTER-ACK` is a tcpmuxd from before
/// acknowledgements, which knows only `REGISTER`.
fn is_old_daemon(reason: &str) -> bool {
    reason.contains("expected `REGISTER")
}

/// A whole frame and the descriptor that came with it: the client's socket and
/// what tcpmuxd said about it.
fn decode(
    frame: &[u8; FRAME_LEN],
    fd: Option<OwnedFd>,
) -> Result<(OwnedFd, ClientFrame), HandoffError> {
    let fd = fd.ok_or(HandoffError::Protocol)?;
    let frame = parse_client_frame(frame).map_err(|_| HandoffError::Protocol)?;
    Ok((fd, frame))
}
