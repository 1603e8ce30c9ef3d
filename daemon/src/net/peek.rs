//! Waiting for a client's opening without consuming it: peeks that grow
//! their buffer with what has arrived, until a pure parser decides on the
//! bytes. Detection and the TLS handshake (which waits for the whole
//! ClientHello) read the first bytes this way.

use std::io;

use super::stream::Stream;

/// The largest ClientHello accepted (post-quantum key shares make them 2 to
/// 10 KiB; 64 KiB is the most a handshake message here may declare).
pub const MAX_HELLO: usize = 64 * 1024;
/// Bytes peeked for a ClientHello: the message and its record headers, even
/// in small records.
pub const HELLO_PEEK: usize = MAX_HELLO + 8 * 1024;

/// What peeking until a parser decides produced.
pub enum Parsed<T, E> {
    Done(T),
    Failed(E),
    /// `cap` bytes seen and the parser still wants more.
    Full,
    /// The client ended its side before the parser could decide.
    Ended,
}

/// Peeks (up to `cap` bytes) until `parse` decides on what has arrived.
pub async fn peek_parsed<T, E>(
    stream: &Stream,
    buf: &mut Vec<u8>,
    cap: usize,
    parse: impl Fn(&[u8]) -> Result<Option<T>, E>,
) -> io::Result<Parsed<T, E>> {
    loop {
        match parse(buf) {
            Ok(Some(done)) => return Ok(Parsed::Done(done)),
            Err(e) => return Ok(Parsed::Failed(e)),
            Ok(None) if buf.len() >= cap => return Ok(Parsed::Full),
            Ok(None) => {}
        }
        if !peek_more(stream, buf, cap).await? {
            return Ok(Parsed::Ended);
        }
    }
}

/// Waits until more than the `buf.len()` bytes already seen have arrived (up
/// to `cap`), and leaves every byte waiting in `buf`; `false` when the client
/// ended its side and nothing new came. Bytes already queued are sized by the
/// kernel's count and taken in one peek (usual: clients send their opening
/// at once). Otherwise, while it waits, `buf` holds one byte more than was
/// seen (a full peek says more came); then it takes what the kernel says is
/// queued. A client that sends part of an opening and stalls costs what it
/// sent, not `cap`.
pub async fn peek_more(stream: &Stream, buf: &mut Vec<u8>, cap: usize) -> io::Result<bool> {
    let seen = buf.len();
    let queued = || rustix::io::ioctl_fionread(stream).ok().map(|q| q as usize);
    // Sized by the count: a full peek then means only that more came since.
    // No count (it failed) is no sizing: the one-byte wait, never `cap`.
    let now = queued().unwrap_or(0).min(cap);
    let mut sized = now > seen;
    let mut room = if sized { now } else { (seen + 1).min(cap) };
    loop {
        resize_exact(buf, room);
        let peeked = stream.peek_beyond(buf, seen).await;
        let len = peeked.as_ref().map_or(seen, |p| p.len);
        buf.truncate(len);
        peeked?;
        if len == room && room < cap && !sized {
            // Full: more is queued. One more peek takes it all.
            room = queued().unwrap_or(cap).clamp(room + 1, cap);
            sized = true;
            continue;
        }
        return Ok(len > seen);
    }
}

/// Sets `buf`'s length to `len`, growing its capacity to exactly that.
fn resize_exact(buf: &mut Vec<u8>, len: usize) {
    buf.reserve_exact(len.saturating_sub(buf.len()));
    buf.resize(len, 0);
}
