//! The daemon's own Unix socket files (admin, upgrade, handoff control):
//! bound in a private directory beside their place, given their mode and
//! owner there, then renamed into place, so no other user ever sees one
//! half made, and nothing is chmodded or chowned through a path another user
//! could have replaced with a symlink.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

/// Which file a listener put in place: removed on shutdown only if the path
/// still names that same file (not one that replaced it since).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The file at `path` itself (a symlink is not followed).
    pub fn of(path: &Path) -> Option<FileId> {
        let stat = rustix::fs::lstat(path).ok()?;
        Some(FileId {
            dev: stat.st_dev,
            ino: stat.st_ino,
        })
    }

    /// Removes `path` if it is still this file.
    pub fn remove(self, path: &Path) {
        if FileId::of(path) == Some(self) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// What a socket file is made with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SocketFile {
    /// Its permission bits: who may connect (connecting needs write).
    pub mode: u32,
    /// Its owner and group, when not the process's own (root binding for a
    /// daemon that runs as `user`).
    pub owner: Option<(u32, u32)>,
}

/// Binds a listening socket whose file appears at `path` complete: mode and
/// owner set. An existing file at `path` is replaced atomically, so the
/// caller decides first whether one may be (a stale socket, or our own being
/// replaced). Fails if `path`'s directory is not writable by this process.
pub(crate) fn bind(
    path: &Path,
    file: SocketFile,
) -> io::Result<(std::os::unix::net::UnixListener, FileId)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent_fd = rustix::fs::open(
        parent,
        OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::RDONLY,
        Mode::empty(),
    )?;
    let private = unguessable(".tcpmuxd-")?;
    rustix::fs::mkdirat(&parent_fd, private.as_str(), Mode::from_raw_mode(0o700))?;
    let made = Private {
        parent: &parent_fd,
        name: &private,
    };
    let dir = made.open()?;
    // Bound by path (sockets have no other way), but every change after it
    // goes through `dir`, a directory this process made and only it can
    // write: had another user swapped the path, the calls below would fail
    // on finding no socket rather than touch theirs.
    let listener = std::os::unix::net::UnixListener::bind(parent.join(&private).join("s"))?;
    rustix::fs::chmodat(&dir, "s", Mode::from_raw_mode(file.mode), AtFlags::empty())?;
    if let Some((uid, gid)) = file.owner {
        let (uid, gid) = (
            rustix::fs::Uid::from_raw(uid),
            rustix::fs::Gid::from_raw(gid),
        );
        rustix::fs::chownat(&dir, "s", Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW)?;
    }
    let stat = rustix::fs::statat(&dir, "s", AtFlags::SYMLINK_NOFOLLOW)?;
    rustix::fs::renameat(&dir, "s", &parent_fd, name)?;
    Ok((
        listener,
        FileId {
            dev: stat.st_dev,
            ino: stat.st_ino,
        },
    ))
}

/// A socket file left by a daemon that died can be replaced; a live one cannot.
pub(crate) fn remove_stale_socket(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(format!(
            "{} exists and is not a socket; remove it or choose another path",
            path.display()
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err("another process is serving on this socket".to_owned()),
        Err(_) => std::fs::remove_file(path)
            .map_err(|e| format!("cannot remove stale socket {}: {e}", path.display())),
    }
}

/// The private directory while it exists; removed (with the socket if the
/// rename did not happen) when dropped.
struct Private<'a> {
    parent: &'a OwnedFd,
    name: &'a str,
}

impl Private<'_> {
    /// The directory, checked to be the one this process made.
    fn open(&self) -> io::Result<OwnedFd> {
        let dir = rustix::fs::openat(
            self.parent,
            self.name,
            OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY,
            Mode::empty(),
        )?;
        let stat = rustix::fs::fstat(&dir)?;
        if stat.st_uid != rustix::process::geteuid().as_raw() || stat.st_mode & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "another user replaced the private directory the socket is made in",
            ));
        }
        Ok(dir)
    }
}

impl Drop for Private<'_> {
    fn drop(&mut self) {
        if let Ok(dir) = self.open() {
            let _ = rustix::fs::unlinkat(dir.as_fd(), "s", AtFlags::empty());
        }
        let _ = rustix::fs::unlinkat(self.parent, self.name, AtFlags::REMOVEDIR);
    }
}

/// `prefix` and 16 random hex digits: a name no other user can guess
/// ahead and plant (this module's private directories, the ACME store's
/// temporary files).
pub(crate) fn unguessable(prefix: &str) -> io::Result<String> {
    let mut random = [0u8; 8];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())?;
    Ok(format!("{prefix}{}", tcpmux_proto::hex::encode(&random)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tcpmuxd-sock-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_file_appears_with_its_mode_and_nothing_else_is_left() {
        let dir = scratch("mode");
        let path = dir.join("admin.sock");
        for mode in [0o600, 0o666] {
            let (listener, id) = bind(&path, SocketFile { mode, owner: None }).unwrap();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, mode);
            assert_eq!(FileId::of(&path), Some(id));
            // The second bind replaced the first's file in place.
            std::os::unix::net::UnixStream::connect(&path).unwrap();
            drop(listener);
        }
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        // No private directory left behind.
        assert_eq!(names, vec![std::ffi::OsString::from("admin.sock")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlink_at_the_path_is_replaced_and_its_target_untouched() {
        let dir = scratch("symlink");
        let target = dir.join("target");
        std::fs::write(&target, b"keep").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = dir.join("admin.sock");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let (_listener, id) = bind(
            &path,
            SocketFile {
                mode: 0o666,
                owner: None,
            },
        )
        .unwrap();
        let target_meta = std::fs::metadata(&target).unwrap();
        assert_eq!(target_meta.permissions().mode() & 0o777, 0o644);
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_socket());
        // Removal spares a file that replaced ours.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"theirs").unwrap();
        id.remove(&path);
        assert_eq!(std::fs::read(&path).unwrap(), b"theirs");
        assert_eq!(std::fs::metadata(&target).unwrap().ino(), target_meta.ino());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
