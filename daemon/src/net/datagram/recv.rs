//! Receiving datagrams: a batch of up to 16 in one `recvmmsg`, each with
//! its sender and, on a wildcard-bound socket, the local address it was
//! sent to (where its replies must leave from).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

/// The local address a datagram was sent to, on a wildcard-bound socket:
/// where its replies must come from (a QUIC or WireGuard client drops a
/// reply from any other address), and for IPv6 the interface, which a
/// link-local address needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Destination {
    pub(crate) ip: IpAddr,
    pub(super) interface: u32,
}

impl Destination {
    /// A local address and the interface index a datagram arrived on, as a
    /// handed-over flow carries them.
    pub(crate) fn new(ip: IpAddr, interface: u32) -> Destination {
        Destination { ip, interface }
    }

    pub(crate) fn interface(&self) -> u32 {
        self.interface
    }
}

/// Datagrams one `recv_batch` reads at most.
pub(crate) const RECV_BATCH: usize = 16;

/// One datagram a `recv_batch` read, in the order of its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Received {
    pub(crate) len: usize,
    /// Its sender: `None` for one that is no IPv4 or IPv6 address, which an
    /// inet socket never reports (it keeps its place all the same).
    pub(crate) from: Option<SocketAddr>,
    /// On a wildcard-bound socket (IP_PKTINFO, IPV6_RECVPKTINFO), the local
    /// address it was sent to.
    pub(crate) to: Option<Destination>,
}

/// What one `recv_batch` read.
pub(crate) type Batch = Vec<Received>;

/// Room for one message's control data, received (an `in6_pktinfo`) or
/// sent (a source address and a GSO segment size: 40 + 24 bytes at most).
#[repr(C, align(8))]
pub(super) struct Control(pub(super) [u8; 64]);

/// Reads the datagrams waiting on `socket` in one `recvmmsg`, one into each
/// `slot_len` slot of `buf` (a slot of 64 KiB takes any datagram whole),
/// into `into` (at most [`RECV_BATCH`]). Its headers live on the stack: a heap allocation per
/// batch, between the flows' long-lived ones, cost 145 bytes per idle flow
/// in fragments (`bench/udp.sh`).
pub(crate) fn recv_batch(
    socket: &impl AsRawFd,
    buf: &mut [u8],
    slot_len: usize,
    into: &mut Batch,
) -> io::Result<()> {
    into.clear();
    // SAFETY: plain C structs and bytes, for which all zeroes is a valid
    // value; zeroed whole (one memset each), not built element by element
    // and copied in, which cost 5 % of a relay's CPU.
    let mut names: [socket2::SockAddrStorage; RECV_BATCH] = unsafe { std::mem::zeroed() };
    let mut iovs: [libc::iovec; RECV_BATCH] = unsafe { std::mem::zeroed() };
    let mut messages: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
    let mut controls: [Control; RECV_BATCH] = unsafe { std::mem::zeroed() };
    let mut count = 0;
    for (((slot, iov), (message, name)), control) in buf
        .chunks_mut(slot_len)
        .zip(iovs.iter_mut())
        .zip(messages.iter_mut().zip(names.iter_mut()))
        .zip(controls.iter_mut())
    {
        *iov = libc::iovec {
            iov_base: slot.as_mut_ptr().cast(),
            iov_len: slot.len(),
        };
        message.msg_hdr.msg_namelen = name.size_of();
        message.msg_hdr.msg_name = (name as *mut socket2::SockAddrStorage).cast();
        message.msg_hdr.msg_iov = iov;
        message.msg_hdr.msg_iovlen = 1;
        message.msg_hdr.msg_control = control.0.as_mut_ptr().cast();
        message.msg_hdr.msg_controllen = control.0.len() as _;
        count += 1;
    }
    // SAFETY: each of the first `count` headers points at its own name,
    // control buffer and iovec, which point into `names`, `controls` and
    // `buf`, all alive and unaliased for the call; the kernel writes no
    // more than their lengths.
    let got = unsafe {
        libc::recvmmsg(
            socket.as_raw_fd(),
            messages.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    for (message, name) in messages.iter().zip(names).take(got as usize) {
        // SAFETY: the kernel initialized `msg_namelen` bytes of `name`.
        let addr = unsafe { socket2::SockAddr::new(name, message.msg_hdr.msg_namelen) };
        into.push(Received {
            len: message.msg_len as usize,
            from: addr.as_socket(),
            to: destination(&message.msg_hdr),
        });
    }
    Ok(())
}

/// The local address in a received message's IP_PKTINFO or IPV6_PKTINFO.
fn destination(header: &libc::msghdr) -> Option<Destination> {
    let mut found = None;
    // SAFETY: `header` is one recvmmsg filled in: its control pointer and
    // the length the kernel set describe control messages it wrote into a
    // buffer still alive; CMSG_FIRSTHDR/NXTHDR stay within that length, and
    // a message's data is read only when its length holds the struct (read
    // unaligned, as the buffer promises no more than 8).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(header);
        while !cmsg.is_null() {
            let data = libc::CMSG_DATA(cmsg);
            // A message cut short (MSG_CTRUNC) is not read past its end.
            let holds =
                |size: usize| (*cmsg).cmsg_len as usize >= libc::CMSG_LEN(size as _) as usize;
            found = match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_PKTINFO) if holds(size_of::<libc::in_pktinfo>()) => {
                    let info = std::ptr::read_unaligned(data as *const libc::in_pktinfo);
                    Some(Destination {
                        ip: IpAddr::from(info.ipi_addr.s_addr.to_ne_bytes()),
                        interface: 0,
                    })
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO)
                    if holds(size_of::<libc::in6_pktinfo>()) =>
                {
                    let info = std::ptr::read_unaligned(data as *const libc::in6_pktinfo);
                    Some(Destination {
                        ip: IpAddr::from(info.ipi6_addr.s6_addr),
                        interface: info.ipi6_ifindex,
                    })
                }
                _ => found,
            };
            cmsg = libc::CMSG_NXTHDR(header, cmsg);
        }
    }
    found
}

