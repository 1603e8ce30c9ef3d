//! `queue_timeout`: a client that finds a service at its `max_connections`
//! waits in line and is served when a connection ends, or hears
//! `-service busy` at the timeout or when the line is full; one that goes
//! away while waiting leaves the line. Only members in service count toward
//! what the line lets through, and room a reload or an operator makes goes
//! to the clients already waiting, in order.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};

use common::{read_all, read_line, Daemon, PATIENCE};

/// A client of `name` whose answer has not been read yet.
fn ask(daemon: &Daemon, name: &str) -> TcpStream {
    let mut stream = daemon.connect();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(format!("{name}\r\n").as_bytes()).unwrap();
    stream
}

fn answer(stream: &mut TcpStream) -> String {
    String::from_utf8(read_line(stream)).unwrap()
}

/// The figure on a metrics line of `family` for `service`, once `ok` holds.
fn wait_for_figure(daemon: &Daemon, family: &str, service: &str, ok: impl Fn(f64) -> bool) -> f64 {
    daemon.wait_for_figure(&format!("{family}{{service=\"{service}\"}}"), ok)
}

fn queue_length(daemon: &Daemon, service: &str, wanted: f64) {
    wait_for_figure(daemon, "tcpmuxd_service_queue_length", service, |v| {
        v == wanted
    });
}

#[test]
fn a_waiting_client_is_served_in_turn_when_a_connection_ends() {
    let daemon =
        Daemon::with_config("[service.echo]\nmax_connections = 1\nqueue_timeout = \"60s\"\n");
    let mut first = ask(&daemon, "echo");
    assert_eq!(answer(&mut first), "+\r\n");
    let mut second = ask(&daemon, "echo");
    queue_length(&daemon, "echo", 1.0);
    let mut third = ask(&daemon, "echo");
    queue_length(&daemon, "echo", 2.0);
    // The first one ends; the second (not the third) gets its turn.
    drop(first);
    assert_eq!(answer(&mut second), "+\r\n");
    second.write_all(b"hello\n").unwrap();
    let mut echoed = [0u8; 6];
    second.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"hello\n");
    queue_length(&daemon, "echo", 1.0);
    drop(second);
    assert_eq!(answer(&mut third), "+\r\n");
    queue_length(&daemon, "echo", 0.0);
    wait_for_figure(&daemon, "tcpmuxd_service_queue_served_total", "echo", |v| {
        v == 2.0
    });
    let waited = wait_for_figure(
        &daemon,
        "tcpmuxd_service_queue_wait_seconds_sum",
        "echo",
        |v| v > 0.0,
    );
    assert!(waited < PATIENCE.as_secs_f64() * 2.0, "waited {waited} s");
}

#[test]
fn the_timeout_and_a_full_queue_say_busy() {
    let daemon = Daemon::with_config(
        "[service.echo]\nmax_connections = 1\nqueue_timeout = \"300ms\"\nqueue_max = 1\n",
    );
    let mut first = ask(&daemon, "echo");
    assert_eq!(answer(&mut first), "+\r\n");
    let mut waiting = ask(&daemon, "echo");
    queue_length(&daemon, "echo", 1.0);
    // The line holds one: the next is refused at once, not after a wait.
    let mut over = ask(&daemon, "echo");
    assert_eq!(
        answer(&mut over),
        "-service busy: the queue is full, try again later\r\n"
    );
    assert_eq!(
        answer(&mut waiting),
        "-service busy: waited too long in the queue, try again later\r\n"
    );
    wait_for_figure(
        &daemon,
        "tcpmuxd_service_queue_timeouts_total",
        "echo",
        |v| v == 1.0,
    );
    queue_length(&daemon, "echo", 0.0);
    // The first client was never disturbed.
    first.write_all(b"still\n").unwrap();
    let mut echoed = [0u8; 6];
    first.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"still\n");
}

