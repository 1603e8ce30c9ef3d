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
