//! tcpmuxd: a TCPMUX (RFC 1078) daemon. It listens on one port, reads a service
//! name, and connects the client to the service registered under that name.
//!
//! The modules, from the bottom (plain data, importing nothing of the daemon) to
//! the top (the server, which nothing imports); each imports only those below it:
//!
//! - [`model`]: what a service, a listener and an access rule are.
//! - `registry`: names to services, and the HELP text.
//! - [`keys`]: the live key material every parse and worker shares: TLS
//!   session-ticket keys, the ACME certificates' slots.
//! - [`config`]: the TOML file, checked and turned into a [`Config`].
//! - [`net`]: sockets: listeners, the stream type, PROXY headers, the relay.
//! - [`ops`]: metrics, logging, systemd, the privilege drop.
//! - `pool`: a proxy's backends: balancing, health checks, DNS discovery.
//! - `acme`: certificates obtained and renewed for `tls = { acme = ... }`.
//! - `admission`: the run-time counts behind the connection limits.
//! - `hub`: handoff backends and their control socket.
//! - `outcome`: how a session ended, for its log line.
//! - `services`: what a name does, one file per kind.
//! - `runtime`: an operator's run-time changes, with who made them, and
//!   the link to the fleet's etcd task.
//! - `state`: what every connection shares; `admin`: the admin socket's
//!   commands; `fleet`: the membership and shared state in etcd;
//!   `session`: one connection; `udp`: a UDP listener's flows.
//! - [`server`]: binding, the accept loops, reload and shutdown.
//! - [`cli`]: the command line, for the binary and the man page.

#![warn(unreachable_pub)]

pub mod cli;
pub mod config;
pub mod keys;
pub mod model;
pub mod net;
pub mod ops;
pub mod server;

mod acme;
mod admin;
mod admission;
mod fleet;
#[cfg(test)]
mod heap;
mod hub;
mod outcome;
mod pool;
mod registry;
mod runtime;
mod services;
mod session;
mod state;
mod udp;

pub use config::{Config, ConfigError};
pub use server::{RunError, Server};
