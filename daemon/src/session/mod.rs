//! One client connection, start to end: (from a trusted upstream, the PROXY
//! header), the request line or, on a detecting listener, the protocol the first
//! bytes begin (`negotiate.rs`, `detect.rs`), the decision on it (`verdict.rs`,
//! the one the accept loop's answers make too), the service, a graceful close,
//! and the one log line that tells what happened.

mod at_accept;
mod detect;
mod negotiate;
mod opening;
mod verdict;

use std::sync::Arc;
use std::time::Instant;

use tcpmux_proto::{Decision, ServiceName};

pub(crate) use self::at_accept::{answer_at_accept, AtAccept};
use self::negotiate::negotiate;
use self::opening::{Negotiated, Reply};
use self::verdict::{decide, is_own, report, Answer, Asked, Chosen};
use crate::admission::{Admission, Busy, Refusal as Limit, ServiceCounts, Slot};
use crate::model::{ClientInfo, ListenOptions, Peer, Queue, Routed};
use crate::net::close::close_gracefully;
use crate::net::conn::Conn;
use crate::net::listener::Accepted;
use crate::net::stream::Metered;
use crate::ops::session_table::{Registered, TlsDetail};
use crate::outcome::{Outcome, Refusal};
use crate::services::{self, help, refused, send_last};
use crate::state::{Settings, Shared};

/// One connection's state, from accept to its log line.
struct Session {
    shared: Arc<Shared>,
    /// The settings in force at accept, kept to the end: a reload changes no
    /// running session.
    settings: Arc<Settings>,
    listen: Arc<ListenOptions>,
    /// Counted from accept to close, so limits and the shutdown grace see
    /// it all; given back before the socket closes.
    admission: Result<Admission, Limit>,
    client: ClientInfo,
    /// The socket's own peer; a PROXY header may announce another client.
    via: Peer,
    conn: Metered<Conn>,
    live: Registered,
    started: Instant,
}

/// The session of an accepted connection, admitted and in the session table
/// now; it serves the client when polled, then logs and counts it. Made
/// here rather than in the future, so that the future holds the session
/// alone and not also what it was made of.
pub(crate) fn handle(
    shared: Arc<Shared>,
    accepted: Accepted,
    listen: Arc<ListenOptions>,
) -> impl std::future::Future<Output = ()> + Send {
    let started = Instant::now();
    let settings = shared.settings();
    let admission = shared.gate.admit(&settings.limits);
    let Accepted {
        stream,
        peer,
        local,
        early,
    } = accepted;
    let mut conn = Metered::new(Conn::Plain(stream));
    // Read by the accept loop, which left the client to a session after all.
    conn.get_mut().unread(early);
    let live = shared.sessions.open(peer.clone(), local);
    let session = Session {
        client: ClientInfo {
            local,
            peer: peer.clone(),
            tls: None,
            sni: None,
        },
        via: peer,
        admission,
        conn,
        live,
        shared,
        settings,
        listen,
        started,
    };
    session.run()
}

impl Session {
    /// Serves the client to its end, or until the admin socket kills the
    /// session; then closes, logs and counts. An `async move` block, not an
    /// `async fn`: an async fn keeps its argument twice in its future (as
    /// passed, and bound), which for a session is 440 bytes more per client.
    #[allow(clippy::manual_async_fn)] // measured: see above
    fn run(mut self) -> impl std::future::Future<Output = ()> + Send {
        async move {
            let killed = self.live.handle();
            let answer = tokio::select! {
                answer = self.answer() => answer,
                () = killed.killed() => {
                    let detail = killed.detail();
                    Answer {
                        outcome: Outcome::Killed { backend: detail.backend },
                        service: detail.service,
                        routed: detail.routed,
                    }
                }
            };
            // Boxed: the close's state (its drain) is needed once, at the
            // end, and would otherwise be sized into every session.
            Box::pin(self.close(&answer)).await;
        }
    }

    /// Negotiates, then answers what the client asked for.
    async fn answer(&mut self) -> Answer {
        let negotiated = match &mut self.admission {
            Err(limit) => Ok(Ok(Negotiated::NotAdmitted(*limit))),
            Ok(admission) => {
                let expect_header = self
                    .via
                    .tcp_addr()
                    .is_some_and(|addr| self.listen.trusts_proxy(addr.ip()));
                let (shared, settings) = (&self.shared, &self.settings);
                // Per-address limits count the client, which behind a trusted
                // upstream is the address its header announces.
                let admit =
                    |peer: &Peer| admission.admit_address(&shared.gate, peer, &settings.limits);
                let routes = (self.listen.detect.as_ref(), &*settings.registry);
                let tls = self.listen.tls.as_ref().map(|t| t.server.clone());
                let client = &mut self.client;
                let negotiation =
                    negotiate(&mut self.conn, expect_header, client, admit, tls, routes);
                // Boxed, so its buffers and the TLS handshake are gone from the
                // session once it is over instead of sized into every session.
                Box::pin(tokio::time::timeout(
                    settings.negotiation_timeout,
                    negotiation,
                ))
                .await
            }
        };
        self.learnt();
        match negotiated {
            Err(_elapsed) => Box::pin(self.timed_out()).await,
            Ok(Err(e)) => Answer::new(Outcome::ReadError(e)),
            // Boxed: a service's state is allocated when it starts, not
            // sized into every session still negotiating.
            Ok(Ok(negotiated)) => Box::pin(self.respond(negotiated)).await,
        }
    }

