//! An exec service's settings: the program, its identity and environment, and
//! what happens to it when the daemon stops.

use std::collections::BTreeMap;
use std::path::PathBuf;

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
}
