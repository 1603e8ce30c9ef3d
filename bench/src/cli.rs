//! tcpmux-bench's command line: its workloads and their options. A module of
//! its own so that `cargo xtask` builds the man page and completions from the
//! same definitions.

use std::net::SocketAddr;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    version,
    about = "Load tool for tcpmuxd and the servers it is compared with: each command is a workload, run against an address, that checks what it received and reports rates and latencies"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// How a run reports: shared by bulk, short and rpc.
#[derive(Debug, clap::Args)]
pub struct Report {
    /// Label for the report line.
    #[arg(long, default_value = "target")]
    pub label: String,
    /// Print one JSON object instead of the text line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A backend: every connection gets exactly --bytes bytes, then EOF.
    Source {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value_t = 1 << 30)]
        bytes: u64,
        /// One task per connection on one thread, instead of a thread each
        /// (cheaper per connection, for connection-rate runs).
        #[arg(long)]
        tasks: bool,
        /// Listen on this many consecutive ports from --listen's (one
        /// process as a pool of that many members); implies --tasks.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        ports: u16,
    },
    /// A minimal TCPMUX proxy on tokio, a task per session (bench/c/relay.c's
    /// exchange and nothing else): the floor of that design, for
    /// bench/proxy_short.sh.
    Relay {
        #[arg(long)]
        listen: SocketAddr,
        /// The backend every client is relayed to.
        #[arg(long)]
        to: SocketAddr,
    },
    /// Concurrency sweep: for each level, that many simultaneous downloads of
    /// one service on one async client thread; aggregate MB/s and fairness as
    /// a markdown table, and JSON lines and an SVG plot if asked.
    Sweep {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value = "sometext")]
        service: String,
        #[arg(long, default_value_t = 1_000_007)]
        expect: u64,
        /// The service never ends (chargen): read exactly --expect bytes, then close.
        #[arg(long)]
        endless: bool,
        /// Comma-separated concurrency levels.
        #[arg(long, default_value = "1,2,4,8,16,32,64,256,1024,10000")]
        levels: String,
        /// Write one JSON object per level here.
        #[arg(long)]
        json_out: Option<std::path::PathBuf>,
        /// Write an SVG plot of aggregate MB/s and fairness here.
        #[arg(long)]
        svg_out: Option<std::path::PathBuf>,
    },
    /// Short connections: C clients in a loop of connect, request, read the whole
    /// (short) answer, close; connections per second and latency percentiles.
    Short {
        #[arg(long)]
        connect: SocketAddr,
        /// Service to ask for; its whole answer is read (e.g. daytime). Leave out
        /// for a plain port (inetd's own daytime): nothing is sent, the answer read.
        #[arg(long)]
        service: Option<String>,
        /// Send these first bytes instead of a name (for detecting listeners
        /// and sslh): `ssh` (an SSH banner), `tls:NAME` (a ClientHello for NAME),
        /// or a client's opening of `openvpn`, `xmpp` or `socks5`.
        #[arg(long, conflicts_with = "service", value_parser = probe_bytes)]
        probe: Option<Probe>,
        /// TCP Fast Open (TCP_FASTOPEN_CONNECT): the request rides in the SYN.
        #[arg(long)]
        fast_open: bool,
        /// The name is expected to be refused: an exchange succeeds when the
        /// answer is a `-` line (the cost of a name the server does not have).
        #[arg(long, requires = "service")]
        refused: bool,
        #[arg(long, default_value_t = 8)]
        connections: usize,
        /// Seconds to run.
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        #[command(flatten)]
        report: Report,
    },
    /// Connect per request, like a simple echo client: connect, (name), write
    /// --size bytes, read them back, half-close, close; in a loop.
    Rpc {
        #[arg(long)]
        connect: SocketAddr,
        /// Negotiate this service first (leave out for plain TCP echo servers).
        #[arg(long)]
        service: Option<String>,
        #[arg(long, default_value_t = 40_000)]
        size: usize,
        #[arg(long, default_value_t = 1)]
        connections: usize,
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        /// Start a request every this many milliseconds per client (an open
        /// loop: latency counts from when it was due), instead of back to back.
        #[arg(long)]
        interval_ms: Option<f64>,
        #[command(flatten)]
        report: Report,
    },
    /// The Nagle stall on the negotiation itself: the name and its CRLF as two
    /// writes before reading the reply, against one write.
    Nagle {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value = "daytime")]
        service: String,
        #[arg(long, default_value_t = 40)]
        iterations: usize,
    },
    /// The Nagle experiment on one established connection: request/response
    /// rounds (100 bytes, then CRLF) to a `lines` server, split in two writes
    /// with Nagle on, split with TCP_NODELAY, and whole.
    NagleEstablished {
        #[arg(long)]
        connect: SocketAddr,
        /// Negotiate this service first (a tcpmuxd proxy to `lines`); leave out
        /// to talk to `lines` directly.
        #[arg(long)]
        service: Option<String>,
        /// Rounds before measuring, to leave Linux's quick-ACK mode.
        #[arg(long, default_value_t = 20)]
        warmup: usize,
        #[arg(long, default_value_t = 50)]
        rounds: usize,
    },
    /// A line backend for nagle-established: answers every line with itself,
    /// once the whole line is in.
    Lines {
        #[arg(long)]
        listen: SocketAddr,
    },
    /// Idle clients: open C connections that never send a name (or name
    /// --service, then send nothing), hold them, close.
    Idle {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 10_000)]
        connections: usize,
        /// Name this service first (e.g. echo): established idle sessions.
        #[arg(long, conflicts_with = "partial")]
        service: Option<String>,
        /// Send the start of an opening instead, then stall (for a listener
        /// with `detect = true`): what a stalled detecting client costs.
        #[arg(long, value_enum)]
        partial: Option<Partial>,
        /// Seconds to hold them open.
        #[arg(long, default_value_t = 5.0)]
        hold: f64,
        /// Over TLS (a `tls` listener whose certificate for `localhost`
        /// chains to this PEM CA): a full handshake, then --service inside.
        #[arg(long, requires = "service")]
        tls_ca: Option<std::path::PathBuf>,
        /// Connect from this address (e.g. 127.0.1.1): one address has
        /// about 28,000 ephemeral ports, so 100,000 clients need several.
        #[arg(long, conflicts_with = "tls_ca")]
        source: Option<std::net::IpAddr>,
    },
    /// Short connections from many source addresses (127.1.0.0 up), one after
    /// another: what a per-address rate limiter sees of many clients.
    Sources {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value = "daytime")]
        service: String,
        /// Distinct source addresses, used in turn.
        #[arg(long, default_value_t = 20_000)]
        sources: u32,
        /// Connections in all.
        #[arg(long, default_value_t = 40_000)]
        connections: u64,
    },
    /// Silent connections to a Unix socket (the handoff control socket), held,
    /// then counted by what the server did with them.
    IdleUnix {
        #[arg(long)]
        path: std::path::PathBuf,
        #[arg(long, default_value_t = 1500)]
        connections: usize,
        /// Seconds to hold them open.
        #[arg(long, default_value_t = 3.0)]
        hold: f64,
    },
    /// TLS short connections: a full handshake (no resumption, cipher suite
    /// TLS_AES_128_GCM_SHA256), an optional TCPMUX name, the whole short answer.
    TlsShort {
        #[arg(long)]
        connect: SocketAddr,
        /// PEM CA that the server's certificate (for `localhost`) chains to.
        #[arg(long)]
        ca: std::path::PathBuf,
        #[arg(long)]
        service: Option<String>,
        /// The name sent as SNI and checked in the server's certificate.
        #[arg(long, default_value = "localhost")]
        server_name: String,
        /// Resume sessions from tickets (shared by all clients), as a
        /// returning client does; the first connection of each is full.
        #[arg(long)]
        resume: bool,
        #[arg(long, default_value_t = 8)]
        connections: usize,
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        #[arg(long, default_value = "target")]
        label: String,
    },
    /// A burst of ClientHellos: C connections each send a full handshake's
    /// ClientHello at once; reports how long until every server flight came.
    TlsBurst {
        #[arg(long)]
        connect: SocketAddr,
        /// PEM CA that the server's certificate (for `localhost`) chains to.
        #[arg(long)]
        ca: std::path::PathBuf,
        #[arg(long, default_value_t = 2000)]
        connections: usize,
    },
    /// TLS bulk download on one connection, read to its end; median of runs.
    TlsBulk {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long)]
        ca: std::path::PathBuf,
        #[arg(long)]
        service: Option<String>,
        /// Bytes the connection must carry (after a TCPMUX `+` line).
        #[arg(long)]
        expect: u64,
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        #[arg(long, default_value = "target")]
        label: String,
    },
    /// A UDP backend: every datagram back to its sender, on one thread.
    UdpEcho {
        #[arg(long)]
        listen: SocketAddr,
    },
    /// UDP flows: F sockets (each a flow at the proxy), each keeping W
    /// datagrams of --size bytes in flight to an echo backend; replies per
    /// second and their latency. A window of 1 is request/response; one flow
    /// with a large window is a bulk stream.
    Udp {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 64)]
        flows: usize,
        #[arg(long, default_value_t = 1)]
        window: usize,
        /// Bytes per datagram (at least 8: the send time rides in them).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Client threads the flows are spread over.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        #[command(flatten)]
        report: Report,
    },
    /// Idle UDP flows: F sockets send one datagram each, wait for the reply,
    /// then hold (bench/udp.sh reads the proxy's memory meanwhile).
    UdpIdle {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 10_000)]
        flows: usize,
        /// Seconds to hold them.
        #[arg(long, default_value_t = 3.0)]
        hold: f64,
    },
    /// Bulk download: C connections at once, each reading to EOF.
    Bulk {
        #[arg(long)]
        connect: SocketAddr,
        /// Negotiate this TCPMUX service first (leave out for plain TCP targets).
        #[arg(long)]
        service: Option<String>,
        /// Send these first bytes instead (see `short`).
        #[arg(long, conflicts_with = "service", value_parser = probe_bytes)]
        probe: Option<Probe>,
        #[arg(long, default_value_t = 1)]
        connections: usize,
        /// Bytes each connection must receive; a mismatch fails the run.
        #[arg(long)]
        expect: u64,
        /// Runs; the report gives the median aggregate rate.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        #[command(flatten)]
        report: Report,
    },
}

