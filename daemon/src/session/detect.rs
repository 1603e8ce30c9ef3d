//! Protocol detection on a listener with `detect = true`: the client's first
//! bytes are peeked, never consumed, until they say TLS (routed by its SNI),
//! SSH, HTTP (routed by its Host), a probed protocol, a `match` rule's
//! pattern, or a TCPMUX name; a client silent for `detect_timeout` goes to
//! the listener's `silent` service. The chosen service receives every byte
//! the client sent. On a listener with `tls` too, a ClientHello that names
//! no passed-through service is left for the listener to terminate.

use std::io;

use tcpmux_proto::sniff::client_hello::{self, ClientHello};
use tcpmux_proto::sniff::{classify_with, http, Protocol, DECIDED_WITHIN};
use tcpmux_proto::ServiceName;

use super::opening::{Negotiated, Reply};
use crate::model::{Detect, MatchRule, Routed, MATCH_WINDOW};
use crate::net::peek::{peek_more, peek_parsed, Parsed, HELLO_PEEK, MAX_HELLO};
use crate::net::stream::Stream;
use crate::ops::log_format::clipped;
use crate::registry::{Registry, TlsMatch};

/// The largest HTTP request head accepted.
const MAX_HEAD: usize = 8 * 1024;
/// Bytes peeked to tell the protocol.
const FIRST_PEEK: usize = DECIDED_WITHIN;

/// What the first bytes decided.
pub(super) enum Detected {
    /// The start's answer: a service, a refusal, the end.
    Done(Negotiated),
    /// A TCPMUX request line (or a client too slow to tell, with no `silent`
    /// service), to negotiate as usual.
    Tcpmux,
    /// A TLS client for the listener to terminate: its ClientHello (still
    /// unread, here as parsed) names no service's `sni`.
    Terminate(ClientHello),
}

/// Detects and routes; a passed-through ClientHello's server name goes to
/// `sni` (for `hash_key = "sni"`). With `terminating` (the listener has
/// `tls`), only a ClientHello whose server name a service's `sni` takes is
/// passed through.
pub(super) async fn detect(
    stream: &Stream,
    options: &Detect,
    registry: &Registry,
    (terminating, sni): (bool, &mut Option<String>),
) -> io::Result<Detected> {
    let mut buf = Vec::new();
    let first = tokio::time::timeout(options.timeout, peek_more(stream, &mut buf, FIRST_PEEK));
    let mut more = match first.await {
        Err(_silent) => {
            return Ok(match &options.silent {
                Some(name) => service(name.clone(), Routed::Silent),
                None => Detected::Tcpmux,
            })
        }
        Ok(peeked) => peeked?,
    };
    let probes = options.enabled();
    let protocol = loop {
        if buf.is_empty() {
            return Ok(Detected::Done(Negotiated::Closed));
        }
        if let Some(protocol) = classify_with(&buf, probes) {
            break protocol;
        }
        if !more {
            // Too short to tell, and no more will come: whatever it is, it is
            // a prefix of a TCPMUX name too, and gets what a cut name gets
            // (unless a `match` rule takes these bytes).
            break Protocol::Tcpmux;
        }
        more = peek_more(stream, &mut buf, FIRST_PEEK).await?;
    };
    Ok(match protocol {
        Protocol::Tcpmux if options.rules.is_empty() => Detected::Tcpmux,
        Protocol::Tcpmux => route_match(stream, &mut buf, options, !more).await?,
        Protocol::Ssh => match &options.ssh {
            Some(name) => service(name.clone(), Routed::Ssh),
            None => unrouted(
                Routed::Ssh,
                "no ssh service on this listener".into(),
                Reply::Line,
            ),
        },
        Protocol::Tls => route_tls(stream, &mut buf, (options, registry), terminating, sni).await?,
        Protocol::Http => route_http(stream, &mut buf, options, registry).await?,
        probed => match options.probe_route(probed) {
            Some(name) => service(name.clone(), Routed::Probe(probed)),
            None => unrouted(
                Routed::Probe(probed),
                format!("no {} service on this listener", probed.name()),
                Reply::Close,
            ),
        },
    })
}

/// Tries the listener's `match` rules in order on bytes no probe took: the
/// first that matches routes the client; none leaves a TCPMUX client. A rule
/// sees the first line, up to [`MATCH_WINDOW`] bytes, or what came before the
/// client ended or paused for `detect_timeout`.
async fn route_match(
    stream: &Stream,
    buf: &mut Vec<u8>,
    options: &Detect,
    mut ended: bool,
) -> io::Result<Detected> {
    loop {
        match first_match(&options.rules, buf, ended) {
            Some(Some(rule)) => return Ok(service(rule.service.clone(), Routed::Match)),
            Some(None) => return Ok(Detected::Tcpmux),
            None => {}
        }
        let more = tokio::time::timeout(options.timeout, peek_more(stream, buf, MATCH_WINDOW));
        ended = match more.await {
            Err(_paused) => true,
            Ok(more) => !more?,
        };
    }
}

