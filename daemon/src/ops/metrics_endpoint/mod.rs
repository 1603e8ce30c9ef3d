//! The HTTP endpoint on `metrics_listen`: a minimal HTTP/1.0 responder.
//! `GET /metrics` gets the Prometheus counters, `GET /` the dashboard (a
//! page, its style and its script, all in the binary), `GET /status.json`
//! its data (a snapshot at most a second old, made off the event loop),
//! `GET /healthz` and `GET /readyz` the answers a load balancer or an
//! orchestrator asks for (200, or 503 and why); HEAD too; anything else 404. One request per connection, bounded in
//! size, time and number (a newcomer ends the oldest idle one), and only for a Host that is an IP literal or a
//! name in `metrics_hosts`, so that a page elsewhere cannot read it by
//! rebinding its own name to this address.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tcpmux_proto::sniff::http::{self, HeadError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::{AbortHandle, JoinSet};

use crate::net::accept_errors::AcceptErrors;
use crate::net::close::close_gracefully;
use crate::net::listener::{Accepted, Listener};

/// Longest request head read, and how long a client may take to send it.
const MAX_REQUEST: usize = 8192;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once, so idle ones cannot take the descriptors
/// `max_connections` was sized for: a newcomer ends the oldest one still
/// sending its head, or is answered 503 when every one is past its head.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// How old the dashboard's data may be: every poller within it shares one.
const SNAPSHOT_AGE: Duration = Duration::from_secs(1);

/// The dashboard: no inline style or script, so its policy forbids both.
const DASHBOARD: &str = include_str!("dashboard.html");
const STYLE: &str = include_str!("dashboard.css");
const SCRIPT: &str = include_str!("dashboard.js");
const POLICY: &str =
    "default-src 'none'; connect-src 'self'; style-src 'self'; script-src 'self'; img-src data:";

/// What the endpoint renders on demand.
pub(crate) struct Pages {
    /// The Prometheus exposition text.
    pub metrics: Box<dyn Fn() -> String + Send + Sync>,
    /// The dashboard's data, as JSON.
    pub status: Box<dyn Fn() -> String + Send + Sync>,
    /// The host names a request may name (`metrics_hosts`).
    pub hosts: Box<dyn Fn() -> Vec<String> + Send + Sync>,
    /// Whether the daemon is alive (its event loops run), or why not.
    pub health: Box<dyn Fn() -> Result<(), String> + Send + Sync>,
    /// Whether it should get traffic (serving, every certificate in
    /// hand, not stopping), or why not.
    pub ready: Box<dyn Fn() -> Result<(), String> + Send + Sync>,
}

/// The last `/status.json`, shared by the pollers of one second.
type Snapshot = tokio::sync::Mutex<Option<(Instant, Arc<String>)>>;

/// Serves `pages` until the task is dropped, which ends the requests in
/// progress with it.
pub(crate) async fn serve(listener: Listener, pages: Arc<Pages>) {
    let mut requests = JoinSet::new();
    let mut errors = AcceptErrors::new("metrics");
    let snapshot = Arc::new(Snapshot::default());
    let mut heads = Heads::default();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = requests.join_next() => continue,
        };
        let stream = match accepted {
            Ok(Accepted { stream, .. }) => stream,
            Err(e) => {
                errors.failed(&listener.local_addr(), &e).await;
                continue;
            }
        };
        if requests.len() >= MAX_CONNECTIONS && !heads.evict_oldest() {
            // No task for it: the refusal fits in an empty socket buffer.
            let _ = stream.send(FULL, false).await;
            continue;
        }
        let (pages, snapshot) = (Arc::clone(&pages), Arc::clone(&snapshot));
        let reading = Arc::new(AtomicBool::new(true));
        let still_reading = Arc::clone(&reading);
        let task = requests.spawn(async move {
            let mut stream = stream;
            let read = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await;
            still_reading.store(false, Ordering::Release);
            let Ok(head) = read else {
                return;
            };
            let reply = match route(&head, &(pages.hosts)()) {
                Answer::Fixed(bytes) => bytes.to_vec(),
                Answer::Probe(probe, head_only) => probe_reply(probe, &pages, head_only),
                Answer::Page(page, head_only) => {
                    let body = render(page, &pages, &snapshot).await;
                    page_reply(page, &body, head_only)
                }
            };
            let _ = stream.write_all(&reply).await;
            close_gracefully(&mut stream, Duration::from_secs(1)).await;
        });
        heads.push(task, reading);
    }
}

/// The connections still sending their request head, oldest first: when
/// every place is taken, a newcomer takes the oldest one's, so that idle
/// connections cannot keep Prometheus or an operator out.
#[derive(Default)]
struct Heads(VecDeque<(AbortHandle, Arc<AtomicBool>)>);

impl Heads {
    fn push(&mut self, task: AbortHandle, reading: Arc<AtomicBool>) {
        if self.0.len() >= 2 * MAX_CONNECTIONS {
            self.0
                .retain(|(task, reading)| !task.is_finished() && reading.load(Ordering::Acquire));
        }
        self.0.push_back((task, reading));
    }

    /// Ends the oldest connection still sending its head; false if none is.
    fn evict_oldest(&mut self) -> bool {
        while let Some((task, reading)) = self.0.pop_front() {
            if !task.is_finished() && reading.load(Ordering::Acquire) {
                task.abort();
                return true;
            }
        }
        false
    }
}

const FULL: &[u8] =
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 5\r\nRetry-After: 1\r\n\r\nbusy\n";

