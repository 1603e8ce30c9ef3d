//! Counters of what the daemon did, rendered in the Prometheus text format for
//! the `stats` built-in and the optional metrics listener.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::connection_counts::{ConnectionCounts, Counts};
use super::lag::Lag;
use crate::model::{MemberFigures, QueueFigures};

/// Connection counts by (service, outcome, routed), and byte totals.
#[derive(Default)]
pub(crate) struct Metrics {
    connections: ConnectionCounts,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// TLS handshakes completed: full, and resumed from a ticket.
    handshakes: [AtomicU64; 2],
    /// How late each event loop runs.
    pub lag: Arc<Lag>,
}

impl Metrics {
    /// Records a finished connection. `service` must be a registered name or `-`,
    /// never what a client typed, so clients cannot grow the label set.
    /// `routed` says how it reached the service (tcpmux, sni, ssh, http,
    /// silent); `refused`, why it was refused, if it was (one fixed word).
    pub(crate) fn record(
        &self,
        service: &str,
        (outcome, refused): (&'static str, Option<&'static str>),
        routed: &'static str,
        (bytes_in, bytes_out): (u64, u64),
    ) {
        self.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        self.connections
            .record(service, (outcome, refused), routed, bytes_in + bytes_out);
    }

    /// Counts a completed TLS handshake.
    pub(crate) fn handshake(&self, resumed: bool) {
        self.handshakes[usize::from(resumed)].fetch_add(1, Ordering::Relaxed);
    }

    /// Every service's finished connections and the bytes they moved (both
    /// ways), for the dashboard's rates.
    pub(crate) fn finished(&self) -> BTreeMap<String, (u64, u64)> {
        self.connections
            .merged()
            .iter()
            .map(|(service, counts)| {
                let connections = counts.outcomes.values().sum();
                (service.clone(), (connections, counts.bytes))
            })
            .collect()
    }

    /// `service`'s finished connections by outcome (`served`, `refused`, ...),
    /// however they were routed.
    pub(crate) fn totals(&self, service: &str) -> BTreeMap<&'static str, u64> {
        self.connections.totals(service)
    }

    /// The exposition text: these counters, and `gauges`.
    pub(crate) fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::new();
        family(
            &mut out,
            "tcpmuxd_connections_total",
            "counter",
            "Connections closed, by service, outcome and how they were routed.",
        );
        let map = self.connections.merged();
        for (service, counts) in map.iter() {
            for ((outcome, routed), count) in &counts.outcomes {
                let _ = writeln!(
                    out,
                    "tcpmuxd_connections_total{{service=\"{}\",outcome=\"{outcome}\",routed=\"{routed}\"}} {count}",
                    escape(service)
                );
            }
        }
        render_refusals(&mut out, &map);
        drop(map);
        let single = [
            (
                "tcpmuxd_connections_active",
                "gauge",
                "Connections open now.",
                gauges.active as u64,
            ),
            (
                "tcpmuxd_bytes_received_total",
                "counter",
                "Bytes read from clients by tcpmuxd itself.",
                self.bytes_in.load(Ordering::Relaxed),
            ),
            (
                "tcpmuxd_bytes_sent_total",
                "counter",
                "Bytes written to clients by tcpmuxd itself.",
                self.bytes_out.load(Ordering::Relaxed),
            ),
        ];
        for (name, kind, help, value) in single {
            family(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        family(
            &mut out,
            "tcpmuxd_handoff_backends",
            "gauge",
            "Registered handoff backends, by service.",
        );
        for (service, count) in &gauges.handoff {
            let _ = writeln!(
                out,
                "tcpmuxd_handoff_backends{{service=\"{}\"}} {count}",
                escape(service)
            );
        }
        render_backends(&mut out, &gauges.backends, false);
        if !gauges.udp_backends.is_empty() {
            render_backends(&mut out, &gauges.udp_backends, true);
        }
        render_queues(&mut out, &gauges.queues);
        family(
            &mut out,
            "tcpmuxd_tls_handshakes_total",
            "counter",
            "TLS handshakes completed on TLS listeners, full or resumed from a session ticket.",
        );
        for (resumed, count) in ["false", "true"].iter().zip(&self.handshakes) {
            let count = count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "tcpmuxd_tls_handshakes_total{{resumed=\"{resumed}\"}} {count}"
            );
        }
        self.lag.render(&mut out);
        render_certificates(&mut out, &gauges.certificates);
        render_acme_failures(&mut out, &gauges.acme_failures);
        out
    }
}

/// `tcpmuxd_refusals_total`, from the same per-service counts.
fn render_refusals(out: &mut String, map: &BTreeMap<String, Counts>) {
    let name = "tcpmuxd_refusals_total";
    family(
        out,
        name,
        "counter",
        "Clients refused, by service and reason.",
    );
    for (service, counts) in map {
        for (reason, count) in &counts.refusals {
            let _ = writeln!(
                out,
                "{name}{{service=\"{}\",reason=\"{reason}\"}} {count}",
                escape(service)
            );
        }
    }
}

