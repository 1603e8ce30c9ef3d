//! A reply line: one JSON object, `"ok": true` and the data, or `"ok": false`
//! and `"error"`. [`Reply::encode`] writes it, [`Reply::decode`] reads it back.

use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::rows::{
    BackendRow, FleetRow, HandoffRow, ListenerRow, ServiceRow, ServiceState, SessionRow,
};

/// What the daemon answers to one [`super::Request`].
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// To `help`: the format's version and the commands.
    Help {
        /// [`super::VERSION`] of the daemon that answered.
        version: u32,
        /// One usage line per command.
        commands: Vec<String>,
    },
    /// To `show services`.
    Services(Vec<ServiceRow>),
    /// To `show backends`.
    Backends(Vec<BackendRow>),
    /// To `show listeners`.
    Listeners(Vec<ListenerRow>),
    /// To `show handoff`.
    Handoff(Vec<HandoffRow>),
    /// To `show sessions`.
    Sessions(Vec<SessionRow>),
    /// To `kill session`: the session as it was.
    Killed(SessionRow),
    /// To `shutdown sessions backend`: how many sessions were ended.
    ShutDown {
        /// The proxy service.
        service: String,
        /// The member.
        backend: String,
        /// Sessions ended.
        killed: u64,
    },
    /// To `set backend`: the member as it is now (`None` if it left the
    /// pool meanwhile).
    Backend(Option<BackendRow>),
    /// To `disable service` and `enable service`.
    Switched {
        /// The service.
        service: String,
        /// Its state now.
        state: ServiceState,
    },
    /// To `show fleet`.
    Fleet {
        /// How this instance stands with etcd, in a sentence
        /// (`connected to http://...`, `unreachable since ...: why`).
        etcd: String,
        /// The instances with a live membership, this one included.
        nodes: Vec<FleetRow>,
    },
    /// Any command the daemon refused, with why.
    Refused(String),
}

/// Why a line is not a reply.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    /// Not one JSON object.
    #[error("not a JSON object: {0}")]
    Json(#[from] serde_json::Error),
    /// An object without a boolean `ok`.
    #[error("no \"ok\" in the reply")]
    NoStatus,
    /// `ok` but none of the replies' keys.
    #[error("a reply to no known command")]
    Unknown,
    /// A known key whose value has the wrong shape.
    #[error("field {key}: {source}")]
    Field {
        /// The key.
        key: &'static str,
        /// What was wrong with its value.
        source: serde_json::Error,
    },
}

impl Reply {
    /// The reply as a JSON object.
    pub fn to_json(&self) -> Value {
        let (ok, fields) = match self {
            Reply::Refused(error) => return json!({ "ok": false, "error": error }),
            Reply::Help { version, commands } => {
                (true, json!({ "version": version, "commands": commands }))
            }
            Reply::Services(rows) => (true, json!({ "services": rows })),
            Reply::Backends(rows) => (true, json!({ "backends": rows })),
            Reply::Listeners(rows) => (true, json!({ "listeners": rows })),
            Reply::Handoff(rows) => (true, json!({ "handoff": rows })),
            Reply::Sessions(rows) => (true, json!({ "sessions": rows })),
            Reply::Killed(row) => (true, json!({ "killed": 1, "session": row })),
            Reply::ShutDown {
                service,
                backend,
                killed,
            } => (
                true,
                json!({ "service": service, "backend": backend, "killed": killed }),
            ),
            Reply::Backend(row) => (true, json!({ "backend": row })),
            Reply::Switched { service, state } => {
                (true, json!({ "service": service, "state": state }))
            }
            Reply::Fleet { etcd, nodes } => (true, json!({ "etcd": etcd, "fleet": nodes })),
        };
        let mut fields = match fields {
            Value::Object(fields) => fields,
            _ => Map::new(),
        };
        fields.insert("ok".into(), Value::Bool(ok));
        Value::Object(fields)
    }

    /// The reply line, newline included.
    pub fn encode(&self) -> Vec<u8> {
        let mut line = self.to_json().to_string().into_bytes();
        line.push(b'\n');
        line
    }

