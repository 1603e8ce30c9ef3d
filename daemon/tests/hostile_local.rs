//! The hostile local user: another account on the daemon's machine (uid
//! 65534 and its neighbours, through setpriv) against the daemon's local
//! surfaces: the admin socket (a symlink planted at its path, slots taken by
//! refused or never-reading connections), the metrics listener (a
//! rebinding Host, idle connections crowding out a scrape) and the ACME
//! storage (symlinks planted where a key is written). Throughout, root must
//! still be served and no file outside the daemon's own may change. Every
//! test needs root, as CI runs them.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use common::{Daemon, Scratch};

/// `tcpmux admin --socket SOCKET WORDS...` as `uid` (root when 0).
fn admin_as(uid: u32, socket: &Path, words: &str) -> Output {
    let mut command = as_uid(uid, common::sibling_binary("tcpmux"));
    command
        .args(["admin", "--socket"])
        .arg(socket)
        .args(words.split_whitespace());
    command.output().expect("run tcpmux admin")
}

/// `program` run as `uid` (its own group, no others); as root when 0.
fn as_uid(uid: u32, program: impl AsRef<std::ffi::OsStr>) -> Command {
    if uid == 0 {
        return Command::new(program);
    }
    let mut command = Command::new("setpriv");
    command
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(program);
    command
}

fn served(out: &Output) -> bool {
    out.status.success()
}

