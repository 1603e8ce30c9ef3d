//! Sending a batch of datagrams in one `sendmmsg`; a run of them to one
//! address, of one size (the last may be shorter), goes as one message the
//! kernel cuts up (UDP GSO, `UDP_SEGMENT`): one trip down the stack for the
//! run, not one per datagram. A QUIC or VPN stream's datagrams come in such
//! runs.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::recv::{Destination, RECV_BATCH};

/// Segments per GSO message: UDP_MAX_SEGMENTS of the oldest kernels with GSO.
const MAX_SEGMENTS: usize = 64;

/// A GSO message's bytes: under the 65,507 an IPv4 datagram can carry.
const MAX_GSO_BYTES: usize = 65_000;

/// Segment sizes from which datagrams go one per message: a GSO send fails
/// with EMSGSIZE or EINVAL when its segment does not fit the route's MTU
/// (it cannot be fragmented, as a lone datagram is), so the first such size
/// lowers this; EIO (a device without checksum offload, so no GSO at all)
/// sets it to 0.
static GSO_BELOW: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Sends `datagrams` (at most [`RECV_BATCH`]) in one `sendmmsg`, to `to`
/// or, on a connected socket, to its peer: how many the socket took. Those
/// after them found its buffer full, and are the caller's to drop, as UDP
/// would. The headers live on the stack: this runs per batch of datagrams.
pub(crate) fn send_all(
    socket: &impl AsRawFd,
    datagrams: &[&[u8]],
    to: Option<SocketAddr>,
) -> io::Result<usize> {
    sendmmsg_to(socket, datagrams, &[to; RECV_BATCH])
}

/// Sends each of `datagrams` (at most [`RECV_BATCH`]) to its own address,
/// `to` in the same order, in one `sendmmsg`: how many the socket took. The
/// one after them failed (the next call says why); those after it were not
/// tried.
pub(crate) fn send_each(
    socket: &impl AsRawFd,
    datagrams: &[&[u8]],
    to: &[SocketAddr],
) -> io::Result<usize> {
    let to: [Option<SocketAddr>; RECV_BATCH] = std::array::from_fn(|i| to.get(i).copied());
    sendmmsg_to(socket, datagrams, &to)
}

/// A `UDP_SEGMENT` control message: the size a GSO message is cut into.
#[repr(C)]
struct Segment {
    header: libc::cmsghdr,
    size: u16,
    _pad: [u8; 6],
}