/// The request head as read: complete, or what came before EOF, an error or
/// the size limit (which `route` then refuses).
async fn read_head(stream: &mut crate::net::stream::Stream) -> Vec<u8> {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !matches!(http::parse(&request, MAX_REQUEST), Ok(Some(_)) | Err(_)) {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    request
}

/// What the endpoint has to give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Page {
    Metrics,
    Dashboard,
    Style,
    Script,
    Status,
}

/// A probe of the daemon's state: cheap, so answered on the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// `/healthz`: alive.
    Health,
    /// `/readyz`: to be sent traffic.
    Ready,
}

/// The answer to a request: a page or a probe (headers only for HEAD), or a
/// fixed one.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Page(Page, bool),
    Probe(Probe, bool),
    Fixed(&'static [u8]),
}

/// Where `request` goes, decided from its bytes alone.
fn route(request: &[u8], hosts: &[String]) -> Answer {
    let head = match http::parse(request, MAX_REQUEST) {
        Ok(Some(head)) => head,
        Ok(None) | Err(HeadError::NotHttp | HeadError::Malformed(_)) => {
            return Answer::Fixed(
                b"HTTP/1.0 400 Bad Request\r\nContent-Length: 12\r\n\r\nbad request\n",
            )
        }
        Err(HeadError::TooLong(_)) => return Answer::Fixed(
            b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Length: 9\r\n\r\ntoo long\n",
        ),
    };
    if let Some(host) = &head.host {
        if host.parse::<IpAddr>().is_err() && !hosts.iter().any(|h| h == host) {
            return Answer::Fixed(b"HTTP/1.0 421 Misdirected Request\r\nContent-Length: 45\r\n\r\nthis host name is not listed in metrics_hosts\n");
        }
    }
    let head_only = match head.method.as_str() {
        "GET" => false,
        "HEAD" => true,
        _ => {
            return Answer::Fixed(b"HTTP/1.0 405 Method Not Allowed\r\nAllow: GET, HEAD\r\nContent-Length: 19\r\n\r\nmethod not allowed\n")
        }
    };
    // The path without a query: a browser may add one to defeat caches.
    let path = head.target.split('?').next().unwrap_or_default();
    let page = match path {
        "/metrics" => Page::Metrics,
        "/" | "/index.html" => Page::Dashboard,
        "/dashboard.css" => Page::Style,
        "/dashboard.js" => Page::Script,
        "/status.json" => Page::Status,
        "/healthz" => return Answer::Probe(Probe::Health, head_only),
        "/readyz" => return Answer::Probe(Probe::Ready, head_only),
        _ => {
            return Answer::Fixed(
                b"HTTP/1.0 404 Not Found\r\nContent-Length: 10\r\n\r\nnot found\n",
            )
        }
    };
    Answer::Page(page, head_only)
}

/// `page`'s body. What costs (the counters, the status) is made off the
/// event loop; the status at most once per `SNAPSHOT_AGE`.
async fn render(page: Page, pages: &Arc<Pages>, snapshot: &Snapshot) -> Arc<String> {
    let fixed = |text: &str| Arc::new(text.to_owned());
    match page {
        Page::Dashboard => fixed(DASHBOARD),
        Page::Style => fixed(STYLE),
        Page::Script => fixed(SCRIPT),
        Page::Metrics => off_loop(pages, |p| (p.metrics)()).await,
        Page::Status => {
            let mut last = snapshot.lock().await;
            match &*last {
                Some((made, body)) if made.elapsed() < SNAPSHOT_AGE => Arc::clone(body),
                _ => {
                    let body = off_loop(pages, |p| (p.status)()).await;
                    *last = Some((Instant::now(), Arc::clone(&body)));
                    body
                }
            }
        }
    }
}

/// `make(pages)` on a blocking thread, logging where this task logs.
async fn off_loop(pages: &Arc<Pages>, make: fn(&Pages) -> String) -> Arc<String> {
    let pages = Arc::clone(pages);
    let log = tracing::dispatcher::get_default(Clone::clone);
    let made = tokio::task::spawn_blocking(move || {
        tracing::dispatcher::with_default(&log, || make(&pages))
    });
    Arc::new(made.await.unwrap_or_default())
}

/// 200 `ok`, or 503 and why.
fn probe_reply(probe: Probe, pages: &Pages, head_only: bool) -> Vec<u8> {
    let answer = match probe {
        Probe::Health => (pages.health)(),
        Probe::Ready => (pages.ready)(),
    };
    match answer {
        Ok(()) => reply("200 OK", PLAIN, "ok\n", head_only),
        Err(why) => reply(
            "503 Service Unavailable",
            PLAIN,
            &format!("{why}\n"),
            head_only,
        ),
    }
}

const PLAIN: &str = "text/plain; charset=utf-8";

fn page_reply(page: Page, body: &str, head_only: bool) -> Vec<u8> {
    let kind = match page {
        Page::Metrics => "text/plain; version=0.0.4",
        Page::Dashboard => "text/html; charset=utf-8",
        Page::Style => "text/css; charset=utf-8",
        Page::Script => "text/javascript; charset=utf-8",
        Page::Status => "application/json",
    };
    reply("200 OK", kind, body, head_only)
}

/// Every answer's head: never cached, the strict policy, no sniffing; the
/// body unless the request was HEAD.
fn reply(status: &str, kind: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut reply = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nContent-Security-Policy: {POLICY}\r\nX-Content-Type-Options: nosniff\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        reply.extend_from_slice(body.as_bytes());
    }
    reply
}

#[cfg(test)]
mod tests;
