//! A command line: words to a [`Request`] and back, every accepted and
//! refused form a unit test.

use std::fmt;
use std::str::FromStr;

/// A proxy member's administrative state (HAProxy's `set server ... state`):
/// health decides only among `Ready` members.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AdminState {
    /// Serves new clients when healthy.
    #[default]
    Ready,
    /// No new clients; its sessions go on.
    Drain,
    /// No new clients and no health checks: out for maintenance.
    Maint,
}

impl AdminState {
    /// The word for it in commands, replies and the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Ready => "ready",
            AdminState::Drain => "drain",
            AdminState::Maint => "maint",
        }
    }
}

impl fmt::Display for AdminState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AdminState {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "ready" => Ok(AdminState::Ready),
            "drain" => Ok(AdminState::Drain),
            "maint" => Ok(AdminState::Maint),
            other => Err(format!("state {other:?}: expected ready, drain or maint")),
        }
    }
}

/// One admin command. Names and addresses are carried as written: the
/// daemon knows which exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `help`: the commands and the format's version.
    Help,
    /// `show services`.
    ShowServices,
    /// `show backends [SERVICE]`: every proxy service's members, or one's.
    ShowBackends(Option<String>),
    /// `show listeners`.
    ShowListeners,
    /// `show handoff`.
    ShowHandoff,
    /// `show sessions [SERVICE]`: every live session, or one service's.
    ShowSessions(Option<String>),
    /// `kill session ID`.
    KillSession(u64),
    /// `shutdown sessions backend SERVICE ADDRESS`: ends every session
    /// relayed to one proxy member.
    ShutdownBackend {
        /// The proxy service.
        service: String,
        /// The member's address as `show backends` writes it.
        backend: String,
    },
    /// `set backend SERVICE ADDRESS state ready|drain|maint [--local]`.
    SetState {
        /// The proxy service.
        service: String,
        /// The member's address.
        backend: String,
        /// The state to set.
        state: AdminState,
        /// `--local`: this instance only, not its fleet.
        local: bool,
    },
    /// `set backend SERVICE ADDRESS weight N|config [--local]`.
    SetWeight {
        /// The proxy service.
        service: String,
        /// The member's address.
        backend: String,
        /// `None`: back to the configured weight.
        weight: Option<u32>,
        /// `--local`: this instance only, not its fleet.
        local: bool,
    },
    /// `disable service NAME [--local]`.
    Disable {
        /// The service.
        name: String,
        /// `--local`: this instance only, not its fleet.
        local: bool,
    },
    /// `enable service NAME [--local]`.
    Enable {
        /// The service.
        name: String,
        /// `--local`: this instance only, not its fleet.
        local: bool,
    },
    /// `show fleet`: the instances sharing this one's `cluster`.
    ShowFleet,
}

/// Why a line is not a command; the text says what would be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Nothing but white space.
    #[error("empty command; send help for the list")]
    Empty,
    /// A first word no command starts with.
    #[error("unknown command {0:?}; send help for the list")]
    Unknown(String),
    /// A known command with the wrong words.
    #[error("usage: {0}")]
    Usage(&'static str),
    /// The right words with a value out of range.
    #[error("{0}")]
    Value(String),
}

/// The commands, one per line, as `help` lists them.
pub const HELP: &[&str] = &[
    "show services",
    "show backends [SERVICE]",
    "show listeners",
    "show handoff",
    "show sessions [SERVICE]",
    "kill session ID",
    "shutdown sessions backend SERVICE ADDRESS",
    "show fleet",
    "set backend SERVICE ADDRESS state ready|drain|maint [--local]",
    "set backend SERVICE ADDRESS weight N|config [--local]",
    "disable service NAME [--local]",
    "enable service NAME [--local]",
    "help",
];

/// The heaviest weight a member may be given, as in the configuration.
const MAX_WEIGHT: u32 = 1000;

