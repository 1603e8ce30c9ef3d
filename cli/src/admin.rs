//! `tcpmux admin`: sends one command to a daemon's admin socket, reads its
//! one-line reply, and prints it as a table for people (or as it is with
//! `--json`). Both sides speak `tcpmux_proto::admin`. Exit status: 0 done,
//! 1 refused or unknown target, 3 the socket cannot be reached.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tcpmux_proto::admin::{
    BackendRow, FleetRow, HandoffRow, ListenerRow, Reply, Request, ServiceRow, SessionRow, SetBy,
};

use super::args::AdminArgs;

pub fn main(args: impl Iterator<Item = String>) -> ExitCode {
    let args = AdminArgs::parse_from(args);
    // Read here as the daemon would: a mistake is told without a connection.
    let mut words = args.command.join(" ");
    if args.local {
        words.push_str(" --local");
    }
    let request = match Request::parse(&words) {
        Ok(request) => request,
        Err(e) => {
            eprintln!("tcpmux admin: {e}");
            return ExitCode::from(1);
        }
    };
    let line = match ask(&args, &request.to_string()) {
        Ok(line) => line,
        Err(e) => {
            eprintln!("tcpmux admin: {}: {e}", args.socket.display());
            return ExitCode::from(3);
        }
    };
    let reply = match Reply::decode(&line) {
        Ok(reply) => reply,
        Err(e) => {
            eprintln!(
                "tcpmux admin: the daemon's reply is not one tcpmux admin reads ({e}): {line}"
            );
            return ExitCode::from(3);
        }
    };
    if args.json {
        println!("{}", line.trim_end());
    }
    if let Reply::Refused(error) = &reply {
        eprintln!("tcpmux admin: {error}");
        return ExitCode::from(1);
    }
    if !args.json {
        print!("{}", render(&reply));
    }
    ExitCode::SUCCESS
}

/// One command, one reply line.
fn ask(args: &AdminArgs, line: &str) -> std::io::Result<String> {
    let limit = (args.timeout > 0.0).then(|| Duration::from_secs_f64(args.timeout));
    let mut stream = UnixStream::connect(&args.socket)?;
    stream.set_read_timeout(limit)?;
    stream.set_write_timeout(limit)?;
    // A daemon that refuses this uid answers without reading: its reply
    // may already be waiting, so a failed write is not the end.
    let written = stream.write_all(format!("{line}\n").as_bytes());
    let mut reply = String::new();
    BufReader::new(&stream).read_line(&mut reply)?;
    if reply.is_empty() {
        written?;
        return Err(std::io::Error::other(
            "the daemon closed the connection without a reply",
        ));
    }
    Ok(reply)
}

/// The reply for people: a table for `show`, a line for a change.
fn render(reply: &Reply) -> String {
    match reply {
        Reply::Help { commands, .. } => commands.iter().map(|c| format!("{c}\n")).collect(),
        Reply::Services(rows) => services(rows),
        Reply::Backends(rows) => backends(rows),
        Reply::Backend(row) => backends(row.as_slice()),
        Reply::Listeners(rows) => listeners(rows),
        Reply::Handoff(rows) => handoff(rows),
        Reply::Sessions(rows) => sessions(rows),
        Reply::Killed(_) => "ended 1 session\n".into(),
        Reply::ShutDown { killed, .. } => {
            let plural = if *killed == 1 { "" } else { "s" };
            format!("ended {killed} session{plural}\n")
        }
        Reply::Switched { service, state } => format!("{service}: {state}\n"),
        Reply::Fleet { etcd, nodes } => format!("etcd: {etcd}\n{}", fleet(nodes)),
        Reply::Refused(error) => format!("{error}\n"),
    }
}

/// An optional value as a table cell.
fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".into(), |v| v.to_string())
}

fn yes(flag: bool) -> String {
    if flag { "yes" } else { "no" }.into()
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

/// Aligned columns; numbers to the right.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, &width)| {
                if !cell.is_empty() && cell.chars().all(|c| c.is_ascii_digit()) {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(headers.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        out.push_str(&line(row.clone()));
    }
    out
}

/// `state*` when an operator set it at run time.
fn marked(state: String, set_at_runtime: bool) -> String {
    if set_at_runtime {
        format!("{state}*")
    } else {
        state
    }
}

/// Who set a run-time state: `edge-1 (fleet)`, `edge-1 (local)`, `-`.
fn set_by(by: Option<&SetBy>) -> String {
    by.map_or_else(|| "-".into(), |by| format!("{} ({})", by.node, by.scope))
}

/// `rows` with a SET BY column after `headers`, when any row has one.
fn with_set_by(
    mut headers: Vec<&'static str>,
    mut body: Vec<Vec<String>>,
    by: Vec<Option<&SetBy>>,
) -> String {
    if by.iter().any(Option::is_some) {
        headers.push("SET BY");
        for (row, by) in body.iter_mut().zip(by) {
            row.push(set_by(by));
        }
    }
    table(&headers, &body)
}

fn services(rows: &[ServiceRow]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let totals: Vec<String> = r.totals.iter().map(|(k, v)| format!("{k}={v}")).collect();
            vec![
                r.name.clone(),
                r.kind.clone(),
                marked(r.state.to_string(), r.set_at_runtime),
                r.active.to_string(),
                or_dash(r.max_connections),
                totals.join(" "),
            ]
        })
        .collect();
    let marked = rows.iter().any(|r| r.set_at_runtime);
    let headers = vec!["NAME", "KIND", "STATE", "ACTIVE", "MAX", "TOTALS"];
    let by = rows.iter().map(|r| r.set_by.as_ref()).collect();
    with_set_by(headers, body, by) + footnote(marked)
}

