//! The `tcpmuxd` command: parse the command line, load the configuration, turn
//! signals into the server's shutdown and reload triggers, and run the daemon on
//! one event-loop thread (or N). Errors are reported as one line on stderr.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tcpmuxd::cli::Args;
use tcpmuxd::net::listener::{prebind, Prebound};
use tcpmuxd::ops::log_format::{self, LogFormat, Prioritized, QuotedFields};
use tcpmuxd::ops::{access_log, descriptors, logging, privileges, systemd};
use tcpmuxd::server::DaemonState;
use tcpmuxd::{Config, Server};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

/// How long the exit waits for queued log lines to reach stderr.
const LOG_FLUSH: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    let code = daemon_main();
    logging::flush(LOG_FLUSH);
    code
}

fn daemon_main() -> ExitCode {
    let args = Args::parse();
    init_logging(args.log_format);

    // The key material every configuration of this daemon is parsed with.
    let daemon = DaemonState::default();
    if let Some(path) = &args.check_config {
        return match Config::load(path, daemon.keys()) {
            Ok(config) => {
                for warning in config
                    .warnings
                    .iter()
                    .chain(&config.missing_socket_directories())
                {
                    eprintln!("tcpmuxd: warning: {warning}");
                }
                if let Some(warning) =
                    privileges::transparent_warning(config.registry.has_transparent_proxy())
                {
                    eprintln!("tcpmuxd: warning: {warning}");
                }
                print_checked(path, &config);
                ExitCode::SUCCESS
            }
            Err(e) => {
                let code = fail(&e);
                // Where in the file, as cargo shows it.
                if let Some(snippet) = e.snippet() {
                    eprintln!("{snippet}");
                }
                code
            }
        };
    }

    let mut config = match &args.config {
        Some(path) => match Config::load(path, daemon.keys()) {
            Ok(config) => config,
            Err(e) => return fail(e),
        },
        None => Config::default(),
    };
    // `--listen` replaces the file's addresses, now and at every reload.
    let given = Given {
        path: args.config.clone(),
        listen: !args.listen.is_empty(),
    };
    if given.listen {
        let addrs = args.listen.into_iter().flat_map(|l| l.0);
        config.listen = addrs.map(Into::into).collect();
    }
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }

    // Before the runtime (and any thread) exists: it edits the environment.
    // SAFETY: no other thread exists yet, and nothing else in the process has
    // claimed the descriptors systemd passed.
    let inherited = unsafe { systemd::take_listen_fds() };
    // Before any client: growing the table under a burst stalls a loop.
    descriptors::grow_ahead(&config.limits);
    // The file's parse is freed: its pages go back before the long run (a
    // file of 100,000 services peaks at ten times what it keeps).
    tcpmuxd::ops::trim::release_free_memory();
    if args.upgrade {
        if args.workers > 1 {
            return fail("--upgrade takes over one event loop: run with --workers 1");
        }
        let Some(socket) = config.upgrade_socket.clone() else {
            return fail("--upgrade needs `upgrade_socket = \"/path\"` in the configuration, as the running daemon has it");
        };
        return match tcpmuxd::server::take_over(&socket) {
            Ok(taken) => event_loop(config, given, daemon, Start::Upgrade(Box::new(taken))),
            Err(e) => fail(e),
        };
    }
    if args.workers > 1 {
        return run_workers(
            config,
            given,
            inherited,
            // One state for every worker: limits, metrics and keys are the daemon's.
            (usize::from(args.workers), daemon),
        );
    }
    event_loop(config, given, daemon, Start::Fresh(inherited, None))
}

/// One event loop on the calling thread.
/// Where an event loop's sockets come from.
enum Start {
    /// Bound here, or inherited from systemd or `--workers`' prebinding, and
    /// which worker this is (`None`: the only event loop).
    Fresh(Vec<Prebound>, Option<usize>),
    /// Handed over by the daemon this one replaces.
    Upgrade(Box<(std::os::unix::net::UnixStream, tcpmuxd::server::Handed)>),
}

/// What the command line says about the configuration: the file a reload
/// reads, and whether `--listen` gave the TCPMUX addresses instead of it.
#[derive(Clone)]
struct Given {
    path: Option<PathBuf>,
    listen: bool,
}

fn event_loop(config: Config, given: Given, daemon: DaemonState, start: Start) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(format!("cannot start the event loop: {e}")),
    };
    runtime.block_on(async {
        let (shutdown, reload) = match signal_triggers() {
            Ok(triggers) => triggers,
            Err(e) => return fail(format!("cannot install signal handlers: {e}")),
        };
        // Said once per daemon, by its first loop, once privileges are
        // dropped (the drop keeps the capability when it is there to keep).
        let first = matches!(start, Start::Fresh(_, None | Some(0)) | Start::Upgrade(_));
        let transparent = config.registry.has_transparent_proxy();
        let bound = match start {
            Start::Fresh(inherited, worker) => Server::bind(config, inherited, given.path, daemon)
                .map(|s| match worker {
                    Some(index) => s.worker(index),
                    None => s,
                }),
            Start::Upgrade(taken) => {
                let (predecessor, handed) = *taken;
                Server::bind_upgrading(config, handed, predecessor, given.path, daemon)
            }
        };
        let bound = bound.map(|server| match given.listen {
            true => server.listen_from_command_line(),
            false => server,
        });
        match bound {
            Ok(server) => {
                if let Some(warning) = privileges::transparent_warning(transparent && first) {
                    tracing::warn!("{warning}");
                }
                server.run(shutdown, reload).await;
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        }
    })
}

