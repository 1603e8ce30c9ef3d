//! The sockets the daemon has at most one of (the metrics endpoint, the
//! handoff control, upgrade and admin sockets): how each is kept, closed,
//! handed to a successor and replaced on reload.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use tcpmux_proto::upgrade::Frame;
use tokio::task::AbortHandle;

use super::upgrade::encoded;
use crate::net::listener::{BindError, Listener};

/// A socket the daemon has at most one of: the metrics endpoint (at a
/// `SocketAddr`), the handoff control or the upgrade socket (at a path).
pub(super) struct Single<A> {
    pub(super) configured: A,
    pub(super) task: AbortHandle,
    /// A second descriptor, to hand to a successor.
    pub(super) fd: Option<OwnedFd>,
}

/// How a single socket's address is written in the log and in its frame.
pub(super) trait Shown {
    fn shown(&self) -> String;
}

impl Shown for SocketAddr {
    fn shown(&self) -> String {
        self.to_string()
    }
}

impl Shown for PathBuf {
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

pub(super) fn close<A: Shown>(slot: &mut Option<Single<A>>, what: &str) {
    if let Some(old) = slot.take() {
        tracing::info!(address = %old.configured.shown(), "{what} closed");
        old.task.abort();
    }
}

/// A single socket for a successor: its frame and a descriptor of its own.
pub(super) fn handed<A: Shown>(
    single: &Option<Single<A>>,
    frame: fn(&str) -> Frame<'_>,
) -> io::Result<Option<super::upgrade::Socket>> {
    let Some(Single {
        configured,
        fd: Some(fd),
        ..
    }) = single
    else {
        return Ok(None);
    };
    Ok(Some((
        encoded(&frame(&configured.shown()))?,
        fd.try_clone()?,
    )))
}

/// What a reload does to a single socket (the metrics endpoint, the control
/// or the upgrade socket): `None` keeps it, `Some(None)` closes it,
/// `Some(Some(..))` replaces it with one bound for `wanted`.
pub(super) fn restage<A: PartialEq>(
    current: Option<A>,
    wanted: Option<A>,
    bind: impl FnOnce(A) -> Result<Listener, BindError>,
) -> Result<Option<Option<Listener>>, BindError> {
    if current == wanted {
        return Ok(None);
    }
    Ok(Some(wanted.map(bind).transpose()?))
}
