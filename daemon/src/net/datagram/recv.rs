//! Receiving datagrams: one with the local address it was sent to (a
//! wildcard-bound listener's replies must leave from it), or a batch of up
//! to 16 with their senders in one `recvmmsg`.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
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

/// One datagram into `buf`, from a socket `bind_udp` bound to a wildcard
/// address: its length, its sender, and the local address it was sent to.
pub(crate) fn recv_with_destination(
    socket: &impl AsRawFd,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<Destination>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
    let mut control = nix::cmsg_space!(libc::in6_pktinfo);
    let mut iov = [io::IoSliceMut::new(buf)];
    let message = recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut control),
        MsgFlags::empty(),
    )?;
    let from = message
        .address
        .as_ref()
        .and_then(socket_addr)
        .ok_or_else(|| io::Error::other("a datagram without a sender's address"))?;
    let mut destination = None;
    for cmsg in message.cmsgs()? {
        destination = match cmsg {
            ControlMessageOwned::Ipv4PacketInfo(info) => Some(Destination {
                ip: IpAddr::from(info.ipi_addr.s_addr.to_ne_bytes()),
                interface: 0,
            }),
            ControlMessageOwned::Ipv6PacketInfo(info) => Some(Destination {
                ip: IpAddr::from(info.ipi6_addr.s6_addr),
                interface: info.ipi6_ifindex,
            }),
            _ => destination,
        };
    }
    Ok((message.bytes, from, destination))
}

/// Datagrams one `recv_batch` reads at most.
pub(crate) const RECV_BATCH: usize = 16;

/// What one `recv_batch` read: each datagram's length and sender, in the
/// order of its slots (a sender that is no IPv4 or IPv6 address, which an
/// inet socket never reports, is `None` and keeps its place).
pub(crate) type Batch = Vec<(usize, Option<SocketAddr>)>;

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
    let mut names: [socket2::SockAddrStorage; RECV_BATCH] =
        std::array::from_fn(|_| socket2::SockAddrStorage::zeroed());
    // SAFETY: plain C structs, for which all zeroes is a valid value.
    let mut iovs: [libc::iovec; RECV_BATCH] = unsafe { std::mem::zeroed() };
    let mut messages: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
    let mut count = 0;
    for ((slot, iov), (message, name)) in buf
        .chunks_mut(slot_len)
        .zip(iovs.iter_mut())
        .zip(messages.iter_mut().zip(names.iter_mut()))
    {
        *iov = libc::iovec {
            iov_base: slot.as_mut_ptr().cast(),
            iov_len: slot.len(),
        };
        message.msg_hdr.msg_namelen = name.size_of();
        message.msg_hdr.msg_name = (name as *mut socket2::SockAddrStorage).cast();
        message.msg_hdr.msg_iov = iov;
        message.msg_hdr.msg_iovlen = 1;
        count += 1;
    }
    // SAFETY: each of the first `count` headers points at its own name and
    // iovec, which point into `names` and `buf`, all alive and unaliased
    // for the call; the kernel writes no more than their lengths.
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
        into.push((message.msg_len as usize, addr.as_socket()));
    }
    Ok(())
}

/// The datagrams `batch` says `recv_batch` read into `buf`'s `slot_len`
/// slots, in order: the first `batch.len()` are they.
pub(crate) fn read_into<'b>(
    buf: &'b [u8],
    slot_len: usize,
    batch: &Batch,
) -> [&'b [u8]; RECV_BATCH] {
    let mut datagrams: [&[u8]; RECV_BATCH] = [&[]; RECV_BATCH];
    for (datagram, (&(len, _), slot)) in datagrams
        .iter_mut()
        .zip(batch.iter().zip(buf.chunks(slot_len)))
    {
        *datagram = &slot[..len];
    }
    datagrams
}

/// A sender's address as nix gives it.
fn socket_addr(addr: &nix::sys::socket::SockaddrStorage) -> Option<SocketAddr> {
    match (addr.as_sockaddr_in(), addr.as_sockaddr_in6()) {
        (Some(v4), _) => Some(SocketAddr::from(SocketAddrV4::from(*v4))),
        (_, Some(v6)) => Some(SocketAddr::from(SocketAddrV6::from(*v6))),
        _ => None,
    }
}
