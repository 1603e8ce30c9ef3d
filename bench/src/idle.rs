//! Idle clients: C connections that never send a name, or that name a service
//! and then send nothing, held open, then closed; bench/idle.sh reads the
//! daemon's memory while they are held and after they leave.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use tcpmux_proto::sniff::client_hello::build;

use crate::cli::Partial;

/// Opens `connections` clients and holds them for `hold` seconds. With a
/// `service`, each first names it and reads the `+` line, so the daemon holds
/// established sessions, not negotiating ones; an `echo` session is then
/// checked to still answer before it is closed. With `partial`, each sends the
/// start of an opening and stalls, as a slow or hostile client does. With a
/// `source`, every connection is made from that address (tens of thousands
/// of clients then spread over several, as one address has about 28,000
/// ephemeral ports).
pub fn idle(
    target: SocketAddr,
    connections: usize,
    hold: f64,
    (service, source): (Option<&str>, Option<IpAddr>),
    partial: Option<Partial>,
) -> Result<(), String> {
    let opening = partial.map(opening_start);
    let mut open = Vec::with_capacity(connections);
    let runtime = crate::runtime()?;
    for i in 0..connections {
        let stream = connect_from(&runtime, target, source)
            .map_err(|e| format!("connection {i}: {e} (raise ulimit -n?)"))?;
        if let Some(name) = service {
            negotiate(&stream, name).map_err(|e| format!("connection {i}: {e}"))?;
        }
        if let Some(bytes) = &opening {
            (&stream)
                .write_all(bytes)
                .map_err(|e| format!("connection {i}: {e}"))?;
        }
        open.push(stream);
    }
    let kind = match (service, partial) {
        (Some(s), _) => format!("established {s}"),
        (None, Some(p)) => format!("stalled after a partial {p:?}"),
        (None, None) => "un-negotiated".to_owned(),
    };
    println!("holding {} {kind} connections for {hold} s", open.len());
    let _ = io::stdout().flush();
    std::thread::sleep(Duration::from_secs_f64(hold.max(0.0)));
    if service == Some("echo") {
        let mut answered = 0;
        for stream in &open {
            let mut byte = [0u8; 1];
            let ok = (&*stream).write_all(b"x").is_ok()
                && (&*stream).read_exact(&mut byte).is_ok()
                && byte == *b"x";
            answered += usize::from(ok);
        }
        println!("{answered} of {} echo sessions still answered", open.len());
    }
    // Each still-open connection proves the daemon kept it (reads would see EOF).
    drop(open);
    Ok(())
}

/// The bytes `--partial` sends: a proper prefix of a valid opening.
fn opening_start(partial: Partial) -> Vec<u8> {
    match partial {
        Partial::ClientHello => {
            let mut hello = build(Some("app.example.com"), &["h2"], 16_000, 16384);
            hello.truncate(3_000);
            hello
        }
        Partial::HttpHead => {
            let mut head = b"GET /index.html HTTP/1.1\r\nHost: app.example.com\r\n\
                User-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\nAccept: */*\r\nCookie: "
                .to_vec();
            head.resize(1_000, b'c');
            head
        }
    }
}

/// Sends `name` and reads the status line, which must be `+`.
pub(crate) fn negotiate(mut stream: impl Read + Write, name: &str) -> Result<(), String> {
    stream
        .write_all(format!("{name}\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") {
        match stream.read(&mut byte) {
            Ok(0) => return Err("closed before the status line".into()),
            Ok(_) => line.push(byte[0]),
            Err(e) => return Err(e.to_string()),
        }
    }
    match line.first() {
        Some(b'+') => Ok(()),
        _ => Err(format!(
            "refused: {}",
            String::from_utf8_lossy(&line).trim_end()
        )),
    }
}

/// Silent connections to a Unix socket (the handoff control socket): opens up
/// to C, holds them, then reports how many the server refused at once, closed
/// while held, or still holds. bench/harden.sh and the flood test use it.
pub fn idle_unix(path: &std::path::Path, connections: usize, hold: f64) -> Result<(), String> {
    use std::os::unix::net::UnixStream;
    let mut open = Vec::with_capacity(connections);
    let mut failed = 0;
    let mut first_error = None;
    for _ in 0..connections {
        match UnixStream::connect(path) {
            Ok(stream) => open.push(stream),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    std::thread::sleep(Duration::from_secs_f64(hold.max(0.0)));
    let (mut refused, mut closed, mut held) = (0, 0, 0);
    for stream in &open {
        stream
            .set_nonblocking(true)
            .map_err(|e| format!("set_nonblocking: {e}"))?;
        let mut answer = [0u8; 64];
        match io::Read::read(&mut &*stream, &mut answer) {
            Ok(0) => closed += 1,
            Ok(n) if answer[..n].starts_with(b"ERR too many") => refused += 1,
            Ok(_) => closed += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => held += 1,
            Err(_) => closed += 1,
        }
    }
    println!(
        "opened {} of {connections} (failed {failed}{}); after {hold} s: refused at once {refused}, closed {closed}, still held {held}",
        open.len(),
        first_error.map(|e| format!(": {e}")).unwrap_or_default()
    );
    Ok(())
}

/// A blocking connection to `target`, from `source` if given (bound first).
fn connect_from(
    runtime: &tokio::runtime::Runtime,
    target: SocketAddr,
    source: Option<IpAddr>,
) -> io::Result<TcpStream> {
    let Some(source) = source else {
        return TcpStream::connect(target);
    };
    let stream = runtime.block_on(async {
        let socket = match source {
            IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.bind(SocketAddr::new(source, 0))?;
        socket.connect(target).await?.into_std()
    })?;
    stream.set_nonblocking(false)?;
    Ok(stream)
}
