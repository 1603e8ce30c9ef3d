//! The fleet's keys in etcd and their values, as pure code: a key and its
//! JSON value in, a member or a run-time change out, and back.
//!
//! Under the `prefix`:
//! - `nodes/NODE`: an instance's membership (`Member`), on its lease;
//! - `state/backend/SERVICE/ADDRESS/state` and `.../weight`, and
//!   `state/service/SERVICE/disabled`: a change for the fleet, with the
//!   node whose operator made it.
//!
//! A service name or an address is one key component, its `%` and `/`
//! written `%25` and `%2F`, so `unix:/run/b.sock` stays one component.

use serde::{Deserialize, Serialize};

use crate::model::AdminState;
use crate::runtime::{Change, Member};

/// What a key under the prefix holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// An instance's membership.
    Node(Member),
    /// A change for the fleet, and the node whose operator made it.
    Change(Change, String),
}

/// `prefix/nodes/NODE`.
pub(super) fn node_key(prefix: &str, node: &str) -> String {
    format!("{prefix}/nodes/{}", escape(node))
}

/// The key `change` is kept under.
pub(super) fn change_key(prefix: &str, change: &Change) -> String {
    match change {
        Change::State {
            service, backend, ..
        } => format!(
            "{prefix}/state/backend/{}/{}/state",
            escape(&service.to_ascii_lowercase()),
            escape(backend)
        ),
        Change::Weight {
            service, backend, ..
        } => format!(
            "{prefix}/state/backend/{}/{}/weight",
            escape(&service.to_ascii_lowercase()),
            escape(backend)
        ),
        Change::Disabled { service, .. } => format!(
            "{prefix}/state/service/{}/disabled",
            escape(&service.to_ascii_lowercase())
        ),
    }
}

#[derive(Serialize, Deserialize)]
struct NodeValue {
    address: String,
    version: String,
    started: i64,
    updated: i64,
    sessions: u64,
}

/// A membership's value.
pub(super) fn node_value(member: &Member) -> Vec<u8> {
    let value = NodeValue {
        address: member.address.clone(),
        version: member.version.clone(),
        started: member.started,
        updated: member.updated,
        sessions: member.sessions,
    };
    serde_json::to_vec(&value).unwrap_or_default()
}

/// A change's value: what it sets, and who set it.
#[derive(Serialize, Deserialize)]
struct ChangeValue<T> {
    value: T,
    node: String,
}

pub(super) fn change_value(change: &Change, node: &str) -> Vec<u8> {
    let node = node.to_owned();
    let json = match change {
        Change::State { state, .. } => serde_json::to_vec(&ChangeValue {
            value: state.as_str(),
            node,
        }),
        Change::Weight { weight, .. } => serde_json::to_vec(&ChangeValue {
            value: weight,
            node,
        }),
        Change::Disabled { disabled, .. } => serde_json::to_vec(&ChangeValue {
            value: disabled,
            node,
        }),
    };
    json.unwrap_or_default()
}

/// What `key` (with its `value`) holds; `None` for a key that is not ours
/// or a value that does not read (written by a newer version, or by hand).
pub(super) fn read(prefix: &str, key: &[u8], value: &[u8]) -> Option<Entry> {
    let key = std::str::from_utf8(key).ok()?;
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    let parts: Vec<String> = rest.split('/').map(unescape).collect::<Option<_>>()?;
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["nodes", node] => {
            let v: NodeValue = serde_json::from_slice(value).ok()?;
            Some(Entry::Node(Member {
                node: (*node).to_owned(),
                address: v.address,
                version: v.version,
                started: v.started,
                updated: v.updated,
                sessions: v.sessions,
            }))
        }
        ["state", "backend", service, backend, what] => {
            let (service, backend) = ((*service).to_owned(), (*backend).to_owned());
            match *what {
                "state" => {
                    let v: ChangeValue<String> = serde_json::from_slice(value).ok()?;
                    let state: AdminState = v.value.parse().ok()?;
                    let change = Change::State {
                        service,
                        backend,
                        state,
                    };
                    Some(Entry::Change(change, v.node))
                }
                "weight" => {
                    let v: ChangeValue<Option<u32>> = serde_json::from_slice(value).ok()?;
                    if v.value.is_some_and(|w| !(1..=1000).contains(&w)) {
                        return None;
                    }
                    let change = Change::Weight {
                        service,
                        backend,
                        weight: v.value,
                    };
                    Some(Entry::Change(change, v.node))
                }
                _ => None,
            }
        }
        ["state", "service", service, "disabled"] => {
            let v: ChangeValue<bool> = serde_json::from_slice(value).ok()?;
            let change = Change::Disabled {
                service: (*service).to_owned(),
                disabled: v.value,
            };
            Some(Entry::Change(change, v.node))
        }
        _ => None,
    }
}

