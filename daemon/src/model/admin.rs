//! The admin socket's settings, and what an operator may set at run time:
//! a backend's administrative state and weight, a service turned off.

use std::path::PathBuf;

/// `admin_socket` and who may use it besides root and the daemon's own user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminSettings {
    pub socket: PathBuf,
    /// `admin_uids`: more uids allowed to connect.
    pub uids: Vec<u32>,
}

/// A backend's administrative state, set on the admin socket: the admin
/// protocol's own type.
pub use tcpmux_proto::admin::AdminState;
