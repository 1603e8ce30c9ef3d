//! Why the daemon could not start: one error for every step of `Server::bind`.

use crate::net::listener::BindError;
use crate::ops::privileges::PrivilegeError;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("cannot use a listening socket passed by systemd or a predecessor: {0}")]
    Inherited(std::io::Error),
    #[error(transparent)]
    Privileges(#[from] PrivilegeError),
}
