//! Tests of `net::stream`: readiness, peeks, and what leaves in which segment.

use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::*;

/// A short read clears the socket's readiness (no read is spent on
/// EAGAIN); what arrives later must still wake the next read, and the
/// end after it must still be seen.
#[tokio::test]
async fn reads_after_a_short_read_wait_for_new_input_and_see_the_end() {
    let (ours, mut peer) = crate::net::test_pair().await;
    let within = |f| tokio::time::timeout(Duration::from_secs(10), f);
    for chunk in [&b"a"[..], b"bc", b"def"] {
        peer.write_all(chunk).await.expect("write");
        let (buf, n) = within(ours.read_lent(64))
            .await
            .expect("woken")
            .expect("read");
        assert_eq!(&buf[..n], chunk);
    }
    peer.shutdown().await.expect("FIN");
    let (_, n) = within(ours.read_lent(64))
        .await
        .expect("woken")
        .expect("read");
    assert_eq!(n, 0, "EOF after short reads");
}

/// A read that fills the buffer leaves the readiness set: the rest is
/// read without a new event.
#[tokio::test]
async fn a_full_read_leaves_the_rest_for_the_next() {
    let (ours, mut peer) = UnixStream::pair().expect("socketpair");
    let ours = Stream::Unix(ours);
    peer.write_all(b"0123456789").await.expect("write");
    drop(peer);
    let (buf, n) = ours.read_lent(4).await.expect("read");
    assert_eq!(&buf[..n], b"0123");
    let (buf, n) = ours.read_lent(64).await.expect("read");
    assert_eq!(&buf[..n], b"456789");
    assert_eq!(ours.read_lent(64).await.expect("read").1, 0);
}

/// The last bytes and the FIN after them reach the peer as one segment;
/// sent the plain way, they take two (the control, which shows this
/// kernel counts them apart).
#[tokio::test]
async fn the_last_bytes_leave_with_the_fin_in_one_segment() {
    for last in [false, true] {
        let (ours, mut peer) = crate::net::test_pair().await;
        let before = crate::net::segments::segments(&peer).received;
        match last {
            true => ours.send_before_fin(b"+answer\r\n").await.expect("send"),
            false => {
                let sent =
                    rustix::net::send(&ours, b"+answer\r\n", rustix::net::SendFlags::empty());
                assert_eq!(sent.expect("send"), 9);
            }
        }
        ours.shutdown_write().expect("FIN");
        let mut got = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut peer, &mut got)
            .await
            .expect("read to EOF");
        assert_eq!(got, b"+answer\r\n");
        let segments = crate::net::segments::segments(&peer).received - before;
        assert_eq!(segments, if last { 1 } else { 2 }, "last: {last}");
    }
}

/// Slices written in one vectored call reach the peer as one segment;
/// the control, one write per slice with each seen to arrive, as three.
#[tokio::test]
async fn a_vectored_write_leaves_as_one_segment() {
    use tokio::io::AsyncReadExt;
    let parts: [&[u8]; 3] = [b"server hello,", b" change cipher spec,", b" the rest"];
    let whole = parts.concat();
    for vectored in [false, true] {
        let (mut ours, mut peer) = crate::net::test_pair().await;
        let before = crate::net::segments::segments(&peer).received;
        let mut got = vec![0u8; whole.len()];
        if vectored {
            let slices = parts.map(io::IoSlice::new);
            let n = ours.write_vectored(&slices).await.expect("writev");
            assert_eq!(n, whole.len(), "a fresh socket takes it all");
            peer.read_exact(&mut got).await.expect("read");
        } else {
            let mut at = 0;
            for part in parts {
                ours.write_all(part).await.expect("write");
                peer.read_exact(&mut got[at..at + part.len()])
                    .await
                    .expect("read");
                at += part.len();
            }
        }
        assert_eq!(got, whole);
        let segments = crate::net::segments::segments(&peer).received - before;
        assert_eq!(
            segments,
            if vectored { 1 } else { 3 },
            "vectored: {vectored}"
        );
    }
}
