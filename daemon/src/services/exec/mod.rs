//! exec: the inetd way. A program runs with the client's socket as its stdin and
//! stdout, so after the negotiation tcpmuxd is out of the data path; its stderr
//! goes to the log (`stderr.rs`).
//!
//! Over TLS, or when the negotiation's read took bytes the client sent behind
//! its request line, the program gets one end of a socketpair instead, and the
//! daemon relays between it and the client (`net/pair.rs`): programs always
//! see plaintext, and every byte in order.
//!
//! Each program runs in a process group of its own. The session ends when the
//! program exits, whatever it left running; with `on_shutdown = "kill"`, a
//! session still running when the daemon stops has its whole group killed, so
//! nothing the program started keeps the client's socket open.

mod stderr;

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::{ExitStatus, Stdio};

use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use tokio::process::{Child, ChildStderr};

use self::stderr::{drain, LineLog};
use super::status_line::{accept, refused};
use crate::admission::Counter;
use crate::model::{ClientInfo, Exec, ExecReply, OnShutdown, Service};
use crate::net::conn::Conn;
use crate::net::pair;
use crate::net::stream::Metered;
use crate::outcome::{Outcome, Refusal};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Runs the program on the connection; `instances` counts the programs of this
/// name that are running.
pub(crate) async fn serve(
    exec: &Exec,
    service: &Service,
    status: Option<&str>,
    conn: &mut Metered<Conn>,
    client: &ClientInfo,
    instances: &Counter,
) -> io::Result<Outcome> {
    let name = service.name.as_str();
    let Some(_slot) = instances.acquire(exec.max_instances) else {
        return Ok(refused(conn, Refusal::TooManyInstances).await);
    };
    if exec.reply == ExecReply::Server {
        // The `+` cannot be taken back once sent, so a program that went missing
        // or lost its execute bit since the configuration was loaded is caught
        // here and refused, not answered `+` and then EOF.
        if let Err(e) = runnable(exec) {
            return Ok(refused(conn, Refusal::CannotRun(e)).await);
        }
        if let Some(message) = status {
            accept(conn, message).await?;
        }
    }
    // Plain: the program gets the client's socket. TLS, or bytes read past
    // the request line: a socketpair's end.
    let (socket, relay_end) = match conn.get_ref().plain() {
        Some(stream) => (stream.as_fd().try_clone_to_owned()?, None),
        None => {
            let (theirs, ours) = pair::pair()?;
            (theirs, Some(ours))
        }
    };
    let spawned = match command(exec, name, socket.as_fd(), client) {
        Ok(command) => spawn_off_loop(command, exec.on_shutdown).await,
        Err(e) => Err(e),
    };
    drop(socket);
    let (mut child, group) = match spawned {
        Ok(spawned) => spawned,
        // The program would have sent the status line: nothing was sent yet.
        Err(e) if exec.reply == ExecReply::Program => {
            return Ok(refused(conn, Refusal::CannotStart(e)).await);
        }
        Err(e) => return Err(e),
    };
    let pid = child.id().unwrap_or_default();
    let status = match relay_end {
        None => run_to_exit(&mut child, name, pid).await,
        Some(ours) => {
            let (status, relayed) =
                tokio::join!(run_to_exit(&mut child, name, pid), pair::relay(conn, ours));
            if let Err(e) = relayed {
                tracing::debug!(service = name, pid, error = %e, "exec relay ended");
            }
            status
        }
    };
    group.disarm();
    // Back to non-blocking before the event loop touches the socket again (the
    // graceful close), or a read there would block every connection.
    if let Some(stream) = conn.get_ref().plain() {
        let flags = fcntl_getfl(stream)?;
        fcntl_setfl(stream, flags | OFlags::NONBLOCK)?;
    }
    Ok(Outcome::Exited {
        pid,
        status: describe(&status?),
    })
}

/// Waits for the program's exit while logging its stderr. What is left of
/// stderr then (a process it started may still hold it) is logged by a task of
/// its own, so neither the client's socket nor the instance slot waits for it.
async fn run_to_exit(child: &mut Child, name: &str, pid: u32) -> io::Result<ExitStatus> {
    let Some(mut stderr) = child.stderr.take() else {
        return child.wait().await;
    };
    let mut log = LineLog::new(name, pid);
    let status = tokio::select! {
        status = child.wait() => status,
        () = drain(&mut stderr, &mut log) => child.wait().await,
    };
    tokio::spawn(finish_log(stderr, log));
    status
}