/// The first bytes of `--probe`: `ssh` (an SSH identification string),
/// `tls:NAME` (a TLS ClientHello asking for NAME), or a client's opening of
/// `openvpn` (a TCP-mode hard reset, as openvpn 2.6 sends it), `xmpp` (a
/// client stream header) or `socks5` (a greeting offering no
/// authentication).
pub fn probe_bytes(spec: &str) -> Result<Probe, String> {
    let fixed: Option<&[u8]> = match spec {
        "ssh" => Some(b"SSH-2.0-tcpmux-bench\r\n"),
        "openvpn" => Some(b"\x00\x0e\x38\x1f\x2e\x3d\x4c\x5b\x6a\x79\x88\x00\x00\x00\x00\x00"),
        "xmpp" => Some(
            b"<?xml version='1.0'?><stream:stream to='bench.example' xmlns='jabber:client' \
              xmlns:stream='http://etherx.jabber.org/streams' version='1.0'>",
        ),
        "socks5" => Some(b"\x05\x01\x00"),
        _ => None,
    };
    if let Some(bytes) = fixed {
        return Ok(Probe(bytes.to_vec()));
    }
    match spec.split_once(':') {
        Some(("tls", name)) if !name.is_empty() => Ok(Probe(
            tcpmux_proto::sniff::client_hello::build(Some(name), &["h2"], 0, 16384),
        )),
        _ => Err(format!(
            "{spec:?}: expected ssh, tls:NAME, openvpn, xmpp or socks5"
        )),
    }
}

/// The bytes of a `--probe` (one value, not a list of numbers).
#[derive(Clone, Debug)]
pub struct Probe(pub Vec<u8>);

/// The start of an opening that `idle --partial` sends before it stalls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Partial {
    /// The first 3,000 bytes of a 16 KB ClientHello.
    ClientHello,
    /// The first 1,000 bytes of an HTTP request head.
    HttpHead,
}
