//! The files an ACME slot keeps in its `storage` directory: the account's
//! credentials and each certificate with its key, written owner-only (0600
//! in a 0700 directory) and atomically (a temporary file renamed), so a
//! crash never leaves half a key and a restart finds what was obtained.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A file that could not be written or read, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct StoreError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// Writes `bytes` to `path`, readable and writable by the daemon's user only.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let at = |source| StoreError {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| StoreError {
                path: dir.to_owned(),
                source,
            })?;
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .map_err(at)?;
    // A file left by an older run may have wider permissions: narrow them.
    file.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(at)?;
    file.write_all(bytes).map_err(at)?;
    file.sync_all().map_err(at)?;
    fs::rename(&partial, path).map_err(at)
}

/// The contents of `path`, `None` when there is no such file.
pub fn read(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError {
            path: path.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_owner_only_and_replace_atomically() {
        let dir = std::env::temp_dir().join(format!("tcpmuxd-store-{}", std::process::id()));
        let path = dir.join("nested").join("key.pem");
        write_private(&path, b"one").expect("write");
        write_private(&path, b"two").expect("rewrite");
        assert_eq!(read(&path).expect("read").as_deref(), Some(&b"two"[..]));
        let mode = |p: &Path| fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().expect("dir")), 0o700);
        assert!(read(&dir.join("absent")).expect("absent").is_none());
        let _ = fs::remove_dir_all(&dir);
    }
}
