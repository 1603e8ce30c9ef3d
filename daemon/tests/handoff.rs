//! Handoff: backends register names on the control socket and receive the client
//! sockets themselves; tcpmuxd leaves the data path.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::Shutdown;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{read_all, read_line, Daemon};

struct Backend {
    child: Child,
}

impl Backend {
    /// Starts the example backend for `names`; `as_nobody` drops it to uid 65534.
    fn start(control: &Path, names: &[&str], as_nobody: bool) -> Result<Backend, String> {
        let example = common::example_binary("handoff_backend");
        let mut command = if as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(example);
            c
        } else {
            Command::new(example)
        };
        let mut child = command
            .arg(control)
            .args(names)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start handoff_backend");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        if first.starts_with("registered") {
            Ok(Backend { child })
        } else {
            let output = child.wait_with_output().unwrap();
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn daemon_with_handoff(rule: &str) -> (Daemon, PathBuf) {
    let dir = common::scratch_dir();
    let control = dir.join("handoff.sock");
    // Rules name uid 0 for the test's own uid, so they hold without root too.
    let rule = rule.replace("[0]", &format!("[{}]", common::my_uid()));
    let daemon = Daemon::with_config(&format!(
        "handoff_socket = \"{}\"\n[service.app]\nhandoff = {rule}\n",
        control.display()
    ))
    .keeping(dir);
    (daemon, control)
}

fn greeting_pid(line: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(line);
    text.strip_prefix("hello from pid ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("not a greeting: {text:?}"))
}

/// Sends `request` on a new connection, checks the `+` and the backend's
/// greeting, sends `more` and the FIN; returns what the backend echoed and
/// the connection's log line.
fn handed_off(
    daemon: &mut Daemon,
    backend: &Backend,
    request: &[u8],
    more: &[u8],
) -> (Vec<u8>, String) {
    let mut stream = daemon.connect();
    let me = stream.local_addr().unwrap();
    stream.write_all(request).unwrap();
    assert_eq!(read_line(&mut stream), b"+\r\n");
    let greeting = read_line(&mut stream);
    assert_eq!(
        String::from_utf8(greeting).unwrap(),
        format!(
            "hello from pid {}: app for {me} via {}\r\n",
            backend.pid(),
            daemon.addr
        )
    );
    stream.write_all(more).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let echoed = read_all(&mut stream);
    let line = daemon
        .wait_for_log(|l| l.contains(&format!("peer={me}")))
        .unwrap();
    (echoed, line)
}

#[test]
fn the_client_socket_itself_reaches_the_backend() {
    let (mut daemon, control) = daemon_with_handoff("{ uid = [0] }");
    let backend = Backend::start(&control, &["app"], false).expect("register");
    let (echoed, line) = handed_off(&mut daemon, &backend, b"APP\r\n", b"after the +");
    assert_eq!(echoed, b"after the +");
    // tcpmuxd saw only the request line: the rest went straight to the backend.
    assert!(
        line.contains("outcome=handed off ") && line.contains("bytes_in=5 "),
        "{line}"
    );
}

/// Bytes sent with the name, before the `+`, are read with it; they cannot
/// go back into the socket, so the backend gets a socketpair's end and
/// tcpmuxd relays, every byte in order.
#[test]
fn bytes_pipelined_behind_the_name_reach_the_backend_through_a_relay() {
    let (mut daemon, control) = daemon_with_handoff("{ uid = [0] }");
    let backend = Backend::start(&control, &["app"], false).expect("register");
    let (echoed, line) = handed_off(&mut daemon, &backend, b"APP\r\npipelined", b" and more");
    assert_eq!(echoed, b"pipelined and more");
    assert!(
        line.contains("outcome=handed off, relayed") && line.contains("bytes_in=23 "),
        "{line}"
    );
}

#[test]
fn help_lists_handoff_names_only_while_a_backend_is_live() {
    let (mut daemon, control) = daemon_with_handoff("{ uid = [0] }");
    let listed = |daemon: &Daemon| {
        String::from_utf8(daemon.exchange(b"help\r\n"))
            .unwrap()
            .lines()
            .any(|l| l == "app")
    };
    assert!(!listed(&daemon));
    let reply = String::from_utf8(daemon.exchange(b"app\r\n")).unwrap();
    assert_eq!(reply, "-no backend is serving app right now\r\n");

    let backend = Backend::start(&control, &["app"], false).expect("register");
    assert!(listed(&daemon));
    drop(backend); // killed
    daemon
        .wait_for_log(|l| l.contains("handoff backend gone"))
        .expect("unregistered");
    assert!(!listed(&daemon));
    assert!(daemon.exchange(b"app\r\n").starts_with(b"-no backend"));
}

#[test]
fn backends_share_clients_round_robin_and_survive_one_dying() {
    let (mut daemon, control) = daemon_with_handoff("{ uid = [0] }");
    let first = Backend::start(&control, &["app"], false).expect("register first");
    let second = Backend::start(&control, &["app"], false).expect("register second");
    let mut served_by = Vec::new();
    for _ in 0..4 {
        let mut stream = daemon.connect();
        stream.write_all(b"app\r\n").unwrap();
        assert_eq!(read_line(&mut stream), b"+\r\n");
        served_by.push(greeting_pid(&read_line(&mut stream)));
    }
    for pid in [first.pid(), second.pid()] {
        assert_eq!(
            served_by.iter().filter(|&&p| p == pid).count(),
            2,
            "{served_by:?}"
        );
    }
    // Kill one mid-way: every later client is served by the other.
    let survivor = second.pid();
    drop(first);
    daemon
        .wait_for_log(|l| l.contains("handoff backend gone"))
        .expect("unregistered");
    for _ in 0..4 {
        let mut stream = daemon.connect();
        stream.write_all(b"app\r\n").unwrap();
        assert_eq!(read_line(&mut stream), b"+\r\n");
        assert_eq!(greeting_pid(&read_line(&mut stream)), survivor);
    }
}

#[test]
fn only_handoff_names_can_be_registered() {
    let (_daemon, control) = daemon_with_handoff("{ uid = [0] }");
    // Names that are not handoff services cannot be registered by anyone.
    let error = Backend::start(&control, &["echo"], false)
        .err()
        .expect("refused");
    assert!(error.contains("echo is not a handoff service"), "{error}");
}

#[test]
#[ignore = "needs root and setpriv (to register as another uid)"]
fn an_unauthorized_uid_cannot_squat_on_a_name() {
    common::require_root();
    common::require_program("setpriv", "--version", "util-linux");
    let (daemon, control) = daemon_with_handoff("{ uid = [0] }");
    let error = Backend::start(&control, &["app"], true)
        .err()
        .expect("refused");
    assert!(
        error.contains("uid 65534 gid 65534 may not register app"),
        "{error}"
    );
    // And the name stays free for its rightful owner.
    let _owner = Backend::start(&control, &["app"], false).expect("owner registers");
    assert!(String::from_utf8(daemon.exchange(b"help\r\n"))
        .unwrap()
        .contains("app\r\n"));
}

#[tokio::test]
async fn the_async_backend_api_yields_tcp_streams() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (daemon, control) = daemon_with_handoff("{ uid = [0], gid = [0] }");
    let mut backend = tcpmux::handoff::AsyncBackend::register(&control, &["app"])
        .await
        .expect("register");
    let addr = daemon.addr;
    let client = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
        stream.write_all(b"app\r\nquestion").unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        read_all(&mut stream)
    });
    let mut handed = backend.accept().await.expect("a client");
    assert_eq!(handed.service, "app");
    let mut question = Vec::new();
    handed.stream.read_to_end(&mut question).await.unwrap();
    assert_eq!(question, b"question");
    handed.stream.write_all(b"answer").await.unwrap();
    drop(handed);
    assert_eq!(client.await.unwrap(), b"+\r\nanswer");
}

