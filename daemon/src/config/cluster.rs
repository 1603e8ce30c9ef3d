//! `cluster`: the etcd cluster a fleet of instances shares its state
//! through. Checked here whole (URLs, names, the secret file's owner and
//! mode, etcd's TLS files), so a fleet member never starts half-configured.

use std::io::Read;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use serde::Deserialize;
use toml::Spanned;

use super::error::{ConfigError, Source};
use crate::model::{Cluster, EtcdTls, Secret};

/// Where the local copy of the fleet's state is kept when `cache` is not
/// given: beside the ACME storage, in the unit's StateDirectory.
const DEFAULT_CACHE: &str = "/var/lib/tcpmuxd/fleet";

/// The prefix of every key when `prefix` is not given.
const DEFAULT_PREFIX: &str = "/tcpmuxd";
/// The fewest bytes a `secret` file may hold: a 256-bit key's worth.
const MIN_SECRET: usize = 32;
/// The most read from it: a key file, not a document.
const MAX_SECRET: usize = 4096;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCluster {
    etcd: Vec<String>,
    prefix: Option<String>,
    node: Option<String>,
    secret: Option<String>,
    ca: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    user: Option<String>,
    password: Option<String>,
    cache: Option<String>,
}

/// The `cluster` table, checked; `None` without one.
pub(super) fn cluster(
    src: Source<'_>,
    raw: Option<&Spanned<RawCluster>>,
) -> Result<Option<Cluster>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let at = |message: String| src.at(raw.span(), format!("cluster: {message}"));
    let table = raw.get_ref();
    // Relative paths are the configuration file's, as everywhere.
    let base = Path::new(src.origin).parent().unwrap_or(Path::new(""));
    let path = |p: &str| base.join(p);
    Ok(Some(Cluster {
        etcd: endpoints(&table.etcd).map_err(at)?,
        prefix: prefix(table.prefix.as_deref()).map_err(at)?,
        node: node(table.node.as_deref()).map_err(at)?,
        secret: Secret(secret(table.secret.as_deref().map(path).as_deref()).map_err(at)?),
        tls: tls(table, &path).map_err(at)?,
        user: match (&table.user, &table.password) {
            (Some(user), Some(password)) => Some((user.clone(), password.clone())),
            (None, None) => None,
            _ => return Err(at("user and password go together".into())),
        },
        cache: match table.cache.as_deref() {
            Some("") => None,
            Some(dir) => Some(path(dir)),
            None => Some(PathBuf::from(DEFAULT_CACHE)),
        },
    }))
}

fn endpoints(list: &[String]) -> Result<Vec<String>, String> {
    if list.is_empty() {
        return Err(
            "etcd lists no endpoint: give its client URLs, e.g. [\"http://10.0.0.1:2379\"]".into(),
        );
    }
    for url in list {
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        if !rest.is_some_and(|r| !r.is_empty() && !r.contains('/')) {
            return Err(format!(
                "etcd endpoint {url:?}: expected http://HOST:PORT or https://HOST:PORT"
            ));
        }
    }
    Ok(list.to_vec())
}

fn prefix(given: Option<&str>) -> Result<String, String> {
    let prefix = given.unwrap_or(DEFAULT_PREFIX);
    let fine = prefix.starts_with('/')
        && prefix.len() > 1
        && !prefix.ends_with('/')
        && prefix.bytes().all(|b| b.is_ascii_graphic());
    if fine {
        Ok(prefix.to_owned())
    } else {
        Err(format!(
            "prefix {prefix:?}: a path such as \"/tcpmuxd/prod\" (a leading slash, none at the end, no spaces)"
        ))
    }
}

/// `node`, or the host name.
fn node(given: Option<&str>) -> Result<String, String> {
    let name = match given {
        Some(name) => name.to_owned(),
        None => rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
    };
    let fine = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if fine {
        Ok(name)
    } else {
        Err(format!(
            "node {name:?}: 1 to 64 letters, digits, '-', '_' or '.' (set node = \"edge-1\")"
        ))
    }
}

