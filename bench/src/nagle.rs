//! The seeds' Nagle experiment (write-write-read against delayed ACKs), twice:
//! `fresh` on the negotiation of new connections, and `established` on request/
//! response rounds over one connection that has left Linux's quick-ACK start,
//! against `lines`, a backend that answers each line once all of it is in.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

pub fn fresh(target: SocketAddr, service: &str, iterations: usize) -> Result<(), String> {
    let name = tcpmux::ServiceName::parse(service).map_err(|e| e.to_string())?;
    let once = |split: bool| -> io::Result<Duration> {
        let t0 = Instant::now();
        let mut stream = TcpStream::connect(target)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        if split {
            stream.write_all(name.as_str().as_bytes())?;
            stream.write_all(b"\r\n")?;
        } else {
            let mut line = name.as_str().as_bytes().to_vec();
            line.extend_from_slice(b"\r\n");
            stream.write_all(&line)?;
        }
        let mut first = [0u8; 1];
        stream.read_exact(&mut first)?;
        let elapsed = t0.elapsed();
        if first[0] != b'+' {
            return Err(io::Error::other("service refused"));
        }
        Ok(elapsed)
    };
    for (label, split) in [
        ("one write (name+CRLF)", false),
        ("two writes (name, CRLF)", true),
    ] {
        let mut samples = (0..iterations)
            .map(|_| once(split))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| format!("{target}: {e}"))?;
        samples.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "{label}: connect to first reply byte, median {:.3} ms, max {:.3} ms over {iterations}",
            ms(samples[samples.len() / 2]),
            ms(samples[samples.len() - 1])
        );
    }
    Ok(())
}

/// A line backend: reads a line, answers with the same line, for ever. It
/// answers only once the whole line is in, as any request/response server does,
/// so a request split in two writes leaves it waiting, with its ACK delayed.
pub fn lines(listen: SocketAddr) -> Result<(), String> {
    let listener =
        TcpListener::bind(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    if let Ok(bound) = listener.local_addr() {
        println!("listening {bound}");
        let _ = io::stdout().flush();
    }
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        std::thread::spawn(move || {
            let Ok(mut writer) = conn.try_clone() else {
                return;
            };
            let mut reader = BufReader::new(conn);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if writer.write_all(&line).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    Ok(())
}

/// How a client sends each request.
#[derive(Clone, Copy)]
enum Writes {
    /// Body, then the line end, as two writes, with Nagle's algorithm on.
    SplitNagle,
    /// The same two writes with TCP_NODELAY.
    SplitNoDelay,
    /// The whole request in one write (Nagle on; nothing is held back).
    Whole,
}

impl Writes {
    fn label(self) -> &'static str {
        match self {
            Writes::SplitNagle => "two writes, Nagle on",
            Writes::SplitNoDelay => "two writes, TCP_NODELAY",
            Writes::Whole => "one write",
        }
    }
}

/// Request/response rounds on one established connection to a line server
/// (`lines`, directly or behind tcpmuxd as `service`): `warmup` rounds to leave
/// quick-ACK mode, then `rounds` measured, for each way of sending.
pub fn established(
    target: SocketAddr,
    service: Option<&str>,
    warmup: usize,
    rounds: usize,
) -> Result<(), String> {
    let name = service
        .map(tcpmux::ServiceName::parse)
        .transpose()
        .map_err(|e| e.to_string())?;
    let body = vec![b'x'; 100];
    // Built once: an allocation inside the timed round would be measured too.
    let whole = [&body[..], b"\r\n"].concat();
    for writes in [Writes::SplitNagle, Writes::SplitNoDelay, Writes::Whole] {
        let mut stream = TcpStream::connect(target).map_err(|e| format!("{target}: {e}"))?;
        let setup = |stream: &mut TcpStream| -> io::Result<()> {
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            if let Some(name) = &name {
                tcpmux::negotiate(stream, name, &tcpmux::Options::default())
                    .map_err(|e| io::Error::other(e.to_string()))?;
            }
            stream.set_nodelay(matches!(writes, Writes::SplitNoDelay))
        };
        setup(&mut stream).map_err(|e| format!("{target}: {e}"))?;
        let mut reply = vec![0u8; body.len() + 2];
        let mut round = |stream: &mut TcpStream| -> io::Result<Duration> {
            let t0 = Instant::now();
            match writes {
                Writes::SplitNagle | Writes::SplitNoDelay => {
                    stream.write_all(&body)?;
                    stream.write_all(b"\r\n")?;
                }
                Writes::Whole => stream.write_all(&whole)?,
            }
            stream.read_exact(&mut reply)?;
            let elapsed = t0.elapsed();
            if reply[..body.len()] != body[..] || &reply[body.len()..] != b"\r\n" {
                return Err(io::Error::other("the answer is not the request"));
            }
            Ok(elapsed)
        };
        for _ in 0..warmup {
            round(&mut stream).map_err(|e| format!("{target}: {e}"))?;
        }
        let mut samples = (0..rounds.max(1))
            .map(|_| round(&mut stream))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| format!("{target}: {e}"))?;
        samples.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let stalled = samples
            .iter()
            .filter(|d| **d >= Duration::from_millis(20))
            .count();
        println!(
            "{}: round trip median {:.3} ms, p90 {:.3} ms, max {:.3} ms; {stalled} of {} rounds took 20 ms or more",
            writes.label(),
            ms(samples[samples.len() / 2]),
            ms(samples[samples.len() * 9 / 10]),
            ms(samples[samples.len() - 1]),
            samples.len()
        );
    }
    Ok(())
}
