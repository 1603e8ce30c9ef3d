//! `cargo xtask assets [DIR]`: writes the man pages and shell completions
//! that the Debian package installs, from the clap definitions of the three
//! commands and from docs/configuration.md (for tcpmuxd.toml(5)), into DIR
//! (default `contrib/`). They are checked in; a test fails when they are out
//! of date, so a new flag cannot ship without its man page entry.
//!
//! `cargo xtask layout`: the house rules on imports and sizes (`layout.rs`);
//! a test runs it too.

#![forbid(unsafe_code)]

mod layout;
mod markdown;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

#[path = "../../bench/src/cli.rs"]
#[allow(dead_code)]
mod bench_cli;
#[path = "../../cli/src/args.rs"]
#[allow(dead_code)]
mod client_args;

/// One generated file: its path under the output directory, and its bytes.
type Asset = (PathBuf, Vec<u8>);

/// The commands, each with its man section.
fn commands() -> Vec<(clap::Command, &'static str)> {
    vec![
        (tcpmuxd::cli::Args::command().name("tcpmuxd"), "8"),
        (client_args::Args::command().name("tcpmux"), "1"),
        (
            client_args::ForwardArgs::command().name("tcpmux-forward"),
            "1",
        ),
        (client_args::AdminArgs::command().name("tcpmux-admin"), "1"),
    ]
    .into_iter()
    .chain(bench_pages())
    .collect()
}

/// tcpmux-bench(1), and one page per workload (tcpmux-bench-short(1), ...),
/// as git has one per command.
fn bench_pages() -> Vec<(clap::Command, &'static str)> {
    let bench = bench_cli::Args::command().name("tcpmux-bench");
    let mut pages: Vec<_> = bench
        .get_subcommands()
        .filter(|sub| sub.get_name() != "help")
        .map(|sub| {
            let name = format!("tcpmux-bench-{}", sub.get_name());
            (
                sub.clone()
                    .name(name)
                    .bin_name(format!("tcpmux-bench {}", sub.get_name())),
                "1",
            )
        })
        .collect();
    pages.insert(0, (bench, "1"));
    pages
}

/// Every asset, generated in memory.
fn assets(root: &Path) -> Result<Vec<Asset>, String> {
    let mut out = Vec::new();
    for (command, section) in commands() {
        let name = command.get_name().to_owned();
        let mut page = Vec::new();
        clap_mangen::Man::new(command.clone())
            .section(section)
            .render(&mut page)
            .map_err(|e| format!("{name}: {e}"))?;
        out.push((PathBuf::from(format!("man/{name}.{section}")), page));
        if name == "tcpmux-forward" || name == "tcpmux-admin" || name.starts_with("tcpmux-bench-") {
            continue; // completed as part of their command's words
        }
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command.clone(), &name, &mut script);
            let file = match shell {
                Shell::Bash => format!("completions/{name}.bash"),
                Shell::Zsh => format!("completions/_{name}"),
                _ => format!("completions/{name}.fish"),
            };
            out.push((PathBuf::from(file), script));
        }
    }
    let reference = root.join("docs/configuration.md");
    let text =
        std::fs::read_to_string(&reference).map_err(|e| format!("{}: {e}", reference.display()))?;
    out.push((
        PathBuf::from("man/tcpmuxd.toml.5"),
        markdown::to_man(&text, "TCPMUXD.TOML", "5").into_bytes(),
    ));
    Ok(out)
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_owned)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    let result = match args.first().map(String::as_str) {
        Some("assets") => {
            let dir = args.get(1).map_or_else(|| root.join("contrib"), PathBuf::from);
            write_assets(&root, &dir)
        }
        Some("layout") => layout::check(&root).and_then(|problems| {
            for problem in &problems {
                println!("{problem}");
            }
            match problems.len() {
                0 => Ok(()),
                n => Err(format!("{n} breaches of the layout rules")),
            }
        }),
        _ => Err("usage: cargo xtask assets [DIR]   (man pages and shell completions; default DIR: contrib/)\n       cargo xtask layout         (import cycles, file and function sizes)".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write_assets(root: &Path, dir: &Path) -> Result<(), String> {
    for (path, bytes) in assets(root)? {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in pages and completions are what the code generates now:
    /// a flag added without `cargo xtask assets` fails here.
    #[test]
    fn checked_in_assets_are_up_to_date() {
        let root = workspace_root();
        for (path, bytes) in assets(&root).unwrap() {
            let checked_in = root.join("contrib").join(&path);
            let current = std::fs::read(&checked_in).unwrap_or_default();
            assert!(
                current == bytes,
                "{} is out of date: run `cargo xtask assets`",
                checked_in.display()
            );
        }
    }

    /// Every long flag of every command is in its man page, and every
    /// top-level configuration key in tcpmuxd.toml(5).
    #[test]
    fn every_flag_and_key_has_a_man_page_entry() {
        let root = workspace_root();
        let assets = assets(&root).unwrap();
        let page = |name: &str| {
            let (_, bytes) = assets
                .iter()
                .find(|(p, _)| p.to_string_lossy() == format!("man/{name}"))
                .unwrap_or_else(|| panic!("no man/{name}"));
            String::from_utf8_lossy(bytes).into_owned()
        };
        for (command, section) in commands() {
            let text = page(&format!("{}.{section}", command.get_name()));
            // Subcommands have pages of their own.
            {
                let cmd = &command;
                for arg in cmd.get_arguments() {
                    if let Some(long) = arg.get_long() {
                        // clap_mangen escapes the dashes: \-\-flag.
                        let escaped = format!("\\-\\-{}", long.replace('-', "\\-"));
                        assert!(
                            text.contains(&escaped),
                            "--{long} of {} has no entry in its man page",
                            command.get_name()
                        );
                    }
                }
            }
        }
        let config = page("tcpmuxd.toml.5");
        for key in [
            "listen",
            "include",
            "negotiation_timeout",
            "max_connections",
            "resolvers",
            "dns_min_ttl",
            "tls",
            "allow_cert_names",
            "health_check",
            "balance",
        ] {
            assert!(
                config.contains(key),
                "{key} is missing from tcpmuxd.toml(5)"
            );
        }
    }
}
