//! The Prometheus endpoint (`metrics_listen`): a minimal HTTP/1.0 responder.
//! `GET /metrics` gets the counters, anything else 404; one request per
//! connection, bounded in size and time.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use crate::net::accept_errors::AcceptErrors;
use crate::net::close::close_gracefully;
use crate::net::listener::{Accepted, Listener};

/// Longest request head read, and how long a client may take to send it.
const MAX_REQUEST: usize = 8192;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `render()` (the exposition text) until the task is dropped, which
/// ends the requests in progress with it.
pub async fn serve(listener: Listener, render: Arc<dyn Fn() -> String + Send + Sync>) {
    let mut requests = JoinSet::new();
    let mut errors = AcceptErrors::new("metrics");
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = requests.join_next() => continue,
        };
        let mut stream = match accepted {
            Ok(Accepted { stream, .. }) => stream,
            Err(e) => {
                errors.failed(&listener.local_addr(), &e).await;
                continue;
            }
        };
        let render = Arc::clone(&render);
        requests.spawn(async move {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            let read = tokio::time::timeout(REQUEST_TIMEOUT, async {
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < MAX_REQUEST {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
            });
            if read.await.is_err() {
                return;
            }
            let _ = stream
                .write_all(respond(&request, &*render).as_bytes())
                .await;
            close_gracefully(&mut stream, Duration::from_secs(1)).await;
        });
    }
}

fn respond(request: &[u8], render: &dyn Fn() -> String) -> String {
    if request.starts_with(b"GET /metrics ") || request.starts_with(b"GET / ") {
        let body = render();
        format!(
            "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    } else {
        "HTTP/1.0 404 Not Found\r\nContent-Length: 10\r\n\r\nnot found\n".to_owned()
    }
}
