//! `tcpmux forward`: listen on local addresses and turn every connection there
//! into a TCPMUX connection to a named service, so that unmodified clients
//! (psql, redis-cli, curl) reach TCPMUX services. One thread per connection;
//! both directions relayed with half-close carried across.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tcpmux::{Error, Options, ServiceName};

use super::args::ForwardArgs;

/// Runs the forwarder with the arguments after `forward`; returns only on a
/// usage or bind error.
pub fn main(args: impl Iterator<Item = String>) -> ExitCode {
    let args = ForwardArgs::parse_from(args);
    let limit = (args.timeout > 0.0).then(|| Duration::from_secs_f64(args.timeout));
    let options = Options {
        connect_timeout: limit,
        reply_timeout: limit,
        fast_open: false,
    };
    // Bind every address first, so a bad one fails before anything is served.
    let mut listeners = Vec::new();
    for (local, service) in args.routes {
        match TcpListener::bind(local) {
            Ok(listener) => listeners.push((listener, service)),
            Err(e) => {
                eprintln!("tcpmux forward: cannot listen on {local}: {e}");
                return ExitCode::from(3);
            }
        }
    }
    let server = format!("{}:{}", args.host, args.port);
    let threads: Vec<_> = listeners
        .into_iter()
        .map(|(listener, service)| {
            let server = server.clone();
            eprintln!(
                "tcpmux forward: {} -> {service} on {server}",
                listener
                    .local_addr()
                    .map_or_else(|e| e.to_string(), |a| a.to_string())
            );
            std::thread::spawn(move || accept_loop(listener, service, server, options))
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    ExitCode::SUCCESS
}

fn accept_loop(listener: TcpListener, service: ServiceName, server: String, options: Options) {
    for client in listener.incoming() {
        match client {
            Ok(client) => {
                let (service, server) = (service.clone(), server.clone());
                std::thread::spawn(move || forward(client, &service, &server, &options));
            }
            Err(e) => {
                eprintln!("tcpmux forward: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// One local client: a TCPMUX connection to `service`, then the relay. A
/// refusal or an unreachable server closes the client after one log line.
fn forward(client: TcpStream, service: &ServiceName, server: &str, options: &Options) {
    let peer = client
        .peer_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string());
    let upstream = tcpmux::open(server, options).and_then(|mut upstream| {
        tcpmux::negotiate(&mut upstream, service, options)?;
        Ok(upstream)
    });
    let upstream = match upstream {
        Ok(upstream) => upstream,
        Err(Error::Refused { message }) => {
            eprintln!("tcpmux forward: {peer}: {service} refused by {server}: {message}");
            return;
        }
        Err(e) => {
            eprintln!("tcpmux forward: {peer}: {service} on {server}: {e}");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    if let Err(e) = relay(client, upstream) {
        eprintln!("tcpmux forward: {peer}: {service}: {e}");
    }
}

/// Both directions at once; each EOF becomes a half-close of the other side.
fn relay(client: TcpStream, upstream: TcpStream) -> io::Result<()> {
    let (mut client_in, mut upstream_out) = (client.try_clone()?, upstream.try_clone()?);
    let up = std::thread::spawn(move || one_way(&mut client_in, &mut upstream_out));
    let (mut upstream_in, mut client_out) = (upstream, client);
    let down = one_way(&mut upstream_in, &mut client_out);
    let up = up
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("relay thread panicked")));
    down.and(up)
}

fn one_way(from: &mut TcpStream, to: &mut TcpStream) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // The other side reset: end this direction as if it had closed.
            Err(_) => break,
        };
        to.write_all(&buf[..n])?;
    }
    let _ = to.shutdown(Shutdown::Write);
    Ok(())
}
