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
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    let mut names = names.split(':').map(str::to_owned);
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
                name: names.next().filter(|n| !n.is_empty() && n != "unknown"),
                datagram: None,
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

/// How often to tell systemd the daemon is alive: half of `WATCHDOG_USEC`,
/// when systemd set one for this process.
pub fn watchdog_interval() -> Option<std::time::Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    let for_us = std::env::var("WATCHDOG_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .map_or(true, |p| p == std::process::id());
    (for_us && usec > 0).then(|| std::time::Duration::from_micros(usec / 2))
}

/// Asks systemd to keep a listening socket (`FDSTORE=1`) under `name`, so that
/// a restart hands it back (LISTEN_FDS with LISTEN_FDNAMES) instead of closing
/// it. Needs `FileDescriptorStoreMax=` in the unit; ignored without it.
pub fn store_fd(fd: std::os::fd::BorrowedFd<'_>, name: &str) {
    use rustix::net::{
        sendmsg_addr, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix,
    };
    use std::io::IoSlice;
    use std::mem::MaybeUninit;
    let Ok(path) = std::env::var("NOTIFY_SOCKET") else {
        return;
    };
    let address = match path.strip_prefix('@') {
        Some(abstract_name) => SocketAddrUnix::new_abstract_name(abstract_name.as_bytes()),
        None => SocketAddrUnix::new(path.as_str()),
    };
    let (Ok(address), Ok(socket)) = (address, UnixDatagram::unbound()) else {
        return;
    };
    // An FDNAME may not contain ':' (it separates LISTEN_FDNAMES).
    let name: String = name
        .chars()
        .map(|c| if c == ':' { '_' } else { c })
        .collect();
    let state = format!("FDSTORE=1\nFDNAME={name}");
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let _ = sendmsg_addr(
        &socket,
        &address,
        &[IoSlice::new(state.as_bytes())],
        &mut control,
        SendFlags::empty(),
    );
}

/// `RELOADING=1` with the monotonic timestamp systemd's Type=notify-reload wants.
pub fn notify_reloading() {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}
