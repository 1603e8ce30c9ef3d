//! An exec program's stderr, into the log: read in bounded chunks, split into
//! lines of at most 4 KiB (the rest of a longer line is dropped and counted),
//! logged lossily whatever the bytes, and read until EOF, so a program never
//! dies of SIGPIPE for what it writes there and never makes the daemon buffer
//! more than one line.

use tokio::io::AsyncReadExt;
use tokio::process::ChildStderr;

/// Longest stderr line logged as one record; the rest of it is dropped.
pub(super) const MAX_LOG_LINE: usize = 4096;
/// Bytes read from the pipe at a time.
const CHUNK: usize = 4096;

/// Assembles lines from chunks and logs each, bounded.
pub(super) struct LineLog {
    service: String,
    pid: u32,
    line: Vec<u8>,
    /// Bytes of the current line beyond `MAX_LOG_LINE`, dropped.
    cut: u64,
}

impl LineLog {
    pub(super) fn new(service: &str, pid: u32) -> LineLog {
        LineLog {
            service: service.to_owned(),
            pid,
            line: Vec::new(),
            cut: 0,
        }
    }

    /// Logs every line `bytes` completes and keeps the start of the next.
    pub(super) fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|&b| b == b'\n');
            let (part, rest) = match end {
                Some(at) => (&bytes[..at], Some(&bytes[at + 1..])),
                None => (bytes, None),
            };
            let room = MAX_LOG_LINE - self.line.len();
            let kept = part.len().min(room);
            self.line.extend_from_slice(&part[..kept]);
            self.cut += (part.len() - kept) as u64;
            match rest {
                Some(rest) => {
                    self.emit();
                    bytes = rest;
                }
                None => break,
            }
        }
    }

    /// Logs what is left of an unterminated last line.
    pub(super) fn finish(&mut self) {
        if !self.line.is_empty() || self.cut > 0 {
            self.emit();
        }
    }

    fn emit(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        let (service, pid) = (self.service.as_str(), self.pid);
        if self.cut > 0 {
            let cut = self.cut;
            tracing::warn!(target: "tcpmuxd::exec", service, pid, cut, "stderr: {text}");
        } else {
            tracing::warn!(target: "tcpmuxd::exec", service, pid, "stderr: {text}");
        }
        self.line.clear();
        self.cut = 0;
    }
}

/// Reads `stderr` into `log` until EOF or a read error.
pub(super) async fn drain(stderr: &mut ChildStderr, log: &mut LineLog) {
    let mut chunk = vec![0u8; CHUNK];
    loop {
        match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => log.feed(&chunk[..n]),
        }
    }
    log.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_at_the_limit_and_the_rest_counted() {
        let mut log = LineLog::new("x", 1);
        log.feed(&vec![b'a'; MAX_LOG_LINE + 100]);
        assert_eq!(log.line.len(), MAX_LOG_LINE);
        assert_eq!(log.cut, 100);
        log.feed(&vec![b'b'; 1 << 20]);
        assert_eq!(
            log.line.len(),
            MAX_LOG_LINE,
            "never more than one line held"
        );
        log.feed(b"\nnext");
        assert_eq!((log.line.as_slice(), log.cut), (&b"next"[..], 0));
        log.feed(b"\xff\n");
        assert!(log.line.is_empty());
    }
}