fn fleet(rows: &[FleetRow]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                if r.this {
                    format!("{} (this)", r.node)
                } else {
                    r.node.clone()
                },
                r.address.clone(),
                r.version.clone(),
                age(r.uptime as f64),
                r.sessions.to_string(),
                format!("{} ago", age(r.last_seen as f64)),
            ]
        })
        .collect();
    let headers = [
        "NODE",
        "ADDRESS",
        "VERSION",
        "UPTIME",
        "SESSIONS",
        "LAST SEEN",
    ];
    table(&headers, &body)
}

fn backends(rows: &[BackendRow]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.service.clone(),
                match r.udp {
                    true => format!("{} (udp)", r.backend),
                    false => r.backend.clone(),
                },
                marked(r.state.to_string(), r.set_at_runtime),
                r.weight.to_string(),
                r.active.to_string(),
                r.connections.to_string(),
                r.failures.to_string(),
                r.last_check.map_or_else(|| "-".into(), |c| c.to_string()),
                r.source.to_string(),
            ]
        })
        .collect();
    let headers = vec![
        "SERVICE",
        "BACKEND",
        "STATE",
        "WEIGHT",
        "ACTIVE",
        "CONNECTIONS",
        "FAILURES",
        "CHECK",
        "SOURCE",
    ];
    let marked = rows.iter().any(|r| r.set_at_runtime);
    let by = rows.iter().map(|r| r.set_by.as_ref()).collect();
    with_set_by(headers, body, by) + footnote(marked)
}

fn listeners(rows: &[ListenerRow]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.kind.clone(),
                r.address.clone(),
                or_dash(r.name.as_ref()),
                yes(r.detect),
                yes(r.tls),
                list(&r.accept_proxy_from),
            ]
        })
        .collect();
    table(
        &["KIND", "ADDRESS", "NAME", "DETECT", "TLS", "PROXY FROM"],
        &body,
    )
}

fn handoff(rows: &[HandoffRow]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.pid.to_string(),
                r.uid.to_string(),
                list(&r.names),
                yes(r.acks),
                r.in_flight.to_string(),
            ]
        })
        .collect();
    table(&["PID", "UID", "NAMES", "ACKS", "IN FLIGHT"], &body)
}

fn sessions(rows: &[SessionRow]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let tls = match (&r.tls, &r.cert) {
                (Some(version), Some(cert)) => format!("{version} {cert}"),
                (Some(version), None) => version.clone(),
                _ => "-".into(),
            };
            vec![
                r.id.to_string(),
                r.client.clone(),
                match r.udp {
                    true => format!("udp:{}", r.listener),
                    false => r.listener.clone(),
                },
                or_dash(r.service.as_ref()),
                r.routed.clone(),
                age(r.age),
                size(r.bytes_in),
                size(r.bytes_out),
                or_dash(r.backend.as_ref()),
                tls,
            ]
        })
        .collect();
    let headers = [
        "ID", "CLIENT", "LISTENER", "SERVICE", "ROUTED", "AGE", "IN", "OUT", "BACKEND", "TLS",
    ];
    table(&headers, &body)
}

/// Seconds as people read a duration: `42s`, `5m07s`, `3h12m`, `2d04h`.
fn age(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Bytes in binary units: `512 B`, `1.5 KiB`, `3.0 MiB`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn footnote(marked: bool) -> &'static str {
    if marked {
        "* set at run time (a restart returns to the file)\n"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_sizes_read_as_people_write_them() {
        assert_eq!(age(0.4), "0s");
        assert_eq!(age(427.0), "7m07s");
        assert_eq!(age(3.0 * 3600.0 + 720.0), "3h12m");
        assert_eq!(age(2.0 * 86400.0 + 4.0 * 3600.0), "2d04h");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 * 1024 * 1024), "3.0 MiB");
    }

    #[test]
    fn columns_line_up_and_numbers_go_right() {
        let text = table(
            &["NAME", "ACTIVE"],
            &[
                vec!["echo".into(), "7".into()],
                vec!["sometext".into(), "1234".into()],
            ],
        );
        assert_eq!(
            text,
            "NAME      ACTIVE\necho           7\nsometext    1234\n"
        );
    }

    #[test]
    fn a_backend_set_at_run_time_is_marked() {
        let reply = Reply::decode(
            r#"{"ok":true,"backend":{"service":"web","backend":"10.0.0.1:80","state":"drain","weight":1,"active":2,"connections":9,"failures":0,"last_check":null,"source":"config","set_at_runtime":true}}"#,
        )
        .unwrap();
        let text = render(&reply);
        assert!(
            text.contains("drain*") && text.contains("* set at run time"),
            "{text}"
        );
    }
}
