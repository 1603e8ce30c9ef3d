//! The handoff hub: backends register service names over a control Unix socket
//! and are sent whole client connections (the socket itself, by SCM_RIGHTS), after
//! which tcpmuxd is out of the data path. Who may register a name is decided by
//! the backend's SO_PEERCRED uid/gid against the name's rule in the config.

use std::collections::HashMap;
use std::io;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use tcpmux_proto::handoff::{parse_register, FRAME_LEN, MAX_REGISTER_LINE};
use tcpmux_proto::ServiceName;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use crate::listener::Listener;
use crate::registry::Registry;
use crate::services::ServiceKind;
use crate::stream::Stream;
use crate::Daemon;

/// Who may register a handoff name: a peer whose uid or gid is listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandoffRule {
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
}

impl HandoffRule {
    pub fn allows(&self, uid: u32, gid: u32) -> bool {
        self.uids.contains(&uid) || self.gids.contains(&gid)
    }
}

/// One client connection on its way to a backend.
pub struct Delivery {
    pub socket: OwnedFd,
    pub frame: [u8; FRAME_LEN],
    /// Told whether the socket reached the backend.
    pub done: oneshot::Sender<io::Result<()>>,
}

struct Registered {
    id: u64,
    deliveries: mpsc::Sender<Delivery>,
}

/// The live registrations, shared by the control loop and the sessions.
#[derive(Default)]
pub struct Hub {
    backends: Mutex<HashMap<ServiceName, Vec<Registered>>>,
    next_id: AtomicUsize,
    turn: AtomicUsize,
}

impl Hub {
    /// Whether any backend serves `name` now.
    pub fn is_live(&self, name: &ServiceName) -> bool {
        self.lock().get(name).is_some_and(|list| !list.is_empty())
    }

    /// The backends of `name`, starting with the next in round-robin order.
    pub fn candidates(&self, name: &ServiceName) -> Vec<mpsc::Sender<Delivery>> {
        let backends = self.lock();
        let Some(list) = backends.get(name).filter(|l| !l.is_empty()) else {
            return Vec::new();
        };
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % list.len();
        list.iter()
            .cycle()
            .skip(start)
            .take(list.len())
            .map(|r| r.deliveries.clone())
            .collect()
    }

    /// Registered backends per name, for the metrics.
    pub fn counts(&self) -> Vec<(String, usize)> {
        let mut counts: Vec<_> = self
            .lock()
            .iter()
            .map(|(n, l)| (n.to_string(), l.len()))
            .collect();
        counts.sort();
        counts
    }

    fn add(&self, names: &[ServiceName], deliveries: &mpsc::Sender<Delivery>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) as u64;
        let mut backends = self.lock();
        for name in names {
            backends.entry(name.clone()).or_default().push(Registered {
                id,
                deliveries: deliveries.clone(),
            });
        }
        id
    }

    fn remove(&self, id: u64) {
        let mut backends = self.lock();
        for list in backends.values_mut() {
            list.retain(|r| r.id != id);
        }
        backends.retain(|_, list| !list.is_empty());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ServiceName, Vec<Registered>>> {
        // A panic while holding the lock cannot leave the map half-edited in a way
        // that matters (each edit is one call), so a poisoned lock is still usable.
        self.backends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Accepts backends on the control socket until the daemon stops. Registrations
/// are checked against the configuration in force when they arrive.
pub async fn control_loop(listener: Listener, daemon: Arc<Daemon>) {
    loop {
        match listener.accept().await {
            Ok((Stream::Unix(stream), _)) => {
                let settings = daemon.settings();
                tokio::spawn(backend_session(
                    stream,
                    Arc::clone(&daemon.hub),
                    Arc::clone(&settings.registry),
                    settings.negotiation_timeout,
                ));
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "handoff control accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
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
    let names = match tokio::time::timeout(register_timeout, read_registration(&mut stream)).await {
        Ok(Ok(line)) => match authorize(&line, uid, gid, &registry) {
            Ok(names) => names,
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
    let (deliveries, mut incoming) = mpsc::channel::<Delivery>(64);
    let id = hub.add(&names, &deliveries);
    drop(deliveries);
    let list: Vec<&str> = names.iter().map(ServiceName::as_str).collect();
    tracing::info!(uid, gid, pid, names = %list.join(","), "handoff backend registered");
    loop {
        tokio::select! {
            delivery = incoming.recv() => {
                let Some(delivery) = delivery else { break };
                let result = send_socket(&stream, &delivery).await;
                let failed = result.is_err();
                let _ = delivery.done.send(result);
                if failed {
                    break;
                }
            }
            // Backends send nothing after REGISTER: readable means EOF (or a
            // protocol error); either way the registration ends.
            ready = stream.readable() => {
                let mut byte = [0u8; 1];
                match (ready, stream.try_read(&mut byte)) {
                    (Ok(()), Err(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    _ => break,
                }
            }
        }
    }
    hub.remove(id);
    tracing::info!(uid, gid, pid, names = %list.join(","), "handoff backend gone");
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

fn authorize(
    line: &[u8],
    uid: u32,
    gid: u32,
    registry: &Registry,
) -> Result<Vec<ServiceName>, String> {
    let names = parse_register(line).map_err(|e| e.to_string())?;
    for name in &names {
        match registry.lookup(name).map(|s| &s.kind) {
            Some(ServiceKind::Handoff(rule)) if rule.allows(uid, gid) => {}
            Some(ServiceKind::Handoff(_)) => {
                return Err(format!("uid {uid} gid {gid} may not register {name}"));
            }
            _ => return Err(format!("{name} is not a handoff service")),
        }
    }
    Ok(names)
}

/// Sends the frame with the socket attached; a short send finishes without it.
async fn send_socket(stream: &UnixStream, delivery: &Delivery) -> io::Result<()> {
    let sent = stream
        .async_io(Interest::WRITABLE, || {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            let fds = [delivery.socket.as_fd()];
            control.push(SendAncillaryMessage::ScmRights(&fds));
            sendmsg(
                stream,
                &[IoSlice::new(&delivery.frame)],
                &mut control,
                SendFlags::NOSIGNAL,
            )
            .map_err(io::Error::from)
        })
        .await?;
    let mut rest = &delivery.frame[sent..];
    while !rest.is_empty() {
        let n = stream
            .async_io(Interest::WRITABLE, || {
                rustix::net::send(stream, rest, SendFlags::NOSIGNAL).map_err(io::Error::from)
            })
            .await?;
        rest = &rest[n..];
    }
    Ok(())
}
