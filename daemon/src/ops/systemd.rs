//! Running under systemd: listening sockets passed in by socket activation
//! (LISTEN_FDS), and readiness, reload and stop notices (sd_notify), both by
//! their documented environment protocols, so no libsystemd is needed.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixDatagram;

/// The first descriptor systemd passes.
const LISTEN_FDS_START: RawFd = 3;

/// Takes the listening sockets systemd passed to this process, if any. Clears
/// the variables so that programs we exec do not think the sockets are theirs.
///
/// # Safety
///
/// Call it once, while the process has a single thread (it edits the
/// environment), and only if nothing else in the process owns or will use the
/// descriptors from 3 up that `LISTEN_FDS` names: they become owned here.
pub unsafe fn take_listen_fds() -> Vec<crate::net::listener::Prebound> {
    let pid_matches = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| p == std::process::id());
    let count = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<i32>().ok());
    // The caller guarantees a single thread, so changing the environment is sound.
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    let (true, Some(count)) = (pid_matches, count) else {
        return Vec::new();
    };
    (0..count.max(0))
        .map(|i| {
            let fd = LISTEN_FDS_START + i;
            // SAFETY: systemd's protocol hands these descriptors to this process,
            // and the caller guarantees nothing else in it claims them.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let _ = rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC);
            crate::net::listener::Prebound {
                fd: owned,
                options: None,
                owns_path: false,
            }
        })
        .collect()
}

/// Sends a state line to systemd's notify socket, if there is one. Errors are
/// ignored: the daemon works the same without a service manager listening.
pub fn notify(state: &str) {
    let Ok(path) = std::env::var("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(socket) = UnixDatagram::unbound() else {
        return;
    };
    let _ = match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|addr| socket.send_to_addr(state.as_bytes(), &addr))
        }
        None => socket.send_to(state.as_bytes(), &path),
    };
}

/// `RELOADING=1` with the monotonic timestamp systemd's Type=notify-reload wants.
pub fn notify_reloading() {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}
