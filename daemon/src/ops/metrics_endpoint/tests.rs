use super::*;

fn hosts() -> Vec<String> {
    vec!["localhost".to_owned(), "metrics.example".to_owned()]
}

fn answer(request: &str) -> Answer {
    route(request.as_bytes(), &hosts())
}

fn status_line(answer: Answer) -> String {
    match answer {
        Answer::Fixed(bytes) => {
            let text = String::from_utf8_lossy(bytes);
            text.lines().next().unwrap_or_default().to_owned()
        }
        Answer::Page(page, head) => format!("{page:?} {head}"),
        Answer::Probe(probe, head) => format!("{probe:?} {head}"),
    }
}

#[test]
fn each_path_gets_its_page() {
    assert_eq!(
        answer("GET /metrics HTTP/1.1\r\n\r\n"),
        Answer::Page(Page::Metrics, false)
    );
    assert_eq!(
        answer("GET / HTTP/1.1\r\n\r\n"),
        Answer::Page(Page::Dashboard, false)
    );
    assert_eq!(
        answer("GET /dashboard.js HTTP/1.1\r\n\r\n"),
        Answer::Page(Page::Script, false)
    );
    assert_eq!(
        answer("GET /dashboard.css HTTP/1.0\r\n\r\n"),
        Answer::Page(Page::Style, false)
    );
    assert_eq!(
        answer("GET /status.json?t=1 HTTP/1.1\r\n\r\n"),
        Answer::Page(Page::Status, false)
    );
    assert_eq!(
        answer("HEAD / HTTP/1.1\r\n\r\n"),
        Answer::Page(Page::Dashboard, true)
    );
    assert_eq!(
        answer("GET /healthz HTTP/1.1\r\n\r\n"),
        Answer::Probe(Probe::Health, false)
    );
    assert_eq!(
        answer("HEAD /readyz HTTP/1.1\r\n\r\n"),
        Answer::Probe(Probe::Ready, true)
    );
    assert_eq!(
        status_line(answer("GET /nope HTTP/1.1\r\n\r\n")),
        "HTTP/1.0 404 Not Found"
    );
    assert_eq!(
        status_line(answer("POST / HTTP/1.1\r\n\r\n")),
        "HTTP/1.0 405 Method Not Allowed"
    );
    assert_eq!(
        status_line(answer("hello\r\n\r\n")),
        "HTTP/1.0 400 Bad Request"
    );
    let long = format!("GET / HTTP/1.1\r\nX: {}\r\n", "y".repeat(MAX_REQUEST));
    assert_eq!(
        status_line(answer(&long)),
        "HTTP/1.0 431 Request Header Fields Too Large"
    );
}

#[test]
fn only_ip_literals_and_listed_names_are_served() {
    let with_host = |host: &str| {
        answer(&format!(
            "GET /status.json HTTP/1.1\r\nHost: {host}\r\n\r\n"
        ))
    };
    for host in [
        "127.0.0.1:9100",
        "[::1]:9100",
        "10.1.2.3",
        "localhost:9100",
        "Metrics.Example",
    ] {
        assert_eq!(with_host(host), Answer::Page(Page::Status, false), "{host}");
    }
    // A rebinding page names its own host; so does a look-alike.
    for host in [
        "attacker.example",
        "localhost.attacker.example",
        "127.0.0.1.nip.io",
    ] {
        assert_eq!(
            status_line(with_host(host)),
            "HTTP/1.0 421 Misdirected Request",
            "{host}"
        );
    }
    // An absolute-form target names the host too, and wins over Host.
    let smuggled = "GET http://attacker.example/status.json HTTP/1.1\r\nHost: localhost\r\n\r\n";
    assert_eq!(
        status_line(answer(smuggled)),
        "HTTP/1.0 421 Misdirected Request"
    );
    // Without a Host (no browser sends that), served.
    assert_eq!(
        answer("GET /metrics HTTP/1.0\r\n\r\n"),
        Answer::Page(Page::Metrics, false)
    );
}

