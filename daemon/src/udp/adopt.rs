//! The successor's side of UDP flows across a binary upgrade: each flow the
//! old daemon handed over starts again here on its own backend socket, with
//! its service, backend, idle timeout and QUIC connection IDs, as if it had
//! been routed here. One whose service this configuration no longer has (or
//! whose backend left its UDP pool) is ended, its client starting anew.

use std::sync::Arc;

use super::flow::Flows;
use super::launch::{launch, Start};
use crate::model::{Endpoint, HandedFlow, Owner};
use crate::net::datagram::Destination;
use crate::state::Shared;
use tcpmux_proto::sniff::datagram::Datagram;

/// `word` as the `&'static` label the metrics keep.
fn routed(word: &str) -> &'static str {
    let probes = Datagram::ALL.into_iter().map(Datagram::name);
    probes
        .chain(super::route::ROUTED)
        .find(|known| *known == word)
        .unwrap_or("upgrade")
}

/// Starts the flows handed over for the listener of `flows`.
pub(super) fn flows(handed: Vec<HandedFlow>, flows: &Arc<Flows>, shared: &Arc<Shared>) {
    if handed.is_empty() {
        return;
    }
    let count = handed.len();
    let started = handed
        .into_iter()
        .map(|flow| one(flow, flows, shared))
        .filter(|started| *started)
        .count();
    tracing::info!(udp = %flows.local, flows = started, ended = count - started, "upgrade: UDP flows taken over");
}

/// Starts one handed-over flow; `false` when it cannot go on here.
fn one(handed: HandedFlow, flows: &Arc<Flows>, shared: &Arc<Shared>) -> bool {
    let settings = shared.settings();
    let pool = settings
        .registry
        .lookup(&handed.service)
        .and_then(|service| {
            let proxy = service.udp.as_deref()?;
            let pool = &settings.usage.get(&service.name)?.udp_pool;
            let members = pool.current(proxy)?;
            members
                .contains(&Endpoint::Tcp(handed.backend))
                .then_some(pool)
        });
    let Some(pool) = pool else {
        tracing::info!(peer = %handed.client, service = %handed.service, backend = %handed.backend, "upgrade: a UDP flow whose service or backend this configuration does not have; ended");
        return false;
    };
    let backend = std::net::UdpSocket::from(handed.socket);
    match backend.set_nonblocking(true) {
        Ok(()) => {}
        Err(e) => {
            tracing::warn!(peer = %handed.client, error = %e, "upgrade: a handed UDP flow's socket cannot be served; its client starts anew");
            return false;
        }
    }
    let routed = routed(&handed.routed);
    let start = Start {
        client: handed.client,
        local: flows.local,
        reply_from: handed
            .reply_from
            .map(|(ip, interface)| Destination::new(ip, interface)),
        service: &handed.service,
        routed,
        backend: (handed.backend, backend),
        pool,
        idle: handed.idle,
        // What its client asked before the handover is not known: the
        // flow ends by its idle timeout.
        answers: 0,
        quic: handed.quic,
        adopted: true,
    };
    let (_, id) = launch(start, flows, shared);
    for cid in &handed.cids {
        let owner = Owner {
            service: handed.service.clone(),
            backend: handed.backend,
            flow: id,
        };
        flows.cids().learn(cid, owner);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::routed;

    #[test]
    fn a_handed_flows_routing_keeps_its_label_or_becomes_upgrade() {
        for word in ["wireguard", "quic", "sni", "udp_default", "server_id"] {
            assert_eq!(routed(word), word);
        }
        assert_eq!(routed("teleport"), "upgrade");
    }
}
