//! The TLS ClientHello as far as routing needs it: the server name (SNI) and
//! the ALPN protocols, read from the records received so far without
//! consuming them. The handshake message may be split across any number of
//! records and reads (post-quantum key shares make it larger than one record).

/// TLS record type of handshake messages.
const HANDSHAKE: u8 = 0x16;
/// Handshake message type of a ClientHello.
const CLIENT_HELLO: u8 = 0x01;
/// The largest record payload TLS allows (2^14) plus the expansion slack some
/// stacks use; anything larger is not TLS.
const MAX_RECORD: usize = (1 << 14) + 2048;
const EXT_SERVER_NAME: u16 = 0x0000;
const EXT_ALPN: u16 = 0x0010;

/// What a ClientHello says about where it wants to go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientHello {
    /// The host name it asks for (SNI), lower case; `None` without one.
    pub server_name: Option<String>,
    /// The ALPN protocols it offers, in its order.
    pub alpn: Vec<String>,
    /// Bytes from the start of the input to the ClientHello's end.
    pub length: usize,
}

/// Why the bytes are not a ClientHello that can be routed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// The first record is not a TLS handshake record.
    #[error("not a TLS handshake record")]
    NotTls,
    /// A record longer than TLS allows.
    #[error("TLS record of {0} bytes, longer than TLS allows")]
    RecordTooLong(usize),
    /// The first handshake message is not a ClientHello.
    #[error("the first TLS handshake message is not a ClientHello (type {0})")]
    NotClientHello(u8),
    /// A ClientHello larger than the receiver accepts.
    #[error("ClientHello of {declared} bytes, more than the {limit} accepted")]
    TooLong {
        /// Bytes the handshake header declares.
        declared: usize,
        /// The receiver's limit.
        limit: usize,
    },
    /// Lengths inside the ClientHello that do not add up.
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
}

/// Reads the ClientHello at the start of `input`: `Ok(None)` means every byte
/// so far may belong to one, send more; `Ok(Some(hello))` that it is complete
/// (in the first `hello.length` bytes). A ClientHello declaring more than
/// `max_len` bytes is refused as soon as its length is known.
pub fn parse(input: &[u8], max_len: usize) -> Result<Option<ClientHello>, HelloError> {
    let Some((message, length)) = handshake_message(input, max_len)? else {
        return Ok(None);
    };
    let mut hello = read_body(&message)?;
    hello.length = length;
    Ok(Some(hello))
}

/// Reads a ClientHello handshake message carried outside TLS records (in
/// QUIC's CRYPTO frames, or DTLS's records once its cookie is cut out):
/// `Ok(None)` while `message` holds only part of it.
pub fn parse_message(message: &[u8]) -> Result<Option<ClientHello>, HelloError> {
    let Some(header) = message.get(..4) else {
        return Ok(None);
    };
    if header[0] != CLIENT_HELLO {
        return Err(HelloError::NotClientHello(header[0]));
    }
    let declared =
        usize::from(header[1]) << 16 | usize::from(header[2]) << 8 | usize::from(header[3]);
    let Some(whole) = message.get(..declared + 4) else {
        return Ok(None);
    };
    let mut hello = read_body(whole)?;
    hello.length = whole.len();
    Ok(Some(hello))
}

/// Gathers the first handshake message from consecutive handshake records.
fn handshake_message(input: &[u8], max_len: usize) -> Result<Option<(Vec<u8>, usize)>, HelloError> {
    let mut message = Vec::new();
    let mut at = 0;
    loop {
        let header = &input[at..input.len().min(at + 5)];
        if let Some(&kind) = header.first() {
            if kind != HANDSHAKE {
                return Err(HelloError::NotTls);
            }
        }
        if let Some(&major) = header.get(1) {
            if major != 0x03 {
                return Err(HelloError::NotTls);
            }
        }
        if header.len() < 5 {
            return Ok(None);
        }
        let record = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if record > MAX_RECORD {
            return Err(HelloError::RecordTooLong(record));
        }
        if record == 0 {
            return Err(HelloError::Malformed("empty handshake record"));
        }
        let body = &input[at + 5..input.len().min(at + 5 + record)];
        let before = message.len();
        message.extend_from_slice(body);
        if let Some(&kind) = message.first() {
            if kind != CLIENT_HELLO {
                return Err(HelloError::NotClientHello(kind));
            }
        }
        if message.len() >= 4 {
            let declared = usize::from(message[1]) << 16
                | usize::from(message[2]) << 8
                | usize::from(message[3]);
            if declared + 4 > max_len {
                return Err(HelloError::TooLong {
                    declared: declared + 4,
                    limit: max_len,
                });
            }
            if message.len() >= declared + 4 {
                // The message may end before its record does.
                let used = declared + 4 - before;
                message.truncate(declared + 4);
                return Ok(Some((message, at + 5 + used)));
            }
        }
        if body.len() < record {
            return Ok(None);
        }
        at += 5 + record;
    }
}

