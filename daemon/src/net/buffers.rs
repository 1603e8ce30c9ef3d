//! Buffers lent to a connection only while its bytes are in flight: a session
//! waits for input with no buffer at all, borrows one when the socket is
//! readable, and gives it back once the bytes have been passed on. So ten
//! thousand idle echo or relay sessions hold no buffer memory between them.

use std::cell::RefCell;
use std::io;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::Poll;

use tokio::io::{AsyncRead, ReadBuf};

/// Buffers kept for reuse per size and thread: enough for the sessions of one
/// event loop that move bytes at the same moment, few enough to cost little.
const KEEP: usize = 16;

thread_local! {
    static FREE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

#[cfg(test)]
thread_local! {
    static OUT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Buffers of this thread lent and not yet returned: what tests check an idle
/// session holds.
#[cfg(test)]
pub(crate) fn lent_out() -> usize {
    OUT.with(|out| out.get())
}

/// Bytes in this thread's free lists: kept for the next reader, not held by
/// any session.
#[cfg(test)]
pub(crate) fn kept_buffers() -> isize {
    FREE.with(|free| free.borrow().iter().map(|b| b.len() as isize).sum())
}

/// A zeroed-once buffer of a fixed length; back to its thread's free list when dropped.
pub struct Lent(Vec<u8>);

/// Lends a buffer of `len` bytes, reused when one of that length is free.
pub(crate) fn lend(len: usize) -> Lent {
    let reused = FREE.with(|free| {
        let mut free = free.borrow_mut();
        let at = free.iter().position(|b| b.len() == len)?;
        Some(free.swap_remove(at))
    });
    #[cfg(test)]
    OUT.with(|out| out.set(out.get() + 1));
    Lent(reused.unwrap_or_else(|| vec![0u8; len]))
}

impl Drop for Lent {
    fn drop(&mut self) {
        #[cfg(test)]
        OUT.with(|out| out.set(out.get() - 1));
        let buf = std::mem::take(&mut self.0);
        if buf.is_empty() {
            return;
        }
        // try_with: a thread being torn down just frees it.
        let _ = FREE.try_with(|free| {
            let mut free = free.borrow_mut();
            if free.iter().filter(|b| b.len() == buf.len()).count() < KEEP {
                free.push(buf);
            }
        });
    }
}

/// Reads from any stream (a TLS session, a relay's half) into a buffer lent
/// for one poll at a time: while the read has to wait, the buffer is back in
/// the free list, so a waiting reader holds none. 0 bytes means EOF.
pub(crate) async fn read_lent<R: AsyncRead + Unpin>(
    reader: &mut R,
    len: usize,
) -> io::Result<(Lent, usize)> {
    std::future::poll_fn(|cx| {
        let mut buf = lend(len);
        let mut filled = ReadBuf::new(&mut buf);
        match Pin::new(&mut *reader).poll_read(cx, &mut filled) {
            Poll::Ready(Ok(())) => {
                let n = filled.filled().len();
                Poll::Ready(Ok((buf, n)))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

impl Deref for Lent {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl DerefMut for Lent {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_buffer_is_lent_again_and_sizes_do_not_mix() {
        let first = lend(4096);
        let address = first.as_ptr();
        drop(first);
        let small = lend(1024);
        assert_eq!(small.len(), 1024);
        let again = lend(4096);
        assert_eq!(again.as_ptr(), address);
        assert_eq!(again.len(), 4096);
    }

    #[test]
    fn only_a_few_are_kept() {
        let many: Vec<Lent> = (0..KEEP + 5).map(|_| lend(512)).collect();
        drop(many);
        let kept = FREE.with(|f| f.borrow().iter().filter(|b| b.len() == 512).count());
        assert_eq!(kept, KEEP);
    }
}
