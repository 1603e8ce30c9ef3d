//! The `tcpmux` command line (and `tcpmux forward`'s): a module of its own so
//! that `cargo xtask` builds the man page and completions from the same
//! definitions.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use tcpmux::ServiceName;

#[derive(Parser, Debug)]
#[command(
    name = "tcpmux",
    version,
    about = "Connect to a TCPMUX (RFC 1078) service by name and relay stdin/stdout",
    after_help = "Also:\n  tcpmux forward LOCAL=SERVICE...  serve local ports as TCPMUX services, for clients that \
                  cannot send a name (tcpmux forward --help, man tcpmux-forward)\n  \
                  tcpmux admin COMMAND...          control a running tcpmuxd through its admin socket \
                  (tcpmux admin --help, man tcpmux-admin)\n\n\
                  Exit status: 0 done, 1 the server refused the service, 2 usage error, 3 could not connect, TLS failed (a refused certificate too) or the connection failed."
)]
pub struct Args {
    /// Server host name or address.
    #[arg(short = 'H', long, env = "TCPMUX_HOST", default_value = "localhost")]
    pub host: String,
    /// Server port (RFC 1078 assigns port 1).
    #[arg(short, long, env = "TCPMUX_PORT", default_value_t = 1)]
    pub port: u16,
    /// Connect to a server's Unix socket instead of TCP.
    #[arg(short = 'U', long, conflicts_with_all = ["host", "port"])]
    pub unix: Option<PathBuf>,
    /// Print the server's service list (HELP) and exit.
    #[arg(short, long, conflicts_with = "service")]
    pub list: bool,
    /// Print connect time, negotiation time, bytes and MB/s on stderr at the end.
    #[arg(short, long)]
    pub stats: bool,
    /// Seconds allowed for connecting and for the server's reply.
    #[arg(short, long, default_value_t = 10.0)]
    pub timeout: f64,
    /// TCP Fast Open: send the service name in the SYN (one round trip less;
    /// needs net.ipv4.tcp_fastopen on both ends, else a normal handshake).
    #[arg(long, conflicts_with = "unix")]
    pub fast_open: bool,
    /// Speak TLS first (a `tls` listener), then TCPMUX inside it.
    #[arg(long, conflicts_with = "unix")]
    pub tls: bool,
    /// With --tls: PEM file of the CA the server's certificate must chain to
    /// (default: the system's trust store).
    #[arg(long, requires = "tls")]
    pub ca: Option<PathBuf>,
    /// With --tls: PEM client certificate (chain) to present; needs --key.
    #[arg(long, requires_all = ["tls", "key"])]
    pub cert: Option<PathBuf>,
    /// With --tls: PEM private key of --cert.
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
    /// With --tls: the name the server's certificate must carry (default: --host).
    #[arg(long, requires = "tls")]
    pub server_name: Option<String>,
    /// Name of the service to connect to.
    #[arg(required_unless_present = "list")]
    pub service: Option<String>,
}

#[derive(Parser, Debug)]
#[command(
    name = "tcpmux forward",
    bin_name = "tcpmux forward",
    version,
    about = "Forward local ports to TCPMUX services: every connection to LOCAL is \
             relayed to SERVICE on the TCPMUX server"
)]
pub struct ForwardArgs {
    /// Server host name or address.
    #[arg(short = 'H', long, env = "TCPMUX_HOST", default_value = "localhost")]
    pub host: String,
    /// Server port.
    #[arg(short, long, env = "TCPMUX_PORT", default_value_t = 1)]
    pub port: u16,
    /// Seconds allowed for connecting to the server and for its reply.
    #[arg(short, long, default_value_t = 10.0)]
    pub timeout: f64,
    /// LOCAL=SERVICE pairs, e.g. 127.0.0.1:5432=postgres.
    #[arg(required = true, value_name = "LOCAL=SERVICE", value_parser = parse_route)]
    pub routes: Vec<(SocketAddr, ServiceName)>,
}

pub fn parse_route(text: &str) -> Result<(SocketAddr, ServiceName), String> {
    let (local, service) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected LOCAL=SERVICE, e.g. 127.0.0.1:5432=postgres"))?;
    let local = local
        .parse()
        .map_err(|_| format!("{local:?}: expected a local IP:PORT"))?;
    let service = ServiceName::parse(service).map_err(|e| format!("{service:?}: {e}"))?;
    Ok((local, service))
}

/// The commands, from the protocol's own list, so the help never lags it.
fn admin_help() -> String {
    let commands: String = tcpmux_proto::admin::HELP
        .iter()
        .map(|c| format!("  {c}\n"))
        .collect();
    format!(
        "Commands:\n{commands}\nExit status: 0 done, 1 refused or unknown target, \
         3 cannot reach the socket."
    )
}

/// `tcpmux admin`: the daemon's admin socket from the command line.
#[derive(Parser)]
#[command(
    name = "tcpmux admin",
    bin_name = "tcpmux admin",
    version,
    about = "Control a running tcpmuxd through its admin socket (admin_socket): show its \
             services, backends, listeners and handoff backends; drain a backend or put it \
             in maintenance, change its weight, disable a service",
    after_help = admin_help()
)]
pub struct AdminArgs {
    /// The daemon's admin socket (its `admin_socket`).
    #[arg(
        short,
        long,
        env = "TCPMUX_ADMIN_SOCKET",
        default_value = "/run/tcpmuxd/admin.sock"
    )]
    pub socket: PathBuf,
    /// Print the daemon's JSON reply as it is, for scripts.
    #[arg(long)]
    pub json: bool,
    /// Seconds allowed for connecting and for the reply.
    #[arg(short, long, default_value_t = 10.0)]
    pub timeout: f64,
    /// In a cluster, change this instance only, not its fleet (set backend,
    /// disable, enable); the same as ending the command with --local.
    #[arg(long)]
    pub local: bool,
    /// The command and its words, e.g. `show backends web`.
    #[arg(required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<String>,
}
