//! The admin socket's commands: one line of words to a `Command`, as pure
//! code (no I/O), so every accepted and refused form is a unit test.

use crate::model::AdminState;

/// The longest command line read; a longer one is refused.
pub(crate) const MAX_LINE: usize = 4096;

/// One admin command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Command {
    Help,
    ShowServices,
    /// Every proxy service's members, or one service's.
    ShowBackends(Option<String>),
    ShowListeners,
    ShowHandoff,
    /// Every live session, or one service's.
    ShowSessions(Option<String>),
    /// End the session with this id.
    KillSession(u64),
    /// End every session relayed to one proxy member.
    ShutdownBackend {
        service: String,
        backend: String,
    },
    SetState {
        service: String,
        backend: String,
        state: AdminState,
    },
    /// `None`: back to the configured weight.
    SetWeight {
        service: String,
        backend: String,
        weight: Option<u32>,
    },
    Disable(String),
    Enable(String),
}

/// Why a line is not a command; the text says what would be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum CommandError {
    #[error("empty command; send help for the list")]
    Empty,
    #[error("unknown command {0:?}; send help for the list")]
    Unknown(String),
    #[error("usage: {0}")]
    Usage(&'static str),
    #[error("{0}")]
    Value(String),
}

/// The commands, one per line, for `help`.
pub(super) const HELP: &[&str] = &[
    "show services",
    "show backends [SERVICE]",
    "show listeners",
    "show handoff",
    "show sessions [SERVICE]",
    "kill session ID",
    "shutdown sessions backend SERVICE ADDRESS",
    "set backend SERVICE ADDRESS state ready|drain|maint",
    "set backend SERVICE ADDRESS weight N|config",
    "disable service NAME",
    "enable service NAME",
    "help",
];

pub(super) fn parse(line: &str) -> Result<Command, CommandError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let owned = |w: &str| w.to_owned();
    match words.as_slice() {
        [] => Err(CommandError::Empty),
        ["help"] => Ok(Command::Help),
        ["show", "services"] => Ok(Command::ShowServices),
        ["show", "backends"] => Ok(Command::ShowBackends(None)),
        ["show", "backends", service] => Ok(Command::ShowBackends(Some(owned(service)))),
        ["show", "listeners"] => Ok(Command::ShowListeners),
        ["show", "handoff"] => Ok(Command::ShowHandoff),
        ["show", "sessions"] => Ok(Command::ShowSessions(None)),
        ["show", "sessions", service] => Ok(Command::ShowSessions(Some(owned(service)))),
        ["show", ..] => Err(CommandError::Usage(
            "show services|backends [SERVICE]|sessions [SERVICE]|listeners|handoff",
        )),
        ["kill", "session", id] => id.parse().map(Command::KillSession).map_err(|_| {
            CommandError::Value(format!("session id {id:?}: a number from show sessions"))
        }),
        ["kill", ..] => Err(CommandError::Usage("kill session ID")),
        ["shutdown", "sessions", "backend", service, backend] => Ok(Command::ShutdownBackend {
            service: owned(service),
            backend: owned(backend),
        }),
        ["shutdown", ..] => Err(CommandError::Usage(
            "shutdown sessions backend SERVICE ADDRESS",
        )),
        ["set", "backend", service, backend, "state", state] => Ok(Command::SetState {
            service: owned(service),
            backend: owned(backend),
            state: state.parse().map_err(CommandError::Value)?,
        }),
        ["set", "backend", service, backend, "weight", weight] => Ok(Command::SetWeight {
            service: owned(service),
            backend: owned(backend),
            weight: parse_weight(weight)?,
        }),
        ["set", ..] => Err(CommandError::Usage(
            "set backend SERVICE ADDRESS state ready|drain|maint, or ... weight N|config",
        )),
        ["disable", "service", name] => Ok(Command::Disable(owned(name))),
        ["enable", "service", name] => Ok(Command::Enable(owned(name))),
        ["disable" | "enable", ..] => Err(CommandError::Usage("disable|enable service NAME")),
        [first, ..] => Err(CommandError::Unknown(owned(first))),
    }
}

/// A weight as the configuration takes it (1 to 1000), or `config`.
fn parse_weight(text: &str) -> Result<Option<u32>, CommandError> {
    if text == "config" {
        return Ok(None);
    }
    text.parse::<u32>()
        .ok()
        .filter(|w| (1..=1000).contains(w))
        .map(Some)
        .ok_or_else(|| {
            CommandError::Value(format!(
                "weight {text:?}: a whole number from 1 to 1000, or config"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_read_word_by_word() {
        assert_eq!(parse("show services"), Ok(Command::ShowServices));
        assert_eq!(
            parse("  show   backends\tweb \r"),
            Ok(Command::ShowBackends(Some("web".into())))
        );
        assert_eq!(parse("show backends"), Ok(Command::ShowBackends(None)));
        assert_eq!(
            parse("set backend web 10.0.0.1:80 state drain"),
            Ok(Command::SetState {
                service: "web".into(),
                backend: "10.0.0.1:80".into(),
                state: AdminState::Drain
            })
        );
        assert_eq!(
            parse("set backend web unix:/run/b.sock weight 5"),
            Ok(Command::SetWeight {
                service: "web".into(),
                backend: "unix:/run/b.sock".into(),
                weight: Some(5)
            })
        );
        assert_eq!(
            parse("set backend web 10.0.0.1:80 weight config"),
            Ok(Command::SetWeight {
                service: "web".into(),
                backend: "10.0.0.1:80".into(),
                weight: None
            })
        );
        assert_eq!(
            parse("disable service web"),
            Ok(Command::Disable("web".into()))
        );
        assert_eq!(
            parse("enable service web"),
            Ok(Command::Enable("web".into()))
        );
        assert_eq!(parse("show sessions"), Ok(Command::ShowSessions(None)));
        assert_eq!(
            parse("show sessions web"),
            Ok(Command::ShowSessions(Some("web".into())))
        );
        assert_eq!(parse("kill session 42"), Ok(Command::KillSession(42)));
        assert_eq!(
            parse("shutdown sessions backend web 10.0.0.1:80"),
            Ok(Command::ShutdownBackend {
                service: "web".into(),
                backend: "10.0.0.1:80".into()
            })
        );
    }

    #[test]
    fn a_wrong_line_says_what_would_be_right() {
        assert_eq!(parse(""), Err(CommandError::Empty));
        assert_eq!(
            parse("frobnicate"),
            Err(CommandError::Unknown("frobnicate".into()))
        );
        assert!(matches!(parse("show"), Err(CommandError::Usage(_))));
        assert!(matches!(
            parse("show sessions extra words"),
            Err(CommandError::Usage(_))
        ));
        assert!(matches!(
            parse("set backend web"),
            Err(CommandError::Usage(_))
        ));
        assert!(matches!(
            parse("set backend web a:1 state sleepy"),
            Err(CommandError::Value(e)) if e.contains("ready, drain or maint")
        ));
        for weight in ["0", "1001", "-1", "x"] {
            assert!(
                matches!(
                    parse(&format!("set backend web a:1 weight {weight}")),
                    Err(CommandError::Value(_))
                ),
                "{weight}"
            );
        }
        assert!(matches!(parse("disable web"), Err(CommandError::Usage(_))));
        assert!(matches!(
            parse("kill session x1"),
            Err(CommandError::Value(_))
        ));
        assert!(matches!(parse("kill 3"), Err(CommandError::Usage(_))));
        assert!(matches!(
            parse("shutdown sessions web"),
            Err(CommandError::Usage(_))
        ));
    }
}
