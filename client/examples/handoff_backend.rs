//! An example handoff backend: registers the names given on the command line with
//! tcpmuxd and serves each client in a thread: a greeting line, then an echo.
//!
//!   cargo run --example handoff_backend -- /run/tcpmuxd/handoff.sock myapp [more names]

use std::io::{Read, Write};
use std::process::ExitCode;

use tcpmux::handoff::Backend;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((control, names)) = args.split_first().filter(|(_, n)| !n.is_empty()) else {
        eprintln!("usage: handoff_backend CONTROL_SOCKET NAME...");
        return ExitCode::from(2);
    };
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut backend = match Backend::register(control, &names) {
        Ok(backend) => backend,
        Err(e) => {
            eprintln!("handoff_backend: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("registered {}", names.join(" "));
    let _ = std::io::stdout().flush();
    loop {
        let mut client = match backend.accept() {
            Ok(client) => client,
            Err(e) => {
                eprintln!("handoff_backend: {e}");
                return ExitCode::FAILURE;
            }
        };
        std::thread::spawn(move || {
            let greeting = format!(
                "hello from pid {}: {} for {} via {}\r\n",
                std::process::id(),
                client.service,
                client.peer,
                client.local
            );
            if client.stream.write_all(greeting.as_bytes()).is_err() {
                return;
            }
            let mut buf = [0u8; 16 * 1024];
            loop {
                match client.stream.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if client.stream.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
}
