//! The admin socket end to end, through the `tcpmux admin` command an
//! operator uses: draining a backend, maintenance, weights, turning a
//! service off and on, what survives a reload, and who may connect.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;

use common::{admin, admin_ok, read_all, tagged_echo, Daemon, PATIENCE};

/// The tag of the backend a new client of `web` reaches.
fn reached(daemon: &Daemon) -> String {
    let mut stream = daemon.connect();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(b"web\r\n").unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    String::from_utf8_lossy(&read_all(&mut stream)).into_owned()
}

/// A daemon with a round-robin pool of two tagged backends, A and B.
fn pool() -> (Daemon, PathBuf, SocketAddr, SocketAddr) {
    let a = tagged_echo(SocketAddr::from(([127, 0, 0, 1], 0)), "A");
    let b = tagged_echo(SocketAddr::from(([127, 0, 0, 1], 0)), "B");
    let dir = common::scratch_dir();
    let socket = dir.join("admin.sock");
    let daemon = Daemon::with_config(&format!(
        "admin_socket = \"{}\"\n[service.web]\nproxy = [\"{a}\", \"{b}\"]\nbalance = \"round-robin\"\n",
        socket.display()
    ))
    .keeping(dir);
    (daemon, socket, a, b)
}

/// A session of `web` held open: its stream and the tag of its backend.
fn hold(daemon: &Daemon) -> (TcpStream, u8) {
    let mut stream = daemon.connect();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(b"web\r\n").unwrap();
    let mut reply = [0u8; 4];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..3], b"+\r\n");
    (stream, reply[3])
}

/// Sends `bytes` on a held session and reads them back.
fn echoes(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).unwrap();
    let mut back = vec![0u8; bytes.len()];
    stream.read_exact(&mut back).unwrap();
    assert_eq!(back, bytes);
}

/// The client sees the end of its session: EOF (or a reset) before PATIENCE.
fn ended(stream: &mut TcpStream) {
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
}

#[test]
fn a_drained_backend_gets_no_new_client_while_its_session_goes_on() {
    let (daemon, socket, a, _b) = pool();
    // Hold a session on A (round robin: one of the first two clients).
    let mut held = None;
    for _ in 0..2 {
        let (stream, tag) = hold(&daemon);
        if tag == b'A' {
            held = Some(stream);
        }
    }
    let mut held = held.expect("a session on A");
    let text = admin_ok(&socket, &format!("set backend web {a} state drain"));
    assert!(text.contains("drain*"), "{text}");
    let tags: Vec<String> = (0..100).map(|_| reached(&daemon)).collect();
    assert!(
        tags.iter().all(|t| t == "+\r\nB"),
        "a drained backend got clients: {:?}",
        tags.iter().filter(|t| t.ends_with('A')).count()
    );
    // The held session still echoes.
    echoes(&mut held, b"still here");
    let table = admin_ok(&socket, "show backends web");
    let line = table.lines().find(|l| l.contains(&a.to_string())).unwrap();
    assert!(line.contains("drain*") && line.contains(" 1 "), "{table}");
    // Maintenance: no clients either; ready again brings it back.
    admin_ok(&socket, &format!("set backend web {a} state maint"));
    assert!((0..10).all(|_| reached(&daemon) == "+\r\nB"));
    admin_ok(&socket, &format!("set backend web {a} state ready"));
    let tags: Vec<String> = (0..10).map(|_| reached(&daemon)).collect();
    assert_eq!(
        tags.iter().filter(|t| t.ends_with('A')).count(),
        5,
        "{tags:?}"
    );
}

#[test]
fn weights_set_at_run_time_share_the_clients() {
    let (daemon, socket, _a, b) = pool();
    admin_ok(&socket, &format!("set backend web {b} weight 3"));
    let tags: Vec<String> = (0..40).map(|_| reached(&daemon)).collect();
    assert_eq!(
        tags.iter().filter(|t| t.ends_with('B')).count(),
        30,
        "{tags:?}"
    );
    // Back to the configured weight.
    admin_ok(&socket, &format!("set backend web {b} weight config"));
    let tags: Vec<String> = (0..40).map(|_| reached(&daemon)).collect();
    assert_eq!(
        tags.iter().filter(|t| t.ends_with('B')).count(),
        20,
        "{tags:?}"
    );
}

