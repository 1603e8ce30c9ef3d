//! The HTTP endpoint on `metrics_listen`: a minimal HTTP/1.0 responder.
//! `GET /metrics` gets the Prometheus counters, `GET /` the dashboard (one
//! page, everything embedded), `GET /status.json` its data; anything else
//! 404. One request per connection, bounded in size and time.

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

/// The dashboard page, with its style and script inline: it works offline
/// and asks for nothing but `/status.json`.
const DASHBOARD: &str = include_str!("dashboard.html");

/// What the endpoint renders on demand.
pub struct Pages {
    /// The Prometheus exposition text.
    pub metrics: Box<dyn Fn() -> String + Send + Sync>,
    /// The dashboard's data, as JSON.
    pub status: Box<dyn Fn() -> String + Send + Sync>,
}

/// Serves `pages` until the task is dropped, which ends the requests in
/// progress with it.
pub async fn serve(listener: Listener, pages: Arc<Pages>) {
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
        let pages = Arc::clone(&pages);
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
            let _ = stream.write_all(&respond(&request, &pages)).await;
            close_gracefully(&mut stream, Duration::from_secs(1)).await;
        });
    }
}

fn respond(request: &[u8], pages: &Pages) -> Vec<u8> {
    // The path without a query: a browser may add one to defeat caches.
    let path = request
        .strip_prefix(b"GET ")
        .and_then(|rest| rest.split(|&b| b == b' ').next())
        .map(|target| target.split(|&b| b == b'?').next().unwrap_or(target));
    let (kind, body) = match path {
        Some(b"/metrics") => ("text/plain; version=0.0.4", (pages.metrics)()),
        Some(b"/" | b"/index.html") => ("text/html; charset=utf-8", DASHBOARD.to_owned()),
        Some(b"/status.json") => ("application/json", (pages.status)()),
        _ => return b"HTTP/1.0 404 Not Found\r\nContent-Length: 10\r\n\r\nnot found\n".to_vec(),
    };
    // The page may load nothing from anywhere but here.
    let policy = "default-src 'none'; connect-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";
    format!(
        "HTTP/1.0 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nContent-Security-Policy: {policy}\r\nX-Content-Type-Options: nosniff\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages() -> Pages {
        Pages {
            metrics: Box::new(|| "m 1\n".into()),
            status: Box::new(|| "{}".into()),
        }
    }

    fn answer(request: &str) -> String {
        String::from_utf8(respond(request.as_bytes(), &pages())).unwrap()
    }

    #[test]
    fn each_path_gets_its_page() {
        assert!(answer("GET /metrics HTTP/1.1\r\n\r\n").ends_with("\r\n\r\nm 1\n"));
        let page = answer("GET / HTTP/1.1\r\n\r\n");
        assert!(page.contains("text/html") && page.contains("<title>tcpmuxd</title>"));
        let json = answer("GET /status.json?t=1 HTTP/1.1\r\n\r\n");
        assert!(json.contains("application/json") && json.ends_with("{}"));
        assert!(answer("GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.0 404"));
        assert!(answer("POST / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.0 404"));
    }

    #[test]
    fn the_page_asks_nothing_of_other_hosts() {
        // The SVG namespace is a name, never fetched; it appears once.
        let page = DASHBOARD.replacen("\"http://www.w3.org/2000/svg\"", "", 1);
        for needle in ["http:", "https:", "//", "@import", "src="] {
            let outside_comments = page.lines().filter(|l| !l.trim_start().starts_with("//"));
            assert!(
                !outside_comments.clone().any(|l| l.contains(needle)),
                "the page names {needle}"
            );
        }
    }
}
