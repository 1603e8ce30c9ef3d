//! The kernel's count of a TCP socket's segments (TCP_INFO), for the tests
//! that prove a reply and its FIN share one segment: the daemon's own unit
//! tests and the integration tests read them through this one reader.

use std::os::fd::AsRawFd;

/// A socket's segment counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segments {
    /// Segments received (`tcpi_segs_in`, Linux 4.2).
    pub received: u32,
    /// Segments sent that carried data, pure ACKs not counted
    /// (`tcpi_data_segs_out`, Linux 4.6).
    pub sent_with_data: u32,
}

/// Reads `socket`'s counts. Panics if the kernel has no such counts (not a
/// TCP socket, or a kernel older than 4.6): it is for tests.
pub fn segments(socket: &impl AsRawFd) -> Segments {
    let mut info = [0u8; 256];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert!(rc == 0 && len >= 160, "TCP_INFO: rc {rc}, {len} bytes");
    let at = |offset: usize| {
        u32::from_ne_bytes([
            info[offset],
            info[offset + 1],
            info[offset + 2],
            info[offset + 3],
        ])
    };
    Segments {
        received: at(140),
        sent_with_data: at(156),
    }
}