#[test]
fn a_disabled_service_refuses_new_clients_and_state_survives_a_reload() {
    let (mut daemon, socket, a, _b) = pool();
    admin_ok(&socket, "disable service web");
    assert_eq!(reached(&daemon), "-service disabled\r\n");
    admin_ok(&socket, &format!("set backend web {a} state drain"));
    daemon.signal("HUP");
    daemon
        .wait_for_log(|l| l.contains("configuration reloaded"))
        .expect("reloaded");
    let services = admin_ok(&socket, "show services");
    let web = services.lines().find(|l| l.starts_with("web ")).unwrap();
    assert!(web.contains("disabled*"), "{services}");
    let backends = admin_ok(&socket, "--json show backends");
    assert!(backends.contains("\"state\":\"drain\""), "{backends}");
    assert_eq!(reached(&daemon), "-service disabled\r\n");
    admin_ok(&socket, "enable service web");
    assert_eq!(reached(&daemon), "+\r\nB");
    let log = daemon
        .wait_for_log(|l| l.contains("admin command") && l.contains("enable service web"))
        .expect("the command's log line");
    assert!(
        log.contains("uid=0") || log.contains(&format!("uid={}", common::my_uid())),
        "{log}"
    );
}

#[test]
fn mistakes_are_refused_with_exit_1_and_no_socket_is_exit_3() {
    let (_daemon, socket, _a, _b) = pool();
    let out = admin(&socket, "set backend web 192.0.2.1:80 state drain");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("its backends:"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        admin(&socket, "disable service nope").status.code(),
        Some(1)
    );
    assert_eq!(admin(&socket, "frobnicate").status.code(), Some(1));
    assert_eq!(
        admin(&socket, "set backend web x state sleepy")
            .status
            .code(),
        Some(1)
    );
    let missing = socket.with_file_name("missing.sock");
    assert_eq!(admin(&missing, "show services").status.code(), Some(3));
    // The tables every show command prints.
    for (words, header) in [
        ("show listeners", "KIND"),
        ("show handoff", "PID"),
        ("help", "show services"),
    ] {
        assert!(admin_ok(&socket, words).contains(header), "{words}");
    }
}

#[test]
#[ignore = "needs root (setpriv to another uid)"]
fn a_uid_not_allowed_is_refused() {
    common::require_root();
    common::require_program("setpriv", "--version", "util-linux");
    let dir = common::scratch_dir();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let socket = dir.join("admin.sock");
    // admin_uids names another uid, so the socket is open (0666) and
    // SO_PEERCRED decides: 65534 is not listed.
    let _daemon = Daemon::with_config(&format!(
        "admin_socket = \"{}\"\nadmin_uids = [65533]\n",
        socket.display()
    ));
    let as_uid = |uid: u32| {
        Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .arg(common::sibling_binary("tcpmux"))
            .args(["admin", "--socket"])
            .arg(&socket)
            .args(["show", "services"])
            .output()
            .unwrap()
    };
    let out = as_uid(65534);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("uid not allowed"), "{stderr}");
    // Listed, it is served.
    let allowed = as_uid(65533);
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
}