#[test]
fn handoff_services_need_a_control_socket_and_a_rule() {
    for (config, words) in [
        (
            "[service.app]\nhandoff = { uid = [0] }\n",
            "need `handoff_socket",
        ),
        (
            "handoff_socket = \"/tmp/x.sock\"\n[service.app]\nhandoff = {}\n",
            "allows no one",
        ),
    ] {
        common::assert_config_rejected(config, words);
    }
}

#[test]
fn a_name_repeated_in_one_registration_counts_once() {
    let (daemon, control) = daemon_with_handoff("{ uid = [0] }");
    let repeated = vec!["app"; 300];
    let _greedy = Backend::start(&control, &repeated, false).expect("register");
    let _fair = Backend::start(&control, &["app"], false).expect("register");
    let stats = String::from_utf8(daemon.exchange(b"stats\r\n")).unwrap();
    assert!(
        stats.contains("tcpmuxd_handoff_backends{service=\"app\"} 2\n"),
        "{stats}"
    );
    // Turns alternate between the two backends, not 300 to 1.
    let mut pids = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let mut stream = daemon.connect();
        stream.write_all(b"app\r\n").unwrap();
        assert_eq!(read_line(&mut stream), b"+\r\n");
        pids.insert(greeting_pid(&read_line(&mut stream)));
    }
    assert_eq!(pids.len(), 2, "{pids:?}");
}

