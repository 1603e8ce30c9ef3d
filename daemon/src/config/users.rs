//! User and group names to ids, from /etc/passwd and /etc/group, for the
//! daemon's own `user`/`group` and an exec service's.

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
        Some(user) => Some(
            user.get_ref()
                .parse::<u32>()
                .ok()
                .map(|uid| (uid, lookup_primary_gid(uid).unwrap_or(uid)))
                .or_else(|| lookup_id("/etc/passwd", user.get_ref()))
                .ok_or_else(|| src.at(user.span(), format!("unknown user {:?}", user.get_ref())))?,
        ),
    };
    let Some(group) = group else {
        return Ok(user);
    };
    let gid = group
        .get_ref()
        .parse::<u32>()
        .ok()
        .or_else(|| lookup_id("/etc/group", group.get_ref()).map(|(gid, _)| gid))
        .ok_or_else(|| src.at(group.span(), format!("unknown group {:?}", group.get_ref())))?;
    // A group alone keeps the daemon's uid.
    let uid = user.map_or_else(|| rustix::process::getuid().as_raw(), |(uid, _)| uid);
    Ok(Some((uid, gid)))
}

/// Reads a user or group database (`/etc/passwd`, `/etc/group`) for `name`: the
/// numeric fields of its line. Names served by NSS modules (LDAP...) are not seen;
/// give numeric ids for those.
fn lookup_id(database: &str, name: &str) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(database).ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        let id = fields.next()?.parse().ok()?;
        let second = fields.next().and_then(|f| f.parse().ok()).unwrap_or(id);
        Some((id, second))
    })
}

fn lookup_primary_gid(uid: u32) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.get(2)?.parse::<u32>().ok()? == uid).then(|| fields.get(3)?.parse().ok())?
    })
}