#[test]
fn show_sessions_lists_a_live_session_and_kill_ends_it() {
    let (mut daemon, socket, a, b) = pool();
    let (mut held, tag) = hold(&daemon);
    echoes(&mut held, b"12345");
    let out = admin(&socket, "--json show sessions web");
    assert!(out.status.success());
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let sessions = reply["sessions"].as_array().expect("a list");
    assert_eq!(sessions.len(), 1, "{reply}");
    let row = &sessions[0];
    let backend = if tag == b'A' { a } else { b };
    assert_eq!(row["client"], held.local_addr().unwrap().to_string());
    assert_eq!(row["service"], "web");
    assert_eq!(row["routed"], "tcpmux");
    assert_eq!(row["backend"], backend.to_string());
    assert_eq!(row["bytes_in"], 5, "{row}");
    assert_eq!(row["bytes_out"], 6, "the tag and the echo: {row}");
    let table = admin_ok(&socket, "show sessions");
    assert!(
        table.contains("CLIENT") && table.contains("web") && table.contains("5 B"),
        "{table}"
    );
    let id = row["id"].as_u64().expect("an id");
    let text = admin_ok(&socket, &format!("kill session {id}"));
    assert!(text.contains("ended 1 session"), "{text}");
    ended(&mut held);
    let line = daemon.wait_for_log(|l| l.contains("killed from the admin socket"));
    let line = line.expect("the kill is logged");
    assert!(line.contains("service=web"), "{line}");
    // Gone: a second kill is refused, and the table is empty.
    assert_eq!(
        admin(&socket, &format!("kill session {id}")).status.code(),
        Some(1)
    );
    let out = admin(&socket, "--json show sessions web");
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        reply["sessions"].as_array().map(Vec::len),
        Some(0),
        "{reply}"
    );
}

#[test]
fn shutdown_sessions_backend_ends_that_members_sessions_only() {
    let (daemon, socket, a, _b) = pool();
    let held: Vec<(TcpStream, u8)> = (0..4).map(|_| hold(&daemon)).collect();
    let text = admin_ok(&socket, &format!("shutdown sessions backend web {a}"));
    assert!(text.contains("ended 2 sessions"), "{text}");
    for (mut stream, tag) in held {
        if tag == b'A' {
            ended(&mut stream);
        } else {
            echoes(&mut stream, b"on B");
        }
    }
    // Not a member and nothing on it: refused.
    let out = admin(&socket, "shutdown sessions backend web 127.0.0.1:1");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn runtime_state_travels_with_a_binary_upgrade() {
    let a = tagged_echo(SocketAddr::from(([127, 0, 0, 1], 0)), "A");
    let b = tagged_echo(SocketAddr::from(([127, 0, 0, 1], 0)), "B");
    let dir = common::scratch_dir();
    let socket = dir.join("admin.sock");
    let mut old = Daemon::binary(&format!(
        "admin_socket = \"{}\"\nupgrade_socket = \"{}\"\n\
         [service.web]\nproxy = [\"{a}\", \"{b}\"]\nbalance = \"round-robin\"\n\
         [service.other]\nbuiltin = \"daytime\"\n",
        socket.display(),
        dir.join("upgrade.sock").display(),
    ));
    admin_ok(&socket, &format!("set backend web {a} state drain"));
    admin_ok(&socket, &format!("set backend web {b} weight 7"));
    admin_ok(&socket, "disable service other");
    // The harness passed --listen to the old daemon; the successor reads the
    // file: give it the same address.
    let config = old.config_path();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("listen = [\"{}\"]\n{text}", old.addr)).unwrap();
    let _successor = common::successor::Successor::start(&config);
    assert!(old.wait_exit().is_some_and(|s| s.success()));
    // The new daemon answers on the handed-over admin socket, with the state.
    let backends = admin_ok(&socket, "--json show backends web");
    let reply: serde_json::Value = serde_json::from_str(&backends).expect("JSON");
    let rows = reply["backends"].as_array().expect("rows");
    let row = |addr: SocketAddr| {
        rows.iter()
            .find(|r| r["backend"] == addr.to_string())
            .unwrap_or_else(|| panic!("{addr} in {reply}"))
    };
    assert_eq!(row(a)["state"], "drain", "{reply}");
    assert_eq!(row(a)["set_at_runtime"], true, "{reply}");
    assert_eq!(row(b)["weight"], 7, "{reply}");
    let services = admin_ok(&socket, "show services");
    let other = services.lines().find(|l| l.starts_with("other ")).unwrap();
    assert!(other.contains("disabled*"), "{services}");
    assert!((0..10).all(|_| reached(&old) == "+\r\nB"));
    let mut stream = old.connect();
    stream.write_all(b"other\r\n").unwrap();
    assert_eq!(read_all(&mut stream), b"-service disabled\r\n");
}