impl Request {
    /// Reads one command line (without its newline); words are separated by
    /// any white space.
    pub fn parse(line: &str) -> Result<Request, RequestError> {
        let mut words: Vec<&str> = line.split_whitespace().collect();
        // A change may end in `--local`; no other command takes it.
        let local = words.last() == Some(&"--local");
        if local {
            words.pop();
            if !matches!(words.first(), Some(&("set" | "disable" | "enable"))) {
                return Err(RequestError::Usage(
                    "--local goes only after set backend, disable service or enable service",
                ));
            }
        }
        let owned = |w: &str| w.to_owned();
        match words.as_slice() {
            [] => Err(RequestError::Empty),
            ["help"] => Ok(Request::Help),
            ["show", "services"] => Ok(Request::ShowServices),
            ["show", "backends"] => Ok(Request::ShowBackends(None)),
            ["show", "backends", service] => Ok(Request::ShowBackends(Some(owned(service)))),
            ["show", "listeners"] => Ok(Request::ShowListeners),
            ["show", "handoff"] => Ok(Request::ShowHandoff),
            ["show", "sessions"] => Ok(Request::ShowSessions(None)),
            ["show", "sessions", service] => Ok(Request::ShowSessions(Some(owned(service)))),
            ["show", "fleet"] => Ok(Request::ShowFleet),
            ["show", ..] => Err(RequestError::Usage(
                "show services|backends [SERVICE]|sessions [SERVICE]|listeners|handoff|fleet",
            )),
            ["kill", "session", id] => id.parse().map(Request::KillSession).map_err(|_| {
                RequestError::Value(format!("session id {id:?}: a number from show sessions"))
            }),
            ["kill", ..] => Err(RequestError::Usage("kill session ID")),
            ["shutdown", "sessions", "backend", service, backend] => Ok(Request::ShutdownBackend {
                service: owned(service),
                backend: owned(backend),
            }),
            ["shutdown", ..] => Err(RequestError::Usage(
                "shutdown sessions backend SERVICE ADDRESS",
            )),
            ["set", "backend", service, backend, "state", state] => Ok(Request::SetState {
                service: owned(service),
                backend: owned(backend),
                state: state.parse().map_err(RequestError::Value)?,
                local,
            }),
            ["set", "backend", service, backend, "weight", weight] => Ok(Request::SetWeight {
                service: owned(service),
                backend: owned(backend),
                weight: parse_weight(weight)?,
                local,
            }),
            ["set", ..] => Err(RequestError::Usage(
                "set backend SERVICE ADDRESS state ready|drain|maint, or ... weight N|config; then --local for this instance only",
            )),
            ["disable", "service", name] => Ok(Request::Disable {
                name: owned(name),
                local,
            }),
            ["enable", "service", name] => Ok(Request::Enable {
                name: owned(name),
                local,
            }),
            ["disable" | "enable", ..] => Err(RequestError::Usage(
                "disable|enable service NAME [--local]",
            )),
            [first, ..] => Err(RequestError::Unknown(owned(first))),
        }
    }
}

/// The command line, without its newline, as [`Request::parse`] reads it.
impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let only =
            |name: &Option<String>| name.as_ref().map(|n| format!(" {n}")).unwrap_or_default();
        match self {
            Request::Help => f.write_str("help"),
            Request::ShowServices => f.write_str("show services"),
            Request::ShowBackends(name) => write!(f, "show backends{}", only(name)),
            Request::ShowListeners => f.write_str("show listeners"),
            Request::ShowHandoff => f.write_str("show handoff"),
            Request::ShowSessions(name) => write!(f, "show sessions{}", only(name)),
            Request::KillSession(id) => write!(f, "kill session {id}"),
            Request::ShutdownBackend { service, backend } => {
                write!(f, "shutdown sessions backend {service} {backend}")
            }
            Request::ShowFleet => f.write_str("show fleet"),
            Request::SetState {
                service,
                backend,
                state,
                local,
            } => write!(
                f,
                "set backend {service} {backend} state {state}{}",
                scope(*local)
            ),
            Request::SetWeight {
                service,
                backend,
                weight,
                local,
            } => match weight {
                Some(weight) => write!(
                    f,
                    "set backend {service} {backend} weight {weight}{}",
                    scope(*local)
                ),
                None => write!(
                    f,
                    "set backend {service} {backend} weight config{}",
                    scope(*local)
                ),
            },
            Request::Disable { name, local } => {
                write!(f, "disable service {name}{}", scope(*local))
            }
            Request::Enable { name, local } => write!(f, "enable service {name}{}", scope(*local)),
        }
    }
}

/// A change's ending: nothing for the fleet, ` --local` for this instance.
fn scope(local: bool) -> &'static str {
    if local {
        " --local"
    } else {
        ""
    }
}

