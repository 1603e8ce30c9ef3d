//! Reload and shutdown: SIGHUP applies services and listeners and keeps the
//! running sessions and their counts; SIGTERM stops accepting and lets
//! sessions finish.

use crate::common;

use std::io::Write;
use std::net::{Shutdown, TcpStream};

use common::{read_all, read_line, Daemon};

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

#[test]
fn a_reload_keeps_counting_the_sessions_started_before_it() {
    let config = "[service.echo]\nmax_connections = 1\n\
                  [service.cat]\nexec = [\"/bin/cat\"]\nmax_instances = 1\n";
    let mut daemon = Daemon::with_config(config);
    let mut held = Vec::new();
    for name in ["echo", "cat"] {
        let mut session = daemon.connect();
        session.write_all(format!("{name}\r\n").as_bytes()).unwrap();
        assert_eq!(read_line(&mut session), b"+\r\n");
        held.push(session);
    }
    // The same caps, under a new configuration (a changed message).
    std::fs::write(
        daemon.config_path(),
        format!("{config}[service.time]\nmessage = \"t\"\n"),
    )
    .unwrap();
    daemon.signal("HUP");
    daemon
        .wait_for_log(|l| l.contains("configuration reloaded"))
        .expect("reloaded");
    assert!(text(daemon.exchange(b"echo\r\n")).starts_with("-service busy"));
    assert!(text(daemon.exchange(b"cat\r\n")).starts_with("-busy: too many running instances"));
    // Once the old sessions end, their slots are free under the new configuration.
    for mut session in held {
        session.shutdown(Shutdown::Write).unwrap();
        read_all(&mut session);
    }
    let deadline = std::time::Instant::now() + common::PATIENCE;
    let cat_answers = || {
        let mut session = daemon.connect();
        session.write_all(b"cat\r\n").unwrap();
        read_line(&mut session)
    };
    while cat_answers() != b"+\r\n" {
        assert!(
            std::time::Instant::now() < deadline,
            "the cat slot was never freed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut echo = daemon.connect();
    echo.write_all(b"echo\r\n").unwrap();
    assert_eq!(read_line(&mut echo), b"+\r\n");
}

#[test]
fn a_name_renamed_away_and_back_counts_its_sessions_through_reloads_between() {
    // A deployment that renames services at each reload: the old name's
    // counts outlive the reloads in between while its session runs.
    let named = |name: &str| {
        format!(
            "builtin_services = false\n[service.{name}]\nbuiltin = \"echo\"\nmax_connections = 1\n"
        )
    };
    let mut daemon = Daemon::with_config(&named("blue"));
    // The first line a client asking for `name` reads.
    let answer = |daemon: &Daemon, name: &str| {
        let mut client = daemon.connect();
        client.write_all(format!("{name}\r\n").as_bytes()).unwrap();
        text(read_line(&mut client))
    };
    let mut held = daemon.connect();
    held.write_all(b"blue\r\n").unwrap();
    assert_eq!(read_line(&mut held), b"+\r\n");
    for (n, name) in ["green", "red", "green"].into_iter().enumerate() {
        assert!(reload(&mut daemon, &named(name), n + 1).contains("configuration reloaded"));
        assert_eq!(answer(&daemon, name), "+\r\n");
    }
    assert!(reload(&mut daemon, &named("blue"), 4).contains("configuration reloaded"));
    assert!(answer(&daemon, "blue").starts_with("-service busy"));
    // Its session still echoes, and once it ends the name's slot is free.
    held.write_all(b"still here").unwrap();
    held.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut held), b"still here");
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while answer(&daemon, "blue") != "+\r\n" {
        assert!(
            std::time::Instant::now() < deadline,
            "blue's slot was never freed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn sighup_reloads_services_without_touching_running_sessions() {
    // The binary, so that the reload really comes from SIGHUP.
    let mut daemon =
        Daemon::binary("builtin_services = false\n[service.old]\nbuiltin = \"echo\"\n");
    let mut running = daemon.connect();
    running.write_all(b"old\r\n").unwrap();
    assert_eq!(read_line(&mut running), b"+\r\n");

    std::fs::write(
        daemon.config_path(),
        "builtin_services = false\n[service.new]\nbuiltin = \"isotime\"\n",
    )
    .unwrap();
    daemon.signal("HUP");
    daemon
        .wait_for_log(|l| l.contains("configuration reloaded"))
        .expect("reloaded");
    assert!(text(daemon.exchange(b"old\r\n")).starts_with("-unknown service old"));
    assert!(text(daemon.exchange(b"new\r\n")).ends_with("Z\r\n"));
    assert_eq!(text(daemon.exchange(b"help\r\n")), "new\r\n");

    // The session that started before the reload still has its echo.
    running.write_all(b"still here").unwrap();
    running.shutdown(Shutdown::Write).unwrap();
    assert_eq!(text(read_all(&mut running)), "still here");

    // A broken file is refused with one clear error and the old services stay.
    std::fs::write(
        daemon.config_path(),
        "[service.new]\nbuiltin = \"nonsense\"\n",
    )
    .unwrap();
    daemon.signal("HUP");
    let line = daemon
        .wait_for_log(|l| l.contains("reload failed"))
        .expect("reload error");
    assert!(
        line.contains("unknown builtin \"nonsense\"") && line.contains("tcpmuxd.toml:2:"),
        "{line}"
    );
    assert!(text(daemon.exchange(b"new\r\n")).starts_with("+\r\n"));
    // `--listen` chose the addresses (the harness passes it), so the file's
    // absent `listen` is no change to warn about.
    let warned: Vec<String> = daemon
        .logs()
        .into_iter()
        .filter(|l| l.contains("only on restart"))
        .collect();
    assert!(warned.is_empty(), "{warned:?}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits (up to PATIENCE) until connects to `addr` are refused.
fn wait_refused(addr: &str) {
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while TcpStream::connect(addr).is_ok() {
        assert!(std::time::Instant::now() < deadline, "{addr} still accepts");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Rewrites the config file, reloads, and waits for the `n`th reload's line
/// ("configuration reloaded" or "reload failed").
pub(crate) fn reload(daemon: &mut Daemon, config: &str, n: usize) -> String {
    std::fs::write(daemon.config_path(), config).unwrap();
    daemon.signal("HUP");
    let deadline = std::time::Instant::now() + common::PATIENCE;
    loop {
        let lines: Vec<String> = daemon
            .logs()
            .into_iter()
            .filter(|l| l.contains("configuration reloaded") || l.contains("reload failed"))
            .collect();
        if lines.len() >= n {
            return lines[n - 1].clone();
        }
        assert!(std::time::Instant::now() < deadline, "no reload line");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn sighup_applies_listen_changes_and_keeps_running_sessions() {
    let (a, b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let mut daemon = Daemon::with_config(&format!("listen = [\"{a}\"]\n"));
    let mut running = TcpStream::connect(&a).unwrap();
    running.write_all(b"echo\r\n").unwrap();
    assert_eq!(read_line(&mut running), b"+\r\n");

    // Add b and remove a: b serves, a refuses new connects, its session goes on.
    let line = reload(&mut daemon, &format!("listen = [\"{b}\"]\n"), 1);
    assert!(line.contains("configuration reloaded"), "{line}");
    let mut fresh = TcpStream::connect(&b).unwrap();
    fresh.write_all(b"daytime\r\n").unwrap();
    assert_eq!(read_line(&mut fresh), b"+\r\n");
    wait_refused(&a);
    running.write_all(b"still here").unwrap();
    running.shutdown(Shutdown::Write).unwrap();
    assert_eq!(text(read_all(&mut running)), "still here");

    // Changed options apply to new connections: b now expects a PROXY header.
    let trusted =
        format!("listen = [{{ address = \"{b}\", accept_proxy_from = [\"127.0.0.1/32\"] }}]\n");
    reload(&mut daemon, &trusted, 2);
    let mut stream = TcpStream::connect(&b).unwrap();
    stream.write_all(b"echo\r\n").unwrap();
    assert!(text(read_line(&mut stream)).starts_with("-invalid PROXY protocol header"));

    // Atomic: an address that cannot be bound changes nothing, services included.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap();
    let c = format!("127.0.0.1:{}", free_port());
    let bad = format!(
        "listen = [\"{b}\", \"{c}\", \"{taken_addr}\"]\n[service.extra]\nbuiltin = \"echo\"\n"
    );
    let line = reload(&mut daemon, &bad, 3);
    assert!(
        line.contains("reload failed") && line.contains(&format!("cannot listen on {taken_addr}")),
        "{line}"
    );
    assert!(
        TcpStream::connect(&c).is_err(),
        "a failed reload left {c} bound"
    );
    let mut stream = TcpStream::connect(&b).unwrap();
    stream
        .write_all(b"PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\nextra\r\n")
        .unwrap();
    assert!(text(read_line(&mut stream)).starts_with("-unknown service extra"));

    // The metrics endpoint and the control socket come and go with the file.
    let m = format!("127.0.0.1:{}", free_port());
    let dir = common::scratch_dir();
    let control = dir.join("handoff.sock");
    let with = format!(
        "listen = [\"{b}\"]\nmetrics_listen = \"{m}\"\nhandoff_socket = \"{}\"\n",
        control.display()
    );
    reload(&mut daemon, &with, 4);
    assert!(TcpStream::connect(&m).is_ok(), "metrics endpoint not bound");
    assert!(control.exists());
    reload(&mut daemon, &format!("listen = [\"{b}\"]\n"), 5);
    wait_refused(&m);
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while control.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        !control.exists(),
        "the control socket file outlived its removal"
    );
    assert!(!daemon.logs().iter().any(|l| l.contains("only on restart")));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sigterm_stops_accepting_and_lets_sessions_finish() {
    // The binary, so that the stop really comes from SIGTERM.
    let mut daemon = Daemon::binary("shutdown_grace = \"20s\"\n");
    let addr = daemon.addr;
    let mut session = daemon.connect();
    session.write_all(b"echo\r\n").unwrap();
    assert_eq!(read_line(&mut session), b"+\r\n");
    daemon.signal("TERM");
    daemon
        .wait_for_log(|l| l.contains("shutting down"))
        .expect("shutdown");
    // The listener is gone...
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while TcpStream::connect(addr).is_ok() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        TcpStream::connect(addr).is_err(),
        "still accepting after SIGTERM"
    );
    // ...but the running session still works, and its end lets the daemon exit.
    session.write_all(b"finishing").unwrap();
    session.shutdown(Shutdown::Write).unwrap();
    assert_eq!(text(read_all(&mut session)), "finishing");
    let status = daemon
        .wait_exit()
        .expect("daemon exits once its sessions are done");
    assert!(status.success(), "{status:?}");
}
