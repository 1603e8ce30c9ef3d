//! UDP sockets: a listener's (with the options every listener has, and
//! SO_REUSEPORT when several event loops share its address, so the kernel
//! keeps each client's flow on one of them) and a flow's socket connected
//! to its backend; receiving (`recv.rs`) and sending (`send.rs`) batches
//! of datagrams on them.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

use super::bind_error::BindError;
use crate::model::ListenAddr;

mod recv;
mod send;
pub(crate) use recv::{read_into, recv_batch, Batch, Destination, Received, RECV_BATCH};
pub(crate) use send::{send_all, send_each, Addressed};

/// What a UDP listener asks for its receive buffer.
const RECEIVE_BUFFER: usize = 4 << 20;

/// A UDP socket bound to `addr`, non-blocking.
pub(crate) fn bind_udp(addr: SocketAddr, reuse_port: bool) -> Result<UdpSocket, BindError> {
    bind_udp_io(addr, reuse_port).map_err(|e| udp_bind_error(addr, &e))
}

/// Tries of a port for a TCP and a UDP socket together.
const PAIR_TRIES: usize = 32;

/// A TCP socket from `bind_tcp` (asked for port 0) and a UDP socket on the
/// port it got: that port may be another program's for UDP, so another is
/// tried, the TCP sockets of the ports tried held meanwhile (or the kernel
/// could give the same one again).
pub(crate) fn on_one_port<T>(
    mut bind_tcp: impl FnMut() -> Result<(T, SocketAddr), BindError>,
    reuse_port: bool,
) -> Result<(T, UdpSocket), BindError> {
    let mut tried = Vec::new();
    loop {
        let (tcp, at) = bind_tcp()?;
        match bind_udp_io(at, reuse_port) {
            Ok(udp) => return Ok((tcp, udp)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && tried.len() < PAIR_TRIES => {
                tried.push(tcp);
            }
            Err(e) => return Err(udp_bind_error(at, &e)),
        }
    }
}

/// [`bind_udp`] with the system's error.
fn bind_udp_io(addr: SocketAddr, reuse_port: bool) -> io::Result<UdpSocket> {
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
    bound()
}

/// What an operator is told when the UDP port `addr` cannot be had.
fn udp_bind_error(addr: SocketAddr, e: &io::Error) -> BindError {
    BindError {
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
    }
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
