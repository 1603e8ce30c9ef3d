//! Many clients at once on the one event-loop thread, every byte checked.

use crate::common;

use common::Daemon;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SESSIONS: u64 = 400;

#[tokio::test]
async fn hundreds_of_concurrent_echo_sessions_lose_no_byte() {
    let daemon = Daemon::start();
    let addr = daemon.addr;
    let options = tcpmux::Options {
        connect_timeout: Some(common::PATIENCE),
        reply_timeout: Some(common::PATIENCE),
        fast_open: false,
    };
    let mut sessions = tokio::task::JoinSet::new();
    for i in 0..SESSIONS {
        sessions.spawn(async move {
            // Sizes from a few bytes to ~100 KB, so some sessions span many reads.
            let len = 1
                + (common::random_bytes(i + 1000, 3)
                    .iter()
                    .map(|&b| b as usize)
                    .product::<usize>()
                    % 100_000);
            let payload = common::random_bytes(i, len);
            let stream = tcpmux::connect_async(addr, "echo", &options)
                .await
                .expect("negotiate");
            let (mut reader, mut writer) = stream.into_split();
            let sent = payload.clone();
            let sender = tokio::spawn(async move {
                writer.write_all(&sent).await.expect("send");
                writer.shutdown().await.expect("half-close");
            });
            let mut echoed = Vec::with_capacity(len);
            reader.read_to_end(&mut echoed).await.expect("receive");
            sender.await.expect("sender");
            assert_eq!(echoed.len(), payload.len(), "session {i}");
            assert!(echoed == payload, "session {i}: bytes differ");
        });
    }
    let mut done = 0;
    let all = async {
        while let Some(result) = sessions.join_next().await {
            result.expect("session");
            done += 1;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), all)
        .await
        .expect("sessions finish");
    assert_eq!(done, SESSIONS);
}
