//! The admin socket's settings, and what an operator may set at run time:
//! a backend's administrative state and weight, a service turned off.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// `admin_socket` and who may use it besides root and the daemon's own user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminSettings {
    pub socket: PathBuf,
    /// `admin_uids`: more uids allowed to connect.
    pub uids: Vec<u32>,
}

/// A backend's administrative state, set on the admin socket (HAProxy's
/// `set server ... state`): health decides only among `Ready` members.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdminState {
    /// Serves new clients when healthy.
    #[default]
    Ready,
    /// No new clients; its sessions go on.
    Drain,
    /// No new clients and no health checks: out for maintenance.
    Maint,
}

impl AdminState {
    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Ready => "ready",
            AdminState::Drain => "drain",
            AdminState::Maint => "maint",
        }
    }
}

impl fmt::Display for AdminState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AdminState {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "ready" => Ok(AdminState::Ready),
            "drain" => Ok(AdminState::Drain),
            "maint" => Ok(AdminState::Maint),
            other => Err(format!("state {other:?}: expected ready, drain or maint")),
        }
    }
}
