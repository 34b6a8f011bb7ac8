//! A reference reading of an HTTP/1.1 request head's body framing, written from RFC 9112
//! (message body length, sections 6.1 to 6.3; the request target, 3.2; `Host`, RFC 9110 7.2)
//! and the gateway's documented stricter rules (docs/src/reference/errors.md: a head whose
//! framing, `host` or target two parsers could read two ways is refused with 400, a
//! `content-length` over 1 GiB with 413) — independently of the server's own code, which the
//! differential fuzz target `http1_framing` and the server's framing tests compare with it.
//!
//! Shared by the fuzz crate (`switchyard_fuzz::framing_reference`) and the server's tests
//! (included by path), so both compare with the same reading.

use switchyard_server::FramingVerdict;

/// The largest body any setting accepts (1 GiB): a declared length above it is a 413.
const LARGEST_BODY: u64 = 1 << 30;

/// How the reference reads a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    NoBody,
    Length(u64),
    Chunked,
    /// Refused; any of these statuses is a correct answer (a head may be wrong in several ways,
    /// and which one a server names first is its own choice).
    Refused(Vec<u16>),
}

/// The reference reading of the head at the front of `data`; `None` when `httparse` does not
/// find a complete, well-formed head in it (no framing to judge).
pub fn read(data: &[u8]) -> Option<Reading> {
    let mut raw = [httparse::EMPTY_HEADER; 100];
    let mut request = httparse::Request::new(&mut raw);
    if !matches!(request.parse(data), Ok(httparse::Status::Complete(_))) {
        return None;
    }
    let http10 = request.version == Some(0);
    let mut hosts = 0usize;
    let mut lengths: Vec<&[u8]> = Vec::new();
    let mut encodings: Vec<&[u8]> = Vec::new();
    for header in request.headers.iter() {
        let value = ows_trimmed(header.value);
        match header.name.to_ascii_lowercase().as_str() {
            "host" => hosts += 1,
            "content-length" => lengths.push(value),
            "transfer-encoding" => encodings.push(value),
            _ => {}
        }
    }
    let mut refused = Vec::new();
    // RFC 9110 7.2 / RFC 9112 3.2: an HTTP/1.1 request has exactly one Host; none is allowed
    // on HTTP/1.0, but never two.
    if hosts > 1 || (hosts == 0 && !http10) {
        refused.push(400);
    }
    // Content-Length = 1*DIGIT (RFC 9110 8.6). A list, or the header twice, even with equal
    // values, is refused here (the RFC lets a recipient accept equal ones; this gateway does not).
    let mut length = None;
    for value in &lengths {
        match decimal(value) {
            Some(n) if n > LARGEST_BODY => refused.push(413),
            Some(n) => length = Some(n),
            None => refused.push(400),
        }
    }
    if lengths.len() > 1 {
        refused.push(400);
    }
    if !encodings.is_empty() {
        // RFC 9112 6.1: a sender must not send both (a server may reject it: this one does);
        // Transfer-Encoding on HTTP/1.0 is faulty framing; a request whose final coding is not
        // chunked is a 400. Stricter here: the only coding accepted is one `chunked`, once.
        let only_chunked = encodings.len() == 1 && {
            let codings: Vec<&[u8]> = encodings[0]
                .split(|&b| b == b',')
                .map(ows_trimmed)
                .collect();
            codings.len() == 1 && codings[0].eq_ignore_ascii_case(b"chunked")
        };
        if !lengths.is_empty() || http10 || !only_chunked {
            refused.push(400);
        }
    }
    // RFC 9110 4.2.4: userinfo in an http(s) URI is an error to refuse.
    if request.path.is_some_and(target_has_userinfo) {
        refused.push(400);
    }
    Some(if !refused.is_empty() {
        refused.sort_unstable();
        refused.dedup();
        Reading::Refused(refused)
    } else if !encodings.is_empty() {
        Reading::Chunked
    } else if let Some(n) = length {
        Reading::Length(n)
    } else {
        // RFC 9112 6.3 (7): a request with neither has no body.
        Reading::NoBody
    })
}

/// `value` without optional whitespace (SP, HTAB) at either end.
fn ows_trimmed(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// `1*DIGIT` as a number, saturating (any length of digits is still a number, only too large).
fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0u64, |n, d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// Whether a request target in absolute form (`scheme://authority/...`) or authority form
/// (`host:port`, CONNECT) names userinfo (`user@`). Origin form (`/path`) and `*` have none.
fn target_has_userinfo(target: &str) -> bool {
    if target.starts_with('/') || target == "*" {
        return false;
    }
    let authority_and_rest = match target.find("://") {
        Some(i) => &target[i + 3..],
        None => target,
    };
    let end = authority_and_rest
        .find(['/', '?', '#'])
        .unwrap_or(authority_and_rest.len());
    authority_and_rest[..end].contains('@')
}

/// Whether the server's verdict on `data` agrees with the reference reading: the same framing,
/// or a refusal with one of the statuses the reference allows. `Err` says how they differ.
pub fn agrees(data: &[u8], server: FramingVerdict) -> Result<(), String> {
    let reference = read(data);
    let same = match (&reference, server) {
        (None, FramingVerdict::Incomplete | FramingVerdict::Unparsable) => true,
        (Some(Reading::NoBody), FramingVerdict::NoBody) => true,
        (Some(Reading::Length(a)), FramingVerdict::Length(b)) => *a == b,
        (Some(Reading::Chunked), FramingVerdict::Chunked) => true,
        (Some(Reading::Refused(allowed)), FramingVerdict::Refused(status)) => {
            allowed.contains(&status)
        }
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(format!(
            "server {server:?}, reference {reference:?} for {:?}",
            String::from_utf8_lossy(data)
        ))
    }
}