/// A cursor over the ClientHello's body that fails on a short read.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        if self.0.len() < n {
            return Err(HelloError::Malformed(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<usize, HelloError> {
        Ok(usize::from(self.take(1, what)?[0]))
    }

    fn u16(&mut self, what: &'static str) -> Result<usize, HelloError> {
        let bytes = self.take(2, what)?;
        Ok(usize::from(u16::from_be_bytes([bytes[0], bytes[1]])))
    }

    /// A vector with a `width`-byte length prefix.
    fn vector(&mut self, width: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        let len = if width == 1 {
            self.u8(what)?
        } else {
            self.u16(what)?
        };
        self.take(len, what)
    }
}

fn read_body(message: &[u8]) -> Result<ClientHello, HelloError> {
    let mut body = Reader(&message[4..]);
    body.take(2 + 32, "no version and random")?;
    body.vector(1, "bad session id")?;
    let suites = body.vector(2, "bad cipher suites")?;
    if suites.len() % 2 != 0 {
        return Err(HelloError::Malformed("odd cipher suites length"));
    }
    body.vector(1, "bad compression methods")?;
    let mut hello = ClientHello::default();
    if body.0.is_empty() {
        return Ok(hello); // no extensions at all (TLS 1.0 era)
    }
    let mut extensions = Reader(body.vector(2, "bad extensions length")?);
    let mut kinds = Vec::new();
    while !extensions.0.is_empty() {
        let kind = extensions.u16("truncated extension")?;
        let data = extensions.vector(2, "truncated extension")?;
        kinds.push(kind);
        match kind as u16 {
            EXT_SERVER_NAME => hello.server_name = server_name(data)?,
            EXT_ALPN => hello.alpn = alpn(data)?,
            _ => {}
        }
    }
    // RFC 8446 §4.2: no two extensions of a type. Two server_names would
    // route by one name here and be served by the other elsewhere.
    kinds.sort_unstable();
    if kinds.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(HelloError::Malformed("an extension given twice"));
    }
    Ok(hello)
}

/// The host_name entry of a server_name extension.
fn server_name(data: &[u8]) -> Result<Option<String>, HelloError> {
    let mut list = Reader(Reader(data).vector(2, "bad server name list")?);
    while !list.0.is_empty() {
        let kind = list.u8("bad server name entry")?;
        let name = list.vector(2, "bad server name entry")?;
        if kind == 0 {
            let name = std::str::from_utf8(name)
                .ok()
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_graphic()))
                .ok_or(HelloError::Malformed(
                    "server name is not an ASCII host name",
                ))?;
            // A DNS name is at most 255 bytes (RFC 1035); longer is no host name.
            if name.len() > 255 {
                return Err(HelloError::Malformed("server name longer than 255 bytes"));
            }
            return Ok(Some(name.trim_end_matches('.').to_ascii_lowercase()));
        }
    }
    Ok(None)
}

fn alpn(data: &[u8]) -> Result<Vec<String>, HelloError> {
    let mut list = Reader(Reader(data).vector(2, "bad ALPN list")?);
    let mut protocols = Vec::new();
    while !list.0.is_empty() {
        let name = list.vector(1, "bad ALPN entry")?;
        protocols.push(String::from_utf8_lossy(name).into_owned());
    }
    Ok(protocols)
}

/// A ClientHello for tests: `server_name`, ALPN `alpn`, and `padding` bytes of
/// an extra extension (to make it as large as a post-quantum one), in records
/// of at most `record` bytes.
pub fn build(server_name: Option<&str>, alpn: &[&str], padding: usize, record: usize) -> Vec<u8> {
    let names: Vec<&str> = server_name.into_iter().collect();
    build_with_names(&names, alpn, padding, record)
}

/// [`build`] with one server_name extension for each of `names` (more than
/// one is malformed, for tests that say so).
pub fn build_with_names(names: &[&str], alpn: &[&str], padding: usize, record: usize) -> Vec<u8> {
    let mut extensions = Vec::new();
    let mut push = |kind: u16, data: &[u8]| {
        extensions.extend_from_slice(&kind.to_be_bytes());
        extensions.extend_from_slice(&(data.len() as u16).to_be_bytes());
        extensions.extend_from_slice(data);
    };
    for name in names {
        let mut entry = vec![0u8];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name.as_bytes());
        let mut data = (entry.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&entry);
        push(EXT_SERVER_NAME, &data);
    }
    if !alpn.is_empty() {
        let mut list = Vec::new();
        for protocol in alpn {
            list.push(protocol.len() as u8);
            list.extend_from_slice(protocol.as_bytes());
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        push(EXT_ALPN, &data);
    }
    if padding > 0 {
        push(0x0015, &vec![0u8; padding]);
    }
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[7u8; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    body.extend_from_slice(&extensions);
    let mut message = vec![CLIENT_HELLO];
    message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend_from_slice(&body);
    let mut records = Vec::new();
    for chunk in message.chunks(record.max(1)) {
        records.extend_from_slice(&[HANDSHAKE, 0x03, 0x01]);
        records.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        records.extend_from_slice(chunk);
    }
    records
}