/// The secret file's bytes. It must be a regular file (not a link another
/// user could point elsewhere), owned by root or this process's user, and
/// readable by nobody else.
fn secret(path: Option<&Path>) -> Result<Vec<u8>, String> {
    let path = path.ok_or(
        "secret is required: a file of at least 32 random bytes, mode 0600 \
         (head -c 32 /dev/urandom > /etc/tcpmuxd/cluster.key), the same on every instance",
    )?;
    read_secret(path).map_err(|e| format!("secret {}: {e}", path.display()))
}

fn read_secret(path: &Path) -> Result<Vec<u8>, String> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP => "is a symbolic link: name the file itself".to_owned(),
        e => format!("cannot open: {e}"),
    })?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat: {e}"))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err("is not a regular file".into());
    }
    if stat.st_mode & 0o077 != 0 {
        return Err(format!(
            "mode {:04o}: others may read it; chmod 600 it",
            stat.st_mode & 0o7777
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    if stat.st_uid != 0 && stat.st_uid != me {
        return Err(format!(
            "owned by uid {}: it must belong to root or to the daemon's user",
            stat.st_uid
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_SECRET as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    match bytes.len() {
        n if n < MIN_SECRET => Err(format!(
            "{n} bytes: it needs at least {MIN_SECRET} (head -c 32 /dev/urandom > FILE)"
        )),
        n if n > MAX_SECRET => Err(format!(
            "more than {MAX_SECRET} bytes: is it the right file?"
        )),
        _ => Ok(bytes),
    }
}

fn tls(table: &RawCluster, path: &dyn Fn(&str) -> PathBuf) -> Result<Option<EtcdTls>, String> {
    let read = |what: &str, file: &str| {
        std::fs::read(path(file)).map_err(|e| format!("{what} {file}: cannot read: {e}"))
    };
    let identity = match (&table.cert, &table.key) {
        (Some(cert), Some(key)) => Some((read("cert", cert)?, read("key", key)?)),
        (None, None) => None,
        _ => return Err("cert and key go together".into()),
    };
    let https = table.etcd.iter().any(|url| url.starts_with("https://"));
    match &table.ca {
        Some(ca) => Ok(Some(EtcdTls {
            ca: read("ca", ca)?,
            identity,
        })),
        None if https || identity.is_some() => {
            Err("https endpoints and a client certificate need ca (the CA that signed etcd's certificate)".into())
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_prefixes_and_nodes_are_checked() {
        assert!(endpoints(&[]).is_err());
        assert!(endpoints(&["10.0.0.1:2379".into()]).is_err());
        assert!(endpoints(&["http://10.0.0.1:2379/v3".into()]).is_err());
        assert!(endpoints(&["http://10.0.0.1:2379".into(), "https://e:2379".into()]).is_ok());
        assert_eq!(prefix(None).as_deref(), Ok(DEFAULT_PREFIX));
        for bad in ["tcpmuxd", "/", "/a/", "/a b"] {
            assert!(prefix(Some(bad)).is_err(), "{bad}");
        }
        assert!(node(Some("edge-1.example")).is_ok());
        assert!(node(Some("edge 1")).is_err());
        assert!(node(Some("")).is_err());
        assert!(node(None).is_ok(), "the host name");
    }

    #[test]
    fn a_secret_must_be_private_plain_and_long_enough() {
        let dir = std::env::temp_dir().join(format!("tcpmuxd-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key");
        std::fs::write(&file, [7u8; 32]).unwrap();
        let set_mode = |mode| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        set_mode(0o600);
        assert_eq!(read_secret(&file).unwrap().len(), 32);
        set_mode(0o640);
        assert!(read_secret(&file).unwrap_err().contains("chmod 600"));
        set_mode(0o600);
        let link = dir.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(read_secret(&link).unwrap_err().contains("symbolic link"));
        std::fs::write(&file, [7u8; 31]).unwrap();
        assert!(read_secret(&file).unwrap_err().contains("at least 32"));
        assert!(read_secret(&dir).is_err(), "a directory");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