#[test]
fn a_client_that_resets_leaves_the_line_and_one_that_half_closed_keeps_its_place() {
    let backend = common::echo_backend();
    let daemon = Daemon::with_config(&format!(
        "[service.db]\nproxy = \"{backend}\"\nmax_connections = 1\nqueue_timeout = \"60s\"\n"
    ));
    let mut first = ask(&daemon, "db");
    assert_eq!(answer(&mut first), "+\r\n");
    let reset = ask(&daemon, "db");
    queue_length(&daemon, "db", 1.0);
    socket2::SockRef::from(&reset)
        .set_linger(Some(std::time::Duration::ZERO))
        .unwrap();
    drop(reset);
    queue_length(&daemon, "db", 0.0);
    // A request sent with its FIN (`printf 'db\r\nrow\n' | nc -N`) waits
    // for its answer like any other.
    let mut half_closed = ask(&daemon, "db");
    half_closed.write_all(b"row\n").unwrap();
    half_closed.shutdown(Shutdown::Write).unwrap();
    queue_length(&daemon, "db", 1.0);
    let mut next = ask(&daemon, "db");
    queue_length(&daemon, "db", 2.0);
    drop(first);
    assert_eq!(read_all(&mut half_closed), b"+\r\nrow\n");
    assert_eq!(answer(&mut next), "+\r\n");
    assert_eq!(
        common::send_and_receive(&mut next, b"more\n".to_vec()),
        b"more\n"
    );
    queue_length(&daemon, "db", 0.0);
}

#[test]
fn queue_keys_need_what_they_wait_for() {
    for (config, words) in [
        (
            "[service.echo]\nqueue_timeout = \"5s\"\n",
            "queue_timeout needs max_connections",
        ),
        (
            "[service.echo]\nmax_connections = 2\nqueue_max = 10\n",
            "queue_max needs queue_timeout",
        ),
        (
            "[service.echo]\nmax_connections = 2\nqueue_timeout = \"5s\"\nqueue_max = 0\n",
            "queue_max",
        ),
        (
            "[service.echo]\nmax_connections = 2\nqueue_timeout = \"0s\"\n",
            "queue_timeout",
        ),
    ] {
        common::assert_config_rejected(config, words);
    }
}

/// The tag a client of `name` reads after `+`: the backend that took it.
fn tag_after_plus(stream: &mut TcpStream) -> String {
    assert_eq!(answer(stream), "+\r\n");
    let mut tag = [0u8; 1];
    stream.read_exact(&mut tag).unwrap();
    String::from_utf8_lossy(&tag).into_owned()
}

#[test]
fn backends_at_their_own_max_connections_queue_or_refuse_the_next_client() {
    let any = "127.0.0.1:0".parse().unwrap();
    let (a, b) = (common::tagged_echo(any, "A"), common::tagged_echo(any, "B"));
    let daemon = Daemon::with_config(&format!(
        "[service.full]\nproxy = [{{ address = \"{a}\", max_connections = 1 }}, \
                                  {{ address = \"{b}\", max_connections = 1 }}]\n\
         balance = \"round-robin\"\n\
         [service.line]\nproxy = [{{ address = \"{a}\", max_connections = 1 }}, \
                                  {{ address = \"{b}\", max_connections = 1 }}]\n\
         queue_timeout = \"60s\"\n"
    ));
    // Without a queue: one client per backend; the caps add up to the
    // service's, so the third is refused like any client of a full service.
    let mut held: Vec<TcpStream> = (0..2).map(|_| ask(&daemon, "full")).collect();
    let mut tags: Vec<String> = held.iter_mut().map(tag_after_plus).collect();
    tags.sort();
    assert_eq!(tags, ["A", "B"]);
    let mut third = ask(&daemon, "full");
    assert_eq!(
        answer(&mut third),
        "-service busy: too many connections, try again later\r\n"
    );
    drop(held);
    // With one (and balance "first"): A is full after one client, so the
    // second goes to B; the third waits and takes B when it frees, passing
    // over A, which is still full.
    let mut first = ask(&daemon, "line");
    assert_eq!(tag_after_plus(&mut first), "A");
    let mut second = ask(&daemon, "line");
    assert_eq!(tag_after_plus(&mut second), "B");
    let mut waiting = ask(&daemon, "line");
    queue_length(&daemon, "line", 1.0);
    drop(second);
    assert_eq!(tag_after_plus(&mut waiting), "B");
    queue_length(&daemon, "line", 0.0);
}

#[test]
fn a_backend_cap_needs_a_fixed_address() {
    common::assert_config_rejected(
        "[service.s]\nproxy = [{ address = \"db.example.internal:5432\", max_connections = 4 }]\n",
        "max_connections needs a fixed address",
    );
    common::assert_config_rejected(
        "[service.s]\nproxy = [{ address = \"127.0.0.1:5432\", max_connections = 0 }]\n",
        "max_connections must be at least 1",
    );
}

