//! tcpmux-bench: measures tcpmuxd and its peers on the same workloads.
//!
//! One module per workload: `bulk` (a byte source and the download client),
//! `sweep` (the concurrency sweep), `udp` (datagram flows and their echo backend), `requests` (short connections and connect-
//! per-request echo), `nagle` (the write-write-read experiment), `idle` (and
//! `idle-unix`, a control-socket flood), `sources` (many source addresses),
//! `relay` (a minimal tokio proxy, the floor of its design). Every
//! run checks what it received, and none reports a run that failed.
#![forbid(unsafe_code)]

mod bulk;
mod cli;
mod idle;
mod latency;
mod nagle;
mod progress;
mod relay;
mod requests;
mod sources;
mod sweep;
mod tls;
mod udp;

use std::process::ExitCode;

use clap::Parser;

use cli::{Args, Command};

fn main() -> ExitCode {
    match run(Args::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcpmux-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Source {
            listen,
            bytes,
            tasks: false,
            ports: 1,
        } => bulk::source(listen, bytes),
        Command::Source {
            listen,
            bytes,
            ports,
            ..
        } => bulk::source_tasks(listen, bytes, ports),
        Command::Relay { listen, to } => relay::relay(listen, to),
        Command::Sweep {
            connect,
            service,
            expect,
            endless,
            levels,
            json_out,
            svg_out,
        } => sweep::sweep(
            connect,
            &service,
            expect,
            endless,
            &levels,
            json_out.as_deref(),
            svg_out.as_deref(),
        ),
        requests @ (Command::Short { .. } | Command::Rpc { .. }) => run_requests(requests),
        Command::Nagle {
            connect,
            service,
            iterations,
        } => nagle::fresh(connect, &service, iterations.max(1)),
        Command::NagleEstablished {
            connect,
            service,
            warmup,
            rounds,
        } => nagle::established(connect, service.as_deref(), warmup, rounds),
        Command::Lines { listen } => nagle::lines(listen),
        idle @ Command::Idle { .. } => run_idle(idle),
        Command::Sources {
            connect,
            service,
            sources,
            connections,
        } => sources::sources(connect, &service, sources, connections),
        Command::IdleUnix {
            path,
            connections,
            hold,
        } => idle::idle_unix(&path, connections, hold),
        tls @ (Command::TlsBurst { .. } | Command::TlsShort { .. } | Command::TlsBulk { .. }) => {
            run_tls(tls)
        }
        udp @ (Command::UdpEcho { .. } | Command::Udp { .. } | Command::UdpIdle { .. }) => {
            run_udp(udp)
        }
        Command::Bulk {
            connect,
            service,
            probe,
            connections,
            expect,
            repeat,
            report,
        } => bulk::bulk(
            connect,
            &match (service, probe) {
                (Some(name), _) => bulk::Opening::Service(name),
                (None, Some(probe)) => bulk::Opening::Probe(probe.0),
                (None, None) => bulk::Opening::Nothing,
            },
            connections,
            expect,
            repeat.max(1),
            &report.label,
            report.json,
        ),
    }
}

/// The short-connection and request-response workloads.
fn run_requests(command: Command) -> Result<(), String> {
    match command {
        Command::Short {
            connect,
            service,
            probe,
            fast_open,
            refused,
            connections,
            duration,
            report,
        } => requests::short(
            connect,
            (service.as_deref(), fast_open, refused),
            probe.map(|p| p.0),
            connections.max(1),
            duration,
            &report.label,
            report.json,
        ),
        Command::Rpc {
            connect,
            service,
            size,
            connections,
            duration,
            interval_ms,
            report,
        } => requests::rpc(
            connect,
            service.as_deref(),
            size,
            connections.max(1),
            duration,
            interval_ms.map(|ms| std::time::Duration::from_secs_f64(ms.max(0.01) / 1e3)),
            &report.label,
            report.json,
        ),
        other => Err(format!("not a request workload: {other:?}")),
    }
}

/// The TLS workloads.
fn run_tls(command: Command) -> Result<(), String> {
    match command {
        Command::TlsBurst {
            connect,
            ca,
            connections,
        } => tls::burst(connect, &ca, connections),
        Command::TlsShort {
            connect,
            ca,
            service,
            server_name,
            resume,
            connections,
            duration,
            label,
        } => tls::short(
            tls::Client {
                target: connect,
                ca: &ca,
                server_name: &server_name,
                resume,
            },
            service.as_deref(),
            connections.max(1),
            duration,
            &label,
        ),
        Command::TlsBulk {
            connect,
            ca,
            service,
            expect,
            repeat,
            label,
        } => tls::bulk(
            connect,
            &ca,
            service.as_deref(),
            expect,
            repeat.max(1),
            &label,
        ),
        other => Err(format!("not a TLS workload: {other:?}")),
    }
}

/// The UDP workloads.
fn run_idle(command: Command) -> Result<(), String> {
    match command {
        Command::Idle {
            connect,
            connections,
            service,
            partial: _,
            hold,
            tls_ca: Some(ca),
            ..
        } => tls::idle(connect, &ca, connections, hold, service.as_deref()),
        Command::Idle {
            connect,
            connections,
            service,
            partial,
            hold,
            tls_ca: None,
            source,
        } => idle::idle(
            connect,
            connections,
            hold,
            (service.as_deref(), source),
            partial,
        ),
        other => Err(format!("not an idle workload: {other:?}")),
    }
}

fn run_udp(command: Command) -> Result<(), String> {
    match command {
        Command::UdpEcho { listen } => udp::echo(listen),
        Command::Udp {
            connect,
            flows,
            window,
            size,
            threads,
            duration,
            report,
        } => udp::load(
            &udp::Load {
                target: connect,
                flows,
                window,
                size,
                threads,
                duration,
            },
            &report.label,
            report.json,
        ),
        Command::UdpIdle {
            connect,
            flows,
            hold,
        } => udp::idle(connect, flows, hold),
        other => Err(format!("not a UDP workload: {other:?}")),
    }
}

/// Read buffer of the threaded clients, and block size of `source`.
const BUFFER: usize = 256 * 1024;

/// The one-thread tokio runtime every async workload runs on.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))
}