/// The next line, or `None` when the read times out or the stream ends first.
fn line_within(stream: &mut std::net::TcpStream, limit: Duration) -> Option<Vec<u8>> {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8];
    loop {
        match std::io::Read::read(stream, &mut byte) {
            Ok(1) => {
                line.push(byte[0]);
                if byte[0] == b'\n' {
                    return Some(line);
                }
            }
            _ => return None,
        }
    }
}

#[test]
fn a_backend_that_stops_reading_is_skipped_and_never_leaves_clients_hanging() {
    let (mut daemon, control) = daemon_with_handoff("{ uid = [0] }");
    // Registered, and never reads a frame.
    let stalled = tcpmux::handoff::Backend::register(&control, &["app"]).expect("register");
    let healthy = Backend::start(&control, &["app"], false).expect("register healthy");
    let (mut served, mut silent) = (0, Vec::new());
    for _ in 0..40 {
        let mut stream = daemon.connect();
        stream.write_all(b"app\r\n").unwrap();
        assert_eq!(
            line_within(&mut stream, common::PATIENCE).as_deref(),
            Some(&b"+\r\n"[..])
        );
        match line_within(&mut stream, Duration::from_secs(4)) {
            Some(greeting) if greeting.starts_with(b"hello from pid") => served += 1,
            _ => silent.push(stream),
        }
    }
    // The stalled backend held at most the one client it was given before it
    // was seen not to read, and never acknowledged it: the daemon shut that
    // connection down (EOF here), though the backend still has its copy.
    assert!(
        silent.len() <= 1 && served + silent.len() == 40,
        "{served} served, {} silent",
        silent.len()
    );
    assert_eq!(silent.len(), 1, "the stalled backend was given one client");
    for mut stream in silent {
        stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
        assert_eq!(read_all(&mut stream), b"", "ended, not left waiting");
        daemon
            .wait_for_log(|l| l.contains("did not acknowledge a client in time"))
            .expect("logged");
    }

    // With only the stalled backend left, clients are refused, not kept waiting.
    drop(healthy);
    daemon
        .wait_for_log(|l| l.contains("handoff backend gone"))
        .expect("the healthy backend's exit is seen");
    for _ in 0..3 {
        let reply = String::from_utf8(daemon.exchange(b"app\r\n")).unwrap();
        assert!(
            reply.starts_with("-service unavailable: every backend is busy"),
            "{reply:?}"
        );
    }
    drop(stalled);
}

#[test]
fn backends_receive_the_socket_in_blocking_mode() {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    use std::io::Read;
    let (daemon, control) = daemon_with_handoff("{ uid = [0] }");
    // A backend written against the wire protocol alone, as one in another
    // language would be: nothing touches the descriptor's flags.
    let mut backend = std::os::unix::net::UnixStream::connect(&control).unwrap();
    backend.write_all(b"REGISTER app\n").unwrap();
    let mut answer = [0u8; 3];
    backend.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"OK\n");
    let addr = daemon.addr;
    let client = std::thread::spawn(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.write_all(b"app\r\n").unwrap();
        stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
        read_all(&mut stream)
    });
    let mut frame = [0u8; tcpmux_proto::handoff::FRAME_LEN];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        &backend,
        &mut [std::io::IoSliceMut::new(&mut frame)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC,
    )
    .unwrap();
    assert!(got.bytes > 0);
    let socket = ancillary
        .drain()
        .find_map(|message| match message {
            RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
            _ => None,
        })
        .expect("the client's socket");
    let flags = rustix::fs::fcntl_getfl(&socket).unwrap();
    assert!(!flags.contains(rustix::fs::OFlags::NONBLOCK), "{flags:?}");
    let mut socket = std::net::TcpStream::from(socket);
    socket.write_all(b"blocking\n").unwrap();
    drop(socket);
    assert_eq!(client.join().unwrap(), b"+\r\nblocking\n");
}

#[test]
fn a_detecting_listener_hands_off_a_tls_client_with_its_client_hello_unread() {
    let dir = common::scratch_dir();
    let control = dir.join("handoff.sock");
    let daemon = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true }}]\n\
         handoff_socket = \"{}\"\n[service.app]\nhandoff = {{ uid = [{}] }}\nsni = [\"app.example\"]\n",
        control.display(),
        common::my_uid()
    ));
    let _backend = Backend::start(&control, &["app"], false).expect("register");
    let hello = tcpmux_proto::sniff::client_hello::build(Some("app.example"), &[], 0, 16384);
    let mut stream = daemon.connect();
    let answer = common::send_and_receive(&mut stream, hello.clone());
    // No `+`: the backend's greeting, then the ClientHello it read itself.
    assert!(answer.starts_with(b"hello from pid "), "{answer:?}");
    assert!(answer.ends_with(&hello));
    let _ = std::fs::remove_dir_all(&dir);
}