/// `sendmmsg` of `datagrams`, the i-th to `to[i]` (`None`: the socket's
/// peer), runs of them as GSO messages: how many datagrams were taken.
fn sendmmsg_to(
    socket: &impl AsRawFd,
    datagrams: &[&[u8]],
    to: &[Option<SocketAddr>],
) -> io::Result<usize> {
    let n = datagrams.len().min(to.len()).min(RECV_BATCH);
    let (datagrams, to) = (&datagrams[..n], &to[..n]);
    let names: [Option<socket2::SockAddr>; RECV_BATCH] =
        std::array::from_fn(|i| to.get(i).copied().flatten().map(socket2::SockAddr::from));
    // SAFETY: plain C structs, for which all zeroes is a valid value.
    let mut iovs: [libc::iovec; RECV_BATCH] = unsafe { std::mem::zeroed() };
    let mut messages: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
    let mut controls: [Segment; RECV_BATCH] = unsafe { std::mem::zeroed() };
    for (iov, datagram) in iovs.iter_mut().zip(datagrams) {
        *iov = libc::iovec {
            iov_base: datagram.as_ptr() as *mut libc::c_void,
            iov_len: datagram.len(),
        };
    }
    // Datagrams in each message.
    let mut runs = [0usize; RECV_BATCH];
    let (mut count, mut first) = (0, 0);
    while first < n {
        let run = run_len(&datagrams[first..], &to[first..]);
        let header = &mut messages[count].msg_hdr;
        if let Some(name) = &names[first] {
            header.msg_name = name.as_ptr() as *mut libc::c_void;
            header.msg_namelen = name.len();
        }
        header.msg_iov = &mut iovs[first];
        header.msg_iovlen = run as _;
        if run > 1 {
            let control = &mut controls[count];
            control.header.cmsg_len = (std::mem::size_of::<libc::cmsghdr>() + 2) as _;
            control.header.cmsg_level = libc::SOL_UDP;
            control.header.cmsg_type = libc::UDP_SEGMENT;
            // run_len keeps sizes under MAX_GSO_BYTES.
            control.size = datagrams[first].len() as u16;
            header.msg_control = (control as *mut Segment).cast();
            header.msg_controllen = std::mem::size_of::<Segment>() as _;
        }
        runs[count] = run;
        count += 1;
        first += run;
    }
    // SAFETY: each of the first `count` headers points at its own name,
    // control message and a range of `iovs`, which point into `datagrams`;
    // all alive and unchanged for the call, which only reads them.
    let sent = unsafe {
        libc::sendmmsg(
            socket.as_raw_fd(),
            messages.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if sent < 0 {
        let e = io::Error::last_os_error();
        return match (runs[0] > 1, e.raw_os_error()) {
            (true, Some(libc::EIO | libc::EINVAL | libc::EMSGSIZE)) => {
                let below = match e.raw_os_error() {
                    Some(libc::EIO) => 0,
                    _ => datagrams[0].len(),
                };
                if GSO_BELOW.fetch_min(below, Ordering::Relaxed) > below {
                    tracing::info!(error = %e, segment = datagrams[0].len(), "UDP GSO refused: datagrams of this size and larger go one by one");
                }
                sendmmsg_to(socket, datagrams, to)
            }
            _ => Err(e),
        };
    }
    let (sent, taken) = (sent as usize, runs[..sent as usize].iter().sum::<usize>());
    if sent < count && runs[sent] > 1 {
        // The next message, a GSO run, failed: asked again, its error says
        // whether GSO was why (and the run goes one by one).
        return Ok(taken + sendmmsg_to(socket, &datagrams[taken..], &to[taken..]).unwrap_or(0));
    }
    Ok(taken)
}

/// How many of `datagrams`, from the first, go as one message: those to the
/// first's address of its size, and one shorter to end the run.
fn run_len(datagrams: &[&[u8]], to: &[Option<SocketAddr>]) -> usize {
    let size = datagrams.first().map_or(0, |d| d.len());
    if size == 0 || size >= GSO_BELOW.load(Ordering::Relaxed) {
        return 1;
    }
    let (mut run, mut bytes) = (1, size);
    while run < datagrams.len().min(to.len()).min(MAX_SEGMENTS) && to[run] == to[0] {
        let len = datagrams[run].len();
        if len == 0 || len > size || bytes + len > MAX_GSO_BYTES {
            break;
        }
        run += 1;
        bytes += len;
        if len < size {
            break;
        }
    }
    run
}

/// Sends `datagram` to `to` from the local address `from` (what a client
/// sent to, on a wildcard-bound socket).
pub(crate) fn send_from(
    socket: &impl AsRawFd,
    datagram: &[u8],
    to: SocketAddr,
    from: Destination,
) -> io::Result<usize> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, SockaddrStorage};
    let iov = [io::IoSlice::new(datagram)];
    let to = SockaddrStorage::from(to);
    // Each arm's control message borrows its own info.
    let (v4, v6);
    let cmsg = match from.ip {
        IpAddr::V4(ip) => {
            v4 = libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from_ne_bytes(ip.octets()),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            };
            ControlMessage::Ipv4PacketInfo(&v4)
        }
        IpAddr::V6(ip) => {
            v6 = libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: ip.octets(),
                },
                ipi6_ifindex: from.interface,
            };
            ControlMessage::Ipv6PacketInfo(&v6)
        }
    };
    let flags = MsgFlags::MSG_DONTWAIT;
    Ok(sendmsg(
        socket.as_raw_fd(),
        &iov,
        &[cmsg],
        flags,
        Some(&to),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    fn addr(port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    #[test]
    fn a_run_is_one_address_one_size_and_a_shorter_last() {
        let (big, small) = ([1u8; 100], [2u8; 40]);
        let same = [addr(1); 8];
        assert_eq!(run_len(&[&big, &big, &big, &small, &big], &same), 4);
        assert_eq!(run_len(&[&big, &small, &small], &same), 2);
        assert_eq!(run_len(&[&small, &big], &same), 1, "a longer one ends it");
        assert_eq!(
            run_len(&[&big, &big], &[addr(1), addr(2)]),
            1,
            "another address"
        );
        assert_eq!(
            run_len(&[&[], &[]], &same),
            1,
            "an empty datagram goes alone"
        );
        let large = vec![0u8; 30_000];
        assert_eq!(
            run_len(&[&large, &large, &large], &same),
            2,
            "65,000 bytes at most"
        );
    }

    #[test]
    fn runs_arrive_as_the_datagrams_they_were_to_each_address() {
        let receivers: Vec<UdpSocket> = (0..2)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let to: Vec<SocketAddr> = receivers.iter().map(|r| r.local_addr().unwrap()).collect();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let payloads: Vec<Vec<u8>> = (0..7u8)
            .map(|i| vec![i; if i == 3 { 10 } else { 50 }])
            .collect();
        let datagrams: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        // 0-3 to the first (a run of three and a shorter one), 4-5 to the
        // second, 6 to the first.
        let each = [to[0], to[0], to[0], to[0], to[1], to[1], to[0]];
        assert_eq!(send_each(&sender, &datagrams, &each).unwrap(), 7);
        assert_eq!(
            GSO_BELOW.load(Ordering::Relaxed),
            usize::MAX,
            "the kernel took the runs as GSO messages"
        );
        let mut buf = [0u8; 100];
        for (receiver, expected) in [(0, [0usize, 1, 2, 3, 6].as_slice()), (1, &[4, 5])] {
            receivers[receiver]
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            for &i in expected {
                let len = receivers[receiver].recv(&mut buf).unwrap();
                assert_eq!(&buf[..len], &payloads[i][..], "datagram {i}");
            }
        }
    }
}
