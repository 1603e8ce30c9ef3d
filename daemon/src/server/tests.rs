//! What an idle client costs the daemon's heap, counted by the test
//! allocator (`heap.rs`) on a server run in process: the figure
//! `bench/idle.sh` measures as resident memory, here as a regression test.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};

use tokio::io::AsyncReadExt;

use super::{DaemonState, Server};
use crate::config::Config;
use crate::heap;
use crate::model::ListenAddr;

const CLIENTS: usize = 256;

/// Heap bytes per client held by a fresh daemon's detecting listener while
/// `CLIENTS` clients that sent `opening` wait, each connected before the
/// runtime resumes. A TCPMUX client connected last is answered only after
/// every earlier session has run its first step (the runtime here has one
/// thread and runs its tasks in order), so each has read what it was sent.
fn heap_per_client(opening: &[u8]) -> isize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    let text =
        "listen = [{ address = \"127.0.0.1:0\", detect = true, detect_timeout = \"60s\" }]\n\
                negotiation_timeout = \"60s\"\nmax_connections = 1000\n";
    let daemon = DaemonState::default();
    let config = Config::parse(text, "test", daemon.keys()).unwrap();
    let server = local.block_on(&runtime, async {
        Server::bind(config, Vec::new(), None, daemon)
    });
    let server = server.unwrap();
    let addr = match server.local_addrs()[..] {
        [ListenAddr::Tcp(addr)] => addr,
        ref other => panic!("one TCP listener expected: {other:?}"),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (_reload, reloads) = tokio::sync::mpsc::channel(1);
    local.spawn_local(server.run(async { drop(stopped.await) }, reloads));
    // Warmed up: the listener, the chores, one session come and gone.
    local.block_on(&runtime, answered(addr));
    let before = heap::live();
    let waiting: Vec<TcpStream> = (0..CLIENTS)
        .map(|_| {
            let mut client = TcpStream::connect(addr).unwrap();
            client.write_all(opening).unwrap();
            client
        })
        .collect();
    local.block_on(&runtime, answered(addr));
    let held = heap::live() - before;
    drop(waiting);
    drop(stop);
    held / CLIENTS as isize
}

/// Connects a TCPMUX client and waits for `daytime`'s answer.
async fn answered(addr: SocketAddr) {
    let mut client = TcpStream::connect(addr).unwrap();
    client.write_all(b"daytime\r\n").unwrap();
    client.set_nonblocking(true).unwrap();
    let mut client = tokio::net::TcpStream::from_std(client).unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert!(answer.starts_with(b"+"), "{answer:?}");
}

#[test]
fn an_idle_client_costs_little_heap_and_a_partial_opening_nothing_more() {
    let silent = heap_per_client(b"");
    let mut head = b"GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: ".to_vec();
    head.resize(1000, b'a');
    let partial_head = heap_per_client(&head);
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3f, 0xfc, 0x03, 0x03,
    ];
    hello.resize(3000, 0);
    let partial_hello = heap_per_client(&hello);
    eprintln!("heap per client: silent {silent}, 1,000 B of a head {partial_head}, 3,000 B of a ClientHello {partial_hello}");
    // Session 16's figure was about 6 KB: the service's future and the TLS
    // handshake sized into every session. About 3,040 since; a refusal's
    // send awaited unboxed in every session once made it 3,460. 2,826 since
    // the session is one value whose future holds it once (session/mod.rs
    // `run`), 2,610 since its close is boxed; 2,629 with the session held
    // in its task, not boxed beside it; the bound fails a regression of a
    // quarter of a kilobyte.
    assert!(silent < 2848, "a silent client holds {silent} heap bytes");
    // What a stalled client sent is the kernel's: it costs no buffer here.
    for (what, held) in [("head", partial_head), ("ClientHello", partial_hello)] {
        assert!(
            held < silent + 256,
            "a stalled partial {what} holds {held} bytes, a silent client {silent}"
        );
    }
}

#[test]
fn an_established_echo_session_costs_little_heap() {
    let echo = heap_per_client(b"echo\r\n");
    eprintln!("heap per established echo session: {echo}");
    // 4,204 bytes before the queue's wait was boxed (it sized every
    // session's reply future by its 512-byte peek buffer), 3,340 after,
    // 3,122 with the close boxed too; 3,259 by session 26, then 2,309 once
    // chargen's and sometext's state, the refusals' sends, the status
    // line's buffer, a second box around the service and the row's TLS
    // strings left the served session; the bound fails a regression of a
    // quarter of a kilobyte.
    assert!(
        echo < 2528,
        "an established echo session holds {echo} heap bytes"
    );
}
