//! The daemon's log as an operator's tools read it: quoted text values, JSON
//! lines, and under journald a syslog priority on every line.

use crate::common;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Daemon;

#[test]
fn text_values_with_spaces_are_quoted() {
    let mut daemon = Daemon::binary("builtin_services = true\n");
    daemon.exchange(b"no-such-name\r\n");
    let line = daemon
        .wait_for_log(|l| l.contains("connection") && l.contains("outcome="))
        .expect("a connection line");
    assert!(
        line.contains("outcome=\"refused: unknown service\""),
        "{line}"
    );
    assert!(line.contains("routed=tcpmux"), "{line}");
}

#[test]
fn json_lines_are_one_object_each_with_the_same_fields() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--log-format",
            "json",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + common::PATIENCE;
    let mut connection = None;
    let mut asked = false;
    while connection.is_none() && Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) else {
            if !asked {
                if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                    stream.write_all(b"daytime\r\n").unwrap();
                    common::read_all(&mut stream);
                    asked = true;
                }
            }
            continue;
        };
        let value: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not one JSON object: {line:?}: {e}"));
        if value["message"] == "connection" {
            connection = Some(value);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let value = connection.expect("a JSON connection line");
    assert_eq!(value["level"], "INFO");
    assert_eq!(value["service"], "daytime");
    assert_eq!(value["outcome"], "served");
    assert!(value["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(value["bytes_out"].as_u64().unwrap() > 3);
}

#[test]
fn under_journald_each_line_carries_its_priority() {
    let dir = common::scratch_dir();
    let log = dir.join("journal");
    let stderr = std::fs::File::create(&log).unwrap();
    let meta = stderr.metadata().unwrap();
    let config = dir.join("tcpmuxd.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .arg("--config")
        .arg(&config)
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stderr(Stdio::from(stderr))
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let wait_for = |what: &str| {
        let deadline = Instant::now() + common::PATIENCE;
        while !read().contains(what) {
            assert!(Instant::now() < deadline, "no {what:?} in {}", read());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for("listening");
    // A reload that fails is an error: `journalctl -p err` shows it.
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nbogus = 1\n").unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_for("reload failed");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let text = read();
    for line in text.lines() {
        assert!(line.starts_with('<'), "no priority: {line:?}");
    }
    let listening = text.lines().find(|l| l.contains("listening")).unwrap();
    assert!(listening.starts_with("<6>"), "{listening}");
    let failed = text.lines().find(|l| l.contains("reload failed")).unwrap();
    assert!(failed.starts_with("<3>"), "{failed}");
    // The journal keeps its own time: none in the line.
    assert!(!listening.contains("Z "), "{listening}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_start_up_error_under_journald_is_an_error() {
    let dir = common::scratch_dir();
    let log = dir.join("journal");
    let stderr = std::fs::File::create(&log).unwrap();
    let meta = stderr.metadata().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_tcpmuxd"))
        .args(["--config", "/nonexistent/tcpmuxd.toml"])
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stderr(Stdio::from(stderr))
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.starts_with("<3>tcpmuxd: cannot read config"), "{text}");
    let _ = std::io::stdout().flush();
    let _ = std::fs::remove_dir_all(&dir);
}
