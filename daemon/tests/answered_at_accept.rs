//! One-line answers the accept loop gives itself (session/at_accept.rs): the
//! same answers, limits and log line as a session's, a client that keeps its
//! place until its FIN (or the drain timeout), and every other opening left
//! to a session with the bytes already read. `defer_accept` makes sure the
//! request is in the socket when the loop accepts it.

use crate::common;

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::{read_all, Daemon, PATIENCE};

fn deferred(rest: &str) -> Daemon {
    Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", defer_accept = true }}]\n{rest}"
    ))
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

/// Asks for daytime until it is served (the client before it has gone).
fn served_eventually(daemon: &Daemon) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let reply = text(daemon.exchange(b"daytime\r\n"));
        if reply.starts_with("+\r\n") {
            return;
        }
        assert!(
            reply.starts_with("-too many connections from your address"),
            "{reply:?}"
        );
        assert!(
            Instant::now() < deadline,
            "still refused after {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client answered and holding its end open, having read the whole answer.
fn answered_and_holding(daemon: &Daemon) -> TcpStream {
    let mut first = daemon.connect();
    first.write_all(b"daytime\r\n").unwrap();
    let answer = text(read_all(&mut first));
    assert!(
        answer.starts_with("+\r\n") && answer.ends_with("-UTC\r\n"),
        "{answer:?}"
    );
    first
}

#[test]
fn an_answered_client_is_logged_at_once_and_keeps_its_place_until_its_fin() {
    let mut daemon = deferred("max_connections_per_ip = 1\nclose_drain_timeout = \"60s\"\n");
    let first = answered_and_holding(&daemon);
    // Logged when answered, not when the client closes: a session would
    // log only after the 60 s drain.
    daemon
        .wait_for_log(|l| l.contains("service=daytime") && l.contains("outcome=served"))
        .expect("logged while the client still holds its end");
    // Its place is held until it closes, as a session's is.
    assert_eq!(
        text(daemon.exchange(b"daytime\r\n")),
        "-too many connections from your address\r\n"
    );
    first.shutdown(Shutdown::Write).unwrap();
    served_eventually(&daemon);
}

#[test]
fn an_answered_client_that_resets_gives_its_place_back() {
    let daemon = deferred("max_connections_per_ip = 1\nclose_drain_timeout = \"60s\"\n");
    let first = answered_and_holding(&daemon);
    socket2::SockRef::from(&first)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(first);
    served_eventually(&daemon);
}

#[test]
fn an_answered_client_that_never_closes_is_closed_at_the_drain_timeout() {
    let daemon = deferred("max_connections_per_ip = 1\nclose_drain_timeout = \"1s\"\n");
    let mut first = answered_and_holding(&daemon);
    served_eventually(&daemon);
    // Closed, not forgotten: its writes are answered with RST now.
    let deadline = Instant::now() + PATIENCE;
    while first.write_all(b"x").is_ok() {
        assert!(
            Instant::now() < deadline,
            "the silent client's socket is still open"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_request_sent_with_its_fin_or_with_bytes_behind_it_is_answered() {
    let mut daemon = deferred("");
    let mut stream = daemon.connect();
    stream.write_all(b"daytime\r\n").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    assert!(text(read_all(&mut stream)).starts_with("+\r\n"));
    assert!(text(daemon.exchange(b"isotime\r\nmore bytes")).starts_with("+\r\n"));
    daemon
        .wait_for_log(|l| l.contains("service=isotime") && l.contains("bytes_in=19"))
        .expect("the bytes behind the line are counted");
}

#[test]
fn a_part_of_a_request_goes_on_as_a_session_with_what_was_read() {
    let daemon = deferred("");
    // One byte and a half-close: the session reads on from that byte.
    let mut stream = daemon.connect();
    stream.write_all(b"d").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(
        text(read_all(&mut stream)),
        "-incomplete request line: the connection was closed before its end\r\n"
    );
    // A name in two writes: the first woke the accept, the rest comes later.
    let mut stream = daemon.connect();
    stream.write_all(b"day").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    stream.write_all(b"time\r\n").unwrap();
    assert!(text(read_all(&mut stream)).starts_with("+\r\n"));
    // A service that is not one line: echo gets the bytes behind its name.
    let mut stream = daemon.connect();
    stream.write_all(b"echo\r\nhello").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(text(read_all(&mut stream)), "+\r\nhello");
}

#[test]
fn refusals_are_answered_at_accept_with_their_reasons() {
    let daemon = deferred("[service.clock]\nbuiltin = \"daytime\"\ndeny = [\"127.0.0.1\"]\n");
    assert_eq!(text(daemon.exchange(b"clock\r\n")), "-access denied\r\n");
    assert_eq!(
        text(daemon.exchange(b"nosuch\r\n")),
        "-unknown service nosuch; send HELP for the list\r\n"
    );
}
