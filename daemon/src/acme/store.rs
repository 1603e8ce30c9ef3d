//! The files an ACME slot keeps in its `storage` directory: the account's
//! credentials, and each certificate with its key in one file, so that they
//! are replaced together. The directory must be the daemon's alone (as
//! OpenSSH's StrictModes asks of ~/.ssh): one that others may write is
//! refused, since they could plant the temporary file a key is written to.
//! Every file is written whole under a random name (O_EXCL, O_NOFOLLOW,
//! 0600), synced, and renamed into place: a crash or a full disk leaves the
//! old file as it was.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::net::unix_socket::unguessable;

/// A file that could not be written or read, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub(crate) struct StoreError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// An open, checked storage directory.
pub(crate) struct Storage {
    path: PathBuf,
    dir: OwnedFd,
}

impl Storage {
    /// Opens `path`, making it (0700) if it is missing, and checks that it is
    /// the daemon's alone.
    pub(crate) fn open(path: &Path) -> Result<Storage, StoreError> {
        let at = |source| StoreError {
            path: path.to_owned(),
            source,
        };
        if !path.exists() {
            std::os::unix::fs::DirBuilderExt::mode(
                std::fs::DirBuilder::new().recursive(true),
                0o700,
            )
            .create(path)
            .map_err(at)?;
        }
        let dir = rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::RDONLY | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| at(e.into()))?;
        // Checked through the descriptor every file is then written through,
        // not by a path that could be swapped between the check and the use.
        let stat = rustix::fs::fstat(&dir).map_err(|e| at(e.into()))?;
        let me = rustix::process::geteuid().as_raw();
        if let Some(why) = crate::config::acme::storage_fault(path, &stat, Some(&[me])) {
            return Err(at(io::Error::new(io::ErrorKind::PermissionDenied, why)));
        }
        Ok(Storage {
            path: path.to_owned(),
            dir,
        })
    }

    /// Replaces the file `name` with `bytes` (0600), or leaves it as it was.
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let at = |source: io::Error| StoreError {
            path: self.path.join(name),
            source,
        };
        let temporary = unguessable(&format!(".{name}.")).map_err(at)?;
        let written = self.write_new(&temporary, bytes).and_then(|()| {
            rustix::fs::renameat(&self.dir, temporary.as_str(), &self.dir, name)?;
            // The rename itself survives a crash once the directory is synced.
            rustix::fs::fsync(&self.dir)?;
            Ok(())
        });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.dir, temporary.as_str(), AtFlags::empty());
        }
        written.map_err(at)
    }

    fn write_new(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let fd = rustix::fs::openat(
            &self.dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut file = std::fs::File::from(fd);
        io::Write::write_all(&mut file, bytes)?;
        file.sync_all()
    }

    /// The contents of `name`, `None` when there is no such file.
    pub(crate) fn read(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let opened = rustix::fs::openat(
            &self.dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let fd = match opened {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => {
                return Err(StoreError {
                    path: self.path.join(name),
                    source: e.into(),
                })
            }
        };
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut std::fs::File::from(fd), &mut bytes).map_err(|source| {
            StoreError {
                path: self.path.join(name),
                source,
            }
        })?;
        Ok(Some(bytes))
    }

    /// Removes `name` if it is there.
    pub(super) fn remove(&self, name: &str) {
        let _ = rustix::fs::unlinkat(&self.dir, name, AtFlags::empty());
    }
}

/// Stores the chain and key `pem` as the slot's pair, in one file; the
/// files older releases kept go once it is there.
pub(super) fn store_pair(
    settings: &crate::model::AcmeSettings,
    pem: &str,
) -> Result<(), StoreError> {
    let storage = Storage::open(&settings.storage)?;
    storage.write(&settings.pair_name(), pem.as_bytes())?;
    let (cert, key) = settings.legacy_names();
    storage.remove(&cert);
    storage.remove(&key);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tcpmuxd-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn files_are_owner_only_and_replace_atomically() {
        let dir = scratch("atomic");
        let storage = Storage::open(&dir.join("nested")).expect("open");
        storage.write("key.pem", b"one").expect("write");
        storage.write("key.pem", b"two").expect("rewrite");
        assert_eq!(
            storage.read("key.pem").expect("read").as_deref(),
            Some(&b"two"[..])
        );
        let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join("nested/key.pem")), 0o600);
        assert_eq!(mode(&dir.join("nested")), 0o700);
        assert!(storage.read("absent").expect("absent").is_none());
        // Nothing but the file: no temporary left behind.
        let names: Vec<_> = std::fs::read_dir(dir.join("nested")).unwrap().collect();
        assert_eq!(names.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_others_may_write_is_refused() {
        let dir = scratch("open");
        std::fs::create_dir_all(&dir).unwrap();
        for (mode, words) in [(0o777, "every user"), (0o770, "its group")] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = Storage::open(&dir).err().expect("refused").to_string();
            assert!(e.contains(words) && e.contains("chmod 700"), "{e}");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(Storage::open(&dir).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_symlink_in_place_of_a_file_is_not_followed() {
        let dir = scratch("symlink");
        let storage = Storage::open(&dir).expect("open");
        let target =
            std::env::temp_dir().join(format!("tcpmuxd-store-target-{}", std::process::id()));
        std::fs::write(&target, b"theirs").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("key.pem")).unwrap();
        assert!(storage.read("key.pem").is_err(), "read through a symlink");
        storage
            .write("key.pem", b"ours")
            .expect("replaces the link itself");
        assert_eq!(std::fs::read(&target).unwrap(), b"theirs");
        assert_eq!(
            storage.read("key.pem").unwrap().as_deref(),
            Some(&b"ours"[..])
        );
        let _ = std::fs::remove_file(&target);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
