//! The `tcpmux` command's own usage handling, with no server needed. (Being an
//! integration test of this package also makes `cargo test` build the binary,
//! which the daemon's CLI tests run.)

use std::process::Command;

fn tcpmux(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tcpmux"))
        .args(args)
        .output()
        .expect("run tcpmux")
}

#[test]
fn a_service_or_list_is_required() {
    let out = tcpmux(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SERVICE"));
}

#[test]
fn unix_and_host_are_exclusive() {
    let out = tcpmux(&["--unix", "/tmp/x.sock", "--host", "h", "echo"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_invalid_name_is_refused_before_connecting() {
    // Port 9 on loopback: nothing needs to listen, the name fails first.
    let out = tcpmux(&["--port", "9", "bad name"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid service name"));
}
