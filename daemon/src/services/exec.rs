//! exec: the inetd way. A program runs with the client's socket as its stdin and
//! stdout, so after the negotiation tcpmuxd is out of the data path; its stderr
//! goes to the log. Bytes the client sent behind its request line are still in
//! the socket (the negotiation only peeks past the line), so the program reads them.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};

use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{accept, refuse, Ended};
use crate::limits::Counter;
use crate::stream::{ClientInfo, Metered, Stream};

/// Who sends the status line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecReply {
    /// tcpmuxd sends `+` before the program starts (xinetd's TCPMUXPLUS).
    #[default]
    Server,
    /// The program sends its own `+` or `-` line (xinetd's TCPMUX).
    Program,
}

/// What happens to running programs when the daemon stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnShutdown {
    /// SIGKILL them, so a stopped daemon leaves nothing behind.
    #[default]
    Kill,
    /// Let them finish their sessions on their own.
    Leave,
}

/// An exec service's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exec {
    /// The program (an absolute path) and its arguments; never run by a shell.
    pub argv: Vec<String>,
    pub reply: ExecReply,
    /// Run as this uid and gid (needs the daemon to be root).
    pub user: Option<(u32, u32)>,
    pub cwd: Option<PathBuf>,
    /// Extra environment, on top of TCPMUX_SERVICE and the UCSPI-TCP variables.
    pub env: BTreeMap<String, String>,
    /// Beyond this many running instances, clients get `-busy`.
    pub max_instances: Option<usize>,
    pub on_shutdown: OnShutdown,
    pub running: Counter,
}

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Longest stderr line logged as one record; the rest is cut.
const MAX_LOG_LINE: usize = 4096;

pub async fn serve(
    exec: &Exec,
    name: &str,
    message: &str,
    conn: &mut Metered<Stream>,
    client: &ClientInfo,
) -> io::Result<Ended> {
    let Some(_slot) = exec.running.acquire(exec.max_instances) else {
        refuse(conn, "busy: too many running instances, try again later").await;
        return Ok(Ended::Refused("busy: max_instances reached".into()));
    };
    if exec.reply == ExecReply::Server {
        // The `+` cannot be taken back once sent, so a program that went missing
        // or lost its execute bit since the configuration was loaded is caught
        // here and refused, not answered `+` and then EOF.
        if let Err(e) = runnable(exec) {
            refuse(conn, UNAVAILABLE).await;
            return Ok(Ended::Refused(format!("cannot run the program: {e}")));
        }
        accept(conn, message).await?;
    }
    let mut child = match spawn(exec, name, conn.get_ref(), client) {
        Ok(child) => child,
        // The program would have sent the status line: nothing was sent yet.
        Err(e) if exec.reply == ExecReply::Program => {
            refuse(conn, UNAVAILABLE).await;
            return Ok(Ended::Refused(format!("cannot start the program: {e}")));
        }
        Err(e) => return Err(e),
    };
    let pid = child.id().unwrap_or_default();
    let stderr = child.stderr.take();
    let log_stderr = async {
        let Some(stderr) = stderr else { return };
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(mut line)) = lines.next_line().await {
            line.truncate(MAX_LOG_LINE);
            tracing::warn!(target: "tcpmuxd::exec", service = name, pid, "stderr: {line}");
        }
    };
    let (status, ()) = tokio::join!(child.wait(), log_stderr);
    // Back to non-blocking before the event loop touches the socket again (the
    // graceful close), or a read there would block every connection.
    let flags = fcntl_getfl(conn.get_ref())?;
    fcntl_setfl(conn.get_ref(), flags | OFlags::NONBLOCK)?;
    Ok(Ended::Exited {
        pid,
        status: describe(&status?),
    })
}

/// The client's reason when the program cannot be started; the log says why.
const UNAVAILABLE: &str = "service unavailable: its program cannot be started";

/// Whether the program can still be executed (by the daemon's own ids; a
/// failure specific to `user` shows up at spawn).
fn runnable(exec: &Exec) -> io::Result<()> {
    let program = exec
        .argv
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty exec"))?;
    rustix::fs::access(program.as_str(), rustix::fs::Access::EXEC_OK).map_err(io::Error::from)
}

fn spawn(
    exec: &Exec,
    name: &str,
    socket: &Stream,
    client: &ClientInfo,
) -> io::Result<tokio::process::Child> {
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
    if let Some((uid, gid)) = exec.user {
        // std also clears supplementary groups when it drops root.
        command.uid(uid).gid(gid);
    }
    if let Some(cwd) = &exec.cwd {
        command.current_dir(cwd);
    }
    // `command` owns our duplicates; spawning hands them to the child and dropping
    // it closes ours.
    command.spawn()
}

/// Reads a user or group database (`/etc/passwd`, `/etc/group`) for `name`: the
/// numeric fields of its line. Names served by NSS modules (LDAP...) are not seen;
/// give numeric ids for those.
pub fn lookup_id(database: &str, name: &str) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(database).ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        let id = fields.next()?.parse().ok()?;
        let second = fields.next().and_then(|f| f.parse().ok()).unwrap_or(id);
        Some((id, second))
    })
}

/// Summarises an exit for the log.
pub fn describe(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}
