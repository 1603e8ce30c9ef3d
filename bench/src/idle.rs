//! Idle clients: C connections that never send a name, held open, then closed;
//! bench/idle.sh reads the daemon's memory while they are held.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub fn idle(target: SocketAddr, connections: usize, hold: f64) -> Result<(), String> {
    let mut open = Vec::with_capacity(connections);
    for i in 0..connections {
        match TcpStream::connect(target) {
            Ok(stream) => open.push(stream),
            Err(e) => return Err(format!("connection {i}: {e} (raise ulimit -n?)")),
        }
    }
    println!("holding {} idle connections for {hold} s", open.len());
    let _ = io::stdout().flush();
    std::thread::sleep(Duration::from_secs_f64(hold.max(0.0)));
    // Each still-open connection proves the daemon kept it (reads would see EOF).
    drop(open);
    Ok(())
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
