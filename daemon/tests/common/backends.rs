//! Plain TCP backends for proxy tests, on threads of their own, and a client
//! that sends and reads at once.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};

use super::read_all;

/// A plain TCP backend that echoes every connection until EOF, then closes.
pub fn echo_backend() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind echo backend");
    let addr = listener.local_addr().expect("backend address");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let Ok(mut reader) = conn.try_clone() else {
                    return;
                };
                let _ = std::io::copy(&mut reader, &mut conn);
                let _ = conn.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    addr
}

/// Writes `data` on a helper thread, then half-closes, while this thread reads
/// everything the server sends until it closes: what a relay test needs, since
/// writing all first could fill both directions' buffers and deadlock.
pub fn send_and_receive(stream: &mut TcpStream, data: Vec<u8>) -> Vec<u8> {
    let mut writer = stream.try_clone().expect("clone stream");
    let sender = std::thread::spawn(move || {
        writer.write_all(&data).expect("send");
        writer
            .shutdown(std::net::Shutdown::Write)
            .expect("half-close");
    });
    let received = read_all(stream);
    sender.join().expect("sender thread");
    received
}

/// A backend on `addr` that sends `tag`, then echoes until the client's EOF.
pub fn tagged_echo(addr: SocketAddr, tag: &'static str) -> SocketAddr {
    let listener = std::net::TcpListener::bind(addr).expect("bind backend");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let _ = conn.write_all(tag.as_bytes());
                let Ok(mut reader) = conn.try_clone() else {
                    return;
                };
                let _ = std::io::copy(&mut reader, &mut conn);
                let _ = conn.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    addr
}
