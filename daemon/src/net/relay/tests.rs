//! The relay's tests: idle relays hold no buffer, and a short answer leaves
//! with its close.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::heap;
use crate::net::buffers::{kept_buffers, lent_out};
use crate::net::test_pair;

async fn bounce(from: &mut TcpStream, to: &mut TcpStream, bytes: &[u8]) {
    from.write_all(bytes).await.unwrap();
    let mut got = vec![0u8; bytes.len()];
    to.read_exact(&mut got).await.unwrap();
    assert_eq!(got, bytes);
}

#[tokio::test]
async fn an_idle_relay_holds_no_buffer_in_either_mode() {
    let big = vec![5u8; 300_000];
    for mode in [RelayMode::Copy, RelayMode::Splice] {
        let (client_side, mut client) = test_pair().await;
        let (backend_side, mut backend) = test_pair().await;
        let before = heap::live() - kept_buffers();
        let traffic = std::sync::Arc::new(Traffic::default());
        let counted = std::sync::Arc::clone(&traffic);
        let relay = tokio::spawn(async move {
            relay(&client_side, &backend_side, mode, None, &counted)
                .await
                .0
        });
        for bytes in [&b"request"[..], &big[..]] {
            bounce(&mut client, &mut backend, bytes).await;
            bounce(&mut backend, &mut client, bytes).await;
            tokio::task::yield_now().await;
            assert_eq!(lent_out(), 0, "{mode:?}");
            // The splice pipe is the kernel's memory; ours is the task (two
            // buffers of up to 256 KiB before).
            let held = heap::live() - kept_buffers() - before;
            assert!(held < 4096, "an idle {mode:?} relay holds {held} bytes");
        }
        client.shutdown().await.unwrap();
        backend.shutdown().await.unwrap();
        let moved = relay.await.unwrap();
        assert_eq!(moved.client_to_backend, 300_007);
        assert_eq!(moved.backend_to_client, 300_007);
        assert_eq!(traffic.up.load(Ordering::Relaxed), 300_007);
    }
}

/// A backend's answer read with its FIN already behind it reaches the
/// client with the relay's FIN, in one segment; an answer whose FIN has
/// not come is not held back for it (the client reads it before the
/// backend closes), and takes two.
#[tokio::test]
async fn an_answer_and_its_close_reach_the_client_as_one_segment() {
    for closed_first in [true, false] {
        let (client_side, mut client) = test_pair().await;
        let (backend_side, mut backend) = test_pair().await;
        let before = crate::net::segments::segments(&client).received;
        let relay = tokio::spawn(async move {
            let traffic = Traffic::default();
            relay(
                &client_side,
                &backend_side,
                RelayMode::Splice,
                None,
                &traffic,
            )
            .await
        });
        // The relay's first look finds nothing and it waits, as a relay
        // does for its backend's answer; then the answer comes.
        tokio::task::yield_now().await;
        backend.write_all(b"answer").await.unwrap();
        if closed_first {
            backend.shutdown().await.unwrap();
        }
        let limit = std::time::Duration::from_secs(10);
        let mut got = [0u8; 6];
        tokio::time::timeout(limit, client.read_exact(&mut got))
            .await
            .expect("the answer, not held back")
            .unwrap();
        assert_eq!(&got, b"answer");
        if !closed_first {
            backend.shutdown().await.unwrap();
        }
        let mut rest = Vec::new();
        tokio::time::timeout(limit, client.read_to_end(&mut rest))
            .await
            .expect("EOF")
            .unwrap();
        assert!(rest.is_empty());
        let segments = crate::net::segments::segments(&client).received - before;
        assert_eq!(
            segments,
            if closed_first { 1 } else { 2 },
            "closed first: {closed_first}"
        );
        client.shutdown().await.unwrap();
        let (moved, result) = relay.await.unwrap();
        result.unwrap();
        assert_eq!(moved.backend_to_client, 6);
    }
}
