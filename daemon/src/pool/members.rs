//! A pool's members as DNS (or the configuration) last gave them, with the
//! configuration they were found for.

use std::collections::HashSet;
use std::sync::Arc;

use crate::model::{Endpoint, Member, Proxy};

/// The pool's members, and the configuration they were found for.
#[derive(Debug, Default)]
pub(crate) struct Members {
    /// The configuration they were found for: members found for other
    /// backends (before a reload) are not this one's.
    pub(super) config: Option<Arc<Proxy>>,
    /// In the configured order; an SRV name's records by priority.
    pub list: Vec<Member>,
    /// False until every backend that needs DNS has been looked up once.
    pub(super) ready: bool,
    /// The list's endpoints, to tell a member from one that left at once.
    pub(super) endpoints: HashSet<Endpoint>,
}

impl Members {
    pub(super) fn new(config: Option<Arc<Proxy>>, list: Vec<Member>, ready: bool) -> Members {
        let endpoints = list.iter().map(|m| m.endpoint.clone()).collect();
        Members {
            config,
            list,
            ready,
            endpoints,
        }
    }

    /// Whether `endpoint` is one of them.
    pub(crate) fn contains(&self, endpoint: &Endpoint) -> bool {
        self.endpoints.contains(endpoint)
    }

    /// Whether they are `proxy`'s: the same configuration (a pointer
    /// comparison, each client's case) or one with the same backends.
    pub(super) fn are_for(&self, proxy: &Proxy) -> bool {
        self.config
            .as_deref()
            .is_some_and(|config| std::ptr::eq(config, proxy) || config.backends == proxy.backends)
    }
}
