//! The accept loop's own answers. A TCPMUX client whose request line is in its
//! socket when it is accepted, and whose answer is one line (a clock built-in,
//! or a refusal), is answered by the loop on the spot: one read, one send
//! with the FIN, and the loop's lingering set (net/lingering.rs) waits for the client's
//! FIN. No task, no timer and no reactor registration, which is most of what a
//! session costs beyond the kernel's work. Every other client becomes a
//! session, with what was read put back in front of its input.

use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use rustix::net::{RecvFlags, SendFlags};
use tcpmux_proto::{encode_reply, Decision, Progress, RequestParser, ServiceName, MAX_NAME_LEN};

use super::verdict::{self, is_own, report, Answer, Asked};
use crate::admission::{Admission, Busy};
use crate::model::{ClientInfo, ListenOptions, Peer, Service, ServiceKind};
use crate::net::close::close_gracefully;
use crate::net::lingering::Lingering;
use crate::net::listener::{Accepted, Incoming};
use crate::net::stream::Stream;
use crate::outcome::{Outcome, Refusal};
use crate::services::{one_line_answer, OneLine};
use crate::state::{Settings, Shared};

/// What the accept loop does with a new client.
pub(crate) enum AtAccept {
    /// Answered; the closer has it.
    Answered,
    /// A session's to serve.
    Session(Accepted),
    /// Answered, but the socket did not take the whole answer at once (a
    /// kernel short of memory): the rest is sent by this, as a session is.
    Unfinished(Pin<Box<dyn Future<Output = ()> + Send>>),
}

/// Answers `incoming` now if its request is in and its answer is one line;
/// else registers it for a session.
pub(crate) fn answer_at_accept(
    shared: &Arc<Shared>,
    incoming: Incoming,
    listen: &ListenOptions,
    closer: &mut Lingering<Option<Admission>>,
) -> io::Result<AtAccept> {
    let started = Instant::now();
    // Detection, TLS and a PROXY header each have more to read first.
    let plain = listen.detect.is_none() && listen.tls.is_none();
    if !plain || listen.trusts_proxy(incoming.peer.ip()) {
        return incoming.into_session(Vec::new()).map(AtAccept::Session);
    }
    let mut buf = [0u8; MAX_NAME_LEN + 2];
    let read = match rustix::net::recv(&incoming.socket, &mut buf, RecvFlags::DONTWAIT) {
        Ok((n, _)) if n > 0 => n,
        // Nothing yet, or an end or an error, which the session reports.
        _ => return incoming.into_session(Vec::new()).map(AtAccept::Session),
    };
    let name = match RequestParser::new().feed(&buf[..read]) {
        Progress::Decided {
            decision: Decision::Service(name),
            ..
        } => name,
        _ => {
            return incoming
                .into_session(buf[..read].to_vec())
                .map(AtAccept::Session)
        }
    };
    let settings = shared.settings();
    let service = match settings.registry.lookup(&name) {
        None => None,
        Some(service) => match one_line(service) {
            Some(answer) => Some((service, answer)),
            None => {
                return incoming
                    .into_session(buf[..read].to_vec())
                    .map(AtAccept::Session)
            }
        },
    };
    let client = ClientInfo {
        peer: Peer::Tcp(incoming.peer),
        local: incoming.local,
        tls: None,
        sni: None,
    };
    let mut reply = Vec::with_capacity(128);
    let (mut answer, admission) = decide(shared, &settings, &client, (name, service), &mut reply);
    let socket = OwnedFd::from(incoming.socket);
    let flags = SendFlags::NOSIGNAL | SendFlags::MORE | SendFlags::DONTWAIT;
    let sent = match rustix::net::send(&socket, &reply, flags) {
        Err(rustix::io::Errno::AGAIN) => Ok(0),
        other => other,
    };
    let bytes = (read as u64, reply.len() as u64);
    match sent {
        Ok(all) if all == reply.len() => {
            // Our FIN joins the answer held back by MSG_MORE.
            let _ = rustix::net::shutdown(&socket, rustix::net::Shutdown::Write);
            // `close_drain_timeout = 0`: closed at once, as a session is.
            if !settings.close_drain_timeout.is_zero() {
                closer.add(socket, admission, started);
            }
        }
        Ok(part) => {
            let rest = reply.split_off(part);
            let drain = settings.close_drain_timeout;
            let stream = tokio::net::TcpStream::from_std(socket.into())?;
            let shared = Arc::clone(shared);
            return Ok(AtAccept::Unfinished(Box::pin(async move {
                let mut stream = Stream::Tcp(stream);
                let answer = match stream.send_before_fin(&rest).await {
                    Err(e) => failed(answer, e),
                    Ok(()) => answer,
                };
                close_gracefully(&mut stream, drain).await;
                report(&shared, &client, &client.peer, &answer, bytes, started);
                drop(admission);
            })));
        }
        Err(e) => answer = failed(answer, e.into()),
    }
    report(shared, &client, &client.peer, &answer, bytes, started);
    Ok(AtAccept::Answered)
}

