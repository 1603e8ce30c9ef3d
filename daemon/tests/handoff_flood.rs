//! The handoff control socket is open to every local user; one of them
//! flooding it must not take the daemon's descriptors from its TCP clients.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{read_all, Daemon};

#[test]
#[ignore = "needs root, setpriv and prlimit (to flood as another user under a descriptor limit)"]
fn a_local_user_flooding_the_control_socket_does_not_starve_tcp_clients() {
    common::require_root();
    common::require_program("setpriv", "--version", "util-linux");
    common::require_program("prlimit", "--version", "util-linux");
    let dir = common::scratch_dir();
    let control = dir.join("handoff.sock");
    let config = format!(
        "handoff_socket = \"{}\"\n[service.app]\nhandoff = {{ uid = [0] }}\n",
        control.display()
    );
    let daemon = Daemon::start_wrapped(&["prlimit", "--nofile=1024:1024"], Some(&config), &[], &[]);
    // 1,500 silent connections from uid 65534 (allowed more descriptors than
    // the daemon has), held for 4 s: past the 2 s registration timeout.
    let flood = Command::new("prlimit")
        .arg("--nofile=4096:4096")
        .args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .arg(common::sibling_binary("tcpmux-bench"))
        .args([
            "idle-unix",
            "--connections",
            "1500",
            "--hold",
            "4",
            "--path",
        ])
        .arg(&control)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the flood");
    // Once the flood is in, the daemon still has descriptors to spare...
    std::thread::sleep(Duration::from_secs(1));
    let fds = std::fs::read_dir(format!("/proc/{}/fd", daemon.pid()))
        .unwrap()
        .count();
    assert!(
        fds < 512,
        "the flood took the daemon to {fds} of 1024 descriptors"
    );
    // ...and 300 TCP clients at once are all served.
    let mut held = Vec::new();
    for i in 0..300 {
        let mut stream = daemon.connect();
        stream.write_all(b"echo\r\n").unwrap();
        assert_eq!(common::read_line(&mut stream), b"+\r\n", "client {i}");
        held.push(stream);
    }
    for mut stream in held {
        stream.write_all(b"ping").unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(read_all(&mut stream), b"ping");
    }
    let report = flood.wait_with_output().expect("the flood ends");
    let report = String::from_utf8_lossy(&report.stdout);
    // Over the per-uid cap, refused at once; the rest timed out unregistered.
    assert!(report.contains("still held 0"), "{report}");
    assert!(!report.contains("refused at once 0,"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
