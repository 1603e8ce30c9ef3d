//! The daemon under test in process: the library's `Server` on a thread of
//! its own, with its log captured and shutdown and reload sent through
//! channels instead of signals.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::{scratch_dir, Daemon, Process, PATIENCE};

impl Daemon {
    /// The library's server on a thread of its own, with its log captured, and
    /// shutdown and reload triggered through channels instead of signals.
    pub fn in_process(config: Option<&str>) -> Daemon {
        use tcpmuxd::model::{ListenAddr, ListenSpec};
        let dir = scratch_dir();
        let path = dir.join("tcpmuxd.toml");
        let daemon = tcpmuxd::server::DaemonState::default();
        let mut loaded = match config {
            Some(text) => {
                std::fs::write(&path, text).expect("write config");
                tcpmuxd::Config::load(&path, daemon.keys()).unwrap_or_else(|e| panic!("{e}"))
            }
            None => tcpmuxd::Config::default(),
        };
        let own_listen =
            config.is_some_and(|c| c.lines().any(|l| l.trim_start().starts_with("listen")));
        if !own_listen {
            let any_port = ListenAddr::Tcp(SocketAddr::from(([127, 0, 0, 1], 0)));
            loaded.listen = vec![ListenSpec::from(any_port)];
        }
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = LogSink(Arc::clone(&logs));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (reload, reloads) = tokio::sync::mpsc::channel(1);
        let (bound, addrs) = std::sync::mpsc::channel();
        let config_path = config.map(|_| path);
        let thread = std::thread::spawn(move || {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(sink)
                .with_ansi(false)
                .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
                .finish();
            let _log = tracing::subscriber::set_default(subscriber);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let server = tcpmuxd::Server::bind(loaded, Vec::new(), config_path, daemon);
                let server = server.map(|server| match own_listen {
                    true => server,
                    false => server.listen_from_command_line(),
                });
                match server {
                    Ok(server) => {
                        let _ = bound.send(Ok(server.local_addrs()));
                        server.run(async { drop(stopped.await) }, reloads).await;
                    }
                    Err(e) => drop(bound.send(Err(e.to_string()))),
                }
            });
        });
        let addrs = addrs
            .recv_timeout(PATIENCE)
            .expect("the server thread answers")
            .unwrap_or_else(|e| panic!("the server did not start: {e}"));
        let addr = addrs
            .iter()
            .find_map(|a| match a {
                ListenAddr::Tcp(addr) => Some(*addr),
                ListenAddr::Unix(_) => None,
            })
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
        Daemon {
            process: Process::InProcess {
                stop: Mutex::new(Some(stop)),
                reload,
                thread: Some(thread),
            },
            addr,
            logs,
            dir,
            kept: Vec::new(),
        }
    }
}

/// Collects the in-process daemon's log lines, one event at a time.
#[derive(Clone)]
struct LogSink(Arc<Mutex<Vec<String>>>);

struct EventBuffer(Vec<u8>, Arc<Mutex<Vec<String>>>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogSink {
    type Writer = EventBuffer;
    fn make_writer(&'a self) -> EventBuffer {
        EventBuffer(Vec::new(), Arc::clone(&self.0))
    }
}

impl Write for EventBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuffer {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let mut lines = self.1.lock().unwrap();
        lines.extend(text.lines().map(str::to_owned));
    }
}
