//! `tcpmux --tls`: the handshake (server certificate checked against `--ca` or
//! the system's trust store, `--cert`/`--key` presented if asked), the
//! negotiation inside TLS, then stdin and stdout relayed through it, stdin's
//! end sent as close_notify. On tokio, one thread.

use std::time::Instant;

use tcpmux::tls::TlsOptions;
use tcpmux::{Error, Options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Args;

pub(super) fn run(args: &Args, options: &Options) -> Result<(), Error> {
    let tls = TlsOptions {
        ca: args.ca.clone(),
        client_cert: args.cert.clone().zip(args.key.clone()),
    };
    let server_name = args.server_name.as_deref().unwrap_or(&args.host);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let started = Instant::now();
        let service = if args.list {
            "help"
        } else {
            args.service.as_deref().unwrap_or_default()
        };
        let addr = (args.host.as_str(), args.port);
        if args.list {
            return list(addr, server_name, &tls, options).await;
        }
        let stream = tcpmux::tls::connect_async(addr, server_name, service, &tls, options).await?;
        let negotiated = Instant::now();
        let (sent, received) = relay(stream).await?;
        if args.stats {
            let zero = std::time::Duration::ZERO;
            super::print_stats(
                zero,
                negotiated - started,
                negotiated.elapsed(),
                sent,
                received,
            );
        }
        Ok(())
    });
    // A read of stdin may still be blocked in tokio's thread pool: leave it.
    runtime.shutdown_background();
    result
}

/// HELP over TLS: the names, one per line.
async fn list(
    addr: (&str, u16),
    server_name: &str,
    tls: &TlsOptions,
    options: &Options,
) -> Result<(), Error> {
    for name in tcpmux::tls::list_async(addr, server_name, tls, options).await? {
        println!("{name}");
    }
    Ok(())
}

/// stdin → TLS (then close_notify), TLS → stdout, until the server's end
/// (stdin may still be open then, as with `nc -N`).
async fn relay(stream: tcpmux::tls::AsyncTlsStream) -> Result<(u64, u64), Error> {
    let (mut from_server, mut to_server) = tokio::io::split(stream);
    let sent = std::cell::Cell::new(0u64);
    let upstream = async {
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 || to_server.write_all(&buf[..n]).await.is_err() {
                break;
            }
            sent.set(sent.get() + n as u64);
        }
        let _ = to_server.shutdown().await;
        std::future::pending::<()>().await
    };
    let downstream = async {
        let mut stdout = tokio::io::stdout();
        let mut buf = vec![0u8; 64 * 1024];
        let mut received = 0u64;
        loop {
            let n = from_server.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            let written = match stdout.write_all(&buf[..n]).await {
                Ok(()) => stdout.flush().await,
                error => error,
            };
            match written {
                // The reader of our stdout went away (`| head`): a normal way to stop.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
                other => other?,
            }
            received += n as u64;
        }
        Ok::<_, std::io::Error>(received)
    };
    let received = tokio::select! {
        received = downstream => received?,
        () = upstream => 0,
    };
    Ok((sent.get(), received))
}
