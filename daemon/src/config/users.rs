//! User and group names to ids, for the daemon's own `user`/`group` and an exec
//! service's, through the system's name service switch (NSS): /etc/passwd and
//! /etc/group, and LDAP, sssd or systemd's DynamicUser users where nsswitch.conf
//! says so. Lookups happen when the configuration is read, never on the event
//! loop (a reload reads the file on a blocking thread).

use nix::unistd::{Group, Uid, User};
use toml::Spanned;

use super::error::{ConfigError, Source};

/// A `user` (name or uid; its primary group by default) and optional `group`
/// (name or gid) to (uid, gid).
pub(crate) fn resolve_user(
    src: Source<'_>,
    user: Option<&Spanned<String>>,
    group: Option<&Spanned<String>>,
) -> Result<Option<(u32, u32)>, ConfigError> {
    let user = match user {
        None => None,
        Some(user) => Some(user_ids(user.get_ref()).map_err(|e| src.at(user.span(), e))?),
    };
    let Some(group) = group else {
        return Ok(user);
    };
    let gid = group_id(group.get_ref()).map_err(|e| src.at(group.span(), e))?;
    // A group alone keeps the daemon's uid.
    let uid = user.map_or_else(|| rustix::process::getuid().as_raw(), |(uid, _)| uid);
    Ok(Some((uid, gid)))
}

/// A user's uid and primary gid; a number is a uid (its primary group if it
/// has an entry, else the same number).
fn user_ids(text: &str) -> Result<(u32, u32), String> {
    if let Ok(uid) = text.parse::<u32>() {
        let gid = User::from_uid(Uid::from_raw(uid))
            .ok()
            .flatten()
            .map_or(uid, |u| u.gid.as_raw());
        return Ok((uid, gid));
    }
    match User::from_name(text) {
        Ok(Some(user)) => Ok((user.uid.as_raw(), user.gid.as_raw())),
        Ok(None) => Err(format!("unknown user {text:?}")),
        Err(e) => Err(format!("cannot look up user {text:?}: {e}")),
    }
}

fn group_id(text: &str) -> Result<u32, String> {
    if let Ok(gid) = text.parse::<u32>() {
        return Ok(gid);
    }
    match Group::from_name(text) {
        Ok(Some(group)) => Ok(group.gid.as_raw()),
        Ok(None) => Err(format!("unknown group {text:?}")),
        Err(e) => Err(format!("cannot look up group {text:?}: {e}")),
    }
}
