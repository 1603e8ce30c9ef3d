//! Waiting for a client's opening without consuming it: peeks that grow
//! their buffer with what has arrived, until a pure parser decides on the
//! bytes. Detection and the TLS handshake (which waits for the whole
//! ClientHello) read the first bytes this way.

use std::io;

use super::stream::Stream;

/// The largest ClientHello accepted (post-quantum key shares make them 2 to
/// 10 KiB; 64 KiB is the most a handshake message here may declare).
pub(crate) const MAX_HELLO: usize = 64 * 1024;
/// Bytes peeked for a ClientHello: the message and its record headers, even
/// in small records.
pub(crate) const HELLO_PEEK: usize = MAX_HELLO + 8 * 1024;

/// What peeking until a parser decides produced.
pub(crate) enum Parsed<T, E> {
    Done(T),
    Failed(E),
    /// `cap` bytes seen and the parser still wants more.
    Full,
    /// The client ended its side before the parser could decide.
    Ended,
}

/// Peeks (up to `cap` bytes) until `parse` decides on what has arrived.
pub(crate) async fn peek_parsed<T, E>(
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
/// ended its side and nothing new came (or `cap` bytes are seen already).
/// Nothing is held while it waits: the bytes seen stay queued in the kernel,
/// which keeps them anyway, and are peeked again, with what came, once the
/// kernel's count says more came. A client that sends part of an opening and
/// stalls costs no buffer here at all.
pub(crate) async fn peek_more(stream: &Stream, buf: &mut Vec<u8>, cap: usize) -> io::Result<bool> {
    let seen = buf.len();
    if seen >= cap {
        return Ok(false);
    }
    if seen == 0 {
        if let Some(first) = peek_first(stream, cap) {
            *buf = first;
            return Ok(true);
        }
    }
    *buf = Vec::new();
    let queued = stream.queued_beyond(seen).await?;
    let mut peeked = vec![0u8; queued.len.min(cap)];
    let len = stream.peek_now(&mut peeked)?;
    peeked.truncate(len);
    *buf = peeked;
    Ok(len > seen)
}

/// Bytes peeked at first without asking the kernel's count: a whole
/// ClientHello of a classic key share, an SSH banner or an HTTP head.
const FIRST_PEEK: usize = 2048;

/// The client's opening when it is queued already and shorter than
/// [`FIRST_PEEK`] (the common case: it came with or just after the
/// handshake): one peek, where asking the count first costs a system call
/// more. `None` (nothing yet, the end, or more than that queued) leaves it
/// to the count. Not async, so its buffer is never held across a wait.
fn peek_first(stream: &Stream, cap: usize) -> Option<Vec<u8>> {
    let mut first = [0u8; FIRST_PEEK];
    match stream.peek_now(&mut first) {
        Ok(n) if n > 0 && n < FIRST_PEEK => Some(first[..n.min(cap)].to_vec()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::future::{poll_fn, Future};
    use std::pin::pin;
    use std::task::Poll;

    use tcpmux_proto::sniff::http;
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::heap;
    use crate::net::test_pair;

    /// Peeks until `want` bytes are seen.
    async fn seen(stream: &Stream, buf: &mut Vec<u8>, want: usize) {
        while buf.len() < want {
            assert!(peek_more(stream, buf, 64 * 1024).await.unwrap());
        }
    }

    /// An opening already queued comes whole from one call, short (the
    /// first peek alone) or longer than the first peek (then by the count).
    #[tokio::test]
    async fn a_queued_opening_comes_whole_short_or_long() {
        for size in [100, FIRST_PEEK - 1, FIRST_PEEK, 3 * FIRST_PEEK] {
            let (stream, mut client) = test_pair().await;
            let opening: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            client.write_all(&opening).await.unwrap();
            let mut buf = Vec::new();
            while buf.len() < size {
                assert!(peek_more(&stream, &mut buf, 64 * 1024).await.unwrap());
            }
            assert_eq!(buf, opening, "{size} bytes");
        }
    }

    #[tokio::test]
    async fn a_stalled_partial_opening_holds_no_buffer_while_it_waits() {
        let (stream, mut client) = test_pair().await;
        let head = b"GET / HTTP/1.1\r\nHost: example.com\r\nX: ".to_vec();
        let mut partial = head.clone();
        partial.resize(1000, b'a');
        let before = heap::live();
        client.write_all(&partial).await.unwrap();
        let mut buf = Vec::new();
        seen(&stream, &mut buf, 1000).await;
        let parse = |bytes: &[u8]| http::parse(bytes, 8192);
        let parsed = {
            let mut waiting = pin!(peek_parsed(&stream, &mut buf, 8192, parse));
            let first = poll_fn(|cx| Poll::Ready(waiting.as_mut().poll(cx).is_pending())).await;
            assert!(first, "1,000 bytes of a head decided nothing");
            // The 1,000 bytes are the kernel's now; ours is the future, on the stack.
            let held = heap::live() - before;
            assert!(held < 64, "a stalled 1,000-byte head holds {held} bytes");
            client.write_all(b"\r\n\r\n").await.unwrap();
            waiting.await.unwrap()
        };
        match parsed {
            Parsed::Done(head) => assert_eq!(head.host.as_deref(), Some("example.com")),
            _ => panic!("the completed head was not parsed"),
        }
        assert_eq!(buf.len(), 1004, "every byte is still there, unconsumed");
    }

    #[tokio::test]
    async fn a_half_close_ends_the_wait_with_the_bytes_seen() {
        let (stream, mut client) = test_pair().await;
        client.write_all(b"G").await.unwrap();
        client.shutdown().await.unwrap();
        let mut buf = Vec::new();
        seen(&stream, &mut buf, 1).await;
        // Half-closed: no more will come, and the wait says so at once.
        assert!(!peek_more(&stream, &mut buf, 1024).await.unwrap());
        assert_eq!(buf, b"G");
        assert!(!peek_more(&stream, &mut buf, 1024).await.unwrap());
    }

    #[tokio::test]
    async fn a_reset_ends_the_wait() {
        let (stream, client) = test_pair().await;
        let client = client.into_std().unwrap();
        std::io::Write::write_all(&mut &client, b"GET /").unwrap();
        let mut buf = Vec::new();
        seen(&stream, &mut buf, 5).await;
        socket2::SockRef::from(&client)
            .set_linger(Some(std::time::Duration::ZERO))
            .unwrap();
        drop(client);
        // RST: an error or the end, never a wait for bytes that cannot come.
        let more = peek_more(&stream, &mut buf, 1024).await;
        assert!(!matches!(more, Ok(true)), "{more:?} after a reset");
    }

    #[tokio::test]
    async fn a_full_buffer_waits_for_nothing() {
        let (stream, mut client) = test_pair().await;
        client.write_all(b"abcdef").await.unwrap();
        let mut buf = Vec::new();
        while buf.len() < 4 {
            peek_more(&stream, &mut buf, 4).await.unwrap();
        }
        assert_eq!(buf, b"abcd");
        assert!(!peek_more(&stream, &mut buf, 4).await.unwrap());
    }
}
