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
pub fn drop_privileges(uid: u32, gid: u32) -> Result<(), PrivilegeError> {
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
    rustix::thread::set_thread_groups(&[]).map_err(call("setgroups"))?;
    rustix::thread::set_thread_res_gid(new_gid, new_gid, new_gid).map_err(call("setresgid"))?;
    rustix::thread::set_thread_res_uid(new_uid, new_uid, new_uid).map_err(call("setresuid"))?;
    if rustix::process::geteuid() != new_uid || rustix::process::getegid() != new_gid {
        return Err(PrivilegeError::Unchanged { uid, gid });
    }
    tracing::info!(uid, gid, "dropped privileges");
    Ok(())
}