/// The answer once its send failed: the client is gone. A refusal's reason
/// stays the outcome, as in a session, whose refusals ignore a failed send.
fn failed(answer: Answer, e: io::Error) -> Answer {
    match answer.outcome {
        Outcome::Served { .. } => Answer {
            outcome: Outcome::ServiceError(e),
            ..answer
        },
        _ => answer,
    }
}

/// How `service` appends its answer, if it is a built-in whose whole answer
/// is one line.
fn one_line(service: &Service) -> Option<OneLine> {
    match &service.kind {
        ServiceKind::Builtin(builtin) if service.queue.is_none() => one_line_answer(*builtin),
        _ => None,
    }
}

/// The steps a session takes, in its order (the limits, the proxy loop, the
/// decision, a slot of the service's cap), and the reply they lead to, put
/// in `reply`; with the connection's admission, if it was admitted.
fn decide(
    shared: &Arc<Shared>,
    settings: &Settings,
    client: &ClientInfo,
    (name, service): (ServiceName, Option<(&Service, OneLine)>),
    reply: &mut Vec<u8>,
) -> (Answer, Option<Admission>) {
    let mut refuse = |refusal: Refusal| {
        if let Some(told) = refusal.told() {
            encode_reply(false, &told, reply);
        }
        Answer::new(Outcome::Refused(refusal))
    };
    let mut admission = match shared.gate.admit(&settings.limits) {
        Ok(admission) => admission,
        Err(limit) => return (refuse(Refusal::Limit(limit)), None),
    };
    let admitted = admission.admit_address(&shared.gate, &client.peer, &settings.limits);
    let refused = match admitted {
        Err(limit) => Some(Refusal::Limit(limit)),
        Ok(()) if is_own(&shared.own, &client.peer, client.local) => Some(Refusal::ProxyLoop),
        Ok(()) => None,
    };
    if let Some(refusal) = refused {
        return (refuse(refusal), Some(admission));
    }
    let (found, one_line_answer) = service.unzip();
    let answer = match verdict::decide(settings, client, (&name, found), Asked::Named) {
        Err(refusal) => refuse(refusal),
        Ok(chosen) => {
            let cap = chosen.service.connection_cap();
            // The slot is held while the answer is made; sent, it is done.
            match chosen.counts.connections.acquire(cap) {
                None => refuse(Refusal::Busy(Busy::Full)),
                Some(_slot) => {
                    encode_reply(true, &chosen.service.message, reply);
                    // Found, so a one-line answer: the caller checked.
                    if let Some(one_line_answer) = one_line_answer {
                        one_line_answer(reply);
                    }
                    Answer::new(Outcome::Served { backend: None })
                }
            }
        }
    };
    (named(answer, name), Some(admission))
}

fn named(answer: Answer, name: ServiceName) -> Answer {
    Answer {
        service: Some(name),
        ..answer
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;
    use crate::state::DaemonState;

    /// A socket that cannot take its one-line answer when the loop has it
    /// (its send buffer full) gets the answer from a task instead: behind
    /// what was queued, then the FIN, and the task ends at the client's.
    #[tokio::test]
    async fn an_answer_the_socket_cannot_take_yet_is_sent_by_a_task() {
        let shared = Arc::new(Shared::new(
            crate::Config::default(),
            DaemonState::default(),
        ));
        let mut closer = Lingering::new().expect("epoll set");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, peer) = listener.accept().expect("accept");
        let local = server.local_addr().ok();
        socket2::SockRef::from(&client)
            .set_recv_buffer_size(4096)
            .expect("SO_RCVBUF");
        socket2::SockRef::from(&server)
            .set_send_buffer_size(4096)
            .expect("SO_SNDBUF");
        server.set_nonblocking(true).expect("nonblocking");
        client.write_all(b"daytime\r\n").expect("request");
        let patience = Instant::now() + std::time::Duration::from_secs(20);
        let mut seen = [0u8; 9];
        while server.peek(&mut seen).map_or(0, |n| n) < seen.len() {
            assert!(Instant::now() < patience, "the request never arrived");
            std::thread::yield_now();
        }
        // The client reads nothing yet: fill the way to it.
        let mut queued = 0;
        loop {
            match (&server).write(&[b'j'; 4096]) {
                Ok(n) => queued += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling the socket: {e}"),
            }
        }
        let incoming = Incoming {
            socket: server,
            peer,
            local,
        };
        let at = answer_at_accept(&shared, incoming, &ListenOptions::default(), &mut closer);
        let Ok(AtAccept::Unfinished(rest)) = at else {
            panic!("a full socket took its answer at once");
        };
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            client.read_to_end(&mut all).expect("read to the FIN");
            all
        });
        tokio::time::timeout(std::time::Duration::from_secs(20), rest)
            .await
            .expect("the task ends at the client's FIN");
        let all = reader.join().expect("reader");
        assert!(all[..queued].iter().all(|&b| b == b'j'));
        let answer = String::from_utf8_lossy(&all[queued..]).into_owned();
        assert!(
            answer.starts_with("+\r\n") && answer.ends_with("\r\n"),
            "{answer:?}"
        );
        assert!(answer.len() > 10, "{answer:?}");
    }
}
