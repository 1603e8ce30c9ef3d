//! Counters of the UDP flows, daemon-wide: flows by service and route,
//! datagrams and bytes each way, datagrams dropped by reason; rendered in
//! the Prometheus text format beside the connection counters.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use super::metrics::{escape, family};

/// Which way a datagram went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// From a client to its backend.
    In = 0,
    /// From a backend to its client.
    Out = 1,
}

#[derive(Default)]
pub(crate) struct UdpCounters {
    active: AtomicI64,
    /// (service, routed) → flows started.
    flows: Mutex<BTreeMap<(String, &'static str), u64>>,
    datagrams: [AtomicU64; 2],
    bytes: [AtomicU64; 2],
    /// Datagrams dropped, by reason (a fixed word).
    drops: Mutex<BTreeMap<&'static str, u64>>,
}

impl UdpCounters {
    /// A flow started for `service` (a registered name), routed by `routed`.
    pub(crate) fn flow_started(&self, service: &str, routed: &'static str) {
        self.active.fetch_add(1, Ordering::Relaxed);
        let mut flows = self.flows.lock().unwrap_or_else(|p| p.into_inner());
        *flows.entry((service.to_owned(), routed)).or_insert(0) += 1;
    }

    /// A flow a predecessor started (a binary upgrade): one more now, and
    /// not counted again among those started.
    pub(crate) fn flow_adopted(&self) {
        self.active.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn flow_ended(&self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
    }

    /// Flows now, daemon-wide.
    pub(crate) fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed).max(0) as u64
    }

    pub(crate) fn datagram(&self, direction: Direction, bytes: usize) {
        self.datagrams[direction as usize].fetch_add(1, Ordering::Relaxed);
        self.bytes[direction as usize].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn dropped(&self, reason: &'static str) {
        let mut drops = self.drops.lock().unwrap_or_else(|p| p.into_inner());
        *drops.entry(reason).or_insert(0) += 1;
    }

    /// The UDP families of the exposition text.
    pub(crate) fn render(&self, out: &mut String) {
        family(out, "tcpmuxd_udp_flows", "gauge", "UDP flows open now.");
        let _ = writeln!(out, "tcpmuxd_udp_flows {}", self.active());
        family(
            out,
            "tcpmuxd_udp_flows_total",
            "counter",
            "UDP flows started, by service and how the first datagram was routed.",
        );
        let flows = self.flows.lock().unwrap_or_else(|p| p.into_inner());
        for ((service, routed), count) in flows.iter() {
            let _ = writeln!(
                out,
                "tcpmuxd_udp_flows_total{{service=\"{}\",routed=\"{routed}\"}} {count}",
                escape(service)
            );
        }
        drop(flows);
        for (name, help, values) in [
            (
                "tcpmuxd_udp_datagrams_total",
                "UDP datagrams relayed, from clients (in) and from backends (out).",
                &self.datagrams,
            ),
            (
                "tcpmuxd_udp_bytes_total",
                "UDP payload bytes relayed, from clients (in) and from backends (out).",
                &self.bytes,
            ),
        ] {
            family(out, name, "counter", help);
            for (direction, value) in ["in", "out"].iter().zip(values) {
                let value = value.load(Ordering::Relaxed);
                let _ = writeln!(out, "{name}{{direction=\"{direction}\"}} {value}");
            }
        }
        family(
            out,
            "tcpmuxd_udp_dropped_total",
            "counter",
            "UDP datagrams dropped, by reason.",
        );
        let drops = self.drops.lock().unwrap_or_else(|p| p.into_inner());
        for (reason, count) in drops.iter() {
            let _ = writeln!(
                out,
                "tcpmuxd_udp_dropped_total{{reason=\"{reason}\"}} {count}"
            );
        }
    }
}
