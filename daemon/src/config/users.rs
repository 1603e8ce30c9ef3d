//! User and group names to ids, for the daemon's own `user`/`group`, an exec
//! service's and `admin_uids`, through the system's name service switch (NSS): /etc/passwd and
//! /etc/group, and LDAP, sssd or systemd's DynamicUser users where nsswitch.conf
//! says so. Lookups happen when the configuration is read, never on the event
//! loop (a reload reads the file on a blocking thread).

use nix::unistd::{Group, Uid, User};
use toml::Spanned;

use super::error::{ConfigError, Source};
use super::raw::RawConfig;
use crate::model::AdminSettings;

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

/// `admin_socket` and `admin_uids` (uids or user names); the uids need the
/// socket.
pub(crate) fn admin(
    src: Source<'_>,
    raw: &RawConfig,
) -> Result<Option<AdminSettings>, ConfigError> {
    let mut uids = Vec::new();
    if let Some(list) = &raw.admin_uids {
        for value in list.get_ref() {
            let uid = match value {
                toml::Value::Integer(n) => {
                    u32::try_from(*n).map_err(|_| format!("uid {n} is out of range"))
                }
                toml::Value::String(name) => user_ids(name).map(|(uid, _)| uid),
                _ => Err("admin_uids lists uids or user names".into()),
            };
            uids.push(uid.map_err(|e| src.at(list.span(), format!("admin_uids: {e}")))?);
        }
    }
    match (&raw.admin_socket, &raw.admin_uids) {
        (Some(socket), _) => Ok(Some(AdminSettings {
            socket: socket.into(),
            uids,
        })),
        (None, Some(list)) => Err(src.at(list.span(), "admin_uids needs admin_socket")),
        (None, None) => Ok(None),
    }
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
