//! An `exec` service's table: the program, its identity and environment.

use std::path::Path;

use toml::Spanned;

use super::checks::{at_least_one, choice};
use super::error::{ConfigError, Source};
use super::raw::RawService;
use super::users::resolve_user;
use crate::model::{Exec, ExecReply, OnShutdown};

/// `exec = ["/path/program", "arg", …]` with the exec-only keys.
pub(crate) fn exec(
    src: Source<'_>,
    table: &RawService,
    argv: &Spanned<Vec<String>>,
) -> Result<Exec, ConfigError> {
    check_program(src, argv)?;
    let reply = choice(
        src,
        "reply",
        table.reply.as_ref(),
        &[
            ("server", ExecReply::Server),
            ("program", ExecReply::Program),
        ],
    )?
    .unwrap_or_default();
    let user = resolve_user(src, table.user.as_ref(), table.group.as_ref())?;
    let on_shutdown = choice(
        src,
        "on_shutdown",
        table.on_shutdown.as_ref(),
        &[("kill", OnShutdown::Kill), ("leave", OnShutdown::Leave)],
    )?
    .unwrap_or_default();
    let max_instances = at_least_one(src, "max_instances", table.max_instances.as_ref())?;
    if let Some(cwd) = &table.cwd {
        if !Path::new(cwd).is_dir() {
            return Err(src.at(argv.span(), format!("exec cwd {cwd} is not a directory")));
        }
    }
    Ok(Exec {
        argv: argv.get_ref().clone(),
        reply,
        user,
        cwd: table.cwd.clone().map(Into::into),
        env: table.env.clone().unwrap_or_default(),
        max_instances,
        on_shutdown,
    })
}

/// The program must be given, absolute (no shell or PATH search), and exist.
fn check_program(src: Source<'_>, argv: &Spanned<Vec<String>>) -> Result<(), ConfigError> {
    let Some(program) = argv.get_ref().first() else {
        return Err(src.at(argv.span(), "`exec` is empty: give the program's path"));
    };
    let path = Path::new(program);
    if !path.is_absolute() {
        return Err(src.at(
            argv.span(),
            format!(
                "exec program {program:?} must be an absolute path (no shell or PATH search is used)"
            ),
        ));
    }
    if !path.is_file() {
        return Err(src.at(
            argv.span(),
            format!("exec program {program} does not exist"),
        ));
    }
    Ok(())
}
