//! `tcpmux`: ask a TCPMUX server for a service by name, then relay stdin and stdout
//! to it like `nc`, with half-close carried across. `tcpmux forward` turns local
//! ports into TCPMUX services for clients that cannot send a name (`forward.rs`);
//! `tcpmux admin` speaks to a daemon's admin socket (`admin.rs`).
//!
//! With `--tls`, the TLS handshake comes first and the negotiation runs inside
//! it (`tls.rs`).
//!
//! Exit status: 0 done, 1 the server refused the service, 2 usage error,
//! 3 could not connect, TLS failed (a refused certificate too) or the
//! connection failed.
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod admin;
mod args;
mod forward;
mod tls;

use clap::Parser;

use args::Args;
use tcpmux::{Error, Options, ServiceName, Stream};

fn main() -> ExitCode {
    // `tcpmux forward …` and `tcpmux admin …` (a service named "forward" or
    // "admin" can still be asked for after an option: `tcpmux --port 1 admin`).
    match std::env::args().nth(1).as_deref() {
        Some("forward") => return forward::main(std::env::args().skip(1)),
        Some("admin") => return admin::main(std::env::args().skip(1)),
        _ => {}
    }
    let args = Args::parse();
    if args
        .service
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("help"))
    {
        eprintln!("tcpmux: HELP is not a service but the list of them: use `tcpmux --list`");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = match &e {
                Error::Refused { .. } => 1,
                Error::InvalidName { .. } => 2,
                _ => 3,
            };
            eprintln!("tcpmux: {}", describe(&e, &args));
            ExitCode::from(code)
        }
    }
}

fn describe(e: &Error, args: &Args) -> String {
    let target = match &args.unix {
        Some(path) => format!("unix:{}", path.display()),
        None => format!("{}:{}", args.host, args.port),
    };
    match e {
        Error::Refused { message } if message.starts_with("unknown service") => {
            format!("{message} (`tcpmux --list` shows the names)")
        }
        Error::Refused { message } if !message.is_empty() => message.clone(),
        Error::Connect(io)
            if io.kind() == io::ErrorKind::ConnectionRefused
                && args.port == 1
                && args.unix.is_none() =>
        {
            format!("{target}: {e} (nothing listens on RFC 1078's port 1 there; give the server's port with --port)")
        }
        Error::Connect(_) | Error::NoReply | Error::ReplyTimeout | Error::Protocol(_) => {
            format!("{target}: {e}")
        }
        _ => e.to_string(),
    }
}

fn run(args: &Args) -> Result<(), Error> {
    let limit = (args.timeout > 0.0).then(|| Duration::from_secs_f64(args.timeout));
    let options = Options {
        connect_timeout: limit,
        reply_timeout: limit,
        fast_open: args.fast_open,
    };
    if args.tls {
        return tls::run(args, &options);
    }
    if args.list {
        let mut conn = open(args, &options)?;
        for name in tcpmux::list(&mut conn, &options)? {
            println!("{name}");
        }
        return Ok(());
    }
    let name = args.service.as_deref().unwrap_or_default();
    let name = ServiceName::parse(name).map_err(|source| Error::InvalidName {
        name: name.to_owned(),
        source,
    })?;

    let started = Instant::now();
    let mut conn = open(args, &options)?;
    let connected = Instant::now();
    tcpmux::negotiate(&mut conn, &name, &options)?;
    let negotiated = Instant::now();
    let (sent, received) = relay(conn)?;
    if args.stats {
        print_stats(
            connected - started,
            negotiated - connected,
            negotiated.elapsed(),
            sent,
            received,
        );
    }
    Ok(())
}

/// The `--stats` line.
fn print_stats(
    connect: Duration,
    negotiate: Duration,
    transfer: Duration,
    sent: u64,
    received: u64,
) {
    let seconds = transfer.as_secs_f64();
    eprintln!(
        "tcpmux: connect {:.3} ms, negotiate {:.3} ms, transfer {:.3} ms, received {received} bytes, sent {sent} bytes, {:.2} MB/s",
        ms(connect),
        ms(negotiate),
        ms(transfer),
        if seconds > 0.0 { received as f64 / 1e6 / seconds } else { 0.0 },
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn open(args: &Args, options: &Options) -> Result<Stream, Error> {
    match &args.unix {
        Some(path) => Ok(Stream::Unix(
            UnixStream::connect(path).map_err(Error::Connect)?,
        )),
        None => Ok(Stream::Tcp(tcpmux::open(
            (args.host.as_str(), args.port),
            options,
        )?)),
    }
}

/// stdin → socket on a helper thread (then half-close), socket → stdout here.
/// Ends when the server closes its side, as `nc -N` does. Returns (sent, received).
fn relay(conn: Stream) -> Result<(u64, u64), Error> {
    let sent = Arc::new(AtomicU64::new(0));
    let mut upstream = conn.try_clone()?;
    let sent_by_thread = Arc::clone(&sent);
    std::thread::spawn(move || {
        let mut stdin = io::stdin().lock();
        // A failed write means the server is gone; the read side below will tell.
        let _ = copy_counting(&mut stdin, &mut upstream, &sent_by_thread);
        // The server sees EOF and may still answer; our read side stays open.
        let _ = upstream.shutdown_write();
    });
    let received = AtomicU64::new(0);
    let mut downstream = conn;
    let mut stdout = io::stdout().lock();
    match copy_counting(&mut downstream, &mut stdout, &received) {
        Ok(()) => {}
        // The reader of our stdout went away (`| head`): a normal way to stop.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(Error::Io(e)),
    }
    let _ = stdout.flush();
    Ok((
        sent.load(Ordering::Relaxed),
        received.load(Ordering::Relaxed),
    ))
}

fn copy_counting(from: &mut impl Read, to: &mut impl Write, total: &AtomicU64) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        to.flush()?;
        total.fetch_add(n as u64, Ordering::Relaxed);
    }
}