    /// Reads a reply line (its newline optional). Unknown fields are
    /// ignored, so a newer daemon's replies still read.
    pub fn decode(line: &str) -> Result<Reply, ReplyError> {
        let fields: Map<String, Value> = serde_json::from_str(line)?;
        match fields.get("ok") {
            Some(Value::Bool(true)) => {}
            Some(Value::Bool(false)) => {
                let error = fields.get("error").and_then(Value::as_str);
                return Ok(Reply::Refused(error.unwrap_or("refused").to_owned()));
            }
            _ => return Err(ReplyError::NoStatus),
        }
        let has = |key: &str| fields.contains_key(key);
        Ok(if has("commands") {
            Reply::Help {
                version: field(&fields, "version")?,
                commands: field(&fields, "commands")?,
            }
        } else if has("services") {
            Reply::Services(field(&fields, "services")?)
        } else if has("backends") {
            Reply::Backends(field(&fields, "backends")?)
        } else if has("listeners") {
            Reply::Listeners(field(&fields, "listeners")?)
        } else if has("handoff") {
            Reply::Handoff(field(&fields, "handoff")?)
        } else if has("sessions") {
            Reply::Sessions(field(&fields, "sessions")?)
        } else if has("session") {
            Reply::Killed(field(&fields, "session")?)
        } else if has("killed") {
            Reply::ShutDown {
                service: field(&fields, "service")?,
                backend: field(&fields, "backend")?,
                killed: field(&fields, "killed")?,
            }
        } else if has("backend") {
            Reply::Backend(field(&fields, "backend")?)
        } else if has("fleet") {
            Reply::Fleet {
                etcd: field(&fields, "etcd")?,
                nodes: field(&fields, "fleet")?,
            }
        } else if has("state") {
            Reply::Switched {
                service: field(&fields, "service")?,
                state: field(&fields, "state")?,
            }
        } else {
            return Err(ReplyError::Unknown);
        })
    }
}

