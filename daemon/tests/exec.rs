//! exec services: programs run on the client's socket, as inetd did.

use crate::common;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use common::{read_all, read_line, Daemon};

/// Children of `pid` that are zombies (exited, not yet reaped).
fn zombie_children(pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            // "pid (comm) state ppid ...": comm may hold spaces, so split after ')'.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next();
            let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
            state == Some("Z") && ppid == Some(pid)
        })
        .count()
}

fn send(daemon: &Daemon, request: &[u8]) -> Vec<u8> {
    let mut stream = daemon.connect();
    stream.write_all(request).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    read_all(&mut stream)
}

#[test]
fn cat_gets_the_bytes_pipelined_behind_the_name() {
    let daemon = Daemon::with_config("[service.cat]\nexec = [\"/bin/cat\"]\n");
    // Name, CRLF and data in one segment: the data must reach the program.
    assert_eq!(
        send(&daemon, b"cat\r\nhello, program"),
        b"+\r\nhello, program"
    );
    let payload = common::random_bytes(5, 2_000_000);
    let mut request = b"CAT\n".to_vec();
    request.extend_from_slice(&payload);
    let reply = common::send_and_receive(&mut daemon.connect(), request);
    let echoed = reply.strip_prefix(b"+\r\n").expect("+ line");
    assert!(
        echoed == payload.as_slice(),
        "{} of {} bytes",
        echoed.len(),
        payload.len()
    );
}

#[test]
fn date_runs_with_its_arguments_and_no_shell() {
    let daemon =
        Daemon::with_config("[service.year]\nexec = [\"/bin/date\", \"-u\", \"+%Y $HOME\"]\n");
    let reply = String::from_utf8(send(&daemon, b"year\r\n")).unwrap();
    // "$HOME" stays literal: the argument reached date unexpanded.
    assert!(
        reply.starts_with("+\r\n20") && reply.ends_with(" $HOME\n"),
        "{reply:?}"
    );
}

#[test]
fn the_program_gets_tcpmux_and_ucspi_tcp_variables() {
    let mut daemon = Daemon::with_config(
        "[service.printenv]\nexec = [\"/usr/bin/env\"]\nenv = { GREETING = \"hi\" }\n",
    );
    let mut stream = daemon.connect();
    let me = stream.local_addr().unwrap();
    stream.write_all(b"printenv\r\n").unwrap();
    let text = String::from_utf8(read_all(&mut stream)).unwrap();
    for expected in [
        "TCPMUX_SERVICE=printenv".to_owned(),
        "PROTO=TCP".to_owned(),
        "TCPREMOTEIP=127.0.0.1".to_owned(),
        format!("TCPREMOTEPORT={}", me.port()),
        "TCPLOCALIP=127.0.0.1".to_owned(),
        format!("TCPLOCALPORT={}", daemon.addr.port()),
        "GREETING=hi".to_owned(),
    ] {
        assert!(
            text.lines().any(|l| l == expected),
            "{expected} missing in {text}"
        );
    }
    // The daemon's own environment is not passed on.
    assert!(!text.contains("RUST_LOG="), "{text}");
    let line = daemon
        .wait_for_log(|l| l.contains("service=printenv"))
        .unwrap();
    assert!(
        line.contains("outcome=served: pid ") && line.contains("exit 0"),
        "{line}"
    );
}

#[test]
#[ignore = "needs root (to switch users)"]
fn runs_as_the_configured_user() {
    common::require_root();
    let daemon = Daemon::with_config(
        "[service.whoami]\nexec = [\"/usr/bin/id\", \"-u\"]\nuser = \"nobody\"\ncwd = \"/\"\n",
    );
    assert_eq!(send(&daemon, b"whoami\r\n"), b"+\r\n65534\n");
    let daemon = Daemon::with_config(
        "[service.whoami]\nexec = [\"/usr/bin/id\", \"-G\"]\nuser = \"65534\"\ngroup = \"65534\"\n",
    );
    // Supplementary groups are dropped with root.
    assert_eq!(send(&daemon, b"whoami\r\n"), b"+\r\n65534\n");
}

#[test]
fn a_program_can_send_its_own_status_line() {
    let daemon = Daemon::with_config(
        "[service.picky]\nexec = [\"/bin/sh\", \"-c\", \"read word; if [ \\\"$word\\\" = please ]; then printf '+ok\\\\r\\\\n'; else printf '%s\\\\r\\\\n' '-say please'; fi\"]\nreply = \"program\"\n",
    );
    assert_eq!(send(&daemon, b"picky\r\nplease\n"), b"+ok\r\n");
    // Exactly one status line, the program's: tcpmuxd sent none of its own.
    assert_eq!(send(&daemon, b"picky\r\nnow\n"), b"-say please\r\n");
}

