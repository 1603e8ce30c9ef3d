//! An HTTP/1.x request head as far as routing needs it: the method, the
//! request target, and the host it names (lower case, port removed), read
//! without consuming anything.

/// What a request head says about where it wants to go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// The method, as sent.
    pub method: String,
    /// The request target, as sent (`/path?query`, or absolute-form).
    pub target: String,
    /// The host the request is for, lower case, without its port: an
    /// absolute-form target's, which wins over the Host header (RFC 9112
    /// §3.2.2), else the Host header's; `None` without either.
    pub host: Option<String>,
    /// Bytes of the head, its blank line included.
    pub length: usize,
}

/// Why the bytes are not an HTTP/1.x request head.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// The request line is not `METHOD target HTTP/1.x`.
    #[error("not an HTTP/1.x request line")]
    NotHttp,
    /// No blank line within the limit.
    #[error("HTTP request head longer than {0} bytes")]
    TooLong(usize),
    /// A header line without a colon or with whitespace before it, or a
    /// Host header given twice.
    #[error("malformed HTTP request head: {0}")]
    Malformed(&'static str),
}

/// Reads the request head at the start of `input`: `Ok(None)` means more bytes
/// are needed; a head longer than `max_len` bytes is refused.
pub fn parse(input: &[u8], max_len: usize) -> Result<Option<RequestHead>, HeadError> {
    let window = &input[..input.len().min(max_len)];
    let Some(first_end) = find(window, b"\n") else {
        return if input.len() >= max_len {
            Err(HeadError::TooLong(max_len))
        } else {
            check_request_line_prefix(window).map(|()| None)
        };
    };
    let (method, target) = request_line(trim_cr(&window[..first_end]))?;
    let Some(end) = head_end(window) else {
        return if input.len() >= max_len {
            Err(HeadError::TooLong(max_len))
        } else {
            Ok(None)
        };
    };
    let mut host = None;
    for line in window[first_end + 1..end].split(|&b| b == b'\n') {
        let line = trim_cr(line);
        if line.is_empty() {
            continue;
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(HeadError::Malformed("a header line has no colon"))?;
        // RFC 9112 §5.1: a server must reject whitespace between a field's
        // name and its colon (`Host :`), which proxies read differently.
        if line[..colon]
            .last()
            .is_some_and(|&b| b == b' ' || b == b'\t')
        {
            return Err(HeadError::Malformed("whitespace before a header's colon"));
        }
        if line[..colon].eq_ignore_ascii_case(b"host") {
            if host.is_some() {
                return Err(HeadError::Malformed("Host given twice"));
            }
            host = Some(host_of(&line[colon + 1..]));
        }
    }
    let host = match absolute_form_host(&target) {
        Some(authority) => authority,
        None => host.flatten(),
    };
    Ok(Some(RequestHead {
        method,
        target,
        host,
        length: end + 1,
    }))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Where the head ends: the index of the blank line's LF.
fn head_end(input: &[u8]) -> Option<usize> {
    let crlf = find(input, b"\r\n\r\n").map(|i| i + 3);
    let lf = find(input, b"\n\n").map(|i| i + 1);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The host of an absolute-form target (`http://host:port/path`), if the
/// target is one: `Some(None)` for one with an empty host.
fn absolute_form_host(target: &str) -> Option<Option<String>> {
    let (scheme, rest) = target.split_once("://")?;
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    Some(host_of(authority.as_bytes()))
}

/// The method and target of a complete request line `METHOD SP target SP HTTP/1.x`.
/// A control byte anywhere refuses it, as it refuses an incomplete line
/// (`check_request_line_prefix`): a line must not turn from "not HTTP" into
/// HTTP by arriving whole.
fn request_line(line: &[u8]) -> Result<(String, String), HeadError> {
    if line.iter().any(|&b| b.is_ascii_control() && b != b'\r') {
        return Err(HeadError::NotHttp);
    }
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::NotHttp);
    };
    let token = |b: &u8| b.is_ascii_alphabetic() || *b == b'-';
    if method.is_empty() || !method.iter().all(token) || target.is_empty() {
        return Err(HeadError::NotHttp);
    }
    if !(version == b"HTTP/1.1" || version == b"HTTP/1.0") {
        return Err(HeadError::NotHttp);
    }
    Ok((
        String::from_utf8_lossy(method).into_owned(),
        String::from_utf8_lossy(target).into_owned(),
    ))
}

/// Refuses early an incomplete first line that can no longer become a request
/// line: a method with a non-letter, or a control byte.
fn check_request_line_prefix(partial: &[u8]) -> Result<(), HeadError> {
    let method_end = partial
        .iter()
        .position(|&b| b == b' ')
        .unwrap_or(partial.len());
    let token = |b: &u8| b.is_ascii_alphabetic() || *b == b'-';
    if !partial[..method_end].iter().all(token)
        || partial.iter().any(|&b| b.is_ascii_control() && b != b'\r')
    {
        return Err(HeadError::NotHttp);
    }
    Ok(())
}

/// The host of a Host value: trimmed, lower case, without `:port`; an IPv6
/// literal keeps its brackets off. `None` when empty.
fn host_of(value: &[u8]) -> Option<String> {
    let value = String::from_utf8_lossy(value).trim().to_ascii_lowercase();
    let host = match value.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default().to_owned(),
        None => match value.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host.to_owned(),
            _ => value,
        },
    };
    let host = host.trim_end_matches('.').to_owned();
    (!host.is_empty()).then_some(host)
}
