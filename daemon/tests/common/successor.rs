//! A daemon's successor for the binary-upgrade tests (`tcpmuxd --upgrade`),
//! and the addresses such a pair needs.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A successor started with `--upgrade`, its log collected.
pub struct Successor {
    pub child: Child,
    pub logs: Arc<Mutex<Vec<String>>>,
}

impl Successor {
    pub fn start(config: &std::path::Path) -> Successor {
        Successor::start_with_env(config, &[])
    }

    pub fn start_with_env(config: &std::path::Path, envs: &[(&str, &str)]) -> Successor {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
            .arg("--config")
            .arg(config)
            .arg("--upgrade")
            .env("RUST_LOG", "info")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the successor");
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Successor { child, logs }
    }

    pub fn wait_for_log(&self, words: &str) {
        let deadline = Instant::now() + super::PATIENCE;
        while !self.logs.lock().unwrap().iter().any(|l| l.contains(words)) {
            assert!(
                Instant::now() < deadline,
                "no {words:?} in {:?}",
                self.logs.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Successor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An address for a daemon that must be named in its file (an upgrade's
/// successor and reloads read it): a free port on 127.0.0.`host`, an address
/// no other test binds, so that no one takes the port between this look and
/// the daemon's bind.
pub fn free_address(host: u8) -> String {
    let probe = std::net::TcpListener::bind(("127.0.0.".to_owned() + &host.to_string(), 0))
        .expect("a free port on a loopback address of its own");
    probe.local_addr().expect("its address").to_string()
}