#[test]
fn a_reload_that_removes_a_service_or_member_forgets_its_run_time_state() {
    let a = tagged_echo(SocketAddr::from(([127, 0, 0, 1], 0)), "A");
    let b = tagged_echo(SocketAddr::from(([127, 0, 0, 1], 0)), "B");
    let dir = common::scratch_dir();
    let socket = dir.join("admin.sock");
    let head = format!("admin_socket = \"{}\"\n", socket.display());
    let web = |members: &str| format!("[service.web]\nproxy = [{members}]\n");
    let both = format!("\"{a}\", \"{b}\"");
    let other = "[service.other]\nbuiltin = \"daytime\"\n";
    let full = format!("{head}{}{other}", web(&both));
    let mut daemon = Daemon::with_config(&full).keeping(dir);
    admin_ok(&socket, "disable service other");
    admin_ok(&socket, &format!("set backend web {a} state maint"));
    // The reload removes `other` and member A; the next one brings them back.
    let config = daemon.config_path();
    std::fs::write(&config, format!("{head}{}", web(&format!("\"{b}\"")))).unwrap();
    daemon.signal("HUP");
    let forgot = daemon
        .wait_for_log(|l| l.contains("reload removed a disabled service"))
        .expect("the forgotten state is logged");
    assert!(forgot.contains("service=other"), "{forgot}");
    let forgot = daemon
        .wait_for_log(|l| l.contains("reload removed a backend"))
        .expect("the forgotten member is logged");
    assert!(forgot.contains(&format!("backend={a}")), "{forgot}");
    std::fs::write(&config, &full).unwrap();
    daemon.signal("HUP");
    assert_eq!(
        daemon.wait_for_lines(2, |l| l.contains("configuration reloaded")),
        2
    );
    let services = admin_ok(&socket, "--json show services");
    let reply: serde_json::Value = serde_json::from_str(&services).expect("JSON");
    let row = reply["services"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["name"] == "other"))
        .unwrap_or_else(|| panic!("other in {reply}"))
        .clone();
    assert_eq!(row["state"], "enabled", "{reply}");
    let backends = admin_ok(&socket, "--json show backends web");
    let reply: serde_json::Value = serde_json::from_str(&backends).expect("JSON");
    let row = reply["backends"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["backend"] == a.to_string()))
        .unwrap_or_else(|| panic!("{a} in {reply}"))
        .clone();
    assert_eq!(row["state"], "ready", "{reply}");
    assert_eq!(row["set_at_runtime"], false, "{reply}");
}

#[test]
fn changes_are_refused_while_an_upgrade_carries_the_state() {
    let dir = common::scratch_dir();
    let socket = dir.join("admin.sock");
    let upgrade = dir.join("upgrade.sock");
    let mut daemon = Daemon::with_config(&format!(
        "admin_socket = \"{}\"\nupgrade_socket = \"{}\"\n[service.other]\nbuiltin = \"daytime\"\n",
        socket.display(),
        upgrade.display()
    ))
    .keeping(dir);
    // A successor that asks, takes the first frame, and stops there: the
    // state has been read for it and it has not taken over.
    let mut successor = std::os::unix::net::UnixStream::connect(&upgrade).unwrap();
    successor.set_read_timeout(Some(PATIENCE)).unwrap();
    successor.write_all(b"UPGRADE\n").unwrap();
    let mut first = [0u8; 1];
    successor.read_exact(&mut first).unwrap();
    let out = admin(&socket, "disable service other");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("upgrade in progress"), "{stderr}");
    // Reading is still allowed.
    admin_ok(&socket, "show services");
    // The successor goes away: this daemon serves on, and takes changes again.
    drop(successor);
    daemon
        .wait_for_log(|l| l.contains("did not take over") || l.contains("upgrade failed"))
        .expect("the upgrade's end is logged");
    admin_ok(&socket, "disable service other");
}