    /// Shows in the session table what the negotiation learnt of the client.
    fn learnt(&self) {
        let client = &self.client;
        if client.tls.is_some() || client.peer.tcp_addr() != self.via.tcp_addr() {
            self.live.update(|d| {
                d.client = client.peer.clone();
                d.tls = client.tls.as_ref().map(|t| {
                    Box::new(TlsDetail {
                        version: t.version.clone(),
                        cert: t.name().map(str::to_owned),
                    })
                });
            });
        }
    }

    /// Answers a client whose negotiation took too long. One of a TLS-only
    /// listener still in its handshake expects TLS records: a plaintext line
    /// would be noise to it.
    async fn timed_out(&mut self) -> Answer {
        let listen = &self.listen;
        let handshaking =
            listen.tls.is_some() && listen.detect.is_none() && self.client.tls.is_none();
        let outcome = match handshaking {
            true => Outcome::Refused(Refusal::NegotiationTimeout),
            false => refused(&mut self.conn, Refusal::NegotiationTimeout).await,
        };
        Answer::new(outcome)
    }

    /// Answers what the negotiation produced.
    async fn respond(&mut self, negotiated: Negotiated) -> Answer {
        let refusal = match negotiated {
            Negotiated::Closed => return Answer::new(Outcome::ClosedBeforeRequest),
            Negotiated::Incomplete(what, routed) => {
                let outcome = Box::pin(refused(&mut self.conn, Refusal::Incomplete(what))).await;
                return Answer {
                    routed,
                    ..Answer::new(outcome)
                };
            }
            Negotiated::NotAdmitted(limit) => Refusal::Limit(limit),
            Negotiated::TlsFailed(e) => Refusal::TlsHandshake(e),
            Negotiated::BadProxyHeader(e) => Refusal::BadProxyHeader(e),
            Negotiated::Unrouted {
                routed,
                reason,
                reply,
            } => {
                let outcome =
                    Box::pin(self.refuse_unrouted(Refusal::Unrouted(reason), reply)).await;
                return Answer {
                    routed,
                    ..Answer::new(outcome)
                };
            }
            // Checked once a request has arrived: by then the proxy that made this
            // connection has registered it (it does so before relaying a byte).
            Negotiated::Decided(_) | Negotiated::Routed(..)
                if is_own(&self.shared.own, &self.via, self.client.local) =>
            {
                Refusal::ProxyLoop
            }
            Negotiated::Decided(Decision::Reject(e)) => Refusal::BadRequest(e),
            Negotiated::Decided(Decision::Help) => return self.help().await,
            Negotiated::Decided(Decision::Service(name)) => {
                return self.serve(name, Asked::Named, Routed::Tcpmux).await
            }
            Negotiated::Routed(name, routed) => {
                return self.serve(name, Asked::Routed, routed).await;
            }
        };
        Answer::new(Box::pin(refused(&mut self.conn, refusal)).await)
    }

    async fn help(&mut self) -> Answer {
        let text = help::answer(&self.settings.registry, &self.shared.hub);
        let outcome = match send_last(&mut self.conn, &text).await {
            Ok(()) => Outcome::Help,
            Err(e) => Outcome::ServiceError(e),
        };
        Answer {
            service: ServiceName::parse("help").ok(),
            ..Answer::new(outcome)
        }
    }

    /// Tells a detected client with no service why, in a form it can read.
    async fn refuse_unrouted(&mut self, refusal: Refusal, reply: Reply) -> Outcome {
        match reply {
            Reply::Close => Outcome::Refused(refusal),
            Reply::Line => refused(&mut self.conn, refusal).await,
            Reply::Http => {
                let body = format!("{refusal}\n");
                let response = format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = send_last(&mut self.conn, response.as_bytes()).await;
                Outcome::Refused(refusal)
            }
        }
    }

