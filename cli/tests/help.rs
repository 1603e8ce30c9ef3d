//! The help matches the tool: every command the daemon's admin socket
//! accepts (the protocol's own list, which its unit tests tie to the parser)
//! is in `tcpmux admin --help` and in its man page, and `tcpmux --help`
//! names the subcommands.

use std::path::Path;
use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpmux"))
        .args(args)
        .output()
        .expect("run tcpmux");
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn every_admin_command_is_in_the_help_and_the_man_page() {
    let text = help(&["admin", "--help"]);
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/man/tcpmux-admin.1");
    // roff writes a hyphen `\-`.
    let page = std::fs::read_to_string(page)
        .expect("the checked-in man page")
        .replace("\\-", "-");
    for command in tcpmux_proto::admin::HELP {
        assert!(
            text.contains(command),
            "tcpmux admin --help lacks {command:?}"
        );
        assert!(page.contains(command), "man tcpmux-admin lacks {command:?}");
    }
    assert!(text.contains("Usage: tcpmux admin"), "{text}");
}

#[test]
fn the_command_names_itself_and_its_subcommands() {
    assert!(help(&["--version"]).starts_with("tcpmux "));
    let text = help(&["--help"]);
    for sub in ["tcpmux forward", "tcpmux admin"] {
        assert!(text.contains(sub), "tcpmux --help lacks {sub}");
    }
    assert!(help(&["forward", "--help"]).contains("Usage: tcpmux forward"));
}