/// The value at `key` as a `T`; a missing key reads as JSON null.
fn field<T: DeserializeOwned>(
    fields: &Map<String, Value>,
    key: &'static str,
) -> Result<T, ReplyError> {
    let value = fields.get(key).cloned().unwrap_or(Value::Null);
    serde_json::from_value(value).map_err(|source| ReplyError::Field { key, source })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::admin::rows::{Check, MemberStatus, QueueRow, Scope, SetBy, Source};

    fn session() -> SessionRow {
        SessionRow {
            id: 7,
            client: "127.0.0.1:5000".into(),
            listener: "127.0.0.1:1".into(),
            service: Some("web".into()),
            routed: "sni".into(),
            age: 1.5,
            started: 1_700_000_000,
            bytes_in: 10,
            bytes_out: 20,
            backend: Some("10.0.0.1:80".into()),
            tls: None,
            cert: None,
            udp: false,
        }
    }

    fn backend() -> BackendRow {
        BackendRow {
            service: "web".into(),
            backend: "10.0.0.1:80".into(),
            udp: false,
            state: MemberStatus::Down,
            weight: 5,
            active: 1,
            connections: 9,
            failures: 2,
            last_check: Some(Check::Fail),
            source: Source::Dns,
            set_at_runtime: true,
            set_by: Some(SetBy {
                node: "edge-1".into(),
                scope: Scope::Fleet,
            }),
        }
    }

    fn every_reply() -> Vec<Reply> {
        vec![
            Reply::Help {
                version: 1,
                commands: vec!["help".into()],
            },
            Reply::Services(vec![ServiceRow {
                name: "web".into(),
                kind: "proxy".into(),
                state: ServiceState::Disabled,
                set_at_runtime: true,
                set_by: None,
                active: 3,
                max_connections: Some(10),
                queue: Some(QueueRow {
                    waiting: 1,
                    max: 1024,
                    timeout_seconds: 2.5,
                    served: 4,
                    waited_seconds: 0.25,
                    timeouts: 0,
                }),
                totals: BTreeMap::from([("served".into(), 4)]),
            }]),
            Reply::Backends(vec![backend()]),
            Reply::Listeners(vec![ListenerRow {
                kind: "tcpmux".into(),
                address: "[::]:1".into(),
                name: None,
                detect: true,
                tls: false,
                accept_proxy_from: vec!["127.0.0.1/32".into()],
            }]),
            Reply::Handoff(vec![HandoffRow {
                pid: 42,
                uid: 1000,
                names: vec!["web".into()],
                acks: true,
                in_flight: 0,
            }]),
            Reply::Sessions(vec![session()]),
            Reply::Killed(session()),
            Reply::ShutDown {
                service: "web".into(),
                backend: "10.0.0.1:80".into(),
                killed: 3,
            },
            Reply::Backend(Some(backend())),
            Reply::Backend(None),
            Reply::Switched {
                service: "web".into(),
                state: ServiceState::Enabled,
            },
            Reply::Fleet {
                etcd: "connected to http://127.0.0.1:2379".into(),
                nodes: vec![FleetRow {
                    node: "edge-1".into(),
                    address: "0.0.0.0:443".into(),
                    version: "0.1.0".into(),
                    uptime: 60,
                    sessions: 2,
                    last_seen: 1,
                    this: true,
                }],
            },
            Reply::Refused("no service \"x\"".into()),
        ]
    }

    #[test]
    fn every_reply_reads_back_as_it_was_written() {
        for reply in every_reply() {
            let line = reply.encode();
            assert_eq!(line.last(), Some(&b'\n'));
            let text = std::str::from_utf8(&line).expect("UTF-8");
            assert_eq!(Reply::decode(text).expect(text), reply, "{text}");
        }
    }

    #[test]
    fn the_keys_are_those_documented() {
        let text = String::from_utf8(Reply::Backends(vec![backend()]).encode()).expect("UTF-8");
        for key in [
            r#""ok":true"#,
            r#""state":"down""#,
            r#""last_check":"fail""#,
            r#""source":"dns""#,
            r#""set_at_runtime":true"#,
            r#""set_by":{"node":"edge-1","scope":"fleet"}"#,
        ] {
            assert!(text.contains(key), "{key} in {text}");
        }
        let killed = Reply::Killed(session()).to_json();
        assert_eq!(killed["killed"], 1);
        assert_eq!(killed["session"]["routed"], "sni");
    }

    #[test]
    fn the_words_are_those_serde_writes() {
        let words = [
            (
                json!(ServiceState::Disabled),
                ServiceState::Disabled.as_str(),
            ),
            (json!(MemberStatus::Down), MemberStatus::Down.as_str()),
            (json!(Check::Pass), Check::Pass.as_str()),
            (json!(Source::Dns), Source::Dns.as_str()),
            (json!(Scope::Local), Scope::Local.as_str()),
        ];
        for (written, word) in words {
            assert_eq!(written, json!(word));
        }
    }

    #[test]
    fn what_is_not_a_reply_is_an_error_not_a_guess() {
        assert!(matches!(Reply::decode("nope"), Err(ReplyError::Json(_))));
        assert!(matches!(Reply::decode("[1]"), Err(ReplyError::Json(_))));
        assert!(matches!(Reply::decode("{}"), Err(ReplyError::NoStatus)));
        assert!(matches!(
            Reply::decode(r#"{"ok":true}"#),
            Err(ReplyError::Unknown)
        ));
        assert!(matches!(
            Reply::decode(r#"{"ok":true,"services":3}"#),
            Err(ReplyError::Field {
                key: "services",
                ..
            })
        ));
        assert_eq!(
            Reply::decode(r#"{"ok":false}"#).ok(),
            Some(Reply::Refused("refused".into()))
        );
        // A newer daemon's extra field is ignored.
        let newer = r#"{"ok":true,"service":"web","state":"enabled","since":3}"#;
        assert!(matches!(Reply::decode(newer), Ok(Reply::Switched { .. })));
    }
}