/// What the live state is now, gathered by the caller under its locks, for
/// the gauges of one rendering.
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    /// Connections open now.
    pub active: usize,
    /// Registered handoff backends by service.
    pub handoff: Vec<(String, usize)>,
    pub backends: Vec<MemberFigures>,
    /// The `proxy_udp` members, as `backends`.
    pub udp_backends: Vec<MemberFigures>,
    /// The queues of services with `queue_timeout`.
    pub queues: Vec<(String, QueueFigures)>,
    /// Each served certificate's first name and notAfter, the earliest
    /// where several share a name (see [`Gauges::certificate`]).
    pub certificates: Vec<(String, i64)>,
    /// Each ACME certificate's first name and its failed orders so far.
    pub acme_failures: Vec<(String, u64)>,
}

impl Gauges {
    /// Adds a served certificate: one series per name, the first to expire.
    pub(crate) fn certificate(&mut self, name: String, expiry: i64) {
        earliest(&mut self.certificates, name, expiry);
    }
}

/// Adds `name`'s `expiry` to `certificates`, keeping the earliest per name.
pub(crate) fn earliest(certificates: &mut Vec<(String, i64)>, name: String, expiry: i64) {
    match certificates.iter_mut().find(|(n, _)| *n == name) {
        Some(known) => known.1 = known.1.min(expiry),
        None => certificates.push((name, expiry)),
    }
}

/// The queues of services with `queue_timeout`.
fn render_queues(out: &mut String, queues: &[(String, QueueFigures)]) {
    type Value = fn(&QueueFigures) -> String;
    let families: [(&str, &str, &str, Value); 4] = [
        (
            "tcpmuxd_service_queue_length",
            "gauge",
            "Clients waiting in the service's queue now.",
            |q| q.waiting.to_string(),
        ),
        (
            "tcpmuxd_service_queue_wait_seconds_sum",
            "counter",
            "Seconds the clients served from the queue waited, in all.",
            |q| q.waited_seconds.to_string(),
        ),
        (
            "tcpmuxd_service_queue_served_total",
            "counter",
            "Clients served from the queue (the wait's count).",
            |q| q.served.to_string(),
        ),
        (
            "tcpmuxd_service_queue_timeouts_total",
            "counter",
            "Clients refused after queue_timeout in the queue.",
            |q| q.timeouts.to_string(),
        ),
    ];
    for (name, kind, help, value) in families {
        if queues.is_empty() {
            break;
        }
        family(out, name, kind, help);
        for (service, figures) in queues {
            let _ = writeln!(
                out,
                "{name}{{service=\"{}\"}} {}",
                escape(service),
                value(figures)
            );
        }
    }
}

/// The per-backend families: `tcpmuxd_backend_*` for `proxy` members,
/// `tcpmuxd_udp_backend_*` (flows, not connections) for `proxy_udp` ones.
fn render_backends(out: &mut String, backends: &[MemberFigures], udp: bool) {
    type Value = fn(&MemberFigures) -> Option<u64>;
    let (prefix, active, total, failures) = match udp {
        false => (
            "tcpmuxd_backend",
            (
                "active_connections",
                "Client connections relayed to the backend now.",
            ),
            (
                "connections_total",
                "Client connections the backend accepted.",
            ),
            (
                "connect_failures_total",
                "Connects to the backend that failed or timed out.",
            ),
        ),
        true => (
            "tcpmuxd_udp_backend",
            ("active_flows", "UDP flows relayed to the backend now."),
            ("flows_total", "UDP flows sent to the backend."),
            (
                "failures_total",
                "UDP flows the backend failed (an ICMP port unreachable).",
            ),
        ),
    };
    let families: [(&str, &str, &str, Value); 5] = [
        (
            "up",
            "gauge",
            "1 while the backend may be tried (not down by checks nor ejected).",
            |b| Some(u64::from(b.up)),
        ),
        (active.0, "gauge", active.1, |b| Some(b.active)),
        (total.0, "counter", total.1, |b| Some(b.connections)),
        (failures.0, "counter", failures.1, |b| Some(b.failures)),
        (
            "last_check",
            "gauge",
            "The last active health check: 1 passed, 0 failed.",
            |b| b.last_check.map(u64::from),
        ),
    ];
    for (suffix, kind, help, value) in families {
        let name = format!("{prefix}_{suffix}");
        family(out, &name, kind, help);
        for b in backends {
            if let Some(v) = value(b) {
                let _ = writeln!(
                    out,
                    "{name}{{service=\"{}\",backend=\"{}\"}} {v}",
                    escape(&b.service),
                    escape(&b.backend)
                );
            }
        }
    }
    family(
        out,
        &format!("{prefix}_bytes_total"),
        "counter",
        "Bytes relayed from clients to the backend (in) and back (out).",
    );
    for b in backends {
        for (direction, v) in [("in", b.bytes_in), ("out", b.bytes_out)] {
            let _ = writeln!(
                out,
                "{prefix}_bytes_total{{service=\"{}\",backend=\"{}\",direction=\"{direction}\"}} {v}",
                escape(&b.service),
                escape(&b.backend)
            );
        }
    }
}

