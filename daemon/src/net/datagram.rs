//! UDP sockets: a listener's (with the options every listener has, and
//! SO_REUSEPORT when several event loops share its address, so the kernel
//! keeps each client's flow on one of them) and a flow's socket connected
//! to its backend.

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};

use socket2::{Domain, Protocol, Socket, Type};

use super::bind_error::BindError;
use crate::model::ListenAddr;

/// What a UDP listener asks for its receive buffer.
const RECEIVE_BUFFER: usize = 4 << 20;

/// A UDP socket bound to `addr`, non-blocking.
pub(crate) fn bind_udp(addr: SocketAddr, reuse_port: bool) -> Result<UdpSocket, BindError> {
    let bound = || -> io::Result<UdpSocket> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if addr.is_ipv6() {
            // As the TCP listeners: an IPv6 address is IPv6 only.
            socket.set_only_v6(true)?;
        }
        if reuse_port {
            socket.set_reuse_port(true)?;
        }
        // Room for a burst while the event loop is busy (the kernel caps
        // it at net.core.rmem_max); a failure keeps the default.
        let _ = socket.set_recv_buffer_size(RECEIVE_BUFFER);
        if addr.ip().is_unspecified() {
            // A wildcard bind: each datagram says which local address it
            // was sent to, so that its replies leave from that one.
            use nix::sys::socket::{setsockopt, sockopt};
            let on = match addr {
                SocketAddr::V4(_) => setsockopt(&socket, sockopt::Ipv4PacketInfo, &true),
                SocketAddr::V6(_) => setsockopt(&socket, sockopt::Ipv6RecvPacketInfo, &true),
            };
            on.map_err(io::Error::from)?;
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        Ok(socket.into())
    };
    bound().map_err(|e| BindError {
        addr: ListenAddr::Tcp(addr),
        reason: match e.kind() {
            io::ErrorKind::AddrInUse => format!(
                "UDP port {} is in use by another program (`ss -ulpn sport = :{}` shows which)",
                addr.port(),
                addr.port()
            ),
            io::ErrorKind::PermissionDenied => format!(
                "permission denied for UDP port {} (ports below 1024 need root or CAP_NET_BIND_SERVICE)",
                addr.port()
            ),
            _ => format!("UDP: {e}"),
        },
    })
}

/// A socket of its own for one flow, connected to `backend`: the backend's
/// replies come back on it alone, and the kernel drops datagrams from
/// anyone else. With a `source`, it is bound there with IP(V6)_TRANSPARENT
/// (`transparent = true`: the client's own address, which the backend then
/// sees); that needs CAP_NET_ADMIN.
pub(crate) fn connect_udp(
    backend: SocketAddr,
    source: Option<SocketAddr>,
) -> io::Result<std::net::UdpSocket> {
    let any: SocketAddr = match backend {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = Socket::new(
        Domain::for_address(backend),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    if let Some(source) = source {
        match backend {
            SocketAddr::V4(_) => socket.set_ip_transparent_v4(true)?,
            SocketAddr::V6(_) => socket.set_ip_transparent_v6(true)?,
        }
        // A client's next flow may bind its address while the last one's
        // socket is still closing.
        socket.set_reuse_address(true)?;
        socket.bind(&source.into())?;
    } else {
        socket.bind(&any.into())?;
    }
    socket.connect(&backend.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The local address a datagram was sent to, on a wildcard-bound socket:
/// where its replies must come from (a QUIC or WireGuard client drops a
/// reply from any other address), and for IPv6 the interface, which a
/// link-local address needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Destination {
    pub(crate) ip: IpAddr,
    interface: u32,
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

/// Sends `datagrams` (at most [`RECV_BATCH`]) in one `sendmmsg`, to `to`
/// or, on a connected socket, to its peer: how many the socket took. Those
/// after them found its buffer full, and are the caller's to drop, as UDP
/// would. The headers live on the stack: this runs per batch of datagrams.
pub(crate) fn send_all(
    socket: &impl AsFd,
    datagrams: &[&[u8]],
    to: Option<SocketAddr>,
) -> io::Result<usize> {
    sendmmsg_to(socket, datagrams, |_| to)
}

/// Sends each of `datagrams` (at most [`RECV_BATCH`]) to its own address,
/// `to` in the same order, in one `sendmmsg`: how many the socket took. The
/// one after them failed (the next call says why); those after it were not
/// tried.
pub(crate) fn send_each(
    socket: &impl AsFd,
    datagrams: &[&[u8]],
    to: &[SocketAddr],
) -> io::Result<usize> {
    let n = datagrams.len().min(to.len());
    sendmmsg_to(socket, &datagrams[..n], |i| to.get(i).copied())
}

/// `sendmmsg` of `datagrams`, the i-th to `to(i)` (`None`: the socket's peer).
fn sendmmsg_to(
    socket: &impl AsFd,
    datagrams: &[&[u8]],
    to: impl Fn(usize) -> Option<SocketAddr>,
) -> io::Result<usize> {
    use rustix::net::addr::SocketAddrArg;
    use rustix::net::{sendmmsg, MMsgHdr, SendAncillaryBuffer, SendFlags};
    let n = datagrams.len().min(RECV_BATCH);
    let to: [_; RECV_BATCH] =
        std::array::from_fn(|i| (i < n).then(|| to(i)).flatten().map(|to| to.as_any()));
    let iovs: [[io::IoSlice<'_>; 1]; RECV_BATCH] = std::array::from_fn(|i| {
        [io::IoSlice::new(
            datagrams.get(i).copied().unwrap_or_default(),
        )]
    });
    let mut controls: [SendAncillaryBuffer<'_, '_, '_>; RECV_BATCH] =
        std::array::from_fn(|_| SendAncillaryBuffer::default());
    let mut each = to.iter().zip(iovs.iter().zip(controls.iter_mut()));
    let mut messages: [MMsgHdr<'_>; RECV_BATCH] = std::array::from_fn(|_| {
        let (to, (iov, control)) = each.next().expect("one per slot");
        match to {
            Some(to) => MMsgHdr::new_with_addr(to, iov, control),
            None => MMsgHdr::new(iov, control),
        }
    });
    sendmmsg(
        socket,
        &mut messages[..n],
        SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
    )
    .map_err(io::Error::from)
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