    /// Serves the service the client named (`Asked::Named`: a TCPMUX client,
    /// which reads status lines) or was routed to, as the decision allows.
    /// A routed client gets no status line, and a refusal closes its
    /// connection silently (the log has the reason).
    async fn serve(&mut self, name: ServiceName, asked: Asked, routed: Routed) -> Answer {
        self.live.update(|d| {
            d.service = Some(name.clone());
            d.routed = routed;
        });
        let tcpmux = asked == Asked::Named;
        let settings = Arc::clone(&self.settings);
        let found = settings.registry.lookup(&name);
        let decided = decide(&settings, &self.client, (&name, found), asked);
        let outcome = match decided {
            Ok(chosen) => match self.slot(&chosen).await {
                Ok(_slot) => self.run_service(&chosen, tcpmux).await,
                Err(refusal) => Box::pin(self.refuse_if(tcpmux, refusal)).await,
            },
            Err(refusal) => Box::pin(self.refuse_if(tcpmux, refusal)).await,
        };
        Answer {
            outcome,
            service: Some(name),
            routed,
        }
    }

    /// Refuses, telling a TCPMUX client why. Boxed where it is awaited, as
    /// are `respond`'s refusals: a refusal's state would otherwise be sized
    /// into every session that is served (about 200 bytes of a live echo).
    async fn refuse_if(&mut self, tcpmux: bool, refusal: Refusal) -> Outcome {
        match tcpmux {
            true => refused(&mut self.conn, refusal).await,
            false => Outcome::Refused(refusal),
        }
    }

    /// Runs the chosen service, its connection slot held.
    async fn run_service(&mut self, chosen: &Chosen<'_>, tcpmux: bool) -> Outcome {
        let shared = &self.shared;
        let stats = || shared.render_metrics();
        let context = services::Context {
            hub: &shared.hub,
            stats: &stats,
            counts: &chosen.counts,
            own: &shared.own,
            live: &self.live,
        };
        // Inline: `respond`, which awaits this, is boxed once the
        // negotiation is over, so a session still negotiating holds no
        // service state; the larger services box their own.
        let serving = services::serve(
            chosen.service,
            &mut self.conn,
            &self.client,
            &context,
            tcpmux,
        );
        match serving.await {
            Ok(outcome) => outcome,
            Err(e) => Outcome::ServiceError(e),
        }
    }

    /// A unit of the service's connection cap: at once, or after a wait in
    /// its queue if it has one. The wait is boxed: its state (a peek buffer
    /// among it) is over a kilobyte, which would otherwise be sized into
    /// every session for its whole life, queue or not.
    async fn slot(&mut self, chosen: &Chosen<'_>) -> Result<Slot, Refusal> {
        let (service, counts) = (chosen.service, &chosen.counts);
        let cap = counts.cap(service);
        match service.queue.as_ref() {
            None => counts
                .connections
                .acquire(cap)
                .ok_or(Refusal::Busy(Busy::Full)),
            Some(queue) => Box::pin(self.queued(counts, cap, queue)).await,
        }
    }

    /// Waits in the service's queue for a unit of its cap. The client's
    /// socket is watched meanwhile: one that resets leaves the queue at once
    /// rather than holding a place for nobody. One that only half-closed
    /// stays: it may still be waiting for its answer (a request sent with its
    /// FIN), as HAProxy keeps it without `abortonclose`.
    async fn queued(
        &mut self,
        counts: &ServiceCounts,
        cap: Option<usize>,
        queue: &Queue,
    ) -> Result<Slot, Refusal> {
        let wait = counts.connections.acquire_queued(cap, Some(queue));
        tokio::pin!(wait);
        let mut peeked = [0u8; 512];
        let (mut seen, mut watch) = (0, true);
        let got = loop {
            tokio::select! {
                biased;
                got = &mut wait => break got,
                peek = self.conn.get_mut().peek_beyond(&mut peeked, seen), if watch => match peek {
                    // Once the buffer is full or the client half-closed,
                    // the socket has no more to say: only wait.
                    Ok(p) => (seen, watch) = (p.len, !p.ended && p.len < peeked.len()),
                    Err(_) => return Err(Refusal::ClientLeftQueue),
                },
            }
        };
        got.map_err(Refusal::Busy)
    }

    /// Closes the connection gracefully (a handed-off socket belongs to its
    /// backend: dropping our descriptor is all we may do; a relay that ran
    /// to its end has closed already), then logs and counts it.
    async fn close(&mut self, answer: &Answer) {
        let handed = matches!(answer.outcome, Outcome::HandedOff { relayed: false });
        if !handed && !self.conn.finished {
            close_gracefully(&mut self.conn, self.settings.close_drain_timeout).await;
        }
        let bytes = (self.conn.bytes_in, self.conn.bytes_out);
        report(
            &self.shared,
            &self.client,
            &self.via,
            answer,
            bytes,
            self.started,
        );
    }
}