#[test]
fn a_head_answer_has_the_headers_without_the_body() {
    let full = page_reply(Page::Dashboard, DASHBOARD, false);
    let head = page_reply(Page::Dashboard, DASHBOARD, true);
    let text = String::from_utf8(head).unwrap();
    assert!(text.ends_with("\r\n\r\n"), "{text}");
    assert!(text.contains(&format!("Content-Length: {}", DASHBOARD.len())));
    assert!(full.ends_with(DASHBOARD.as_bytes()));
}

#[test]
fn the_page_has_no_inline_script_or_style_and_asks_nothing_of_other_hosts() {
    assert!(!POLICY.contains("unsafe-inline"), "{POLICY}");
    for tag in ["<script>", "<style>", " style=", " onclick=", " onload="] {
        assert!(!DASHBOARD.contains(tag), "the page has {tag}");
    }
    assert!(DASHBOARD.contains("<script src=\"dashboard.js\">"));
    assert!(DASHBOARD.contains("href=\"dashboard.css\""));
    // The SVG namespace is a name, never fetched; it appears once.
    let script = SCRIPT.replacen("\"http://www.w3.org/2000/svg\"", "", 1);
    for text in [DASHBOARD, STYLE, script.as_str()] {
        for needle in ["http:", "https:", "@import", "url("] {
            let outside_comments = text.lines().filter(|l| !l.trim_start().starts_with("//"));
            assert!(
                !outside_comments.clone().any(|l| l.contains(needle)),
                "the dashboard names {needle}"
            );
        }
    }
}

#[tokio::test]
async fn the_pollers_of_one_second_share_one_status() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (made, scraped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (counted, scrapes) = (Arc::clone(&made), Arc::clone(&scraped));
    let pages = Arc::new(Pages {
        metrics: Box::new(move || format!("m {}\n", scrapes.fetch_add(1, Ordering::SeqCst))),
        status: Box::new(move || format!("n{}", counted.fetch_add(1, Ordering::SeqCst))),
        hosts: Box::new(Vec::new),
        health: Box::new(|| Ok(())),
        ready: Box::new(|| Ok(())),
    });
    // A snapshot made "now" (its instant ahead, so no slow machine can age
    // it) is served as it is; one older than a second is made again.
    let now = Instant::now() + Duration::from_secs(3600);
    let snapshot = Snapshot::new(Some((now, Arc::new("kept".to_owned()))));
    assert_eq!(
        render(Page::Status, &pages, &snapshot).await.as_str(),
        "kept"
    );
    assert_eq!(made.load(Ordering::SeqCst), 0);
    let old = Instant::now() - SNAPSHOT_AGE;
    let snapshot = Snapshot::new(Some((old, Arc::new("old".to_owned()))));
    assert_eq!(render(Page::Status, &pages, &snapshot).await.as_str(), "n0");
    assert_eq!(made.load(Ordering::SeqCst), 1);
    // The counters are never cached.
    assert_eq!(
        render(Page::Metrics, &pages, &snapshot).await.as_str(),
        "m 0\n"
    );
    assert_eq!(
        render(Page::Metrics, &pages, &snapshot).await.as_str(),
        "m 1\n"
    );
}

#[test]
fn a_probe_says_ok_or_why_not_and_is_never_cached() {
    let pages = Pages {
        metrics: Box::new(String::new),
        status: Box::new(String::new),
        hosts: Box::new(Vec::new),
        health: Box::new(|| Ok(())),
        ready: Box::new(|| Err("not ready: shutting down".to_owned())),
    };
    let healthy = String::from_utf8(probe_reply(Probe::Health, &pages, false)).unwrap();
    assert!(healthy.starts_with("HTTP/1.0 200 OK\r\n"), "{healthy}");
    assert!(
        healthy.ends_with("\r\n\r\nok\n") && healthy.contains("no-store"),
        "{healthy}"
    );
    let stopping = String::from_utf8(probe_reply(Probe::Ready, &pages, false)).unwrap();
    assert!(
        stopping.starts_with("HTTP/1.0 503 Service Unavailable\r\n"),
        "{stopping}"
    );
    assert!(
        stopping.ends_with("not ready: shutting down\n"),
        "{stopping}"
    );
    let head = String::from_utf8(probe_reply(Probe::Ready, &pages, true)).unwrap();
    assert!(head.ends_with("\r\n\r\n"), "{head}");
}
