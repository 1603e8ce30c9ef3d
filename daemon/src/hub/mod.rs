//! The handoff hub: backends register service names over a control Unix socket
//! (`control`) and are sent whole client connections (the socket itself, by
//! SCM_RIGHTS, by the session: `services/handoff.rs`), after which tcpmuxd is
//! out of the data path. `live` holds the registrations the sessions choose
//! from (each backend's control socket), `acks` the deliveries not yet acknowledged.

mod acks;
mod control;
mod live;

pub(crate) use acks::Acks;
pub(crate) use control::{adopt_all, control_loop, Adopted};
pub(crate) use live::{Hub, Registration};
