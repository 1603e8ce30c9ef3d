//! Sending a batch of datagrams in one `sendmmsg`; a run of them to one
//! address, of one size (the last may be shorter), goes as one message the
//! kernel cuts up (UDP GSO, `UDP_SEGMENT`): one trip down the stack for the
//! run, not one per datagram. A QUIC or VPN stream's datagrams come in such
//! runs.

use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::recv::{Control, Destination, RECV_BATCH};

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

/// Where a datagram goes (`None`: a connected socket's peer) and, from a
/// wildcard-bound socket, the local address it leaves from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Addressed {
    pub(crate) to: Option<SocketAddr>,
    pub(crate) from: Option<Destination>,
}

/// Sends `datagrams` (at most [`RECV_BATCH`]) in one `sendmmsg`, to `to`
/// or, on a connected socket, to its peer: how many the socket took. Those
/// after them found its buffer full, and are the caller's to drop, as UDP
/// would. The headers live on the stack: this runs per batch of datagrams.
pub(crate) fn send_all(
    socket: &impl AsRawFd,
    datagrams: &[&[u8]],
    to: Option<SocketAddr>,
) -> io::Result<usize> {
    send_each(
        socket,
        datagrams,
        &[Addressed { to, from: None }; RECV_BATCH],
    )
}

/// Sends each of `datagrams` (at most [`RECV_BATCH`]) as `to` says, in the
/// same order, in one `sendmmsg`, runs of them as GSO messages: how many
/// the socket took. The one after them failed (the next call says why);
/// those after it were not tried.
pub(crate) fn send_each(
    socket: &impl AsRawFd,
    datagrams: &[&[u8]],
    to: &[Addressed],
) -> io::Result<usize> {
    let n = datagrams.len().min(to.len()).min(RECV_BATCH);
    let (datagrams, to) = (&datagrams[..n], &to[..n]);
    // A message's address and control data are made only for the messages
    // there are (building all 16 and copying them in was 5 % of a relay's
    // CPU).
    let mut names = [const { MaybeUninit::<socket2::SockAddr>::uninit() }; RECV_BATCH];
    let mut controls = [const { MaybeUninit::<Control>::uninit() }; RECV_BATCH];
    // SAFETY: plain C structs, for which all zeroes is a valid value.
    let mut iovs: [libc::iovec; RECV_BATCH] = unsafe { std::mem::zeroed() };
    let mut messages: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
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
        if let Some(to) = to[first].to {
            let name = names[count].write(socket2::SockAddr::from(to));
            header.msg_name = name.as_ptr() as *mut libc::c_void;
            header.msg_namelen = name.len();
        }
        header.msg_iov = &mut iovs[first];
        header.msg_iovlen = run as _;
        // run_len keeps sizes under MAX_GSO_BYTES.
        let segment = (run > 1).then_some(datagrams[first].len() as u16);
        control(header, &mut controls[count], to[first].from, segment);
        runs[count] = run;
        count += 1;
        first += run;
    }
    // SAFETY: each of the first `count` headers points at its own name,
    // control messages and a range of `iovs`, which point into `datagrams`;
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
        // The sizes from which GSO goes unused, if GSO was what failed.
        let below = match e.raw_os_error() {
            Some(libc::EIO) => Some(0),
            Some(libc::EINVAL | libc::EMSGSIZE) => Some(datagrams[0].len()),
            _ => None,
        };
        return match (runs[0] > 1, below) {
            (true, Some(below)) => {
                if GSO_BELOW.fetch_min(below, Ordering::Relaxed) > below {
                    tracing::info!(error = %e, segment = datagrams[0].len(), "UDP GSO refused: datagrams of this size and larger go one by one");
                }
                send_each(socket, datagrams, to)
            }
            _ => Err(e),
        };
    }
    let (sent, taken) = (sent as usize, runs[..sent as usize].iter().sum::<usize>());
    if sent < count && runs[sent] > 1 {
        // The next message, a GSO run, failed: asked again, its error says
        // whether GSO was why (and the run goes one by one).
        return Ok(taken + send_each(socket, &datagrams[taken..], &to[taken..]).unwrap_or(0));
    }
    Ok(taken)
}

