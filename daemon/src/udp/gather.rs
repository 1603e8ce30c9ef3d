//! QUIC clients whose ClientHello spans several Initial packets (a
//! post-quantum key share makes it about 1.8 KB): their first datagrams are
//! held, a few per client and for a short while, until the CRYPTO frames
//! add up to the whole ClientHello; then the flow is routed by its name and
//! the held datagrams go on, in order. Bounded in clients, datagrams and
//! time, so a flood of half-hellos costs a fixed amount of memory.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use tcpmux_proto::sniff::client_hello::ClientHello;
use tcpmux_proto::sniff::quic::CryptoStream;

/// Clients held at once, per listener.
const MAX_CLIENTS: usize = 1024;
/// Datagrams held per client: a ClientHello needs two or three.
const MAX_DATAGRAMS: usize = 4;
/// How long a client's datagrams are held before it is routed without
/// its name (its next Initial should follow within a round trip).
const HOLD_MS: u64 = 1000;

/// What a datagram from a client without a flow leads to.
#[derive(Debug)]
pub(super) enum Gathered {
    /// Not a QUIC Initial this daemon opens: routed on its own.
    NotQuic,
    /// Held: the ClientHello is not whole yet.
    Held,
    /// Routed now, by `hello` if it is whole; `earlier` are the client's
    /// datagrams held before this one, to send first.
    Done {
        hello: Option<ClientHello>,
        earlier: Vec<Vec<u8>>,
    },
}

struct Held {
    crypto: CryptoStream,
    datagrams: Vec<Vec<u8>>,
    since: u64,
}

/// The clients held, per listener.
#[derive(Default)]
pub(super) struct Gathering {
    held: HashMap<SocketAddr, Held>,
    /// Clients in the order they were first held.
    order: VecDeque<(SocketAddr, u64)>,
}

impl Gathering {
    /// Takes `datagram`, whose decrypted Initial payload is `payload`
    /// (`None`: not a client Initial that opens), from `client` at `now`
    /// (milliseconds).
    pub(super) fn add(
        &mut self,
        client: SocketAddr,
        datagram: &[u8],
        payload: Option<Vec<u8>>,
        now: u64,
    ) -> Gathered {
        self.expire(now);
        let Some(payload) = payload else {
            // Whatever was held for it goes on, unrouted by name.
            return match self.held.remove(&client) {
                Some(held) => Gathered::Done {
                    hello: None,
                    earlier: held.datagrams,
                },
                None => Gathered::NotQuic,
            };
        };
        let mut held = self.held.remove(&client).unwrap_or_else(|| {
            self.order.push_back((client, now));
            Held {
                crypto: CryptoStream::default(),
                datagrams: Vec::new(),
                since: now,
            }
        });
        let whole = match held.crypto.add(&payload) {
            Ok(()) => held.crypto.hello(),
            Err(e) => Err(e),
        };
        match whole {
            Ok(None) if held.datagrams.len() + 1 < MAX_DATAGRAMS => {
                held.datagrams.push(datagram.to_vec());
                if self.held.len() >= MAX_CLIENTS {
                    self.evict_oldest();
                }
                self.held.insert(client, held);
                Gathered::Held
            }
            Ok(hello) => Gathered::Done {
                hello,
                earlier: held.datagrams,
            },
            Err(_) => Gathered::Done {
                hello: None,
                earlier: held.datagrams,
            },
        }
    }

    /// Clients held past [`HOLD_MS`] are let go (their datagrams dropped:
    /// a client that does not finish its ClientHello is not waited for).
    fn expire(&mut self, now: u64) {
        while let Some(&(client, since)) = self.order.front() {
            if now.saturating_sub(since) < HOLD_MS && self.order.len() <= 2 * MAX_CLIENTS {
                break;
            }
            self.order.pop_front();
            if self.held.get(&client).is_some_and(|h| h.since == since) {
                self.held.remove(&client);
            }
        }
    }

    fn evict_oldest(&mut self) {
        while let Some((client, since)) = self.order.pop_front() {
            if self.held.get(&client).is_some_and(|h| h.since == since) {
                self.held.remove(&client);
                return;
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcpmux_proto::sniff::client_hello;
    use tcpmux_proto::sniff::datagram::QUIC_V1;
    use tcpmux_proto::sniff::quic::crypto_frame;

    fn client(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 1], port))
    }

    /// A ClientHello that needs two Initial packets, as the two packets.
    fn two_packets(name: &str) -> [Vec<u8>; 2] {
        let message = client_hello::build(Some(name), &["h3"], 1500, 1 << 20)[5..].to_vec();
        let half = message.len() / 2;
        [
            super::super::quic::build_initial(QUIC_V1, &[3; 8], &crypto_frame(0, &message[..half])),
            super::super::quic::build_initial(
                QUIC_V1,
                &[3; 8],
                &crypto_frame(half, &message[half..]),
            ),
        ]
    }

    fn payload(datagram: &[u8]) -> Option<Vec<u8>> {
        super::super::quic::initial_payload(datagram)
    }

    #[test]
    fn a_hello_over_two_packets_is_held_then_routed_with_both() {
        let [first, second] = two_packets("pq.example");
        let mut gathering = Gathering::default();
        assert!(matches!(
            gathering.add(client(1), &first, payload(&first), 0),
            Gathered::Held
        ));
        match gathering.add(client(1), &second, payload(&second), 10) {
            Gathered::Done { hello, earlier } => {
                let hello = hello.expect("whole");
                assert_eq!(hello.server_name.as_deref(), Some("pq.example"));
                assert_eq!(earlier, vec![first]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(gathering.len(), 0);
        assert!(matches!(
            gathering.add(client(2), b"plain", None, 20),
            Gathered::NotQuic
        ));
    }

    #[test]
    fn half_hellos_are_bounded_in_clients_datagrams_and_time() {
        let [first, _] = two_packets("flood.example");
        let mut gathering = Gathering::default();
        for port in 0..3000 {
            gathering.add(client(port), &first, payload(&first), 0);
            assert!(gathering.len() <= MAX_CLIENTS);
        }
        // One client sending only first halves is routed without its name
        // once it has sent MAX_DATAGRAMS of them.
        let mut one = Gathering::default();
        for i in 0..MAX_DATAGRAMS - 1 {
            assert!(matches!(
                one.add(client(9), &first, payload(&first), i as u64),
                Gathered::Held
            ));
        }
        let done = one.add(client(9), &first, payload(&first), 5);
        assert!(
            matches!(done, Gathered::Done { hello: None, ref earlier } if earlier.len() == MAX_DATAGRAMS - 1)
        );
        // And a held client is let go after HOLD_MS.
        gathering.add(client(9999), &first, payload(&first), 5000);
        assert_eq!(gathering.len(), 1);
    }
}
