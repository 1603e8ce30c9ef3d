//! `tcpmux admin`: sends one command line to a daemon's admin socket, reads
//! its one-line JSON reply, and prints it as a table for people (or as it is
//! with `--json`). Exit status: 0 done, 1 refused or unknown target, 3 the
//! socket cannot be reached.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde_json::Value;

use super::args::AdminArgs;

pub fn main(args: impl Iterator<Item = String>) -> ExitCode {
    let args = AdminArgs::parse_from(args);
    let line = args.command.join(" ");
    let reply = match ask(&args, &line) {
        Ok(reply) => reply,
        Err(e) => {
            eprintln!("tcpmux admin: {}: {e}", args.socket.display());
            return ExitCode::from(3);
        }
    };
    let Ok(value) = serde_json::from_str::<Value>(&reply) else {
        eprintln!("tcpmux admin: the daemon's reply is not JSON: {reply}");
        return ExitCode::from(3);
    };
    if args.json {
        println!("{}", reply.trim_end());
    }
    if value["ok"] != Value::Bool(true) {
        let error = value["error"].as_str().unwrap_or("refused");
        eprintln!("tcpmux admin: {error}");
        return ExitCode::from(1);
    }
    if !args.json {
        print!("{}", render(&value));
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
fn render(value: &Value) -> String {
    let rows = |key: &str| value[key].as_array().cloned().unwrap_or_default();
    if value.get("services").is_some() {
        return services(&rows("services"));
    }
    if value.get("backends").is_some() {
        return backends(&rows("backends"));
    }
    if value.get("listeners").is_some() {
        return listeners(&rows("listeners"));
    }
    if value.get("handoff").is_some() {
        return handoff(&rows("handoff"));
    }
    if value.get("sessions").is_some() {
        return sessions(&rows("sessions"));
    }
    if let Some(killed) = value["killed"].as_u64() {
        let plural = if killed == 1 { "" } else { "s" };
        return format!("ended {killed} session{plural}\n");
    }
    if let Some(commands) = value["commands"].as_array() {
        return commands
            .iter()
            .filter_map(Value::as_str)
            .map(|c| format!("{c}\n"))
            .collect();
    }
    if let Some(backend) = value.get("backend").filter(|b| b.is_object()) {
        return backends(std::slice::from_ref(backend));
    }
    if let (Some(service), Some(state)) = (value["service"].as_str(), value["state"].as_str()) {
        return format!("{service}: {state}\n");
    }
    format!("{value}\n")
}

/// A JSON value as a table cell.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Array(items) if items.is_empty() => "-".into(),
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
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
fn marked(row: &Value, key: &str) -> String {
    let mark = if row["set_at_runtime"] == Value::Bool(true) {
        "*"
    } else {
        ""
    };
    format!("{}{mark}", cell(&row[key]))
}

fn services(rows: &[Value]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let totals = r["totals"].as_object().map_or_else(String::new, |t| {
                t.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            });
            vec![
                cell(&r["name"]),
                cell(&r["kind"]),
                marked(r, "state"),
                cell(&r["active"]),
                cell(&r["max_connections"]),
                totals,
            ]
        })
        .collect();
    table(&["NAME", "KIND", "STATE", "ACTIVE", "MAX", "TOTALS"], &body) + &footnote(rows)
}

fn backends(rows: &[Value]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            ["service", "backend"]
                .iter()
                .map(|k| cell(&r[*k]))
                .chain([marked(r, "state")])
                .chain(
                    [
                        "weight",
                        "active",
                        "connections",
                        "failures",
                        "last_check",
                        "source",
                    ]
                    .iter()
                    .map(|k| cell(&r[*k])),
                )
                .collect()
        })
        .collect();
    let headers = [
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
    table(&headers, &body) + &footnote(rows)
}

fn listeners(rows: &[Value]) -> String {
    let keys = [
        "kind",
        "address",
        "name",
        "detect",
        "tls",
        "accept_proxy_from",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| keys.iter().map(|k| cell(&r[*k])).collect())
        .collect();
    table(
        &["KIND", "ADDRESS", "NAME", "DETECT", "TLS", "PROXY FROM"],
        &body,
    )
}

fn handoff(rows: &[Value]) -> String {
    let keys = ["pid", "uid", "names", "acks", "in_flight"];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| keys.iter().map(|k| cell(&r[*k])).collect())
        .collect();
    table(&["PID", "UID", "NAMES", "ACKS", "IN FLIGHT"], &body)
}

fn sessions(rows: &[Value]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let tls = match (r["tls"].as_str(), r["cert"].as_str()) {
                (Some(version), Some(cert)) => format!("{version} {cert}"),
                (Some(version), None) => version.to_owned(),
                _ => "-".into(),
            };
            vec![
                cell(&r["id"]),
                cell(&r["client"]),
                cell(&r["listener"]),
                cell(&r["service"]),
                cell(&r["routed"]),
                age(r["age"].as_f64().unwrap_or(0.0)),
                size(r["bytes_in"].as_u64().unwrap_or(0)),
                size(r["bytes_out"].as_u64().unwrap_or(0)),
                cell(&r["backend"]),
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

fn footnote(rows: &[Value]) -> String {
    if rows
        .iter()
        .any(|r| r["set_at_runtime"] == Value::Bool(true))
    {
        "* set at run time (a restart returns to the file)\n".into()
    } else {
        String::new()
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
        let reply: Value = serde_json::from_str(
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