/// A directory every user may write in, without the sticky bit: the
/// careless setup in which another user can replace any file in it.
fn open_directory() -> Scratch {
    let dir = common::scratch_dir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

fn needs_root_and_setpriv() {
    common::require_root();
    common::require_program("setpriv", "--version", "util-linux");
}

/// A root-owned file the attacks aim at, and its mode.
fn target(dir: &Path) -> (std::path::PathBuf, u32) {
    let target = dir.join("target");
    std::fs::write(&target, b"root's").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    (target, 0o640)
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Replaces `socket` with a symlink to `target`, as uid 65534.
fn plant_symlink(socket: &Path, target: &Path) {
    let status = as_uid(65534, "sh")
        .arg("-c")
        .arg(format!(
            "rm -f '{}' && ln -s '{}' '{}'",
            socket.display(),
            target.display(),
            socket.display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
    assert!(std::fs::symlink_metadata(socket).unwrap().is_symlink());
}

#[test]
#[ignore = "needs root (setpriv to another uid)"]
fn a_symlink_planted_at_the_admin_socket_changes_nothing_on_reload() {
    needs_root_and_setpriv();
    let dir = open_directory();
    let elsewhere = common::scratch_dir();
    let (target, mode) = target(&elsewhere);
    let socket = dir.join("admin.sock");
    let config = |uids: &str| format!("admin_socket = \"{}\"\n{uids}", socket.display());
    let daemon = Daemon::binary(&config("admin_uids = [65533]\n"));
    assert_eq!(mode_of(&socket), 0o666);
    // The same admin_uids, then ones that close the socket to others: a
    // reload chmodded the symlink's target (0666, then 0600) before.
    for (round, uids) in [(1, "admin_uids = [65533]\n"), (2, "")] {
        plant_symlink(&socket, &target);
        std::fs::write(daemon.config_path(), config(uids)).unwrap();
        daemon.signal("HUP");
        assert_eq!(
            daemon.wait_for_lines(round, |l| l.contains("configuration reloaded")),
            round,
            "{:?}",
            daemon.logs()
        );
        assert_eq!(
            mode_of(&target),
            mode,
            "round {round}: the target was chmodded"
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"root's");
        // The daemon's socket is back in its place, for root.
        let meta = std::fs::symlink_metadata(&socket).unwrap();
        assert!(!meta.is_symlink(), "round {round}");
        assert!(served(&admin_as(0, &socket, "show services")));
    }
    assert_eq!(mode_of(&socket), 0o600);
    assert_eq!(std::fs::metadata(&target).unwrap().uid(), 0);
}

#[test]
#[ignore = "needs root (starts the daemon as root with user = \"nobody\")"]
fn the_admin_socket_belongs_to_the_daemons_user_and_reloads_keep_it() {
    needs_root_and_setpriv();
    let dir = common::scratch_dir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.join("admin.sock");
    let daemon = Daemon::binary(&format!(
        "user = \"nobody\"\nadmin_socket = \"{}\"\n",
        socket.display()
    ));
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (65534, 0o600));
    for round in 1..=2 {
        daemon.signal("HUP");
        assert_eq!(
            daemon.wait_for_lines(round, |l| l.contains("configuration reloaded")),
            round,
            "{:?}",
            daemon.logs()
        );
    }
    assert!(
        !daemon.logs().iter().any(|l| l.contains("reload failed")),
        "{:?}",
        daemon.logs()
    );
    let out = admin_as(65534, &socket, "show services");
    assert!(served(&out), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(served(&admin_as(0, &socket, "show services")));
    // Another user still cannot connect at all (0600).
    let out = admin_as(65533, &socket, "show services");
    assert!(!served(&out));
}

/// A Python program run as `uid` against the socket at `path`: `script`
/// reads the path as sys.argv[1]; its first line of output says it is ready.
struct Attacker(Child);

impl Attacker {
    fn start(uid: u32, script: &str, path: &Path, args: &[&str]) -> (Attacker, String) {
        let mut child = as_uid(uid, "/usr/bin/python3")
            .arg("-c")
            .arg(script)
            .arg(path)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("run python3");
        let mut first = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout).read_line(&mut first).unwrap();
        (Attacker(child), first.trim().to_owned())
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A daemon (the binary, as root) whose admin socket, open to `uids`, is
/// in a directory every user may write; with what the attackers need.
fn admin_under_attack(uids: &str) -> (Daemon, std::path::PathBuf) {
    needs_root_and_setpriv();
    common::require_program("/usr/bin/python3", "--version", "python3");
    let dir = open_directory();
    let socket = dir.join("admin.sock");
    let config = format!(
        "admin_socket = \"{}\"\nadmin_uids = {uids}\n",
        socket.display()
    );
    (Daemon::binary(&config).keeping(dir), socket)
}

/// Connects to the socket as fast as it can for argv[2] seconds (bounded to
/// 20,000 connections), sending a command on each and closing at once.
const REFUSED_FLOOD: &str = r#"
import socket, sys, time
print("start", flush=True)
end = time.time() + float(sys.argv[2])
count = 0
while time.time() < end and count < 20000:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1])
        s.send(b"show services\n")
    except OSError:
        pass
    s.close()
    count += 1
"#;

#[test]
#[ignore = "needs root (setpriv to another uid) and python3"]
fn a_refused_uid_connecting_in_a_loop_never_locks_root_out() {
    let (daemon, socket) = admin_under_attack("[65533]");
    let started = std::time::Instant::now();
    let (attacker, ready) = Attacker::start(65534, REFUSED_FLOOD, &socket, &["6"]);
    assert_eq!(ready, "start");
    // Root and the allowed uid, again and again while the flood runs.
    let mut tries = 0;
    while attacker_running(&attacker) && tries < 40 {
        let out = admin_as(0, &socket, "show services");
        assert!(
            served(&out),
            "root refused: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = admin_as(65533, &socket, "show services");
        assert!(
            served(&out),
            "65533 refused: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tries += 1;
    }
    drop(attacker);
    let seconds = started.elapsed().as_secs() + 2;
    // Refusals are answered and logged a few times a second, not each one.
    let logged = daemon
        .logs()
        .iter()
        .filter(|l| l.contains("uid not allowed"))
        .count() as u64;
    assert!(
        logged <= 5 * seconds,
        "{logged} refusals logged in {seconds}s"
    );
}

fn attacker_running(attacker: &Attacker) -> bool {
    std::fs::metadata(format!("/proc/{}", attacker.0.id())).is_ok()
}

/// Opens argv[2] connections, sends each a long burst of commands and never
/// reads; says "held" once the daemon is writing to every one of them.
const NEVER_READS: &str = r#"
import select, socket, sys, time
socks = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.setblocking(False)
    try:
        s.send(b"show services\n" * 20000)
    except BlockingIOError:
        pass
    socks.append(s)
pending, end = set(socks), time.time() + 20
while pending and time.time() < end:
    ready, _, _ = select.select(list(pending), [], [], 1)
    pending -= set(ready)
print("held" if not pending else "not held", flush=True)
time.sleep(60)
"#;

#[test]
#[ignore = "needs root (setpriv to other uids) and python3"]
fn clients_that_never_read_lose_their_slots_and_root_still_gets_in() {
    let (daemon, socket) = admin_under_attack("[65531, 65532, 65533]");
    // Two uids, eight connections each: every slot of the non-root users.
    let (_one, ready) = Attacker::start(65533, NEVER_READS, &socket, &["8"]);
    assert_eq!(ready, "held");
    let (_two, ready) = Attacker::start(65532, NEVER_READS, &socket, &["8"]);
    assert_eq!(ready, "held");
    let out = admin_as(65531, &socket, "show services");
    assert!(!served(&out), "the slots are full");
    assert!(String::from_utf8_lossy(&out.stderr).contains("too many admin connections"));
    let out = admin_as(0, &socket, "show services");
    assert!(
        served(&out),
        "root locked out: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The write deadline ends the never-reading connections, and frees
    // their slots, while their processes still hold them open.
    assert_eq!(
        daemon.wait_for_lines(16, |l| l.contains("did not read the reply")),
        16
    );
    let out = admin_as(65531, &socket, "show services");
    assert!(served(&out), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
#[ignore = "needs root (setpriv to another uid)"]
fn an_acme_storage_others_may_write_is_refused_before_a_key_goes_near_it() {
    needs_root_and_setpriv();
    let dir = open_directory();
    let elsewhere = common::scratch_dir();
    let (target, mode) = target(&elsewhere);
    // Another user plants what a key used to be written through: the fixed
    // temporary name of before, and the pair's own name, as symlinks to a
    // file of root's.
    for name in [
        "acme.test.pem",
        "acme.test.key.pem.partial",
        "acme.test.key.pem",
    ] {
        let status = as_uid(65534, "ln")
            .arg("-s")
            .arg(&target)
            .arg(dir.join(name))
            .status()
            .unwrap();
        assert!(status.success());
    }
    let config = dir.join("tcpmuxd.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [{{ address = \"127.0.0.1:0\", tls = {{ acme = {{ directory = \"https://localhost/dir\", \
             names = [\"acme.test\"], storage = \"{}\" }} }} }}]\n",
            dir.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .arg("--config")
        .arg(&config)
        .output()
        .expect("run tcpmuxd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with storage 0777: {stderr}");
    assert!(stderr.contains("may be written by every user"), "{stderr}");
    assert_eq!(mode_of(&target), mode);
    assert_eq!(std::fs::read(&target).unwrap(), b"root's");
}

/// Opens argv[2] TCP connections to port argv[1] on 127.0.0.1 that send
/// nothing; asks once with a rebinding page's Host; says what it got.
const METRICS_ATTACK: &str = r#"
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"GET /status.json HTTP/1.1\r\nHost: attacker.example\r\n\r\n")
answer = b""
while chunk := s.recv(4096):
    answer += chunk
print(answer.split(b"\r\n")[0].decode(), flush=True)
time.sleep(60)
"#;

#[test]
#[ignore = "needs root (setpriv to another uid) and python3"]
fn a_local_user_can_neither_read_the_dashboard_by_rebinding_nor_crowd_out_a_scrape() {
    needs_root_and_setpriv();
    common::require_program("/usr/bin/python3", "--version", "python3");
    let port = common::dns::free_port();
    let daemon = Daemon::binary(&format!("metrics_listen = \"127.0.0.1:{port}\"\n"));
    let (_attacker, said) = Attacker::start(
        65534,
        METRICS_ATTACK,
        Path::new(&port.to_string()),
        &["300"],
    );
    assert_eq!(said, "HTTP/1.0 421 Misdirected Request");
    // Root's scrape, after the 300 idle ones, is served.
    let mut scrape = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    scrape.set_read_timeout(Some(common::PATIENCE)).unwrap();
    std::io::Write::write_all(&mut scrape, b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let answer = String::from_utf8_lossy(&common::read_all(&mut scrape)).into_owned();
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    assert!(daemon.exchange(b"daytime\r\n").starts_with(b"+"));
}
