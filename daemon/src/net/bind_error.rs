//! A bind that failed, for every kind of listening socket (TCP, UDP,
//! Unix): what was asked and, in words, why not and the fix.

use crate::model::ListenAddr;

/// A bind that failed, with the reason in words and, where there is one, the fix.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {reason}")]
pub struct BindError {
    pub addr: ListenAddr,
    pub reason: String,
}
