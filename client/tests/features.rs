//! What a library user's build pulls in, read from `cargo tree`: with the
//! default features, neither an async runtime nor a command-line parser.

use std::process::Command;

/// The packages `tcpmux` depends on (normal dependencies) with `features`.
fn dependencies(features: &[&str]) -> Vec<String> {
    let mut tree = Command::new(env!("CARGO"));
    tree.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            "tcpmux",
            "-e",
            "normal",
        ])
        .args(["--prefix", "none", "--format", "{p}"]);
    if !features.is_empty() {
        tree.args(["--features", &features.join(",")]);
    }
    let out = tree.output().expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn default_features_bring_neither_tokio_nor_clap() {
    let default = dependencies(&[]);
    assert!(
        default.iter().any(|p| p == "rustls"),
        "tls is on by default: {default:?}"
    );
    for unwanted in ["tokio", "clap", "tokio-rustls"] {
        assert!(
            !default.iter().any(|p| p == unwanted),
            "{unwanted} in a default build: {default:?}"
        );
    }
    // The same reading sees tokio where it belongs.
    let with_async = dependencies(&["async"]);
    assert!(with_async.iter().any(|p| p == "tokio"), "{with_async:?}");
    assert!(!with_async.iter().any(|p| p == "clap"), "{with_async:?}");
}
