//! Dropping root after the privileged work (binding port 1, creating sockets in
//! /run) is done: for good, saved ids and supplementary groups included.

use rustix::process::{Gid, Uid};

/// Why the privilege drop failed. The daemon refuses to run on after it.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("cannot drop privileges with {0} threads running (the drop must come first)")]
    Threads(usize),
    #[error("cannot switch to uid {uid} gid {gid}: {call} failed: {source} (is the daemon running as root?)")]
    Call {
        call: &'static str,
        uid: u32,
        gid: u32,
        source: rustix::io::Errno,
    },
    #[error("cannot switch to uid {uid} gid {gid}: the credentials did not change")]
    Unchanged { uid: u32, gid: u32 },
}

/// Switches to `uid`/`gid` for good (saved ids too) and drops supplementary
/// groups. The kernel changes credentials per thread, so this must run while the
/// process has its only thread; every later thread inherits the new ones.
/// With `keep_net_admin` (a `transparent` proxy), CAP_NET_ADMIN alone
/// survives the switch: IP_TRANSPARENT needs it, nothing else does.
pub fn drop_privileges(uid: u32, gid: u32, keep_net_admin: bool) -> Result<(), PrivilegeError> {
    let threads = std::fs::read_dir("/proc/self/task")
        .map(Iterator::count)
        .unwrap_or(1);
    if threads != 1 {
        return Err(PrivilegeError::Threads(threads));
    }
    let call = |call: &'static str| {
        move |source| PrivilegeError::Call {
            call,
            uid,
            gid,
            source,
        }
    };
    let (new_uid, new_gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    if keep_net_admin {
        rustix::thread::set_keep_capabilities(true).map_err(call("prctl(PR_SET_KEEPCAPS)"))?;
    }
    rustix::thread::set_thread_groups(&[]).map_err(call("setgroups"))?;
    rustix::thread::set_thread_res_gid(new_gid, new_gid, new_gid).map_err(call("setresgid"))?;
    rustix::thread::set_thread_res_uid(new_uid, new_uid, new_uid).map_err(call("setresuid"))?;
    if rustix::process::geteuid() != new_uid || rustix::process::getegid() != new_gid {
        return Err(PrivilegeError::Unchanged { uid, gid });
    }
    if keep_net_admin {
        use rustix::thread::{CapabilitySet, CapabilitySets};
        let only = CapabilitySets {
            effective: CapabilitySet::NET_ADMIN,
            permitted: CapabilitySet::NET_ADMIN,
            inheritable: CapabilitySet::empty(),
        };
        rustix::thread::set_capabilities(None, only).map_err(call("capset"))?;
        rustix::thread::set_keep_capabilities(false).map_err(call("prctl(PR_SET_KEEPCAPS)"))?;
    }
    tracing::info!(
        uid,
        gid,
        kept = keep_net_admin.then_some("CAP_NET_ADMIN"),
        "dropped privileges"
    );
    Ok(())
}

/// Whether this process may set IP_TRANSPARENT (CAP_NET_ADMIN in effect).
pub fn has_net_admin() -> bool {
    rustix::thread::capabilities(None).is_ok_and(|sets| {
        sets.effective
            .contains(rustix::thread::CapabilitySet::NET_ADMIN)
    })
}

/// The warning for a configuration with `transparent = true` run without
/// the capability it needs, if so.
pub fn transparent_warning(wanted: bool) -> Option<&'static str> {
    (wanted && !has_net_admin()).then_some(
        "transparent = true needs CAP_NET_ADMIN, which this process lacks: start tcpmuxd as root \
         (it keeps only that capability after dropping to `user`) or grant it \
         (AmbientCapabilities=CAP_NET_ADMIN under systemd); until then those backends cannot be reached",
    )
}
