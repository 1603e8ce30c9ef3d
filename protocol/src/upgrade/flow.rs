//! A UDP flow as it travels in a `FLOW` frame, its backend socket beside
//! it, so that a client's flow keeps its backend socket (and so its source
//! port at the backend) across a binary upgrade: `FLOW LISTENER CLIENT
//! SERVICE BACKEND ROUTED IDLE_MS QUIC REPLY_FROM CIDS`, every field one
//! word (`-` for none).

use std::net::{IpAddr, SocketAddr};

use super::FrameError;

/// The longest QUIC connection ID (RFC 9000 §17.2).
const MAX_CID: usize = 20;
/// The connection IDs a frame carries at most.
const MAX_CIDS: usize = 4;

/// One flow of a UDP listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow<'a> {
    /// The listener socket's address (as `LISTEN_UDP` names it).
    pub listener: SocketAddr,
    /// The client's address.
    pub client: SocketAddr,
    /// The service its first datagram was routed to.
    pub service: &'a str,
    /// The backend its socket is connected to.
    pub backend: SocketAddr,
    /// How it was routed (`sni`, `wireguard`, `udp_default`, ...).
    pub routed: &'a str,
    /// Its idle timeout, in milliseconds.
    pub idle_ms: u64,
    /// A QUIC flow: its server's connection IDs are learned from replies.
    pub quic: bool,
    /// The local address its replies leave from, on a wildcard-bound
    /// listener, with the interface it arrived on.
    pub reply_from: Option<(IpAddr, u32)>,
    /// The QUIC connection IDs it carries (at most [`MAX_CIDS`]).
    pub cids: Vec<Vec<u8>>,
}

impl Flow<'_> {
    /// The frame's value (after `FLOW `).
    pub(super) fn value(&self) -> Result<String, FrameError> {
        let word = |w: &str| match w.is_empty() || w.contains(|c: char| c == ' ' || c.is_control())
        {
            true => Err(FrameError::BadValue),
            false => Ok(()),
        };
        word(self.service)?;
        word(self.routed)?;
        if self.cids.len() > MAX_CIDS || self.cids.iter().any(|c| c.is_empty() || c.len() > MAX_CID)
        {
            return Err(FrameError::BadValue);
        }
        let reply_from = self.reply_from.map_or_else(
            || "-".to_owned(),
            |(ip, interface)| format!("{ip}%{interface}"),
        );
        let cids = match self.cids.is_empty() {
            true => "-".to_owned(),
            false => self
                .cids
                .iter()
                .map(|c| crate::hex::encode(c))
                .collect::<Vec<_>>()
                .join(","),
        };
        Ok(format!(
            "{} {} {} {} {} {} {} {reply_from} {cids}",
            self.listener,
            self.client,
            self.service,
            self.backend,
            self.routed,
            self.idle_ms,
            u8::from(self.quic),
        ))
    }
}

/// A `FLOW` frame's value read back.
pub(super) fn flow(value: &str) -> Result<Flow<'_>, FrameError> {
    let bad = || FrameError::BadFlow;
    let fields: Vec<&str> = value.split(' ').collect();
    let [listener, client, service, backend, routed, idle_ms, quic, reply_from, cids] = fields[..]
    else {
        return Err(bad());
    };
    let addr = |text: &str| text.parse::<SocketAddr>().map_err(|_| bad());
    let reply_from = match reply_from {
        "-" => None,
        text => {
            let (ip, interface) = text.split_once('%').ok_or_else(bad)?;
            Some((
                ip.parse().map_err(|_| bad())?,
                interface.parse().map_err(|_| bad())?,
            ))
        }
    };
    let cids = match cids {
        "-" => Vec::new(),
        list => list
            .split(',')
            .map(crate::hex::decode)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?,
    };
    if cids.len() > MAX_CIDS || cids.iter().any(|c| c.is_empty() || c.len() > MAX_CID) {
        return Err(bad());
    }
    let nonempty = |w: &str| match w.is_empty() {
        true => Err(bad()),
        false => Ok(()),
    };
    nonempty(service)?;
    nonempty(routed)?;
    let flow = Flow {
        listener: addr(listener)?,
        client: addr(client)?,
        service,
        backend: addr(backend)?,
        routed,
        idle_ms: idle_ms.parse().map_err(|_| bad())?,
        quic: match quic {
            "0" => false,
            "1" => true,
            _ => return Err(bad()),
        },
        reply_from,
        cids,
    };
    // Read only what can be written back: an address written shorter than
    // it displays (`::ffff:102:304`) could otherwise not fit again.
    if "FLOW ".len() + flow.value()?.len() > super::MAX_TEXT {
        return Err(bad());
    }
    Ok(flow)
}

#[cfg(test)]
mod tests {
    use super::super::{encode, parse, Frame};
    use super::*;

    fn flow() -> Flow<'static> {
        Flow {
            listener: "0.0.0.0:443".parse().unwrap(),
            client: "[2001:db8::7]:50123".parse().unwrap(),
            service: "h3",
            backend: "10.0.0.5:443".parse().unwrap(),
            routed: "sni",
            idle_ms: 30_000,
            quic: true,
            reply_from: Some(("192.0.2.1".parse().unwrap(), 2)),
            cids: vec![vec![1, 2, 3, 4, 5, 6, 7, 8], vec![0xff; 20]],
        }
    }

    #[test]
    fn a_flow_reads_back_as_written() {
        for flow in [
            flow(),
            Flow {
                quic: false,
                reply_from: None,
                cids: Vec::new(),
                ..flow()
            },
        ] {
            let bytes = encode(&Frame::Flow(flow.clone())).unwrap();
            assert_eq!(parse(&bytes), Ok(Frame::Flow(flow)));
        }
    }

    #[test]
    fn what_a_flow_frame_cannot_hold_is_refused_both_ways() {
        let spaced = Flow {
            service: "a b",
            ..flow()
        };
        assert_eq!(encode(&Frame::Flow(spaced)), Err(FrameError::BadValue));
        let many = Flow {
            cids: vec![vec![1]; 5],
            ..flow()
        };
        assert_eq!(encode(&Frame::Flow(many)), Err(FrameError::BadValue));
        let text = |v: &str| {
            let mut bytes = [b' '; super::super::FRAME];
            let line = format!("FLOW {v}");
            bytes[..line.len()].copy_from_slice(line.as_bytes());
            bytes[super::super::FRAME - 1] = b'\n';
            bytes
        };
        for bad in [
            "0.0.0.0:443 1.2.3.4:5 h3 10.0.0.5:443 sni 100 1 -",
            "0.0.0.0:443 1.2.3.4:5 h3 10.0.0.5:443 sni 100 2 - -",
            "0.0.0.0:443 1.2.3.4:5 h3 nowhere sni 100 1 - -",
            "0.0.0.0:443 1.2.3.4:5 h3 10.0.0.5:443 sni 100 1 1.2.3.4 -",
            "0.0.0.0:443 1.2.3.4:5 h3 10.0.0.5:443 sni 100 1 - 0g",
            "0.0.0.0:443 1.2.3.4:5 h3 10.0.0.5:443 sni 100 1 - 01,,02",
            "0.0.0.0:443 1.2.3.4:5 h3 10.0.0.5:443 sni -1 1 - -",
        ] {
            assert_eq!(parse(&text(bad)), Err(FrameError::BadFlow), "{bad}");
        }
    }
}