#[test]
fn a_drained_member_adds_nothing_to_what_the_queue_lets_through() {
    let any = "127.0.0.1:0".parse().unwrap();
    let (a, b) = (common::tagged_echo(any, "A"), common::tagged_echo(any, "B"));
    let dir = common::scratch_dir();
    let socket = dir.join("admin.sock");
    let daemon = Daemon::with_config(&format!(
        "admin_socket = \"{}\"\n\
         [service.line]\nproxy = [{{ address = \"{a}\", max_connections = 1 }}, \
                                  {{ address = \"{b}\", max_connections = 1 }}]\n\
         queue_timeout = \"60s\"\n",
        socket.display()
    ))
    .keeping(dir);
    common::admin_ok(&socket, &format!("set backend line {a} state drain"));
    // B alone takes clients: one at a time, the others wait their turn
    // (the drained A's place was counted, and the second client refused
    // with "every backend is full", passing its place down the line).
    let mut first = ask(&daemon, "line");
    assert_eq!(tag_after_plus(&mut first), "B");
    let mut waiting: Vec<TcpStream> = (0..4).map(|_| ask(&daemon, "line")).collect();
    queue_length(&daemon, "line", 4.0);
    drop(first);
    assert_eq!(tag_after_plus(&mut waiting[0]), "B");
    queue_length(&daemon, "line", 3.0);
}

#[test]
fn a_reload_that_raises_the_cap_serves_the_waiting_clients_first_in_order() {
    let config =
        |max: usize| format!("[service.echo]\nmax_connections = {max}\nqueue_timeout = \"60s\"\n");
    let daemon = Daemon::with_config(&config(1));
    let mut first = ask(&daemon, "echo");
    assert_eq!(answer(&mut first), "+\r\n");
    let mut second = ask(&daemon, "echo");
    queue_length(&daemon, "echo", 1.0);
    let mut third = ask(&daemon, "echo");
    queue_length(&daemon, "echo", 2.0);
    // Room for one more: the first in line has it at the reload, with
    // nobody leaving and nobody new arriving.
    std::fs::write(daemon.config_path(), config(2)).unwrap();
    daemon.signal("HUP");
    assert_eq!(answer(&mut second), "+\r\n");
    queue_length(&daemon, "echo", 1.0);
    // A newcomer now waits behind the third, and the next room is the
    // third's.
    let mut fourth = ask(&daemon, "echo");
    queue_length(&daemon, "echo", 2.0);
    std::fs::write(daemon.config_path(), config(3)).unwrap();
    daemon.signal("HUP");
    assert_eq!(answer(&mut third), "+\r\n");
    queue_length(&daemon, "echo", 1.0);
    drop(first);
    assert_eq!(answer(&mut fourth), "+\r\n");
}

#[test]
fn a_member_back_up_after_its_health_checks_serves_the_waiting_clients() {
    let any = "127.0.0.1:0".parse().unwrap();
    let b = common::tagged_echo(any, "B");
    // A listens nowhere yet: its checks fail, it is down.
    let a: std::net::SocketAddr = format!("127.0.0.1:{}", common::dns::free_port())
        .parse()
        .unwrap();
    let daemon = Daemon::with_config(&format!(
        "[service.line]\nproxy = [{{ address = \"{a}\", max_connections = 1 }}, \
                                  {{ address = \"{b}\", max_connections = 1 }}]\n\
         queue_timeout = \"60s\"\n\
         health_check = {{ interval = \"100ms\", timeout = \"100ms\", rise = 1, fall = 1 }}\n"
    ));
    daemon.wait_for_figure(
        &format!("tcpmuxd_backend_up{{service=\"line\",backend=\"{a}\"}}"),
        |v| v == 0.0,
    );
    let mut first = ask(&daemon, "line");
    assert_eq!(tag_after_plus(&mut first), "B");
    let mut waiting = ask(&daemon, "line");
    queue_length(&daemon, "line", 1.0);
    // A comes up: its next check makes room, and the waiting client has it
    // while the first still holds B.
    let _a = common::tagged_echo(a, "A");
    assert_eq!(tag_after_plus(&mut waiting), "A");
    drop(first);
}