#[test]
fn stderr_goes_to_the_log() {
    let mut daemon = Daemon::with_config(
        "[service.grumble]\nexec = [\"/bin/sh\", \"-c\", \"echo something is off >&2\"]\n",
    );
    assert_eq!(send(&daemon, b"grumble\r\n"), b"+\r\n");
    let line = daemon
        .wait_for_log(|l| l.contains("stderr: something is off"))
        .expect("stderr logged");
    assert!(
        line.contains("service=\"grumble\"") || line.contains("service=grumble"),
        "{line}"
    );
}

#[test]
fn beyond_max_instances_clients_are_told_busy() {
    let daemon = Daemon::with_config("[service.one]\nexec = [\"/bin/cat\"]\nmax_instances = 1\n");
    let mut first = daemon.connect();
    first.write_all(b"one\r\n").unwrap();
    assert_eq!(read_line(&mut first), b"+\r\n");
    let reply = String::from_utf8(send(&daemon, b"one\r\n")).unwrap();
    assert!(reply.starts_with("-busy"), "{reply:?}");
    // Once the first instance ends, the slot is free again.
    first.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut first), b"");
    let deadline = Instant::now() + common::PATIENCE;
    loop {
        let reply = send(&daemon, b"one\r\nagain");
        if reply == b"+\r\nagain" {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed: {reply:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn no_zombies_after_a_thousand_programs() {
    let daemon = Daemon::binary("[service.true]\nexec = [\"/bin/true\"]\n");
    let addr = daemon.addr;
    let workers: Vec<_> = (0..10)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..100 {
                    let mut stream = std::net::TcpStream::connect(addr).unwrap();
                    stream.set_read_timeout(Some(common::PATIENCE)).unwrap();
                    stream.write_all(b"true\r\n").unwrap();
                    let mut reply = Vec::new();
                    stream.read_to_end(&mut reply).unwrap();
                    assert_eq!(reply, b"+\r\n");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    // Every session waits for its child, so none should be left unreaped; allow
    // the last sessions a moment to get there.
    let deadline = Instant::now() + common::PATIENCE;
    while zombie_children(daemon.pid()) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(zombie_children(daemon.pid()), 0);
}

fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            !stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn program_pid_then_stop_daemon(on_shutdown: &str) -> (u32, Daemon) {
    let mut daemon = Daemon::with_config(&format!(
        "shutdown_grace = \"500ms\"\n[service.long]\nexec = [\"/bin/sh\", \"-c\", \"echo $$; exec sleep 30\"]\non_shutdown = \"{on_shutdown}\"\n"
    ));
    let mut stream = daemon.connect();
    stream.write_all(b"long\r\n").unwrap();
    assert_eq!(read_line(&mut stream), b"+\r\n");
    let pid: u32 = String::from_utf8(read_line(&mut stream))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(running(pid));
    daemon.signal("TERM");
    daemon
        .wait_for_log(|l| l.contains("shutting down"))
        .expect("shutdown");
    (pid, daemon)
}

#[test]
fn programs_are_killed_on_shutdown_by_default() {
    let (pid, daemon) = program_pid_then_stop_daemon("kill");
    let deadline = Instant::now() + common::PATIENCE;
    while running(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !running(pid),
        "program {pid} outlived the daemon:\n{}",
        daemon.logs().join("\n")
    );
}

#[test]
fn programs_can_be_left_running_on_shutdown() {
    let (pid, mut daemon) = program_pid_then_stop_daemon("leave");
    // The daemon has finished its shutdown (a kill would have come before).
    assert!(daemon.wait_exit().is_some(), "the daemon stops");
    let alive = running(pid);
    // It was ours (started through our daemon): stop it by its PID.
    let _ = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status();
    assert!(
        alive,
        "program {pid} was killed although on_shutdown = leave"
    );
}

#[test]
fn bad_exec_settings_are_config_errors() {
    for (config, words) in [
        ("[service.x]\nexec = [\"cat\"]\n", "absolute path"),
        ("[service.x]\nexec = []\n", "empty"),
        (
            "[service.x]\nexec = [\"/no/such/program\"]\n",
            "does not exist",
        ),
        (
            "[service.x]\nexec = [\"/bin/cat\"]\nuser = \"no-such-user-here\"\n",
            "unknown user",
        ),
        (
            "[service.x]\nexec = [\"/bin/cat\"]\nreply = \"client\"\n",
            "expected \"server\" or \"program\"",
        ),
        (
            "[service.x]\nexec = [\"/bin/cat\"]\nproxy = \"127.0.0.1:9\"\n",
            "choose one",
        ),
        (
            "[service.x]\nproxy = \"127.0.0.1:9\"\nmax_instances = 3\n",
            "only applies to `exec`",
        ),
        (
            "[service.x]\nexec = [\"/bin/cat\"]\nmax_instances = 0\n",
            "at least 1",
        ),
    ] {
        common::assert_config_rejected(config, words);
    }
}

#[test]
fn a_program_gone_since_the_config_was_loaded_is_refused_not_answered_plus() {
    let dir = common::scratch_dir();
    for (reply, name) in [("server", "late"), ("program", "own")] {
        let program = dir.join(name);
        std::fs::write(&program, "#!/bin/sh\necho hi\n").unwrap();
        set_mode(&program, 0o755);
        let mut daemon = Daemon::with_config(&format!(
            "[service.{name}]\nexec = [\"{}\"]\nreply = \"{reply}\"\n",
            program.display()
        ));
        // Runs while it is there.
        let first = send(&daemon, format!("{name}\r\n").as_bytes());
        assert!(
            first.ends_with(b"hi\n"),
            "{:?}",
            String::from_utf8_lossy(&first)
        );
        // Not executable any more: a clear '-' line, and the daemon serves on.
        set_mode(&program, 0o644);
        let reply_line = send(&daemon, format!("{name}\r\n").as_bytes());
        assert_eq!(
            String::from_utf8_lossy(&reply_line),
            "-service unavailable: its program cannot be started\r\n",
            "reply = {reply}"
        );
        assert!(daemon.exchange(b"daytime\r\n").starts_with(b"+"));
        daemon
            .wait_for_log(|l| l.contains("outcome=refused") && l.contains("cannot"))
            .expect("the log says why");
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Peak resident memory: a buffer freed by the time we look still counts.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

#[test]
fn stderr_without_newlines_costs_the_daemon_at_most_one_line() {
    let mut daemon = Daemon::binary("[service.spill]\nexec = [\"/bin/sh\", \"-c\", \"cat >&2\"]\n");
    let warm = send(&daemon, b"spill\r\nwarm up\n");
    assert_eq!(warm, b"+\r\n");
    let before = peak_rss_kib(daemon.pid());
    let mut stream = daemon.connect();
    stream.write_all(b"spill\r\n").unwrap();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..200 {
        stream.write_all(&chunk).unwrap();
    }
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_all(&mut stream), b"+\r\n");
    // Wait for the program's end (its last line logged), then look at the peak.
    let line = daemon.wait_for_log(|l| l.contains("stderr: xxx"));
    let grown = peak_rss_kib(daemon.pid()).saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "the daemon's peak memory grew by {grown} KiB"
    );
    // Logged cut, saying how much was dropped.
    let line = line.expect("the line is logged");
    assert!(
        line.contains(&format!("cut={}", 200 * (1 << 20) - 4096)),
        "{}",
        &line[..200]
    );
}

#[test]
fn invalid_utf8_on_stderr_neither_stops_the_log_nor_kills_the_program() {
    let mut daemon = Daemon::with_config(
        "[service.odd]\nexec = [\"/bin/sh\", \"-c\", \"printf 'a\\\\377b\\\\n' >&2; sleep 0.3; echo second >&2; echo done\"]\n",
    );
    assert_eq!(send(&daemon, b"odd\r\n"), b"+\r\ndone\n");
    daemon
        .wait_for_log(|l| l.contains("stderr: a\u{FFFD}b"))
        .expect("the bad line, logged lossily");
    daemon
        .wait_for_log(|l| l.contains("stderr: second"))
        .expect("and the lines after it");
}

#[test]
fn a_process_left_holding_stderr_holds_neither_the_client_nor_the_slot() {
    let daemon = Daemon::with_config(
        "[service.bye]\nexec = [\"/bin/sh\", \"-c\", \"sleep 8 </dev/null >/dev/null & echo bye\"]\nmax_instances = 1\n",
    );
    for _ in 0..2 {
        let started = Instant::now();
        let mut stream = daemon.connect();
        stream.write_all(b"bye\r\n").unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(4)))
            .unwrap();
        // EOF right after `bye`, not when `sleep` lets go of stderr; and the
        // second client is not refused as busy.
        assert_eq!(read_all(&mut stream), b"+\r\nbye\n");
        assert!(started.elapsed() < Duration::from_secs(4));
    }
}

#[test]
fn on_shutdown_kill_stops_what_the_program_started() {
    let mut daemon = Daemon::binary(
        "shutdown_grace = \"200ms\"\n[service.stubborn]\nexec = [\"/bin/sh\", \"-c\", \"trap '' TERM; sleep 60 & echo started; wait\"]\n",
    );
    let mut stream = daemon.connect();
    stream.write_all(b"stubborn\r\n").unwrap();
    assert_eq!(read_line(&mut stream), b"+\r\n");
    assert_eq!(read_line(&mut stream), b"started\n");
    daemon.signal("TERM");
    assert!(daemon.wait_exit().is_some());
    // `sleep` had the client's socket as its stdout: only its death ends it.
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    let ended = stream.read_to_end(&mut rest);
    assert!(
        ended.is_ok(),
        "the client's socket outlived the daemon: {ended:?}"
    );
}
