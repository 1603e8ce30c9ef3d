//! TCPMUX over TLS, against tcpmuxd on real sockets: the tcpmux library and
//! CLI as clients (certificates generated per test), every service kind
//! through TLS, client certificates, reload, concurrency, and what a TLS
//! listener does with clients that do not speak TLS.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use common::pki::{Ca, Leaf, TlsSetup as Setup};
use common::{read_all, Daemon, PATIENCE};
use tcpmux::tls::{TlsOptions, TlsStream};
use tcpmux::Options;

fn options() -> Options {
    Options {
        connect_timeout: Some(PATIENCE),
        reply_timeout: Some(PATIENCE),
        fast_open: false,
    }
}

fn connect(daemon: &Daemon, service: &str, tls: &TlsOptions) -> Result<TlsStream, tcpmux::Error> {
    tcpmux::tls::connect(daemon.addr, "localhost", service, tls, &options())
}

/// Reads to the end; a TLS stream that ends without close_notify is an error.
fn read_to_end(stream: &mut TlsStream) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    stream.read_to_end(&mut out)?;
    Ok(out)
}

#[test]
fn builtins_over_tls_end_with_close_notify() {
    let setup = Setup::new();
    let mut daemon = setup.daemon("", "");
    let mut daytime = connect(&daemon, "daytime", &setup.trust()).unwrap();
    // A client that offers the post-quantum hybrid (as browsers do) gets it;
    // the openssl peers (tls_peers.rs) show classical-only clients still work.
    let group = daytime
        .conn
        .negotiated_key_exchange_group()
        .map(|g| g.name());
    assert_eq!(group, Some(rustls::NamedGroup::X25519MLKEM768));
    let text = String::from_utf8(read_to_end(&mut daytime).unwrap()).unwrap();
    assert!(text.ends_with("\r\n") && text.len() > 10, "{text:?}");
    // The log names the version as OpenSSL does and the suite by its IANA name.
    let line = daemon
        .wait_for_log(|l| l.contains("service=daytime"))
        .expect("the daytime line");
    assert!(
        line.contains("tls=TLSv1.3") && line.contains("cipher=TLS_AES_"),
        "{line}"
    );

    // sometext: every byte, then close_notify (rustls reports a cut stream).
    let mut bulk = connect(&daemon, "sometext", &setup.trust()).unwrap();
    assert_eq!(read_to_end(&mut bulk).unwrap().len(), 1_000_007);

    // echo: bytes behind the request line, in the same record, come back.
    let mut echo = connect(&daemon, "echo", &setup.trust()).unwrap();
    echo.write_all(b"through TLS").unwrap();
    echo.conn.send_close_notify();
    echo.flush().unwrap();
    assert_eq!(read_to_end(&mut echo).unwrap(), b"through TLS");
}

#[test]
fn each_served_certificate_s_expiry_is_a_metric() {
    let setup = Setup::new();
    let daemon = setup.daemon("", "");
    let mut stats = connect(&daemon, "stats", &setup.trust()).unwrap();
    let text = String::from_utf8(read_to_end(&mut stats).unwrap()).unwrap();
    // rcgen's certificates are valid until 4096-01-01.
    let until = rcgen::date_time_ymd(4096, 1, 1).unix_timestamp();
    let line =
        format!("tcpmuxd_tls_certificate_expiry_timestamp_seconds{{name=\"localhost\"}} {until}\n");
    assert!(text.contains(&line), "{line} in {text}");
}

#[test]
fn proxy_and_exec_services_work_over_tls() {
    let setup = Setup::new();
    let backend = common::echo_backend();
    let script = setup.dir.join("who.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho \"name=${TLS_CLIENT_NAME:-none}\"\nread line\necho \"got $line\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let daemon = setup.daemon(
        &format!(
            ", client_ca = \"{}\", client_auth = \"optional\"",
            setup.ca.pem.display()
        ),
        &format!(
            "[service.relay]\nproxy = \"{backend}\"\n[service.who]\nexec = [\"{}\"]\n",
            script.display()
        ),
    );
    // 4 MiB through TLS to a plain backend and back, intact.
    let payload = common::random_bytes(5, 4 << 20);
    let mut relay = connect(&daemon, "relay", &setup.trust()).unwrap();
    relay.write_all(&payload).unwrap();
    relay.conn.send_close_notify();
    relay.flush().unwrap();
    assert!(
        read_to_end(&mut relay).unwrap() == payload,
        "relayed bytes differ"
    );

    // The program sees plaintext, and the client certificate's name.
    let client = setup.ca.client("ops", "ops.example.com", false);
    let with_cert = TlsOptions {
        client_cert: Some((client.cert.clone(), client.key.clone())),
        ..setup.trust()
    };
    for (tls, name) in [(&with_cert, "ops.example.com"), (&setup.trust(), "none")] {
        let mut who = connect(&daemon, "who", tls).unwrap();
        who.write_all(b"hello\n").unwrap();
        who.flush().unwrap();
        let text = String::from_utf8(read_to_end(&mut who).unwrap()).unwrap();
        assert_eq!(text, format!("name={name}\ngot hello\n"));
    }
}

