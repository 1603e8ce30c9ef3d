//! Running the daemon as an operator sees it: counters and their HTTP endpoint,
//! the log writer and its line format, systemd integration, the privilege
//! drop, giving memory back after a wave of clients, and how late each event
//! loop runs.

pub(crate) mod lag;
pub mod log_format;
pub mod logging;
pub(crate) mod metrics;
pub(crate) mod metrics_endpoint;
pub mod privileges;
pub mod systemd;
pub(crate) mod trim;
