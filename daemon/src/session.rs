//! One client connection, start to end: read the request line, answer it, run the
//! service, close gracefully, and write the one log line that tells what happened.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use tcpmux_proto::{encode_reply, Decision, Progress, RequestParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::close::close_gracefully;
use crate::services;
use crate::stream::{ClientStream, Metered, Peer};
use crate::Daemon;

/// Read size during negotiation: a full name and its CRLF, with room for the first
/// pipelined bytes, which are then handed to the service from this buffer.
const NEGOTIATION_READ: usize = 4096;

/// How a connection ended, for the log.
enum Outcome {
    Served,
    Help,
    ServiceError(io::Error),
    UnknownService,
    BadRequest(tcpmux_proto::NameError),
    NegotiationTimeout,
    ClosedBeforeRequest,
    ReadError(io::Error),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Served => f.write_str("served"),
            Outcome::Help => f.write_str("help"),
            Outcome::ServiceError(e) => write!(f, "service error: {e}"),
            Outcome::UnknownService => f.write_str("refused: unknown service"),
            Outcome::BadRequest(e) => write!(f, "refused: {e}"),
            Outcome::NegotiationTimeout => f.write_str("refused: negotiation timeout"),
            Outcome::ClosedBeforeRequest => f.write_str("closed before request"),
            Outcome::ReadError(e) => write!(f, "read error: {e}"),
        }
    }
}

/// What the negotiation produced: a decision and where, in the read buffer, the
/// bytes behind the request line are.
enum Negotiated {
    Decided {
        decision: Decision,
        pending: std::ops::Range<usize>,
    },
    Closed,
}

pub async fn handle(daemon: Arc<Daemon>, stream: ClientStream, peer: Peer) {
    let started = Instant::now();
    let mut conn = Metered::new(stream);
    let mut buf = vec![0u8; NEGOTIATION_READ];
    let mut service_name = String::from("-");

    let negotiated =
        tokio::time::timeout(daemon.negotiation_timeout, negotiate(&mut conn, &mut buf)).await;
    let outcome = match negotiated {
        Err(_elapsed) => {
            refuse(&mut conn, "negotiation timeout").await;
            Outcome::NegotiationTimeout
        }
        Ok(Err(e)) => Outcome::ReadError(e),
        Ok(Ok(Negotiated::Closed)) => Outcome::ClosedBeforeRequest,
        Ok(Ok(Negotiated::Decided { decision, pending })) => match decision {
            Decision::Help => {
                service_name = "help".into();
                match conn.write_all(daemon.registry.help_text()).await {
                    Ok(()) => Outcome::Help,
                    Err(e) => Outcome::ServiceError(e),
                }
            }
            Decision::Reject(e) => {
                refuse(&mut conn, &e.to_string()).await;
                Outcome::BadRequest(e)
            }
            Decision::Service(name) => {
                service_name = name.to_string();
                match daemon.registry.lookup(&name) {
                    None => {
                        refuse(
                            &mut conn,
                            &format!("unknown service {name}; send HELP for the list"),
                        )
                        .await;
                        Outcome::UnknownService
                    }
                    Some(service) => {
                        let mut status = Vec::new();
                        encode_reply(true, &service.message, &mut status);
                        let served = async {
                            conn.write_all(&status).await?;
                            services::serve(&service.kind, &mut conn, &buf[pending]).await
                        };
                        match served.await {
                            Ok(()) => Outcome::Served,
                            Err(e) => Outcome::ServiceError(e),
                        }
                    }
                }
            }
        },
    };
    close_gracefully(&mut conn, daemon.close_drain_timeout).await;

    tracing::info!(
        target: "tcpmuxd::connection",
        peer = %peer,
        service = %service_name,
        outcome = %outcome,
        bytes_in = conn.bytes_in,
        bytes_out = conn.bytes_out,
        ms = format_args!("{:.3}", started.elapsed().as_secs_f64() * 1e3),
        "connection"
    );
}

/// Reads until the request line is complete. Bytes behind it stay in `buf`.
async fn negotiate(conn: &mut Metered<ClientStream>, buf: &mut [u8]) -> io::Result<Negotiated> {
    let mut parser = RequestParser::new();
    loop {
        let n = conn.read(buf).await?;
        if n == 0 {
            return Ok(Negotiated::Closed);
        }
        if let Progress::Decided { decision, consumed } = parser.feed(&buf[..n]) {
            return Ok(Negotiated::Decided {
                decision,
                pending: consumed..n,
            });
        }
    }
}

/// Sends a `-` line. A failure means the client is already gone; nothing to do.
async fn refuse(conn: &mut Metered<ClientStream>, reason: &str) {
    let mut line = Vec::new();
    encode_reply(false, reason, &mut line);
    let _ = conn.write_all(&line).await;
}
