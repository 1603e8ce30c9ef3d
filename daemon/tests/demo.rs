//! The demo a newcomer runs (`contrib/demo/run.sh`), run as documented: its
//! web pool answers through the one port, each server in turn, a TCPMUX
//! name too, the dashboard's /readyz and the admin socket answer, and a stop
//! leaves no process behind. Its ports are fixed (4141, 9900, 4181, 4182) and
//! its web servers need python3: ignored by a plain `cargo test`, run by
//! `--include-ignored`, as CI does.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::PATIENCE;

/// `GET /` on `port`, if it answers: the body.
fn get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(PATIENCE)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.contains(" 200 ").then(|| body.to_owned())
}

#[test]
#[ignore = "fixed ports 4141, 9900, 4181, 4182, and python3"]
fn the_demo_runs_as_the_readme_says() {
    common::require_program("python3", "--version", "python3");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let bin = common::sibling_binary("tcpmuxd");
    let bin = bin.parent().expect("the binaries' directory");
    let log = common::scratch_dir();
    let out = std::fs::File::create(log.join("demo.log")).unwrap();
    let mut demo = Command::new(format!("{root}/contrib/demo/run.sh"))
        .env("TCPMUX_DEMO_BIN", bin)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .expect("start contrib/demo/run.sh");
    let deadline = Instant::now() + PATIENCE;
    let first = loop {
        if let Some(body) = get(4141, "/") {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "the demo never answered HTTP on 4141"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let second = get(4141, "/").expect("a second answer");
    let mut servers = [first, second];
    servers.sort();
    assert_eq!(
        servers,
        ["hello from web server 1\n", "hello from web server 2\n"],
        "round robin over the pool"
    );
    let daytime = Command::new(bin.join("tcpmux"))
        .args(["-H", "127.0.0.1", "-p", "4141", "daytime"])
        .output()
        .expect("run tcpmux");
    assert!(daytime.status.success(), "{daytime:?}");
    assert_eq!(get(9900, "/readyz").as_deref(), Some("ok\n"));
    let text = std::fs::read_to_string(log.join("demo.log")).unwrap();
    let socket = text
        .split_whitespace()
        .find(|w| w.ends_with("/admin.sock"))
        .expect("run.sh prints the admin socket's path");
    let backends = Command::new(bin.join("tcpmux"))
        .args(["admin", "--socket", socket, "show", "backends"])
        .output()
        .expect("run tcpmux admin");
    let shown = String::from_utf8_lossy(&backends.stdout);
    assert!(
        backends.status.success() && shown.contains("127.0.0.1:4182"),
        "{shown}"
    );
    // Stopped as a terminal's Ctrl-C would, everything it started goes.
    Command::new("kill")
        .args(["-INT", &demo.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while demo.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "run.sh did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect(("127.0.0.1", 4181)).is_ok()
        || TcpStream::connect(("127.0.0.1", 4141)).is_ok()
    {
        assert!(Instant::now() < deadline, "the demo left a server running");
        std::thread::sleep(Duration::from_millis(20));
    }
}
