//! Handoff: backends register names on the control socket and receive the client
//! sockets themselves; tcpmuxd leaves the data path.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::Shutdown;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

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
    ));
    (daemon, control)
}

fn greeting_pid(line: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(line);
    text.strip_prefix("hello from pid ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("not a greeting: {text:?}"))
}

#[test]
fn the_client_socket_itself_reaches_the_backend_with_pipelined_bytes() {
    let (mut daemon, control) = daemon_with_handoff("{ uid = [0] }");
    let backend = Backend::start(&control, &["app"], false).expect("register");
    let mut stream = daemon.connect();
    let me = stream.local_addr().unwrap();
    stream.write_all(b"APP\r\npipelined").unwrap();
    assert_eq!(read_line(&mut stream), b"+\r\n");
    let greeting = read_line(&mut stream);
    assert_eq!(greeting_pid(&greeting), backend.pid());
    assert_eq!(
        String::from_utf8(greeting).unwrap(),
        format!(
            "hello from pid {}: app for {me} via {}\r\n",
            backend.pid(),
            daemon.addr
        )
    );
    stream.write_all(b" and more").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut stream), b"pipelined and more");
    // tcpmuxd saw only the request line: the rest went straight to the backend.
    let line = daemon
        .wait_for_log(|l| l.contains(&format!("peer={me}")))
        .unwrap();
    assert!(
        line.contains("outcome=handed off") && line.contains("bytes_in=5 "),
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
