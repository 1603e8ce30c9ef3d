//! Fixed bytes (chargen's pattern; sometext's text, in memory only) kept in a
//! sealed memfd and sent with sendfile(2), so the kernel hands its pages to the
//! socket instead of copying them from user space on every write; plain writes
//! where it cannot, or where that is faster (see `FixedBytes::in_memory`).
//!
//! The memfd is sealed against writes, so the pages a socket still references
//! can never change under it, and one file serves every connection and worker
//! (sendfile with an explicit offset leaves the file position alone).

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
use rustix::io::Errno;
use tokio::io::Interest;

use super::stream::Stream;

/// Bytes that never change, in memory and, where the kernel allows, in a sealed
/// memfd for sendfile.
#[derive(Debug)]
pub(crate) struct FixedBytes {
    bytes: Vec<u8>,
    file: Option<OwnedFd>,
}

impl FixedBytes {
    /// Copies `bytes` into a sealed memfd named `name`. Without memfd (an old or
    /// confined kernel), the bytes are still served, by write(2).
    pub(crate) fn new(name: &str, bytes: Vec<u8>) -> FixedBytes {
        let file = match sealed_memfd(name, &bytes) {
            Ok(file) => Some(file),
            Err(e) => {
                tracing::debug!(error = %e, name, "no sealed memfd; serving by write");
                None
            }
        };
        FixedBytes { bytes, file }
    }

    /// The same bytes served by write(2) only: for short answers, where the
    /// page references of sendfile cost more than the copy they save.
    pub(crate) fn in_memory(bytes: Vec<u8>) -> FixedBytes {
        FixedBytes { bytes, file: None }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    /// Sends `self[start..end]` on `stream`, adding each byte sent to `sent` (so
    /// the log counts them even when the client leaves halfway). At most `turn`
    /// bytes go out per system call, and the task yields after each, so that one
    /// fast reader cannot starve the other connections.
    pub(crate) async fn send(
        &self,
        stream: &Stream,
        start: usize,
        end: usize,
        turn: usize,
        sent: &mut u64,
    ) -> io::Result<()> {
        let end = end.min(self.bytes.len());
        let mut at = start.min(end);
        let turn = turn.max(1);
        let mut use_file = self.file.as_ref();
        while at < end {
            let len = (end - at).min(turn);
            let result = match use_file {
                Some(file) => {
                    send_some(stream, || {
                        let mut offset = at as u64;
                        rustix::fs::sendfile(stream.as_fd(), file, Some(&mut offset), len)
                    })
                    .await
                }
                None => stream.send(&self.bytes[at..at + len], false).await,
            };
            match result {
                Ok(n) => {
                    at += n;
                    *sent += n as u64;
                    tokio::task::yield_now().await;
                }
                // Refused before the first byte (a socket type or kernel that
                // cannot): the same bytes by write(2).
                Err(e) if use_file.is_some() && at == start && zero_copy_unsupported(&e) => {
                    tracing::debug!(error = %e, "sendfile refused; serving by write");
                    use_file = None;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn sealed_memfd(name: &str, bytes: &[u8]) -> io::Result<OwnedFd> {
    let file = memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    let mut written = 0;
    while written < bytes.len() {
        let n = rustix::io::write(&file, &bytes[written..])?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        written += n;
    }
    fcntl_add_seals(
        &file,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    Ok(file)
}

/// Runs one non-blocking send `op` once the socket is writable; returns how many
/// bytes it took (never 0 for a non-empty send).
async fn send_some(
    stream: &Stream,
    mut op: impl FnMut() -> rustix::io::Result<usize>,
) -> io::Result<usize> {
    match stream
        .async_io(Interest::WRITABLE, || op().map_err(io::Error::from))
        .await?
    {
        0 => Err(io::Error::from(io::ErrorKind::WriteZero)),
        n => Ok(n),
    }
}

/// The errors with which the kernel refuses splice(2) or sendfile(2) for a pair
/// of descriptors (rather than failing a transfer it started): the cue to move
/// the bytes by plain reads and writes instead.
pub(crate) fn zero_copy_unsupported(e: &io::Error) -> bool {
    matches!(
        Errno::from_io_error(e),
        Some(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memfd_holds_the_bytes_and_is_sealed() {
        let fixed = FixedBytes::new("test", b"0123456789".to_vec());
        let Some(file) = &fixed.file else {
            // A kernel without memfd: the write path is what runs, nothing to check.
            return;
        };
        let mut back = [0u8; 10];
        let n = rustix::io::pread(file, &mut back, 0).expect("pread");
        assert_eq!(&back[..n], b"0123456789");
        assert!(
            rustix::io::pwrite(file, b"x", 0).is_err(),
            "sealed against writes"
        );
    }

    /// Sends `fixed[start..end]` in turns of 7 bytes over a socket pair and
    /// returns what the other end read and what the counter said.
    fn send_over_a_socket_pair(fixed: &FixedBytes, start: usize, end: usize) -> (Vec<u8>, u64) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let (ours, theirs) = tokio::net::UnixStream::pair().expect("socketpair");
            let stream = Stream::Unix(ours);
            let mut sent = 0;
            let reader = tokio::spawn(async move {
                let mut theirs = theirs;
                let mut got = Vec::new();
                tokio::io::AsyncReadExt::read_to_end(&mut theirs, &mut got)
                    .await
                    .expect("read");
                got
            });
            fixed
                .send(&stream, start, end, 7, &mut sent)
                .await
                .expect("send");
            drop(stream);
            (reader.await.expect("reader"), sent)
        })
    }

    #[test]
    fn both_paths_send_exactly_the_range_asked_for() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let with_file = FixedBytes::new("test", bytes.clone());
        let without_file = FixedBytes {
            bytes: bytes.clone(),
            file: None,
        };
        for fixed in [&with_file, &without_file] {
            let (got, sent) = send_over_a_socket_pair(fixed, 123, 9_000);
            assert_eq!(got, &bytes[123..9_000]);
            assert_eq!(sent, got.len() as u64);
            // A range past the end is cut at the end.
            let (got, _) = send_over_a_socket_pair(fixed, 9_990, 20_000);
            assert_eq!(got, &bytes[9_990..]);
        }
    }
}
