//! Test harness: starts the daemon on an ephemeral loopback port, in-process (the
//! library's `Server` on a thread of its own) or as the real `tcpmuxd` binary
//! (for signals, the CLI, systemd and per-process checks), and collects its log;
//! plus small helpers for talking to it over real sockets. The in-process
//! harness is `in_process.rs`, plain backends `backends.rs`, test PKI
//! `pki.rs`, a DNS server `dns.rs`, real peers `peers.rs`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod backends;
pub mod dns;
pub mod etcd;
mod in_process;
pub mod pebble;
pub mod peers;
pub mod pki;
pub mod successor;

#[allow(unused_imports)] // each test binary uses some
pub use backends::{echo_backend, send_and_receive, tagged_echo};

/// Upper bound on any single wait in a test, so a bug fails a test instead of
/// hanging it. Not a performance assertion.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct Daemon {
    process: Process,
    pub addr: SocketAddr,
    logs: Arc<Mutex<Vec<String>>>,
    pub dir: Scratch,
    /// Scratch directories the test made for this daemon (an admin or
    /// handoff socket's), removed with it.
    kept: Vec<Scratch>,
}

/// How the daemon under test runs.
enum Process {
    Binary(Child),
    InProcess {
        stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
        reload: tokio::sync::mpsc::Sender<()>,
        thread: Option<std::thread::JoinHandle<()>>,
    },
}

impl Daemon {
    /// The built-in services on 127.0.0.1, port chosen by the kernel, in-process.
    pub fn start() -> Daemon {
        Daemon::in_process(None)
    }

    /// In-process, with a config file holding `config` (a `listen` it lacks is
    /// 127.0.0.1 on a port the kernel chooses).
    pub fn with_config(config: &str) -> Daemon {
        Daemon::in_process(Some(config))
    }

    /// The `tcpmuxd` binary with a config file holding `config`.
    pub fn binary(config: &str) -> Daemon {
        Daemon::start_with(Some(config), &[])
    }

    pub fn start_with(config: Option<&str>, extra_args: &[&str]) -> Daemon {
        Daemon::start_full(config, extra_args, &[])
    }

    /// With extra environment variables too.
    pub fn start_full(config: Option<&str>, extra_args: &[&str], envs: &[(&str, &str)]) -> Daemon {
        Daemon::start_wrapped(&[], config, extra_args, envs)
    }