/// How many of `datagrams`, from the first, go as one message: those
/// addressed as the first, of its size, and one shorter to end the run.
fn run_len(datagrams: &[&[u8]], to: &[Addressed]) -> usize {
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

/// Sets `header`'s control messages, written into `buf`: the local address
/// the message leaves from (IP_PKTINFO, IPV6_PKTINFO) and the size a GSO
/// message is cut into (UDP_SEGMENT), each if given.
fn control(
    header: &mut libc::msghdr,
    buf: &mut MaybeUninit<Control>,
    from: Option<Destination>,
    segment: Option<u16>,
) {
    if from.is_none() && segment.is_none() {
        return;
    }
    let buf = buf.write(Control([0; 64]));
    let (v4, v6);
    let source: Option<(libc::c_int, libc::c_int, &[u8])> = match from {
        Some(Destination {
            ip: IpAddr::V4(ip), ..
        }) => {
            v4 = libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from_ne_bytes(ip.octets()),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            };
            Some((libc::IPPROTO_IP, libc::IP_PKTINFO, bytes_of(&v4)))
        }
        Some(Destination {
            ip: IpAddr::V6(ip),
            interface,
        }) => {
            v6 = libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: ip.octets(),
                },
                ipi6_ifindex: interface,
            };
            Some((libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, bytes_of(&v6)))
        }
        None => None,
    };
    let size = segment.map(u16::to_ne_bytes);
    let gso = size
        .as_ref()
        .map(|s| (libc::SOL_UDP, libc::UDP_SEGMENT, &s[..]));
    header.msg_control = buf.0.as_mut_ptr().cast();
    header.msg_controllen = buf.0.len() as _;
    let mut used = 0;
    // SAFETY: `header` points at `buf` (64 bytes, 8-aligned) with that
    // length; CMSG_FIRSTHDR/NXTHDR give headers inside it or null, and the
    // messages written (a pktinfo of at most 20 bytes, a u16) fit in it:
    // 40 + 24 bytes at most.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(header);
        for (level, kind, data) in [source, gso].into_iter().flatten() {
            if cmsg.is_null() {
                break;
            }
            (*cmsg).cmsg_level = level;
            (*cmsg).cmsg_type = kind;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data.len() as _) as _;
            std::ptr::copy_nonoverlapping(data.as_ptr(), libc::CMSG_DATA(cmsg), data.len());
            used += libc::CMSG_SPACE(data.len() as _) as usize;
            cmsg = libc::CMSG_NXTHDR(header, cmsg);
        }
    }
    header.msg_controllen = used as _;
}

/// A pktinfo struct's bytes.
fn bytes_of<T: Copy>(value: &T) -> &[u8] {
    // SAFETY: `T` is a pktinfo struct: integers without padding, all of
    // whose bytes are initialized, read for its size.
    unsafe { std::slice::from_raw_parts((value as *const T).cast(), std::mem::size_of::<T>()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    fn addr(port: u16) -> Addressed {
        Addressed {
            to: Some(SocketAddr::from(([127, 0, 0, 1], port))),
            from: None,
        }
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
        let elsewhere = Addressed {
            from: Some(Destination::new([127, 0, 0, 2].into(), 0)),
            ..addr(1)
        };
        assert_eq!(
            run_len(&[&big, &big], &[addr(1), elsewhere]),
            1,
            "another source"
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

    fn receiver() -> (UdpSocket, SocketAddr) {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let addr = receiver.local_addr().unwrap();
        (receiver, addr)
    }

    #[test]
    fn runs_arrive_as_the_datagrams_they_were_to_each_address() {
        let (first, second) = (receiver(), receiver());
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let payloads: Vec<Vec<u8>> = (0..7u8)
            .map(|i| vec![i; if i == 3 { 10 } else { 50 }])
            .collect();
        let datagrams: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        // 0-3 to the first (a run of three and a shorter one), 4-5 to the
        // second, 6 to the first.
        let to = |a: SocketAddr| Addressed {
            to: Some(a),
            from: None,
        };
        let each = [
            first.1, first.1, first.1, first.1, second.1, second.1, first.1,
        ]
        .map(to);
        assert_eq!(send_each(&sender, &datagrams, &each).unwrap(), 7);
        assert_eq!(
            GSO_BELOW.load(Ordering::Relaxed),
            usize::MAX,
            "the kernel took the runs as GSO messages"
        );
        let mut buf = [0u8; 100];
        for (receiver, expected) in [
            (&first.0, [0usize, 1, 2, 3, 6].as_slice()),
            (&second.0, &[4, 5]),
        ] {
            for &i in expected {
                let len = receiver.recv(&mut buf).unwrap();
                assert_eq!(&buf[..len], &payloads[i][..], "datagram {i}");
            }
        }
    }

    /// From a wildcard-bound socket, each datagram (a GSO run's too) leaves
    /// from the local address it is given, not the route's choice.
    #[test]
    fn each_leaves_from_its_given_local_address() {
        let (receiver, at) = receiver();
        let sender = super::super::bind_udp(SocketAddr::from(([0, 0, 0, 0], 0)), false).unwrap();
        let from = |last: u8| Addressed {
            to: Some(at),
            from: Some(Destination::new([127, 0, 0, last].into(), 0)),
        };
        let datagrams: [&[u8]; 4] = [b"two", b"three", b"three", b"three"];
        let each = [from(2), from(3), from(3), from(3)];
        assert_eq!(send_each(&sender, &datagrams, &each).unwrap(), 4);
        let mut buf = [0u8; 16];
        for (said, last) in [
            (&b"two"[..], 2),
            (b"three", 3),
            (b"three", 3),
            (b"three", 3),
        ] {
            let (len, source) = receiver.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..len], said);
            assert_eq!(source.ip(), std::net::IpAddr::from([127, 0, 0, last]));
        }
    }
}