/// The node a deleted `nodes/NODE` key named.
pub(super) fn deleted_node(prefix: &str, key: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(key).ok()?;
    let node = key.strip_prefix(prefix)?.strip_prefix("/nodes/")?;
    unescape(node)
}

pub(super) fn escape(component: &str) -> String {
    component.replace('%', "%25").replace('/', "%2F")
}

pub(super) fn unescape(component: &str) -> Option<String> {
    let mut out = String::with_capacity(component.len());
    let mut rest = component;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3)?;
        out.push(match code {
            "25" => '%',
            "2F" => '/',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "/tcpmuxd/prod";

    fn round_trip(change: Change) {
        let key = change_key(PREFIX, &change);
        let value = change_value(&change, "edge-1");
        assert_eq!(
            read(PREFIX, key.as_bytes(), &value),
            Some(Entry::Change(change, "edge-1".into())),
            "{key}"
        );
    }

    #[test]
    fn every_change_reads_back_from_its_key_and_value() {
        for state in [AdminState::Drain, AdminState::Maint, AdminState::Ready] {
            round_trip(Change::State {
                service: "web".into(),
                backend: "unix:/run/b%1.sock".into(),
                state,
            });
        }
        for weight in [Some(1), Some(1000), None] {
            round_trip(Change::Weight {
                service: "web".into(),
                backend: "[::1]:80".into(),
                weight,
            });
        }
        round_trip(Change::Disabled {
            service: "a/b".into(),
            disabled: true,
        });
    }

    #[test]
    fn a_membership_reads_back_and_its_deletion_names_the_node() {
        let member = Member {
            node: "edge/1".into(),
            address: "0.0.0.0:443".into(),
            version: "0.1.0".into(),
            started: 10,
            updated: 20,
            sessions: 3,
        };
        let key = node_key(PREFIX, &member.node);
        assert_eq!(key, "/tcpmuxd/prod/nodes/edge%2F1");
        assert_eq!(
            read(PREFIX, key.as_bytes(), &node_value(&member)),
            Some(Entry::Node(member))
        );
        assert_eq!(
            deleted_node(PREFIX, key.as_bytes()).as_deref(),
            Some("edge/1")
        );
    }

    #[test]
    fn what_is_not_ours_or_does_not_read_is_left_alone() {
        let drain = br#"{"value":"drain","node":"a"}"#;
        for key in [
            "/other/state/service/web/disabled",
            "/tcpmuxd/prodx/state/service/web/disabled",
            "/tcpmuxd/prod/state/backend/web/a:1/colour",
            "/tcpmuxd/prod/state/backend/web/a%2:1/state",
            "/tcpmuxd/prod/nodes",
        ] {
            assert_eq!(read(PREFIX, key.as_bytes(), drain), None, "{key}");
        }
        let key = b"/tcpmuxd/prod/state/backend/web/a:1/state";
        for value in [&b"drain"[..], br#"{"value":"sleepy","node":"a"}"#, b"\xff"] {
            assert_eq!(read(PREFIX, key, value), None);
        }
        let weight = b"/tcpmuxd/prod/state/backend/web/a:1/weight";
        assert_eq!(read(PREFIX, weight, br#"{"value":5000,"node":"a"}"#), None);
    }
}