#[test]
fn client_certificates_required_optional_and_per_service_names() {
    let setup = Setup::new();
    let other_ca = Ca::new(&setup.dir, "other-ca");
    let good = setup.ca.client("good", "ops.example.com", false);
    let stranger = other_ca.client("stranger", "ops.example.com", false);
    let expired = setup.ca.client("expired", "ops.example.com", true);
    let dev = setup.ca.client("dev", "dev.example.com", false);
    let presenting = |leaf: &Leaf| TlsOptions {
        client_cert: Some((leaf.cert.clone(), leaf.key.clone())),
        ..setup.trust()
    };
    let services =
        "[service.ops]\nbuiltin = \"daytime\"\nallow_cert_names = [\"OPS.example.com\"]\n";
    let ca = setup.ca.pem.display().to_string();

    let required = setup.daemon(&format!(", client_ca = \"{ca}\""), services);
    assert!(connect(&required, "daytime", &presenting(&good)).is_ok());
    for (who, tls) in [
        ("no certificate", setup.trust()),
        ("another CA's", presenting(&stranger)),
        ("an expired one", presenting(&expired)),
    ] {
        let result = connect(&required, "daytime", &tls);
        assert!(result.is_err(), "{who} was let in");
    }

    let optional = setup.daemon(
        &format!(", client_ca = \"{ca}\", client_auth = \"optional\""),
        services,
    );
    assert!(connect(&optional, "daytime", &setup.trust()).is_ok());
    assert!(connect(&optional, "ops", &presenting(&good)).is_ok());
    for (who, tls) in [("no certificate", setup.trust()), ("dev", presenting(&dev))] {
        match connect(&optional, "ops", &tls) {
            Err(tcpmux::Error::Refused { message }) => {
                assert_eq!(message, "access denied", "{who}")
            }
            other => panic!("{who}: {:?}", other.map(|_| ())),
        }
    }
    // A certificate is still verified when optional.
    assert!(connect(&optional, "daytime", &presenting(&stranger)).is_err());
}

#[test]
fn a_renewed_certificate_is_served_after_sighup_while_old_sessions_go_on() {
    let setup = Setup::new();
    let daemon = setup.daemon("", "");
    let serial = |stream: &TlsStream| {
        let der = stream.conn.peer_certificates().unwrap()[0].to_vec();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        cert.raw_serial().to_vec()
    };
    let mut old = connect(&daemon, "echo", &setup.trust()).unwrap();
    assert_eq!(serial(&old), [1]);

    // Renewal: the same paths, a new certificate (serial 2), then SIGHUP.
    let renewed = setup.ca.server("renewed", 2);
    std::fs::copy(&renewed.cert, &setup.server.cert).unwrap();
    std::fs::copy(&renewed.key, &setup.server.key).unwrap();
    daemon.signal("HUP");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let new = connect(&daemon, "daytime", &setup.trust()).unwrap();
        if serial(&new) == [2] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was never served"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A broken file fails the reload and keeps the renewed one.
    std::fs::write(&setup.server.key, "not a key").unwrap();
    daemon.signal("HUP");
    let failed = |l: &str| l.contains("reload failed, keeping the running configuration");
    assert_eq!(
        daemon.wait_for_lines(1, failed),
        1,
        "the reload ran and failed"
    );
    let still = connect(&daemon, "daytime", &setup.trust()).unwrap();
    assert_eq!(serial(&still), [2]);

    // The session from before the reload still echoes.
    old.write_all(b"after the reload").unwrap();
    old.conn.send_close_notify();
    old.flush().unwrap();
    assert_eq!(read_to_end(&mut old).unwrap(), b"after the reload");
}

