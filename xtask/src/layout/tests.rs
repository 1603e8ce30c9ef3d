//! The layout checker against this workspace and against small made-up trees.

use super::*;

/// This workspace keeps the rules: what CI checks.
#[test]
fn the_workspace_keeps_the_layout_rules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let problems = check(&root).expect("the sources parse");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A small crate with one breach of each kind, some of them hidden where
/// a line-by-line look would miss them (a macro's body, a re-export), and
/// imports in test code, which do not count.
#[test]
fn each_kind_of_breach_is_found() {
    let root = std::env::temp_dir().join(format!("xtask-layout-{}", std::process::id()));
    let long_body = "    let _ = 1;\n".repeat(MAX_FN_LINES);
    let files = [
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\nmod f;\n".to_owned()),
        ("src/a.rs", "use crate::b::B;\nuse crate::c::C;\npub struct A;\n".to_owned()),
        (
            "src/b.rs",
            "pub struct B;\nfn f() { let _ = crate::a::A; static SEEN: u8 = 0; }\n".to_owned(),
        ),
        (
            "src/c.rs",
            "pub struct C;\n#[cfg(test)]\nmod tests { use crate::a::A; static TEST_ONLY: u8 = 0; }\n"
                .to_owned(),
        ),
        ("src/f/mod.rs", "mod x;\nmod y;\npub use x::X;\n".to_owned()),
        ("src/f/x.rs", "use super::y::Y;\npub struct X;\n".to_owned()),
        (
            "src/f/y.rs",
            format!(
                "pub struct Y;\nasync fn g() {{\n{long_body}    tokio::select! {{ () = async {{}} => {{ let _ = super::X; }} }}\n}}\n"
            ),
        ),
    ];
    for (path, text) in &files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    // a uses c and c's tests use a: not a cycle, test code does not count.
    let problems = check_dirs(&root, &["src"], "src").unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(problems.len(), 4, "{problems:#?}");
    assert!(
        problems[0].starts_with("src/f/y.rs:2: fn g is 103 lines"),
        "{problems:#?}"
    );
    assert!(
        problems[1]
            .starts_with("import cycle in modules: a -> b (src/a.rs:1), b -> a (src/b.rs:2)"),
        "{problems:#?}"
    );
    assert!(
        problems[2].starts_with("import cycle in f: x -> y (src/f/x.rs:1), y -> x (src/f/y.rs:"),
        "{problems:#?}"
    );
    // A static in a function body counts; one in test code does not.
    assert!(
        problems[3].starts_with("daemon/src/b.rs:2: static SEEN holds state for the whole process"),
        "{problems:#?}"
    );
}
