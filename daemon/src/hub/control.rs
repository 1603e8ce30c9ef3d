//! The control socket: a backend connects, sends `REGISTER name…`, is checked
//! by its SO_PEERCRED uid/gid against each name's rule in the configuration,
//! and then receives client sockets until it disconnects.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tcpmux_proto::handoff::{parse_ack, parse_registration, MAX_REGISTER_LINE};
use tcpmux_proto::ServiceName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::task::JoinSet;

use super::acks::Acks;
use super::live::{Hub, Registration};
use crate::model::{ControlLimits, Peer, ServiceKind};
use crate::net::accept_errors::AcceptErrors;
use crate::net::listener::{Accepted, Listener};
use crate::net::stream::Stream;
use crate::registry::Registry;

/// Accepts backends on the control socket until the task is dropped, which ends
/// every registration with it. Registrations are checked against the
/// configuration in force when they arrive: `current` gives its registry and
/// the control socket's limits.
pub(crate) async fn control_loop(
    listener: Listener,
    hub: Arc<Hub>,
    current: impl Fn() -> (Arc<Registry>, ControlLimits),
    adopted: Vec<Enlisted>,
) {
    let reserve_cap = descriptor_share();
    let mut backends = JoinSet::new();
    let mut per_uid: HashMap<u32, usize> = HashMap::new();
    for enlisted in adopted {
        let uid = enlisted.registration.uid;
        *per_uid.entry(uid).or_default() += 1;
        let hub = Arc::clone(&hub);
        backends.spawn(async move {
            watch(enlisted, &hub).await;
            uid
        });
    }
    let mut errors = AcceptErrors::new("handoff control");
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(Accepted {
                    stream: Stream::Unix(stream),
                    peer: Peer::Unix { uid, .. },
                    ..
                }) => {
                    let (registry, limits) = current();
                    let total = limits.max_connections.min(reserve_cap);
                    let held = per_uid.get(&uid).copied().unwrap_or(0);
                    if backends.len() >= total || held >= limits.max_connections_per_uid {
                        refuse_connection(&stream, uid, backends.len(), held);
                        continue;
                    }
                    *per_uid.entry(uid).or_default() += 1;
                    let hub = Arc::clone(&hub);
                    let timeout = limits.register_timeout;
                    backends.spawn(async move {
                        backend_session(stream, hub, registry, timeout).await;
                        uid
                    });
                }
                Ok(_) => {}
                Err(e) => errors.failed(&listener.local_addr(), &e).await,
            },
            Some(ended) = backends.join_next() => {
                if let Ok(uid) = ended {
                    if let Some(held) = per_uid.get_mut(&uid) {
                        *held -= 1;
                        if *held == 0 {
                            per_uid.remove(&uid);
                        }
                    }
                }
            }
        }
    }
}

/// The most control connections the descriptor limit allows: a quarter of it,
/// so that however many local users connect, most descriptors stay for clients.
fn descriptor_share() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    limit.map_or(usize::MAX, |n| {
        usize::try_from(n / 4).unwrap_or(usize::MAX).max(1)
    })
}

/// Says no to a control connection over a limit, without waiting for it.
fn refuse_connection(stream: &UnixStream, uid: u32, total: usize, held: usize) {
    tracing::warn!(
        uid,
        total,
        held_by_uid = held,
        "handoff control connection refused: too many"
    );
    let _ = stream.try_write(b"ERR too many control connections\n");
}

async fn backend_session(
    mut stream: UnixStream,
    hub: Arc<Hub>,
    registry: Arc<Registry>,
    register_timeout: Duration,
) {
    let cred = match stream.peer_cred() {
        Ok(cred) => cred,
        Err(e) => {
            tracing::warn!(error = %e, "handoff backend without credentials refused");
            return;
        }
    };
    let (uid, gid, pid) = (cred.uid(), cred.gid(), cred.pid().unwrap_or(0));
    let asked = match tokio::time::timeout(register_timeout, read_registration(&mut stream)).await {
        Ok(Ok(line)) => match authorize(&line, uid, gid, &registry) {
            Ok(asked) => asked,
            Err(reason) => {
                tracing::warn!(uid, gid, pid, %reason, "handoff registration refused");
                let _ = stream.write_all(format!("ERR {reason}\n").as_bytes()).await;
                return;
            }
        },
        Ok(Err(e)) => {
            tracing::warn!(uid, gid, pid, error = %e, "handoff registration failed");
            return;
        }
        Err(_) => {
            let _ = stream.write_all(b"ERR registration timeout\n").await;
            return;
        }
    };
    if stream.write_all(b"OK\n").await.is_err() {
        return;
    }
    watch(enlist(stream, asked, (uid, gid, pid), &hub), &hub).await;
}

/// A registration in the hub, watched for its backend's EOF.
pub(crate) struct Enlisted {
    id: u64,
    registration: Arc<Registration>,
}

/// Puts a registration in the hub at once.
fn enlist(
    stream: UnixStream,
    asked: Asked,
    (uid, gid, pid): (u32, u32, i32),
    hub: &Hub,
) -> Enlisted {
    let Asked { names, acks } = asked;
    // A small send buffer makes "writable" mean "has read what it was given",
    // so a backend that stops reading is skipped after one client, not hundreds
    // (services/handoff.rs offers a client only to a writable backend).
    let _ = socket2::SockRef::from(&stream).set_send_buffer_size(1);
    let registration = Arc::new(Registration {
        names,
        uid,
        gid,
        pid,
        control: Arc::new(stream),
        acks: acks.then(Acks::default),
    });
    let id = hub.add(&registration);
    let list: Vec<&str> = registration.names.iter().map(ServiceName::as_str).collect();
    tracing::info!(uid, gid, pid, names = %list.join(","), acks, "handoff backend registered");
    Enlisted { id, registration }
}