/// The `# HELP` and `# TYPE` lines that open a metric family.
/// When each certificate the TLS listeners serve expires, by its first name.
fn render_certificates(out: &mut String, certificates: &[(String, i64)]) {
    if certificates.is_empty() {
        return;
    }
    let name = "tcpmuxd_tls_certificate_expiry_timestamp_seconds";
    family(
        out,
        name,
        "gauge",
        "When a served certificate expires (its notAfter), by its first name.",
    );
    for (cert, expiry) in certificates {
        let _ = writeln!(out, "{name}{{name=\"{}\"}} {expiry}", escape(cert));
    }
}

/// Failed ACME orders, by the certificate's first name: one that grows means
/// renewals fail (the log says why).
fn render_acme_failures(out: &mut String, failures: &[(String, u64)]) {
    if failures.is_empty() {
        return;
    }
    let name = "tcpmuxd_acme_order_failures_total";
    family(
        out,
        name,
        "counter",
        "ACME orders that failed, by the certificate's first name.",
    );
    for (cert, count) in failures {
        let _ = writeln!(out, "{name}{{name=\"{}\"}} {count}", escape(cert));
    }
}

pub(super) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub(super) fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each thread records into its own shard; every reader adds them up.
    #[test]
    fn counts_from_many_threads_add_up() {
        let metrics = Arc::new(Metrics::default());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let metrics = Arc::clone(&metrics);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        metrics.record("echo", ("served", None), "tcpmux", (1, 2));
                    }
                    metrics.record("web", ("refused", Some("busy")), "sni", (0, 0));
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("a recording thread");
        }
        assert_eq!(metrics.totals("echo").get("served"), Some(&8000));
        assert_eq!(metrics.finished().get("echo"), Some(&(8000, 24_000)));
        let text = metrics.render(&Gauges::default());
        assert!(text.contains(
            "tcpmuxd_connections_total{service=\"echo\",outcome=\"served\",routed=\"tcpmux\"} 8000\n"
        ));
        assert!(
            text.contains("tcpmuxd_refusals_total{service=\"web\",reason=\"busy\"} 8\n"),
            "{text}"
        );
    }

    #[test]
    fn renders_counts() {
        let metrics = Metrics::default();
        metrics.record("echo", ("served", None), "tcpmux", (10, 20));
        metrics.record("echo", ("served", None), "tcpmux", (1, 2));
        metrics.record("-", ("refused", Some("unknown_service")), "tcpmux", (5, 30));
        metrics.record("web", ("refused", Some("busy")), "tcpmux", (0, 0));
        metrics.record("web", ("refused", Some("busy")), "tcpmux", (0, 0));
        let queue = QueueFigures {
            waiting: 4,
            served: 7,
            waited_seconds: 1.5,
            timeouts: 2,
        };
        let mut gauges = Gauges {
            active: 3,
            handoff: vec![("app".into(), 2)],
            queues: vec![("db".into(), queue)],
            ..Gauges::default()
        };
        gauges.certificate("example.com".into(), 2_000);
        gauges.certificate("example.com".into(), 1_000);
        gauges.certificate("example.com".into(), 3_000);
        gauges.acme_failures.push(("example.com".into(), 2));
        let text = metrics.render(&gauges);
        assert!(text.contains("tcpmuxd_acme_order_failures_total{name=\"example.com\"} 2\n"));
        assert!(text.contains(
            "tcpmuxd_tls_certificate_expiry_timestamp_seconds{name=\"example.com\"} 1000\n"
        ));
        for line in [
            "tcpmuxd_service_queue_length{service=\"db\"} 4\n",
            "tcpmuxd_service_queue_wait_seconds_sum{service=\"db\"} 1.5\n",
            "tcpmuxd_service_queue_served_total{service=\"db\"} 7\n",
            "tcpmuxd_service_queue_timeouts_total{service=\"db\"} 2\n",
        ] {
            assert!(text.contains(line), "{line}");
        }
        assert!(text.contains(
            "tcpmuxd_connections_total{service=\"echo\",outcome=\"served\",routed=\"tcpmux\"} 2\n"
        ));
        assert!(text.contains(
            "tcpmuxd_connections_total{service=\"-\",outcome=\"refused\",routed=\"tcpmux\"} 1\n"
        ));
        assert!(text.contains("tcpmuxd_connections_active 3\n"));
        assert!(text.contains("tcpmuxd_bytes_received_total 16\n"));
        assert!(text.contains("tcpmuxd_bytes_sent_total 52\n"));
        assert!(text.contains("tcpmuxd_handoff_backends{service=\"app\"} 2\n"));
        assert!(text.contains("tcpmuxd_refusals_total{service=\"web\",reason=\"busy\"} 2\n"));
        assert!(
            text.contains("tcpmuxd_refusals_total{service=\"-\",reason=\"unknown_service\"} 1\n")
        );
    }
}
