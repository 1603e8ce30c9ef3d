//! The `tcpmuxd` command: parse the command line, load the configuration, run the
//! daemon on one event-loop thread. Errors are reported as one line on stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tcpmuxd::config::Config;
use tcpmuxd::listener::ListenAddr;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "TCPMUX (RFC 1078) daemon: one port, services by name",
    after_help = "With no --config, every built-in service is served. Logs go to stderr; \
                  set RUST_LOG (e.g. RUST_LOG=debug) to change the level."
)]
struct Args {
    /// TOML configuration file.
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on, replacing the configured ones; repeat for several.
    /// IP:PORT, [IPv6]:PORT or unix:/path. Default: 0.0.0.0:1 (RFC 1078's port).
    #[arg(short, long = "listen", value_name = "ADDR")]
    listen: Vec<ListenAddr>,
    /// Check FILE and exit: 0 if it is valid, 1 with the error if not.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["config", "listen"])]
    check_config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();

    if let Some(path) = &args.check_config {
        return match Config::load(path) {
            Ok(config) => {
                let listen: Vec<String> =
                    config.listen.iter().map(|l| l.addr.to_string()).collect();
                println!(
                    "{}: ok: {} services ({}), listening on {}",
                    path.display(),
                    config.registry.len(),
                    config.registry.names().collect::<Vec<_>>().join(", "),
                    listen.join(", ")
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        };
    }

    let mut config = match &args.config {
        Some(path) => match Config::load(path) {
            Ok(config) => config,
            Err(e) => return fail(e),
        },
        None => Config::default(),
    };
    if !args.listen.is_empty() {
        config.listen = args.listen.into_iter().map(Into::into).collect();
    }

    // Before the runtime (and any thread) exists: it edits the environment.
    let inherited = tcpmuxd::systemd::take_listen_fds();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(format!("cannot start the event loop: {e}")),
    };
    match runtime.block_on(tcpmuxd::run(config, args.config.clone(), inherited)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

fn fail(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("tcpmuxd: {error}");
    ExitCode::FAILURE
}