/// SIGTERM or SIGINT stop the server; each SIGHUP asks it to reload. Installed
/// before anything is bound, so no signal meets the default action meanwhile.
fn signal_triggers() -> std::io::Result<(impl std::future::Future<Output = ()>, mpsc::Receiver<()>)>
{
    let mut hangup = signal(SignalKind::hangup())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    // Each SIGHUP is one reload, as an operator counting them expects; a burst
    // beyond what is queued adds nothing (the last reload reads the latest file).
    let (reload, reloads) = mpsc::channel(16);
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            let _ = reload.try_send(());
        }
    });
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        // A second one (Ctrl-C again) ends the daemon at once, without
        // waiting out the sessions' grace period.
        tokio::spawn(async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
            tracing::warn!("second stop signal: exiting now, without waiting for sessions");
            logging::flush(LOG_FLUSH);
            std::process::exit(1);
        });
    };
    Ok((shutdown, reloads))
}

/// The multi-core mode: every socket is bound here, on the only thread, then
/// privileges are dropped, then each worker thread runs its own event loop on
/// its own sockets. Workers share only the settings they were started with.
fn run_workers(
    mut config: Config,
    given: Given,
    inherited: Vec<Prebound>,
    (workers, daemon): (usize, DaemonState),
) -> ExitCode {
    if config.handoff_socket.is_some() {
        return fail("handoff services need a single event loop: run with --workers 1");
    }
    if config.upgrade_socket.is_some() {
        return fail("binary upgrades hand over one event loop's sockets: run with --workers 1, or remove upgrade_socket");
    }
    let sets = if inherited.is_empty() {
        match prebind(&config.listen, workers) {
            Ok(sets) => sets,
            Err(e) => return fail(e),
        }
    } else {
        // systemd's sockets are shared: every worker accepts from the same queues.
        let mut sets: Vec<Vec<_>> = (0..workers).map(|_| Vec::new()).collect();
        for prebound in inherited {
            for set in sets.iter_mut().skip(1) {
                match prebound.fd.try_clone() {
                    Ok(fd) => set.push(Prebound {
                        fd,
                        options: None,
                        owns_path: false,
                        name: prebound.name.clone(),
                        datagram: None,
                    }),
                    Err(e) => return fail(format!("cannot share a socket passed by systemd: {e}")),
                }
            }
            sets[0].push(prebound);
        }
        sets
    };
    if let Some((uid, gid)) = config.run_as.take() {
        if let Err(e) =
            privileges::drop_privileges(uid, gid, config.registry.has_transparent_proxy())
        {
            return fail(e);
        }
    }
    let threads: Vec<_> = sets
        .into_iter()
        .enumerate()
        .map(|(index, set)| {
            let mut config = config.clone();
            // One metrics endpoint and admin socket, on the first worker; they
            // report, and act on, all of them.
            if index != 0 {
                config.leave_daemon_sockets();
            }
            let (given, daemon) = (given.clone(), daemon.clone());
            std::thread::Builder::new()
                .name(format!("tcpmuxd-worker-{index}"))
                .spawn(move || event_loop(config, given, daemon, Start::Fresh(set, Some(index))))
        })
        .collect();
    let mut status = ExitCode::SUCCESS;
    for thread in threads {
        match thread.map(|t| t.join()) {
            Ok(Ok(code)) if code != ExitCode::SUCCESS => status = code,
            Ok(Ok(_)) => {}
            _ => status = fail("a worker thread failed"),
        }
    }
    status
}

fn fail(error: impl std::fmt::Display) -> ExitCode {
    // After what was logged before it, not ahead of it.
    logging::flush(LOG_FLUSH);
    // An error for `journalctl -p err`, under journald.
    let priority = if log_format::stderr_is_journal() {
        "<3>"
    } else {
        ""
    };
    eprintln!("{priority}tcpmuxd: {error}");
    ExitCode::FAILURE
}

/// The log subscriber: `format`, RUST_LOG's filter (default info), and under
/// journald a priority on each line and no timestamp (the journal has one).
fn init_logging(format: LogFormat) {
    let journal = log_format::stderr_is_journal();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = !journal && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_writer(logging::QueuedStderr)
        .with_env_filter(filter)
        .with_ansi(ansi);
    let text = tracing_subscriber::fmt::format().with_ansi(ansi);
    let json = tracing_subscriber::fmt::format()
        .json()
        .flatten_event(true)
        .with_current_span(false);
    let access = match (format, journal, ansi) {
        (LogFormat::Text, false, false) => access_log::Mode::Text,
        (LogFormat::Text, true, _) => access_log::Mode::Journal,
        _ => access_log::Mode::Tracing,
    };
    access_log::set_mode(access);
    match (format, journal) {
        (LogFormat::Text, false) => builder.fmt_fields(QuotedFields).event_format(text).init(),
        (LogFormat::Text, true) => builder
            .fmt_fields(QuotedFields)
            .event_format(Prioritized(text.without_time()))
            .init(),
        (LogFormat::Json, false) => builder.json().flatten_event(true).init(),
        (LogFormat::Json, true) => builder
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(Prioritized(json.without_time()))
            .init(),
    }
}

/// `--check-config`'s line for a good file: the services (the first few, for
/// a file of thousands) and the addresses.
fn print_checked(path: &std::path::Path, config: &Config) {
    const NAMED: usize = 50;
    let listen: Vec<String> = config.listen.iter().map(|l| l.addr.to_string()).collect();
    let count = config.registry.len();
    let mut names = config
        .registry
        .names()
        .take(NAMED)
        .collect::<Vec<_>>()
        .join(", ");
    if count > NAMED {
        names.push_str(&format!(" and {} more", count - NAMED));
    }
    println!(
        "{}: ok: {count} services ({names}), listening on {}",
        path.display(),
        listen.join(", ")
    );
}
