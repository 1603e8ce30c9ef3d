//! The `tcpmuxd` command line, as a value: parsed by the binary, and read by
//! `cargo xtask` for the man page and shell completions.

use std::path::PathBuf;

use clap::Parser;

use crate::model::ListenAddr;
use crate::ops::log_format::LogFormat;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "TCPMUX (RFC 1078) daemon: one port, services by name",
    after_help = "With no --config, every built-in service is served. Logs go to stderr; \
                  set RUST_LOG (e.g. RUST_LOG=debug) to change the level."
)]
pub struct Args {
    /// TOML configuration file.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on, replacing the configured ones; repeat for several.
    /// IP:PORT, [IPv6]:PORT, HOST:PORT (every address HOST resolves to) or
    /// unix:/path. Default: 0.0.0.0:1 (RFC 1078's port).
    #[arg(short, long = "listen", value_name = "ADDR", value_parser = parse_listen)]
    pub listen: Vec<Listen>,
    /// Event loops to run, each a single thread with its own listening sockets
    /// (SO_REUSEPORT): the shared-nothing multi-core mode. 1 (the default) is the
    /// classic single event loop.
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: u16,
    /// Check FILE and exit: 0 if it is valid, 1 with the error if not.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["config", "listen"])]
    pub check_config: Option<PathBuf>,
    /// Take over from the tcpmuxd running with the same configuration's
    /// `upgrade_socket`: receive its listening sockets, serve on them, then let
    /// it drain and exit. Runs in the foreground as the new daemon; exits 1
    /// with the reason if it cannot take over.
    #[arg(long, requires = "config")]
    pub upgrade: bool,
    /// Log lines as `text` (key=value) or `json` (one object per line). Under
    /// journald each line also carries its syslog priority.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// One `--listen`: its addresses (a host name may have several).
#[derive(Clone, Debug)]
pub struct Listen(pub Vec<ListenAddr>);

fn parse_listen(text: &str) -> Result<Listen, String> {
    if let Ok(addr) = text.parse::<ListenAddr>() {
        return Ok(Listen(vec![addr]));
    }
    let usage = || {
        format!("invalid listen address {text:?}: expected IP:PORT, [IPv6]:PORT, HOST:PORT or unix:/path")
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(usage)?;
    let port: u16 = port.parse().map_err(|_| usage())?;
    let found = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .map_err(|e| format!("cannot resolve {host:?} for --listen: {e}"))?;
    let mut addrs: Vec<std::net::SocketAddr> = found.collect();
    addrs.sort();
    addrs.dedup();
    if addrs.is_empty() {
        return Err(format!("{host:?} resolves to no address"));
    }
    Ok(Listen(addrs.into_iter().map(ListenAddr::Tcp).collect()))
}