/// The first rule that matches `first` (`Some(None)`: none does), or `None`
/// while a rule before it cannot tell yet.
fn first_match<'a>(
    rules: &'a [MatchRule],
    first: &[u8],
    ended: bool,
) -> Option<Option<&'a MatchRule>> {
    for rule in rules {
        if rule.pattern.decide(first, ended)? {
            return Some(Some(rule));
        }
    }
    Some(None)
}

fn unrouted(routed: Routed, reason: String, reply: Reply) -> Detected {
    Detected::Done(Negotiated::unrouted(routed, reason, reply))
}

fn service(name: ServiceName, routed: Routed) -> Detected {
    Detected::Done(Negotiated::Routed(name, routed))
}

fn incomplete(what: &'static str, routed: Routed) -> Detected {
    Detected::Done(Negotiated::Incomplete(what, routed))
}

async fn route_tls(
    stream: &Stream,
    buf: &mut Vec<u8>,
    (options, registry): (&Detect, &Registry),
    terminating: bool,
    sni: &mut Option<String>,
) -> io::Result<Detected> {
    let parse = |bytes: &[u8]| client_hello::parse(bytes, MAX_HELLO);
    let hello = match peek_parsed(stream, buf, HELLO_PEEK, parse).await? {
        Parsed::Done(hello) => hello,
        Parsed::Failed(e) => return Ok(unrouted(Routed::Sni, e.to_string(), Reply::Close)),
        Parsed::Full => {
            let reason = "ClientHello split into too many records".into();
            return Ok(unrouted(Routed::Sni, reason, Reply::Close));
        }
        Parsed::Ended => return Ok(incomplete("TLS ClientHello", Routed::Sni)),
    };
    let mut found = registry.by_hello(hello.server_name.as_deref(), &hello.alpn);
    if terminating {
        // Services without `sni` are found by the protocol the handshake
        // agrees on, after termination, as on any TLS listener; a client no
        // `sni` takes is terminated, whatever `sni_default` says.
        found = found.filter(|(passed, _)| !passed.sni.is_empty());
        let exact_here = hello
            .server_name
            .as_deref()
            .is_some_and(|name| registry.terminates_before_wildcard(name));
        if found.is_none() || exact_here {
            return Ok(Detected::Terminate(hello));
        }
    }
    sni.clone_from(&hello.server_name);
    let routed = match found {
        Some((_, TlsMatch::Alpn)) => Routed::Alpn,
        _ => Routed::Sni,
    };
    Ok(by_name(
        hello.server_name.as_deref(),
        found.map(|(service, _)| &service.name),
        options.sni_default.as_ref(),
        ByName {
            routed,
            reply: Reply::Close,
            unknown: "no service for SNI",
            absent: "ClientHello without SNI and no sni_default",
        },
    ))
}

async fn route_http(
    stream: &Stream,
    buf: &mut Vec<u8>,
    options: &Detect,
    registry: &Registry,
) -> io::Result<Detected> {
    // The parser refuses a head as long as MAX_HEAD, so the peek never fills.
    let parse = |bytes: &[u8]| http::parse(bytes, MAX_HEAD);
    let head = match peek_parsed(stream, buf, MAX_HEAD, parse).await? {
        Parsed::Done(head) => head,
        Parsed::Failed(e) => return Ok(unrouted(Routed::Http, e.to_string(), Reply::Http)),
        Parsed::Full | Parsed::Ended => return Ok(incomplete("HTTP request head", Routed::Http)),
    };
    let found = head
        .host
        .as_deref()
        .and_then(|host| registry.by_http_host(host));
    Ok(by_name(
        head.host.as_deref(),
        found.map(|service| &service.name),
        options.http.as_ref(),
        ByName {
            routed: Routed::Http,
            reply: Reply::Http,
            unknown: "no service for HTTP host",
            absent: "HTTP request without Host and no http service",
        },
    ))
}

/// How a protocol routed by a name in it (TLS by SNI, HTTP by Host) routes
/// and refuses.
struct ByName {
    routed: Routed,
    reply: Reply,
    /// The refusal's reason when the name leads nowhere (the name follows).
    unknown: &'static str,
    /// The refusal's reason when there is no name and no default.
    absent: &'static str,
}

/// The service the client's `name` leads to (`found`), else the listener's
/// `default`, else a refusal saying which was missing.
fn by_name(
    name: Option<&str>,
    found: Option<&ServiceName>,
    default: Option<&ServiceName>,
    how: ByName,
) -> Detected {
    match (found.or(default), name) {
        (Some(service_name), _) => service(service_name.clone(), how.routed),
        (None, Some(name)) => unrouted(
            how.routed,
            format!("{} {}", how.unknown, clipped(name)),
            how.reply,
        ),
        (None, None) => unrouted(how.routed, how.absent.into(), how.reply),
    }
}