    /// The binary run by `wrapper` (e.g. `["prlimit", "--nofile=1024:1024"]`).
    pub fn start_wrapped(
        wrapper: &[&str],
        config: Option<&str>,
        extra_args: &[&str],
        envs: &[(&str, &str)],
    ) -> Daemon {
        let dir = scratch_dir();
        let binary = env!("CARGO_BIN_EXE_tcpmuxd");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        // A config with its own `listen` (port 0, for tests) keeps it.
        let own_listen =
            config.is_some_and(|c| c.lines().any(|l| l.trim_start().starts_with("listen")));
        if !own_listen && !extra_args.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        if let Some(config) = config {
            let path = dir.join("tcpmuxd.toml");
            std::fs::write(&path, config).expect("write config");
            command.arg("--config").arg(path);
        }
        command
            .args(extra_args)
            .env("RUST_LOG", "info")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn tcpmuxd");
        let stderr = child.stderr.take().expect("stderr piped");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        // Drain stderr for the daemon's whole life, so its log can never fill the
        // pipe and stall its event loop.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut daemon = Daemon {
            process: Process::Binary(child),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            logs,
            dir,
            kept: Vec::new(),
        };
        let line = daemon
            .wait_for_log(|l| l.contains(" listening ") && l.contains("address="))
            .unwrap_or_else(|| panic!("tcpmuxd did not start; log:\n{}", daemon.logs().join("\n")));
        let addr = line
            .split_whitespace()
            .find_map(|word| word.strip_prefix("address="))
            .and_then(|a| a.parse().ok());
        // A Unix-only daemon has no TCP address; its tests use the socket path.
        if let Some(addr) = addr {
            daemon.addr = addr;
        }
        daemon
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// Waits (up to PATIENCE) for a log line matching `pred`.
    pub fn wait_for_log(&mut self, pred: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Some(line) = self.logs.lock().unwrap().iter().find(|l| pred(l)) {
                return Some(line.clone());
            }
            if self.has_exited() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Waits (up to PATIENCE) until `n` log lines match `pred`; how many did.
    /// The figure on the `stats` line for `series` (a metric's name and its
    /// labels, as printed), once `ok` holds; fails after [`PATIENCE`].
    pub fn wait_for_figure(&self, series: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let prefix = format!("{series} ");
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let stats = String::from_utf8(self.exchange(b"stats\r\n")).unwrap();
            let figure = stats
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|v| v.parse::<f64>().ok());
            if let Some(value) = figure.filter(|v| ok(*v)) {
                return value;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{series} never right in {stats}"
            );
            std::thread::yield_now();
        }
    }

    pub fn wait_for_lines(&self, n: usize, pred: impl Fn(&str) -> bool) -> usize {
        let count = || self.logs.lock().unwrap().iter().filter(|l| pred(l)).count();
        let deadline = Instant::now() + PATIENCE;
        while count() < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        count()
    }

    /// The binary's pid; an in-process daemon has none of its own.
    pub fn pid(&self) -> u32 {
        match &self.process {
            Process::Binary(child) => child.id(),
            Process::InProcess { .. } => {
                panic!("an in-process daemon has no pid: use Daemon::binary")
            }
        }
    }

    fn has_exited(&mut self) -> bool {
        match &mut self.process {
            Process::Binary(child) => matches!(child.try_wait(), Ok(Some(_))),
            Process::InProcess { thread, .. } => thread.as_ref().map_or(true, |t| t.is_finished()),
        }
    }

    /// A connection with read/write timeouts set.
    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect to tcpmuxd");
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream.set_write_timeout(Some(PATIENCE)).unwrap();
        stream
    }

    /// Sends `request` as is and returns everything the server sends until it closes.
    pub fn exchange(&self, request: &[u8]) -> Vec<u8> {
        let mut stream = self.connect();
        stream.write_all(request).unwrap();
        read_all(&mut stream)
    }
}

