//! The `tcpmuxd` command itself: configuration files, --check-config, listen
//! addresses (TCP and Unix) and start-up errors.

use crate::common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::Command;

use common::{read_all, Daemon};

fn tcpmuxd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .args(args)
        .output()
        .expect("run tcpmuxd")
}

#[test]
fn configured_services_replace_and_refine_the_builtins() {
    let daemon = Daemon::with_config(
        r#"
builtin_services = false

[service."Org.Example.Clock"]
builtin = "isotime"
message = "time follows"

[service.echo]
"#,
    );
    assert_eq!(
        daemon.exchange(b"help\r\n"),
        b"echo\r\norg.example.clock\r\n"
    );
    let reply = String::from_utf8(daemon.exchange(b"ORG.EXAMPLE.CLOCK\r\n")).unwrap();
    assert!(reply.starts_with("+time follows\r\n20"), "{reply:?}");
    assert!(daemon.exchange(b"chargen\r\n").starts_with(b"-"));
}

#[test]
fn check_config_accepts_a_good_file_and_locates_errors_in_a_bad_one() {
    let dir = common::scratch_dir();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "listen = [\"127.0.0.1:41397\"]\n[service.clock]\nbuiltin = \"daytime\"\n",
    )
    .unwrap();
    let out = tcpmuxd(&["--check-config", good.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ok") && stdout.contains("clock") && stdout.contains("127.0.0.1:41397"),
        "{stdout}"
    );

    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "# services\n\n[service.clock]\nbuiltin = \"dyatime\"\n",
    )
    .unwrap();
    let out = tcpmuxd(&["--check-config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}:4:", bad.display())),
        "{stderr}"
    );
    assert!(stderr.contains("unknown builtin \"dyatime\""), "{stderr}");
    // One line of error, then where: the line and a caret, as cargo shows it.
    let lines: Vec<&str> = stderr.trim_end().lines().collect();
    assert_eq!(lines.len(), 4, "{stderr}");
    assert_eq!(lines[2], "4 | builtin = \"dyatime\"");
    assert_eq!(lines[3], "  |           ^^^^^^^^^");

    let out = tcpmuxd(&["--check-config", dir.join("missing.toml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read config"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_config_warns_of_a_socket_whose_directory_is_missing() {
    let dir = common::scratch_dir();
    let file = dir.join("admin.toml");
    let missing = dir.join("not-made-yet").join("admin.sock");
    std::fs::write(&file, format!("admin_socket = \"{}\"\n", missing.display())).unwrap();
    let out = tcpmuxd(&["--check-config", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Valid (systemd's RuntimeDirectory= may make it), but said.
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: admin_socket") && stderr.contains("does not exist"),
        "{stderr}"
    );
    std::fs::create_dir(dir.join("not-made-yet")).unwrap();
    let out = tcpmuxd(&["--check-config", file.to_str().unwrap()]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
}

#[test]
fn a_busy_port_fails_the_start_with_advice() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = tcpmuxd(&["--listen", &addr]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(
        last.contains("already in use") && last.contains("--listen"),
        "{stderr}"
    );
}

#[test]
fn bad_listen_addresses_are_usage_errors() {
    for bad in ["localhost", "no-such-host.invalid:1", "127.0.0.1:99999"] {
        let out = tcpmuxd(&["--listen", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
    let out = tcpmuxd(&["--listen", "localhost"]);
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("IP:PORT, [IPv6]:PORT, HOST:PORT or unix:/path"));
}

#[test]
fn listen_takes_a_host_name() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("localhost:{port}");
    let mut daemon = Daemon::start_with(None, &["--listen", &listen]);
    daemon
        .wait_for_log(|l| l.contains(&format!("address=127.0.0.1:{port}")))
        .expect("localhost resolved to 127.0.0.1");
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(b"daytime\r\n").unwrap();
    assert!(common::read_all(&mut stream).starts_with(b"+\r\n"));
}

#[test]
fn serves_on_a_unix_socket_and_replaces_a_stale_one() {
    let dir = common::scratch_dir();
    let path = dir.join("tcpmux.sock");
    // A socket file nobody serves, as a crashed daemon leaves behind.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let listen = format!("unix:{}", path.display());
    let mut daemon = Daemon::start_with(None, &["--listen", &listen]);
    daemon
        .wait_for_log(|l| l.contains(&format!("address={listen}")))
        .expect("unix listener up");
    let mut stream = UnixStream::connect(&path).unwrap();
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    stream.write_all(b"echo\r\nover unix").unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut stream), b"+\r\nover unix");

    // The client library speaks Unix sockets too.
    let mut stream = tcpmux::connect_unix(&path, "isotime").unwrap();
    let text = String::from_utf8(read_all(&mut stream)).unwrap();
    assert!(text.ends_with("Z\r\n"), "{text:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sigterm_stops_the_daemon_and_removes_its_unix_socket() {
    let dir = common::scratch_dir();
    let path = dir.join("term.sock");
    let listen = format!("unix:{}", path.display());
    let mut daemon = Daemon::start_with(None, &["--listen", &listen]);
    daemon
        .wait_for_log(|l| l.contains(&format!("address={listen}")))
        .expect("unix listener up");
    assert!(path.exists());
    daemon.signal("TERM");
    daemon
        .wait_for_log(|l| l.contains("shutting down"))
        .expect("shutdown logged");
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while path.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!path.exists(), "socket file left behind");
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs tcpmuxd with `args` as nobody (uid/gid 65534, no capabilities).
fn run_as_nobody(args: &[&str]) -> std::process::Output {
    common::require_root();
    common::require_program("setpriv", "--version", "util-linux");
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_tcpmuxd"))
        .args(args)
        .output()
        .expect("run tcpmuxd as nobody")
}

#[test]
#[ignore = "needs root and setpriv (to run tcpmuxd as an unprivileged user)"]
fn a_privileged_port_without_root_explains_how_to_pick_another() {
    let out = run_as_nobody(&["--listen", "127.0.0.1:1"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot listen on 127.0.0.1:1: permission denied"),
        "{stderr}"
    );
    assert!(
        stderr.contains("CAP_NET_BIND_SERVICE") && stderr.contains("--listen 127.0.0.1:41397"),
        "{stderr}"
    );
}

#[test]
#[ignore = "needs root and setpriv (to run tcpmuxd as an unprivileged user)"]
fn a_failed_privilege_drop_says_so_plainly() {
    let dir = common::scratch_dir();
    let config = dir.join("drop.toml");
    std::fs::write(&config, "listen = [\"127.0.0.1:0\"]\nuser = \"nobody\"\n").unwrap();
    let out = run_as_nobody(&["--config", config.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // Not dressed up as a bind failure on a made-up address.
    assert!(!stderr.contains("cannot listen"), "{stderr}");
    assert!(
        stderr.contains("tcpmuxd: cannot switch to uid 65534 gid 65534: setgroups failed")
            && stderr.contains("is the daemon running as root?"),
        "{stderr}"
    );
}

#[test]
fn a_second_ctrl_c_ends_the_daemon_at_once() {
    let mut daemon = Daemon::binary("shutdown_grace = \"60s\"\n");
    // A session that would hold the graceful shutdown for its whole grace.
    let mut session = daemon.connect();
    session.write_all(b"echo\r\n").unwrap();
    assert_eq!(common::read_line(&mut session), b"+\r\n");
    daemon.signal("INT");
    daemon
        .wait_for_log(|l| l.contains("shutting down"))
        .expect("the first stops accepting");
    // Still running, and its session still served: it waits for the grace.
    session.write_all(b"still there").unwrap();
    let mut echoed = [0u8; 11];
    std::io::Read::read_exact(&mut session, &mut echoed).unwrap();
    assert_eq!(&echoed, b"still there");
    assert!(
        std::process::Command::new("kill")
            .args(["-0", &daemon.pid().to_string()])
            .status()
            .unwrap()
            .success(),
        "still waiting for the session after one"
    );
    daemon.signal("INT");
    let started = std::time::Instant::now();
    let status = daemon.wait_exit().expect("exits");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(!status.success(), "cut short: {status:?}");
    drop(session);
}

#[test]
fn a_relative_unix_socket_path_is_the_config_files_like_every_other_path() {
    let daemon = Daemon::binary("listen = [\"127.0.0.1:0\", \"unix:mux.sock\"]\n");
    // Beside the file, wherever the daemon was started from.
    let path = daemon.dir.join("mux.sock");
    let mut stream = UnixStream::connect(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; {:?}", path.display(), daemon.logs()));
    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
    stream.write_all(b"daytime\r\n").unwrap();
    assert!(read_all(&mut stream).starts_with(b"+\r\n"));
}
