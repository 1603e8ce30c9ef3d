//! The daemon's integration tests, one binary: each file below is a module
//! that talks to a real tcpmuxd (the built binary, or the library's server in
//! process) over real sockets, and to real peers where users have them.
//! One binary, not one per file: each would link the whole daemon again (about
//! 90 MB each; 53 of them once filled a CI machine's disk). Run one file's
//! tests with `cargo test -p tcpmuxd --test integration -- NAME::`.

mod common;

mod acme;
mod admin;
mod alpn;
mod answered_at_accept;
mod backend_tls;
mod balancing;
mod builtins;
mod cli;
mod client_library;
mod cluster;
mod cluster_acme;
mod cluster_added;
mod cluster_tls;
mod concurrency;
mod config_errors;
mod daemon_cli;
mod dashboard;
mod demo;
mod detect;
mod discovery;
mod exec;
mod fast_open;
mod fleet;
mod handoff;
mod handoff_flood;
mod haproxy;
mod health;
mod hostile;
mod hostile_local;
mod kubernetes;
mod logs;
mod memory;
mod monitoring;
mod negotiation;
mod one_port;
mod operations;
mod peers;
mod probes;
mod proxy;
mod queue;
mod reload;
mod soak;
mod sticky;
mod systemd;
mod tls;
mod tls_peers;
mod tls_resumption;
mod transparent;
mod udp;
mod udp_answers;
mod udp_netns;
mod udp_peers;
mod udp_pool;
mod udp_quic;
mod upgrade;
mod workers;
