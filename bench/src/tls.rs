//! TLS workloads, for TLS termination compared across servers: `tls-short`
//! (a full handshake, or one resumed from a ticket, then a short answer read
//! to the end),
//! `tls-bulk` (one connection's download through TLS) and `tls-burst` (many
//! ClientHellos at once, each costing the server a full handshake). The client offers one
//! cipher suite, TLS_AES_128_GCM_SHA256, so every server uses the same.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::requests::run_clients;

fn config(ca: &Path) -> Result<Arc<ClientConfig>, String> {
    config_with(ca, false)
}

/// The client's configuration; `resume`: tickets kept and used.
fn config_with(ca: &Path, resume: bool) -> Result<Arc<ClientConfig>, String> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites =
        vec![rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256];
    // X25519 alone: the peers compared (OpenSSL 3.0) have no ML-KEM, and a
    // server that took the hybrid share would do more work than they do.
    provider.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519];
    let mut roots = RootCertStore::empty();
    let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Every connection a full handshake, as a new client's, unless asked.
    if !resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    Ok(Arc::new(config))
}

fn open(
    target: SocketAddr,
    config: &Arc<ClientConfig>,
) -> io::Result<StreamOwned<ClientConnection, TcpStream>> {
    open_as(target, config, "localhost")
}

fn open_as(
    target: SocketAddr,
    config: &Arc<ClientConfig>,
    server_name: &str,
) -> io::Result<StreamOwned<ClientConnection, TcpStream>> {
    let socket = TcpStream::connect(target)?;
    socket.set_nodelay(true)?;
    socket.set_read_timeout(Some(Duration::from_secs(30)))?;
    let name = ServerName::try_from(server_name.to_owned()).map_err(io::Error::other)?;
    let session = ClientConnection::new(Arc::clone(config), name).map_err(io::Error::other)?;
    Ok(StreamOwned::new(session, socket))
}

/// Reads to the end; a peer that closes without close_notify still counts.
fn read_to_end(stream: &mut impl Read, mut each: impl FnMut(&[u8])) -> io::Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => each(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// `idle --tls-ca`: `connections` TLS clients, each through a full handshake
/// and `service` negotiated inside, held for `hold` seconds (an `echo`
/// session then checked to still answer); bench/idle.sh reads the daemon's
/// memory meanwhile.
pub fn idle(
    target: SocketAddr,
    ca: &Path,
    connections: usize,
    hold: f64,
    service: Option<&str>,
) -> Result<(), String> {
    let config = config(ca)?;
    let name = service.ok_or("--tls-ca needs --service")?;
    let mut held = Vec::with_capacity(connections);
    for i in 0..connections {
        let mut stream =
            open(target, &config).map_err(|e| format!("connection {i}: {e} (raise ulimit -n?)"))?;
        crate::idle::negotiate(&mut stream, name).map_err(|e| format!("connection {i}: {e}"))?;
        held.push(stream);
    }
    println!(
        "holding {} established {name} TLS sessions for {hold} s",
        held.len()
    );
    let _ = io::stdout().flush();
    std::thread::sleep(Duration::from_secs_f64(hold.max(0.0)));
    if name == "echo" {
        let mut answered = 0;
        for stream in &mut held {
            let mut byte = [0u8; 1];
            let ok = stream.write_all(b"x").is_ok()
                && stream.read_exact(&mut byte).is_ok()
                && byte == *b"x";
            answered += usize::from(ok);
        }
        println!("{answered} of {} echo sessions still answered", held.len());
    }
    Ok(())
}

/// Where a TLS client connects and how.
pub struct Client<'a> {
    pub target: SocketAddr,
    pub ca: &'a Path,
    pub server_name: &'a str,
    pub resume: bool,
}

pub fn short(
    client: Client<'_>,
    service: Option<&str>,
    connections: usize,
    duration: f64,
    label: &str,
) -> Result<(), String> {
    let config = config_with(client.ca, client.resume)?;
    let (target, name) = (client.target, client.server_name.to_owned());
    let request: Option<Arc<[u8]>> = service.map(|s| format!("{s}\r\n").into_bytes().into());
    let resumed = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&resumed);
    let summary = run_clients(connections, duration, "connections", move |buf| {
        let mut stream = open_as(target, &config, &name)?;
        if let Some(request) = &request {
            // Queued before the handshake, as the tcpmux library does: it
            // leaves with the client's Finished.
            stream.conn.writer().write_all(request)?;
        }
        // Drives the handshake, and sends what was queued.
        stream.flush()?;
        buf.clear();
        read_to_end(&mut stream, |bytes| buf.extend_from_slice(bytes))?;
        if stream.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
            counted.fetch_add(1, Ordering::Relaxed);
        }
        Ok(!buf.is_empty() && (request.is_none() || buf[0] == b'+'))
    })?;
    let resumed = match client.resume {
        true => format!(" ({} resumed)", resumed.load(Ordering::Relaxed)),
        false => String::new(),
    };
    println!("{label}: {}{resumed}", summary.text("connections"));
    summary.require_success(label)
}

pub fn bulk(
    target: SocketAddr,
    ca: &Path,
    service: Option<&str>,
    expect: u64,
    repeat: usize,
    label: &str,
) -> Result<(), String> {
    let config = config(ca)?;
    let mut rates = Vec::new();
    for _ in 0..repeat {
        let started = Instant::now();
        let mut stream = open(target, &config).map_err(|e| e.to_string())?;
        if let Some(name) = service {
            let request = format!("{name}\r\n");
            stream
                .conn
                .writer()
                .write_all(request.as_bytes())
                .map_err(|e| e.to_string())?;
        }
        stream.flush().map_err(|e| e.to_string())?;
        let mut bytes = 0u64;
        read_to_end(&mut stream, |chunk| bytes += chunk.len() as u64).map_err(|e| e.to_string())?;
        // A TCPMUX answer starts with its 3-byte `+` line.
        let payload = bytes - if service.is_some() { 3 } else { 0 };
        if payload != expect {
            return Err(format!("{label}: {payload} bytes, expected {expect}"));
        }
        rates.push(bytes as f64 / 1e6 / started.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    let all: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    println!(
        "{label}: {:.0} MB/s median of {} ({})",
        rates[rates.len() / 2],
        rates.len(),
        all.join(", ")
    );
    Ok(())
}

/// Sends `connections` ClientHellos as fast as it can connect, then waits for
/// each server flight (the server's handshake computation done), and closes.
pub fn burst(target: SocketAddr, ca: &Path, connections: usize) -> Result<(), String> {
    let config = config(ca)?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut open = Vec::with_capacity(connections);
    for i in 0..connections {
        let mut socket = TcpStream::connect(target).map_err(|e| format!("connection {i}: {e}"))?;
        socket.set_nodelay(true).map_err(|e| e.to_string())?;
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let mut session =
            ClientConnection::new(Arc::clone(&config), name.clone()).map_err(|e| e.to_string())?;
        while session.wants_write() {
            session
                .write_tls(&mut socket)
                .map_err(|e| format!("connection {i}: {e}"))?;
        }
        open.push(socket);
    }
    let sent = started.elapsed();
    let mut answered = 0;
    for socket in &mut open {
        let mut first = [0u8; 1];
        answered += usize::from(socket.read(&mut first).is_ok_and(|n| n > 0));
    }
    println!(
        "{connections} ClientHellos sent in {:.3} s; {answered} server flights by {:.3} s",
        sent.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
