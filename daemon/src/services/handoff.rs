//! handoff: the client's socket itself goes to a backend process that registered
//! the name (see `crate::hub`); tcpmuxd keeps no copy and moves no byte.

use std::io;

use tcpmux_proto::handoff::{encode_client_frame, ClientFrame};
use tokio::sync::oneshot;

use super::{accept, refuse};
use crate::hub::{Delivery, Hub};
use crate::model::{ClientInfo, Service};
use crate::net::stream::{Metered, Stream};
use crate::outcome::Outcome;

pub async fn serve(
    service: &Service,
    hub: &Hub,
    conn: &mut Metered<Stream>,
    client: &ClientInfo,
) -> io::Result<Outcome> {
    let candidates = hub.candidates(&service.name);
    if candidates.is_empty() {
        let reason = format!("no backend is serving {} right now", service.name);
        refuse(conn, &reason).await;
        return Ok(Outcome::Refused("no live handoff backend".into()));
    }
    // The `+` goes first: once the backend has the socket it may write at once.
    accept(conn, &service.message).await?;
    let frame = encode_client_frame(&ClientFrame {
        service: service.name.to_string(),
        peer: client
            .peer
            .tcp_addr()
            .map_or_else(|| "unix".to_owned(), |a| a.to_string()),
        local: client
            .local
            .map_or_else(|| "-".to_owned(), |a| a.to_string()),
    });
    let tried = candidates.len();
    for backend in candidates {
        let socket = rustix::io::fcntl_dupfd_cloexec(conn.get_ref(), 0)?;
        let (done, outcome) = oneshot::channel();
        let delivery = Delivery {
            socket,
            frame,
            done,
        };
        if backend.send(delivery).await.is_err() {
            continue; // that backend is gone; try the next
        }
        if let Ok(Ok(())) = outcome.await {
            return Ok(Outcome::HandedOff);
        }
    }
    // Every backend vanished between the lookup and the send: rare, and after the
    // `+`, so all that is left is to close.
    Ok(Outcome::Refused(format!(
        "all {tried} handoff backends failed after '+'"
    )))
}