/// Waits for the backend to close its connection (reading its
/// acknowledgements meanwhile, if it sends them), then ends the registration.
async fn watch(enlisted: Enlisted, hub: &Hub) {
    let Enlisted { id, registration } = enlisted;
    let (uid, gid, pid) = (registration.uid, registration.gid, registration.pid);
    match &registration.acks {
        None => until_eof(&registration.control).await,
        Some(acks) => read_acks(&registration.control, acks, pid).await,
    }
    hub.remove(id);
    let list: Vec<&str> = registration.names.iter().map(ServiceName::as_str).collect();
    tracing::info!(uid, gid, pid, names = %list.join(","), "handoff backend gone");
}

/// A backend that does not acknowledge sends nothing after REGISTER:
/// readable means EOF (or a protocol error); either way the registration ends.
async fn until_eof(control: &UnixStream) {
    loop {
        let ready = control.readable().await;
        let mut byte = [0u8; 1];
        match (ready, control.try_read(&mut byte)) {
            (Ok(()), Err(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
            _ => return,
        }
    }
}

/// `ACK` and a 64-bit number, with room to spare.
const MAX_ACK_LINE: usize = 32;

/// Reads `ACK seq` lines until EOF or anything else, and shuts down each
/// delivery not acknowledged in time.
async fn read_acks(control: &UnixStream, acks: &Acks, pid: i32) {
    let mut line = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let due = acks.next_due();
        let overdue = async {
            match due {
                Some(due) => tokio::time::sleep_until(due.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ready = control.readable() => {
                if ready.is_err() {
                    return;
                }
                let n = match control.try_read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(_) => return,
                };
                for &byte in &buf[..n] {
                    if byte != b'\n' {
                        line.push(byte);
                        // An ACK line is short: a longer one is read as what
                        // it is, not an ACK.
                        if line.len() <= MAX_ACK_LINE {
                            continue;
                        }
                    }
                    match parse_ack(&line) {
                        Ok(seq) => drop(acks.acked(seq)),
                        Err(e) => {
                            tracing::warn!(pid, error = %e, "handoff backend sent a line that is not ACK; dropping it");
                            return;
                        }
                    }
                    line.clear();
                }
            }
            () = overdue => {
                let shut = acks.expire(std::time::Instant::now());
                if shut > 0 {
                    tracing::warn!(pid, clients = shut, "handoff backend did not acknowledge a client in time; its connection is shut down");
                }
            }
            () = acks.added() => {}
        }
    }
}

/// A backend registration handed over by a predecessor daemon.
pub(crate) struct Adopted {
    pub names: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
    pub control: std::os::fd::OwnedFd,
    /// Whether it acknowledges each client.
    pub acks: bool,
}

/// Takes over, at once (before the successor says READY), the registrations
/// handed over that `registry` still allows; the others are closed, so their
/// backends see EOF and may register again.
pub(crate) fn adopt_all(adopted: Vec<Adopted>, registry: &Registry, hub: &Hub) -> Vec<Enlisted> {
    adopted
        .into_iter()
        .filter_map(|backend| {
            let creds = (backend.uid, backend.gid, backend.pid);
            let (stream, asked) = adopt(backend, registry)?;
            Some(enlist(stream, asked, creds, hub))
        })
        .collect()
}

fn adopt(adopted: Adopted, registry: &Registry) -> Option<(UnixStream, Asked)> {
    let names = adopted.names.iter().map(|n| ServiceName::parse(n));
    let asked = names
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())
        .and_then(|names| {
            let acks = adopted.acks;
            allowed(Asked { names, acks }, adopted.uid, adopted.gid, registry)
        });
    let asked = match asked {
        Ok(asked) => asked,
        Err(reason) => {
            let pid = adopted.pid;
            tracing::warn!(pid, %reason, "handoff registration from the old daemon dropped");
            return None;
        }
    };
    let std = std::os::unix::net::UnixStream::from(adopted.control);
    std.set_nonblocking(true).ok()?;
    Some((UnixStream::from_std(std).ok()?, asked))
}

async fn read_registration(stream: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    // Byte at a time: the line is short and read once per backend.
    while line.len() < MAX_REGISTER_LINE {
        if stream.read(&mut byte).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before REGISTER",
            ));
        }
        if byte[0] == b'\n' {
            return Ok(line);
        }
        line.push(byte[0]);
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "REGISTER line too long",
    ))
}

/// What a backend asked for: its names, and whether it acknowledges.
type Asked = tcpmux_proto::handoff::Registration;

fn authorize(line: &[u8], uid: u32, gid: u32, registry: &Registry) -> Result<Asked, String> {
    let asked = parse_registration(line).map_err(|e| e.to_string())?;
    allowed(asked, uid, gid, registry)
}

/// `asked`, once every name is a handoff service that `uid`/`gid` may serve.
fn allowed(asked: Asked, uid: u32, gid: u32, registry: &Registry) -> Result<Asked, String> {
    let Asked { mut names, acks } = asked;
    // A name listed twice is registered once: one backend, one turn, one count.
    names.sort();
    names.dedup();
    for name in &names {
        match registry.lookup(name).map(|s| &s.kind) {
            Some(ServiceKind::Handoff(rule)) if rule.allows(uid, gid) => {}
            Some(ServiceKind::Handoff(_)) => {
                return Err(format!("uid {uid} gid {gid} may not register {name}"));
            }
            _ => return Err(format!("{name} is not a handoff service")),
        }
    }
    Ok(Asked { names, acks })
}