/// The library queues its request before the handshake: it leaves with the
/// client's Finished, so the client sends two segments with data (the
/// ClientHello, then Finished and request), not three; blocking and async.
#[test]
fn the_request_leaves_with_the_clients_finished() {
    let setup = Setup::new();
    let daemon = setup.daemon("", "");
    let mut stream = connect(&daemon, "daytime", &setup.trust()).expect("daytime");
    assert_eq!(common::data_segments_out(&stream.sock), 2);
    assert!(!read_to_end(&mut stream).expect("the answer").is_empty());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let segments = runtime.block_on(async {
        let tls = setup.trust();
        let stream =
            tcpmux::tls::connect_async(daemon.addr, "localhost", "daytime", &tls, &options())
                .await
                .expect("daytime, async");
        common::data_segments_out(stream.get_ref().0)
    });
    assert_eq!(segments, 2);
    let names = runtime
        .block_on(tcpmux::tls::list_async(
            daemon.addr,
            "localhost",
            &setup.trust(),
            &options(),
        ))
        .expect("HELP over TLS");
    assert!(names.iter().any(|n| n == "daytime"), "{names:?}");
}

#[test]
fn two_hundred_concurrent_tls_sessions_keep_their_bytes() {
    let setup = Setup::new();
    let daemon = setup.daemon("", "");
    let addr = daemon.addr;
    let tls = setup.trust();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let failures = runtime.block_on(async move {
        let mut sessions = tokio::task::JoinSet::new();
        for i in 0..200u64 {
            let tls = tls.clone();
            sessions.spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let payload = common::random_bytes(i, 16 * 1024 + i as usize * 97);
                let mut stream =
                    tcpmux::tls::connect_async(addr, "localhost", "echo", &tls, &options())
                        .await
                        .map_err(|e| e.to_string())?;
                let (mut reader, mut writer) = tokio::io::split(&mut stream);
                let write = async {
                    writer.write_all(&payload).await?;
                    writer.shutdown().await
                };
                let mut back = Vec::new();
                let (written, read) = tokio::join!(write, reader.read_to_end(&mut back));
                written.and(read.map(drop)).map_err(|e| e.to_string())?;
                if hash(&back) != hash(&payload) {
                    return Err(format!(
                        "session {i}: {} of {} bytes",
                        back.len(),
                        payload.len()
                    ));
                }
                Ok::<_, String>(())
            });
        }
        let mut failures = Vec::new();
        while let Some(done) = sessions.join_next().await {
            if let Err(e) = done.unwrap() {
                failures.push(e);
            }
        }
        failures
    });
    assert!(failures.is_empty(), "{failures:?}");
}

fn hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

#[test]
fn plaintext_and_garbage_on_a_tls_listener_are_refused_quickly() {
    let setup = Setup::new();
    let mut daemon = setup.daemon("", "");
    for junk in [
        &b"daytime\r\n"[..],
        &[0x16, 3, 1, 0, 5, 1, 2, 3, 4, 5][..],
        &[0xff; 300][..],
    ] {
        let started = Instant::now();
        let mut stream = daemon.connect();
        stream.write_all(junk).unwrap();
        let _ = stream.shutdown(Shutdown::Write);
        let answer = read_all(&mut stream);
        // At most a TLS alert; never a TCPMUX answer in clear.
        assert!(
            !answer.starts_with(b"+") && !answer.starts_with(b"-"),
            "{answer:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{junk:?} held the connection"
        );
    }
    daemon
        .wait_for_log(|l| l.contains("TLS handshake failed"))
        .expect("one log line with the reason");
    // Other clients were served meanwhile.
    assert!(connect(&daemon, "daytime", &setup.trust()).is_ok());
}

