//! Running the daemon as an operator sees it: counters and their HTTP endpoint,
//! the log writer, its line format and the access line, systemd integration, the privilege
//! drop, giving memory back after a wave of clients, the descriptor table
//! grown before one comes, how late each event
//! loop runs, the table of live sessions, and the recent history of each
//! service's traffic.

pub mod access_log;
pub(crate) mod connection_counts;
pub mod descriptors;
pub(crate) mod history;
pub(crate) mod lag;
pub mod log_format;
pub mod logging;
pub(crate) mod metrics;
pub(crate) mod metrics_endpoint;
pub mod privileges;
pub mod session_table;
pub mod systemd;
pub mod trim;
pub(crate) mod udp_metrics;