/// The datagrams `batch` says `recv_batch` read into `buf`'s `slot_len`
/// slots, in order: the first `batch.len()` are they.
pub(crate) fn read_into<'b>(
    buf: &'b [u8],
    slot_len: usize,
    batch: &Batch,
) -> [&'b [u8]; RECV_BATCH] {
    let mut datagrams: [&[u8]; RECV_BATCH] = [&[]; RECV_BATCH];
    for (datagram, (&Received { len, .. }, slot)) in datagrams
        .iter_mut()
        .zip(batch.iter().zip(buf.chunks(slot_len)))
    {
        *datagram = &slot[..len];
    }
    datagrams
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// On a wildcard-bound socket each datagram of a batch says which local
    /// address it was sent to; on a specific one, none does.
    #[test]
    fn a_batch_says_where_each_datagram_was_sent_on_a_wildcard_bind() {
        let wildcard = super::super::bind_udp(SocketAddr::from(([0, 0, 0, 0], 0)), false).unwrap();
        let port = wildcard.local_addr().unwrap().port();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        for last in [2u8, 3, 2] {
            client
                .send_to(&[last], SocketAddr::from(([127, 0, 0, last], port)))
                .unwrap();
        }
        let (mut buf, mut batch) = (vec![0u8; RECV_BATCH * 64], Batch::new());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut seen = Vec::new();
        while seen.len() < 3 && std::time::Instant::now() < deadline {
            if recv_batch(&wildcard, &mut buf, 64, &mut batch).is_ok() {
                seen.extend(batch.iter().map(|r| (r.from, r.to.map(|d| d.ip))));
            }
        }
        let client = client.local_addr().ok();
        let to = |last: u8| Some(IpAddr::from([127, 0, 0, last]));
        assert_eq!(seen, [(client, to(2)), (client, to(3)), (client, to(2))]);
    }
}