/// A weight as the configuration takes it (1 to 1000), or `config`.
fn parse_weight(text: &str) -> Result<Option<u32>, RequestError> {
    if text == "config" {
        return Ok(None);
    }
    text.parse::<u32>()
        .ok()
        .filter(|w| (1..=MAX_WEIGHT).contains(w))
        .map(Some)
        .ok_or_else(|| {
            RequestError::Value(format!(
                "weight {text:?}: a whole number from 1 to {MAX_WEIGHT}, or config"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Request, RequestError> {
        Request::parse(line)
    }

    #[test]
    fn commands_are_read_word_by_word() {
        assert_eq!(parse("show services"), Ok(Request::ShowServices));
        assert_eq!(
            parse("  show   backends\tweb \r"),
            Ok(Request::ShowBackends(Some("web".into())))
        );
        assert_eq!(parse("show backends"), Ok(Request::ShowBackends(None)));
        assert_eq!(
            parse("set backend web 10.0.0.1:80 state drain"),
            Ok(Request::SetState {
                service: "web".into(),
                backend: "10.0.0.1:80".into(),
                state: AdminState::Drain,
                local: false,
            })
        );
        assert_eq!(
            parse("set backend web unix:/run/b.sock weight 5"),
            Ok(Request::SetWeight {
                service: "web".into(),
                backend: "unix:/run/b.sock".into(),
                weight: Some(5),
                local: false,
            })
        );
        assert_eq!(
            parse("set backend web 10.0.0.1:80 weight config --local"),
            Ok(Request::SetWeight {
                service: "web".into(),
                backend: "10.0.0.1:80".into(),
                weight: None,
                local: true,
            })
        );
        assert_eq!(
            parse("disable service web"),
            Ok(Request::Disable {
                name: "web".into(),
                local: false
            })
        );
        assert_eq!(
            parse("enable service web"),
            Ok(Request::Enable {
                name: "web".into(),
                local: false
            })
        );
        assert_eq!(parse("show sessions"), Ok(Request::ShowSessions(None)));
        assert_eq!(
            parse("show sessions web"),
            Ok(Request::ShowSessions(Some("web".into())))
        );
        assert_eq!(parse("kill session 42"), Ok(Request::KillSession(42)));
        assert_eq!(
            parse("shutdown sessions backend web 10.0.0.1:80"),
            Ok(Request::ShutdownBackend {
                service: "web".into(),
                backend: "10.0.0.1:80".into()
            })
        );
    }

    #[test]
    fn a_wrong_line_says_what_would_be_right() {
        assert_eq!(parse(""), Err(RequestError::Empty));
        assert_eq!(
            parse("frobnicate"),
            Err(RequestError::Unknown("frobnicate".into()))
        );
        assert!(matches!(parse("show"), Err(RequestError::Usage(_))));
        assert!(matches!(
            parse("show sessions extra words"),
            Err(RequestError::Usage(_))
        ));
        assert!(matches!(
            parse("set backend web"),
            Err(RequestError::Usage(_))
        ));
        assert!(matches!(
            parse("set backend web a:1 state sleepy"),
            Err(RequestError::Value(e)) if e.contains("ready, drain or maint")
        ));
        for weight in ["0", "1001", "-1", "x"] {
            assert!(
                matches!(
                    parse(&format!("set backend web a:1 weight {weight}")),
                    Err(RequestError::Value(_))
                ),
                "{weight}"
            );
        }
        assert!(matches!(parse("disable web"), Err(RequestError::Usage(_))));
        for line in ["show fleet --local", "kill session 1 --local", "--local"] {
            assert!(
                matches!(parse(line), Err(RequestError::Usage(u)) if u.contains("--local")),
                "{line}"
            );
        }
        assert!(matches!(
            parse("disable service web --local extra"),
            Err(RequestError::Usage(_))
        ));
        assert!(matches!(
            parse("kill session x1"),
            Err(RequestError::Value(_))
        ));
        assert!(matches!(parse("kill 3"), Err(RequestError::Usage(_))));
        assert!(matches!(
            parse("shutdown sessions web"),
            Err(RequestError::Usage(_))
        ));
    }

    #[test]
    fn every_command_in_help_is_written_back_as_it_is_read() {
        let examples = [
            "help",
            "show services",
            "show backends",
            "show backends web",
            "show listeners",
            "show handoff",
            "show sessions",
            "show sessions web",
            "kill session 7",
            "shutdown sessions backend web 10.0.0.1:80",
            "set backend web 10.0.0.1:80 state maint",
            "set backend web [::1]:80 weight 1000",
            "set backend web unix:/run/b.sock weight config",
            "disable service web",
            "enable service web",
            "show fleet",
            "set backend web 10.0.0.1:80 state drain --local",
            "set backend web 10.0.0.1:80 weight 3 --local",
            "disable service web --local",
            "enable service web --local",
        ];
        for line in examples {
            let request = parse(line).expect(line);
            assert_eq!(request.to_string(), line);
        }
        // Each line of help names a command an example above parses to.
        for usage in HELP {
            let first_two: Vec<&str> = usage.split(' ').take(2).collect();
            assert!(
                examples.iter().any(|e| e.starts_with(&first_two.join(" "))),
                "{usage}"
            );
        }
    }
}