async fn finish_log(mut stderr: ChildStderr, mut log: LineLog) {
    drain(&mut stderr, &mut log).await;
}

/// The program's process group, killed whole if the session is dropped while
/// the program runs (the daemon stopping) and `on_shutdown` is `kill`.
struct Group(Option<rustix::process::Pid>);

impl Group {
    fn new(pid: u32, on_shutdown: OnShutdown) -> Group {
        let pid = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw);
        Group(pid.filter(|_| on_shutdown == OnShutdown::Kill))
    }

    /// The program has exited (and been reaped): its group is left alone.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

/// Whether the program can still be executed (by the daemon's own ids; a
/// failure specific to `user` shows up at spawn).
fn runnable(exec: &Exec) -> io::Result<()> {
    let program = exec
        .argv
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty exec"))?;
    rustix::fs::access(program.as_str(), rustix::fs::Access::EXEC_OK).map_err(io::Error::from)
}

/// Starts the program on a thread of the runtime's blocking pool. Spawning is
/// vfork and exec: the calling thread stands still until the child has
/// exec'd (0.1-0.6 ms here), and on the event loop every other client would
/// stand still with it, and every spawn would wait for the one before. The
/// group guard is made on that thread, so a session dropped while it spawns
/// (the daemon stopping) still has the program killed when the unclaimed
/// result is dropped.
async fn spawn_off_loop(
    mut command: tokio::process::Command,
    on_shutdown: OnShutdown,
) -> io::Result<(Child, Group)> {
    let spawn = move || {
        let child = command.spawn()?;
        let group = Group::new(child.id().unwrap_or_default(), on_shutdown);
        Ok((child, group))
    };
    match tokio::task::spawn_blocking(spawn).await {
        Ok(spawned) => spawned,
        Err(e) => Err(io::Error::other(format!("the spawning thread failed: {e}"))),
    }
}

/// The program's command: its arguments, its environment (the client's
/// addresses, as tcpserver sets them), the client's socket as stdin and
/// stdout, stderr piped to the log, its own process group.
fn command(
    exec: &Exec,
    name: &str,
    socket: BorrowedFd<'_>,
    client: &ClientInfo,
) -> io::Result<tokio::process::Command> {
    let (program, args) = exec
        .argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty exec"))?;
    // Programs expect blocking stdio. O_NONBLOCK belongs to the open file, shared
    // with our own descriptor, which is fine: tcpmuxd does no more I/O on it.
    let stdin = rustix::io::fcntl_dupfd_cloexec(socket, 0)?;
    let flags = fcntl_getfl(&stdin)?;
    fcntl_setfl(&stdin, flags - OFlags::NONBLOCK)?;
    let stdout: OwnedFd = rustix::io::fcntl_dupfd_cloexec(socket, 0)?;

    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("PATH", PATH)
        .env("TCPMUX_SERVICE", name)
        .env("PROTO", "TCP")
        .envs(&exec.env)
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::piped())
        // Its own group, so that stopping it stops what it started too.
        .process_group(0)
        .kill_on_drop(exec.on_shutdown == OnShutdown::Kill);
    if let Some(remote) = client.peer.tcp_addr() {
        command
            .env("TCPREMOTEIP", remote.ip().to_string())
            .env("TCPREMOTEPORT", remote.port().to_string());
    }
    if let Some(local) = client.local {
        command
            .env("TCPLOCALIP", local.ip().to_string())
            .env("TCPLOCALPORT", local.port().to_string());
    }
    if let Some(name) = client.tls.as_ref().and_then(|t| t.name()) {
        command.env("TLS_CLIENT_NAME", name);
    }
    if let Some((uid, gid)) = exec.user {
        // std also clears supplementary groups when it drops root.
        command.uid(uid).gid(gid);
    }
    if let Some(cwd) = &exec.cwd {
        command.current_dir(cwd);
    }
    // `command` owns our duplicates; spawning hands them to the child and dropping
    // it closes ours.
    Ok(command)
}

/// Summarises an exit for the log.
pub(crate) fn describe(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}