/// `tcpmux --tls`, the command a user runs: exit 3 and one line for a refused
/// server certificate.
#[test]
fn the_cli_checks_the_server_certificate() {
    let setup = Setup::new();
    let expired = setup.ca.leaf(&common::pki::LeafSpec {
        file: "expired-server",
        dns: &["localhost"],
        common_name: "localhost",
        serial: 3,
        expired: true,
        client: false,
    });
    let good = setup.daemon("", "");
    let old = Daemon::with_config(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", tls = {{ cert = \"{}\", key = \"{}\" }} }}]\n",
        expired.cert.display(),
        expired.key.display()
    ));
    let run = |addr: SocketAddr, extra: &[&str]| {
        let out = Command::new(common::sibling_binary("tcpmux"))
            .args([
                "--host",
                "localhost",
                "--port",
                &addr.port().to_string(),
                "--tls",
            ])
            .args(["--ca", setup.ca.pem.to_str().unwrap()])
            .args(extra)
            .arg("daytime")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run(good.addr, &[]);
    assert_eq!(code, Some(0));
    assert!(stdout.ends_with("\r\n"), "{stdout:?}");
    let (code, _, stderr) = run(good.addr, &["--server-name", "db.example.com"]);
    assert_eq!(code, Some(3));
    assert!(
        stderr.contains("certificate was refused") && stderr.contains("not valid for name"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let (code, _, stderr) = run(old.addr, &[]);
    assert_eq!(code, Some(3));
    assert!(
        stderr.contains("certificate was refused") && stderr.contains("expired"),
        "{stderr}"
    );
}

#[test]
fn a_stalled_handshake_counts_against_the_negotiation_timeout() {
    let setup = Setup::new();
    let mut daemon = setup.daemon("", "negotiation_timeout = \"300ms\"\n");
    let mut stream = daemon.connect();
    // The first bytes of a ClientHello, then nothing.
    stream
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .unwrap();
    let started = Instant::now();
    let answer = read_all(&mut stream);
    assert!(
        answer.is_empty() || answer[0] == 0x15,
        "only a TLS alert: {answer:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    daemon
        .wait_for_log(|l| l.contains("negotiation timeout"))
        .expect("logged as a negotiation timeout");
}

/// CPU time (ticks) of each thread of `pid`, by thread name.
fn thread_cpu(pid: u32) -> Vec<(String, u64)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let ticks: u64 = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|f| f.parse::<u64>().ok())
            .sum();
        threads.push((name.trim().to_owned(), ticks));
    }
    threads
}

/// CPU ticks of the TLS threads and of the event loop (the main thread, named
/// after the binary) while `clients` TLS clients each get `daytime`.
fn cpu_for_clients(daemon: &Daemon, setup: &Setup, clients: usize) -> (u64, u64) {
    let daytime = || {
        let mut stream = connect(daemon, "daytime", &setup.trust()).unwrap();
        read_to_end(&mut stream).unwrap();
    };
    // The TLS threads start with the first TLS listener or handshake.
    daytime();
    let cpu = |threads: &[(String, u64)], named: &dyn Fn(&str) -> bool| -> u64 {
        let matching = threads.iter().filter(|(name, _)| named(name));
        matching.map(|(_, ticks)| ticks).sum()
    };
    let tls_threads = |t: &[(String, u64)]| cpu(t, &|name| name.starts_with("tcpmuxd-tls"));
    let event_loop = |t: &[(String, u64)]| cpu(t, &|name| name == "tcpmuxd");
    let before = thread_cpu(daemon.pid());
    for _ in 0..clients {
        daytime();
    }
    let after = thread_cpu(daemon.pid());
    (
        tls_threads(&after) - tls_threads(&before),
        event_loop(&after) - event_loop(&before),
    )
}

#[test]
fn handshakes_are_computed_off_the_event_loop() {
    let setup = Setup::new();
    // A `tls` listener's sessions run whole on the TLS threads: accept,
    // handshake, answer. The event loop has next to nothing to do.
    let tls = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", {} }}]\n",
        setup.tls_table("")
    ));
    let (threads, event_loop) = cpu_for_clients(&tls, &setup, 400);
    assert!(
        threads >= 4 && event_loop * 4 < threads,
        "tls listener: TLS threads {threads} ticks, event loop {event_loop}"
    );
    // A detecting listener's sessions stay on the loop, which sends each
    // handshake to the TLS threads (key exchange, signature, the client's
    // Finished) and does the rest: a share of the same order; with the
    // handshakes on the loop, the threads' part would be nothing.
    let one_port = Daemon::binary(&format!(
        "listen = [{{ address = \"127.0.0.1:0\", detect = true, {} }}]\n",
        setup.tls_table("")
    ));
    let (threads, event_loop) = cpu_for_clients(&one_port, &setup, 400);
    assert!(
        threads >= 2 && threads * 2 > event_loop,
        "detect + tls: TLS threads {threads} ticks, event loop {event_loop}"
    );
}