impl Daemon {
    /// The daemon, now also owning `dir` (made before it started, for a
    /// socket its config names): removed when the daemon is dropped.
    pub fn keeping(mut self, dir: Scratch) -> Daemon {
        self.kept.push(dir);
        self
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        match &mut self.process {
            Process::Binary(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            // Stopped, not joined: a test that ends mid-session should not wait
            // out the shutdown grace.
            Process::InProcess { stop, .. } => {
                let _ = stop.get_mut().unwrap().take().map(|s| s.send(()));
            }
        }
        // The scratch directory goes with `dir`, after the process.
    }
}

pub fn read_all(stream: &mut impl Read) -> Vec<u8> {
    let mut out = Vec::new();
    stream
        .read_to_end(&mut out)
        .expect("read until the server closes");
    out
}

/// Reads one line, up to and including LF, one byte at a time (so nothing behind it
/// is consumed).
pub fn read_line(stream: &mut impl Read) -> Vec<u8> {
    let mut line = Vec::new();
    let mut byte = [0u8];
    while stream.read(&mut byte).expect("read line") == 1 {
        line.push(byte[0]);
        if byte[0] == b'\n' {
            break;
        }
    }
    line
}

/// A fresh directory under the system temp dir, removed with all it holds
/// when the value is dropped (so a test run leaves nothing behind in /tmp).
pub fn scratch_dir() -> Scratch {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tcpmuxd-test-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    Scratch(dir)
}

/// A directory of [`scratch_dir`]; usable as a `Path`, removed on drop.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Segments with data a socket has sent (pure ACKs not counted).
pub fn data_segments_out(socket: &impl std::os::fd::AsRawFd) -> u32 {
    tcpmuxd::net::segments::segments(socket).sent_with_data
}

/// Deterministic pseudo-random bytes (xorshift64*), so a failure can be replayed.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// `tcpmux admin --socket SOCKET WORDS...`.
pub fn admin(socket: &Path, words: &str) -> std::process::Output {
    std::process::Command::new(sibling_binary("tcpmux"))
        .arg("admin")
        .arg("--socket")
        .arg(socket)
        .args(words.split_whitespace())
        .output()
        .expect("run tcpmux admin")
}

/// [`admin`], which must succeed: its output.
pub fn admin_ok(socket: &Path, words: &str) -> String {
    let out = admin(socket, words);
    assert!(
        out.status.success(),
        "{words}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Path of another binary of the workspace, built next to tcpmuxd.
pub fn sibling_binary(name: &str) -> PathBuf {
    let daemon = Path::new(env!("CARGO_BIN_EXE_tcpmuxd"));
    let path = daemon.with_file_name(name);
    assert!(
        path.exists(),
        "{} is not built; run the workspace tests (cargo test --workspace)",
        path.display()
    );
    path
}

/// Path of an example program of the workspace (cargo test builds them).
pub fn example_binary(name: &str) -> PathBuf {
    let daemon = Path::new(env!("CARGO_BIN_EXE_tcpmuxd"));
    let path = daemon.with_file_name("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built; run the workspace tests (cargo test --workspace)",
        path.display()
    );
    path
}

impl Daemon {
    /// The config file the daemon was started with (rewrite it, then `signal`).
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("tcpmuxd.toml")
    }

    /// Sends `signal` (e.g. "HUP", "TERM") to the daemon; in-process, HUP is a
    /// reload and TERM or INT a shutdown.
    pub fn signal(&self, signal: &str) {
        if let Process::InProcess { stop, reload, .. } = &self.process {
            match signal {
                "HUP" => reload.try_send(()).expect("reload queued"),
                "TERM" | "INT" => drop(stop.lock().unwrap().take().map(|s| s.send(()))),
                other => panic!("an in-process daemon takes no SIG{other}"),
            }
            return;
        }
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    /// Waits (up to PATIENCE) for the daemon to exit.
    pub fn wait_exit(&mut self) -> Option<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            match &mut self.process {
                Process::Binary(child) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Some(status);
                    }
                }
                // `run` returning is the in-process exit; it has no failure.
                Process::InProcess { thread, .. } => {
                    if thread.as_ref().map_or(true, |t| t.is_finished()) {
                        return Some(std::process::ExitStatus::from_raw(0));
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

/// The real uid of this test process.
pub fn my_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(u32::MAX)
}

pub fn is_root() -> bool {
    my_uid() == 0
}

/// For a test marked `#[ignore = "needs root"]`: run without root, it fails
/// saying why; it never passes by skipping.
/// Runs `args` (a command and its arguments) to success and returns its
/// output; a failure fails the test with its stderr.
pub fn run(args: &[&str]) -> std::process::Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn require_root() {
    assert!(
        is_root(),
        "this test needs root: run `cargo test --workspace -- --include-ignored` as root (CI does)"
    );
}

/// For a test marked `#[ignore = "needs PROGRAM"]`: fails if `program` cannot
/// be run (`program --version`-like `probe` must succeed), naming the package.
pub fn require_program(program: &str, probe: &str, package: &str) {
    let found = Command::new(program)
        .arg(probe)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "this test needs `{program}`: apt-get install {package} (.ci/run installs it)"
    );
}

/// Asserts that `tcpmuxd --check-config` refuses `config` with exit 1 and an
/// error containing `words`.
pub fn assert_config_rejected(config: &str, words: &str) {
    let dir = scratch_dir();
    let path = dir.join("bad.toml");
    std::fs::write(&path, config).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .arg("--check-config")
        .arg(&path)
        .output()
        .expect("run tcpmuxd --check-config");
    drop(dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{config:?} was accepted: {stderr}"
    );
    assert!(stderr.contains(words), "{config:?} gave {stderr}");
}
