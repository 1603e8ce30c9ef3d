//! Blocking client: std sockets, one thread per connection.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use rustix::net::{recv, RecvFlags};
use tcpmux_proto::{encode_request, ReplyLine, ReplyParser, ReplyProgress, ServiceName};

use crate::{accepted, help_lines, parse_name, Error, Options};

/// Sockets the blocking client negotiates over.
pub trait Socket: Read + Write + AsFd {
    /// Bounds each read; `None` waits as long as the OS does.
    fn set_read_timeout(&self, limit: Option<Duration>) -> io::Result<()>;
}

impl Socket for TcpStream {
    fn set_read_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, limit)
    }
}

impl Socket for UnixStream {
    fn set_read_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, limit)
    }
}

/// Connects to the TCPMUX server at `addr` and asks for `name`.
///
/// Returns the stream once the server answered `+`; the next byte read from it is
/// the service's first byte.
pub fn connect<A: ToSocketAddrs>(addr: A, name: &str) -> Result<TcpStream, Error> {
    connect_with(addr, name, &Options::default())
}

/// [`connect`] with timeouts.
pub fn connect_with<A: ToSocketAddrs>(
    addr: A,
    name: &str,
    options: &Options,
) -> Result<TcpStream, Error> {
    let name = parse_name(name)?;
    let mut stream = open(addr, options)?;
    negotiate(&mut stream, &name, options)?;
    Ok(stream)
}

/// Connects to a TCPMUX server listening on a Unix socket and asks for `name`.
pub fn connect_unix<P: AsRef<Path>>(path: P, name: &str) -> Result<UnixStream, Error> {
    connect_unix_with(path, name, &Options::default())
}

/// [`connect_unix`] with a reply timeout.
pub fn connect_unix_with<P: AsRef<Path>>(
    path: P,
    name: &str,
    options: &Options,
) -> Result<UnixStream, Error> {
    let name = parse_name(name)?;
    let mut stream = UnixStream::connect(path).map_err(Error::Connect)?;
    negotiate(&mut stream, &name, options)?;
    Ok(stream)
}

/// Asks the server on `stream` for its HELP list (no status line comes first).
pub fn list<S: Socket>(stream: &mut S, options: &Options) -> Result<Vec<String>, Error> {
    stream.set_read_timeout(options.reply_timeout)?;
    stream.write_all(b"help\r\n")?;
    let mut text = Vec::new();
    stream.read_to_end(&mut text).map_err(timeout_error)?;
    Ok(help_lines(&text))
}

/// Runs the negotiation on a connected stream: sends the request in one write, then
/// consumes exactly the status line. `options.reply_timeout` bounds the wait.
pub fn negotiate<S: Socket>(
    stream: &mut S,
    name: &ServiceName,
    options: &Options,
) -> Result<ReplyLine, Error> {
    stream.set_read_timeout(options.reply_timeout)?;
    stream.write_all(&encode_request(name))?;
    let reply = read_status_line(stream).map_err(|e| match e {
        Error::Io(io) => timeout_error(io),
        other => other,
    })?;
    stream.set_read_timeout(None)?;
    accepted(reply)
}

/// Opens a TCP connection to the first address of `addr` that accepts.
pub fn open<A: ToSocketAddrs>(addr: A, options: &Options) -> Result<TcpStream, Error> {
    if options.fast_open {
        let candidate = addr.to_socket_addrs().map_err(Error::Connect)?.next();
        let candidate =
            candidate.ok_or_else(|| Error::Connect(io::ErrorKind::InvalidInput.into()))?;
        return fast_open(candidate).map_err(Error::Connect);
    }
    let Some(timeout) = options.connect_timeout else {
        return TcpStream::connect(addr).map_err(Error::Connect);
    };
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "address resolved to nothing");
    for candidate in addr.to_socket_addrs().map_err(Error::Connect)? {
        match TcpStream::connect_timeout(&candidate, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = e,
        }
    }
    Err(Error::Connect(last))
}

fn timeout_error(e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::ReplyTimeout,
        _ => Error::Io(e),
    }
}
/// Peeks, lets the parser look, then reads exactly what the parser claimed, so bytes
/// behind the line are left in the socket.
fn read_status_line<S: Read + AsFd>(stream: &mut S) -> Result<ReplyLine, Error> {
    let mut parser = ReplyParser::new();
    let mut buf = [0u8; 512];
    loop {
        let n = match recv(stream.as_fd(), &mut buf, RecvFlags::PEEK) {
            Ok((n, _)) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::Io(e.into())),
        };
        if n == 0 {
            return Err(Error::NoReply);
        }
        match parser.feed(&buf[..n]) {
            ReplyProgress::NeedMore => stream.read_exact(&mut buf[..n])?,
            ReplyProgress::Done { reply, consumed } => {
                stream.read_exact(&mut buf[..consumed])?;
                return Ok(reply?);
            }
        }
    }
}

/// A TCP socket with TCP_FASTOPEN_CONNECT: `connect` returns at once and the
/// first write (the request line) goes out in the SYN, when the kernel allows
/// Fast Open (`net.ipv4.tcp_fastopen`) and has a cookie for the server; else
/// the kernel does an ordinary handshake, silently.
pub(crate) fn fast_open(addr: std::net::SocketAddr) -> io::Result<TcpStream> {
    use rustix::net::{AddressFamily, SocketType};
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let socket = rustix::net::socket(family, SocketType::STREAM, Some(rustix::net::ipproto::TCP))?;
    nix::sys::socket::setsockopt(
        &socket,
        nix::sys::socket::sockopt::TcpFastOpenConnect,
        &true,
    )
    .map_err(io::Error::from)?;
    rustix::net::connect(&socket, &addr)?;
    let stream = TcpStream::from(socket);
    stream.set_nodelay(true)?;
    Ok(stream)
}
