//! How a request's body is delimited, and the request heads refused for it: every head either
//! plane reads, whether this crate's reader serves it or hyper does.
//!
//! A request whose framing two parsers could read two ways is how requests are smuggled past a
//! proxy, so the rules are nginx's, stricter than hyper's (which takes `transfer-encoding` over
//! `content-length`, and reads `gzip, chunked` or two equal `content-length` headers): each of
//! these is answered 400 (a JSON error, `code: bad_request`) and the connection closed —
//! - `content-length` together with `transfer-encoding` (either order);
//! - a `transfer-encoding` other than exactly `chunked` (`identity, chunked`, `gzip, chunked`,
//!   `chunked, chunked`), or two of them; any on HTTP/1.0;
//! - two `content-length` headers, even equal, or one that is not plain decimal digits;
//! - no `host` on HTTP/1.1, or two `host` headers;
//! - a request target in absolute form (or authority form) with userinfo (`http://u@host/`).
//!
//! A `content-length` over [`MAX_DECLARED_BODY`] (larger than any body limit either plane can be
//! set to, `18446744073709551615` included) is answered 413 (`request_too_large`) and closed. A
//! chunk of a chunked body declared larger than [`MAX_DECLARED_BODY`] (a 16-digit size line, for
//! one) fails the body at once, as a malformed body: the service answers it (the data plane with
//! a 400) instead of waiting out the body deadline for bytes that will never come.
//!
//! [`Inspect`] applies the same rules to a connection hyper serves: it reads the request stream
//! ahead of hyper, following each message's framing so it knows where every head begins; a head
//! is held back until it is complete and checked. A refused head is replaced by a plain request
//! asking to close, which the service wrapper answers with the refusal ([`Refused`]), so requests
//! before it on a pipelined connection are still answered first, in order.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};

use axum::body::Body;
use bytes::BytesMut;
use http::{header, HeaderValue, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The largest request body any setting of either plane lets through (the data plane's
/// `max_request_body_bytes` at its maximum): a `content-length` or a chunk declared larger is
/// refused at once.
pub const MAX_DECLARED_BODY: u64 = 1 << 30;

/// Most headers a head [`Inspect`] reads may have (hyper's own limit; more: hyper's 431).
const MAX_HEADERS: usize = 100;

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// Why a request head is refused: the answer it gets before its connection closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: &'static str,
}

const fn bad(message: &'static str) -> Refusal {
    Refusal {
        status: StatusCode::BAD_REQUEST,
        code: "bad_request",
        message,
    }
}

const TOO_LARGE: Refusal = Refusal {
    status: StatusCode::PAYLOAD_TOO_LARGE,
    code: "request_too_large",
    message:
        "The declared request body is larger than any body this server accepts (1073741824 bytes).",
};

impl Refusal {
    /// The JSON answer, asking to close the connection.
    pub fn response(&self) -> Response<Body> {
        let body = format!(
            "{{\"error\":{{\"message\":\"{}\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"{}\"}}}}",
            self.message, self.code
        );
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        response
    }
}

/// The framing of a parsed request head, or why it is refused.
pub(crate) fn check(request: &httparse::Request<'_, '_>) -> Result<BodyFraming, Refusal> {
    let http10 = request.version == Some(0);
    let (mut hosts, mut lengths, mut encodings) = (0, 0, 0);
    let mut length = None;
    let mut chunked = false;
    for header in request.headers.iter() {
        let name = header.name.as_bytes();
        let value = header.value.trim_ascii();
        if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case(b"content-length") {
            lengths += 1;
            length = Some(declared_length(value)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            encodings += 1;
            chunked = value.eq_ignore_ascii_case(b"chunked");
        }
    }
    if hosts > 1 {
        return Err(bad("The request has more than one Host header."));
    }
    if hosts == 0 && !http10 {
        return Err(bad("An HTTP/1.1 request needs a Host header."));
    }
    if lengths > 1 {
        return Err(bad("The request has more than one Content-Length header."));
    }
    if encodings > 0 && lengths > 0 {
        return Err(bad(
            "The request has both Content-Length and Transfer-Encoding.",
        ));
    }
    if encodings > 1 || (encodings == 1 && (!chunked || http10)) {
        return Err(bad(
            "The only Transfer-Encoding accepted is a single `chunked` (HTTP/1.1).",
        ));
    }
    if request.path.is_some_and(has_userinfo) {
        return Err(bad("The request target has userinfo."));
    }
    Ok(match (chunked, length) {
        (true, _) => BodyFraming::Chunked,
        (false, Some(n)) => BodyFraming::Length(n),
        (false, None) => BodyFraming::None,
    })
}

/// A `content-length` value: plain decimal digits, at most [`MAX_DECLARED_BODY`].
fn declared_length(value: &[u8]) -> Result<u64, Refusal> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(bad("The Content-Length is not a decimal number."));
    }
    let digits = value.iter().skip_while(|&&d| d == b'0').count();
    if digits > 10 {
        return Err(TOO_LARGE);
    }
    let n = value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    if n > MAX_DECLARED_BODY {
        return Err(TOO_LARGE);
    }
    Ok(n)
}

/// Whether a request target that is not a path names userinfo in its authority
/// (`http://user@host/`, `user:pw@host:443`).
fn has_userinfo(target: &str) -> bool {
    if target.starts_with('/') {
        return false;
    }
    let after_scheme = target.split_once("://").map_or(target, |(_, rest)| rest);
    let authority = after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or(after_scheme);
    authority.contains('@')
}

/// Where a reader following a request stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// At (or within) a request head.
    Head,
    /// Within a body of this many more bytes.
    Length(u64),
    /// Within a chunked body.
    Chunk(Chunk),
    /// Not following any more: what hyper reads next it refuses itself (an unparsable or too
    /// large head), closing the connection.
    Passthrough,
    /// A head was refused: nothing more is read.
    Refused,
}

/// Where in a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In the size line's hex digits, `size` so far.
    Size(u64),
    /// Past the digits (whitespace or an extension) until the line's end.
    SizeRest(u64),
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    /// In a trailer line of this many bytes so far (0: the line may be the final empty one).
    Trailer(u64),
    TrailerLf(u64),
}

/// A chunk declared over [`MAX_DECLARED_BODY`].
fn chunk_too_large() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "a chunk of the request body is declared larger than any body this server accepts",
    )
}

impl Scan {
    /// Follows `bytes` of a body (or of anything after a refusal or in passthrough): how many
    /// belong to it; fewer than all when the body ends and a head begins within them.
    fn body(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut at = 0;
        while at < bytes.len() {
            match self {
                Scan::Head => return Ok(at),
                Scan::Passthrough | Scan::Refused => return Ok(bytes.len()),
                Scan::Length(left) => {
                    let n = (*left).min((bytes.len() - at) as u64);
                    at += n as usize;
                    *left -= n;
                    if *left == 0 {
                        *self = Scan::Head;
                    }
                }
                Scan::Chunk(Chunk::Data(left)) => {
                    let n = (*left).min((bytes.len() - at) as u64);
                    at += n as usize;
                    *left -= n;
                    if *left == 0 {
                        *self = Scan::Chunk(Chunk::DataCr);
                    }
                }
                Scan::Chunk(chunk) => {
                    *self = chunk_byte(*chunk, bytes[at])?;
                    at += 1;
                }
            }
        }
        Ok(at)
    }
}

/// The state after one byte of a chunked body's framing. A byte hyper refuses (a bad size line,
/// no line end after the data) ends the following: hyper fails the body and the connection.
fn chunk_byte(chunk: Chunk, byte: u8) -> io::Result<Scan> {
    let next = match (chunk, byte) {
        (Chunk::Size(size), _) if byte.is_ascii_hexdigit() => {
            let digit = u64::from((byte as char).to_digit(16).unwrap_or(0));
            let size = size * 16 + digit;
            if size > MAX_DECLARED_BODY {
                return Err(chunk_too_large());
            }
            Chunk::Size(size)
        }
        (Chunk::Size(size) | Chunk::SizeRest(size), b'\r') => Chunk::SizeLf(size),
        // A bare LF ends no size line for hyper: it fails the body.
        (Chunk::Size(_) | Chunk::SizeRest(_), b'\n') => return Ok(Scan::Passthrough),
        (Chunk::Size(size) | Chunk::SizeRest(size), _) => Chunk::SizeRest(size),
        (Chunk::SizeLf(0), b'\n') => Chunk::Trailer(0),
        (Chunk::SizeLf(size), b'\n') => Chunk::Data(size),
        (Chunk::DataCr, b'\r') => Chunk::DataLf,
        (Chunk::DataLf, b'\n') => Chunk::Size(0),
        (Chunk::Trailer(len), b'\r') => Chunk::TrailerLf(len),
        (Chunk::Trailer(len), _) => Chunk::Trailer(len + 1),
        (Chunk::TrailerLf(0), b'\n') => return Ok(Scan::Head),
        (Chunk::TrailerLf(_), b'\n') => Chunk::Trailer(0),
        _ => return Ok(Scan::Passthrough),
    };
    Ok(Scan::Chunk(next))
}

/// The plain request a refused head is replaced with; the service answers it with the refusal.
const STAND_IN: &[u8] = b"GET / HTTP/1.1\r\nhost: refused\r\nconnection: close\r\n\r\n";

/// The refused head of a connection hyper serves: its place among the connection's requests
/// (from 0), and the refusal. The service answers the request at that place with it.
#[derive(Debug, Default)]
pub(crate) struct Refused(OnceLock<(u64, Refusal)>);

impl Refused {
    /// The refusal for the connection's request number `index`, if it is the refused one.
    pub fn at(&self, index: u64) -> Option<Refusal> {
        self.0
            .get()
            .filter(|(at, _)| *at == index)
            .map(|(_, refusal)| *refusal)
    }
}

/// A connection's socket as hyper reads it: the request stream checked head by head (see the
/// module's comment). Writes pass straight through.
pub(crate) struct Inspect<T> {
    inner: T,
    scan: Scan,
    /// A head not yet complete, held back.
    pending: BytesMut,
    /// Checked bytes hyper has not read yet.
    ready: BytesMut,
    /// Heads longer than this are left to hyper (which refuses them).
    head_limit: usize,
    /// Complete heads so far.
    heads: u64,
    refused: Arc<Refused>,
    /// The client's end of stream was read.
    eof: bool,
    /// A chunk was declared too large: once hyper has read what came before, its reads fail.
    failed: bool,
}

impl<T> Inspect<T> {
    /// Reads `inner` from the start of a request head.
    pub fn new(inner: T, head_limit: usize, refused: Arc<Refused>) -> Inspect<T> {
        Inspect {
            inner,
            scan: Scan::Head,
            pending: BytesMut::new(),
            ready: BytesMut::new(),
            head_limit,
            heads: 0,
            refused,
            eof: false,
            failed: false,
        }
    }

    /// How many of `bytes` belong to the body being read (all of them once a chunk is declared
    /// too large: the reads fail after them).
    fn follow_body(&mut self, bytes: &[u8]) -> usize {
        match self.scan.body(bytes) {
            Ok(n) => n,
            Err(_) => {
                self.failed = true;
                self.scan = Scan::Passthrough;
                bytes.len()
            }
        }
    }

    /// Takes the complete heads at the front of `pending` (and the body bytes after each) into
    /// `ready`, until a head is incomplete, refused or not parsable.
    fn take_heads(&mut self) {
        while self.scan == Scan::Head && !self.pending.is_empty() {
            let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut request = httparse::Request::new(&mut raw);
            let (len, checked, upgrade) = match request.parse(&self.pending) {
                Ok(httparse::Status::Complete(len)) => {
                    (len, check(&request), asks_upgrade(&request))
                }
                Ok(httparse::Status::Partial) if self.pending.len() <= self.head_limit => return,
                // Hyper answers it (400, 431) and closes.
                _ => {
                    self.scan = Scan::Passthrough;
                    let rest = self.pending.split();
                    self.ready.extend_from_slice(&rest);
                    return;
                }
            };
            let index = self.heads;
            self.heads += 1;
            match checked {
                Ok(framing) => {
                    self.scan = match framing {
                        // What follows an upgrade's head is another protocol's bytes (a
                        // WebSocket's frames), not a request; a refused upgrade closes the
                        // connection after its answer (the server's rule).
                        _ if upgrade => Scan::Passthrough,
                        BodyFraming::None | BodyFraming::Length(0) => Scan::Head,
                        BodyFraming::Length(n) => Scan::Length(n),
                        BodyFraming::Chunked => Scan::Chunk(Chunk::Size(0)),
                    };
                    let head = self.pending.split_to(len);
                    self.ready.extend_from_slice(&head);
                    let rest = std::mem::take(&mut self.pending);
                    let body = self.follow_body(&rest);
                    self.pending = rest;
                    let body = self.pending.split_to(body);
                    self.ready.extend_from_slice(&body);
                }
                Err(refusal) => {
                    let _ = self.refused.0.set((index, refusal));
                    self.scan = Scan::Refused;
                    self.pending.clear();
                    self.ready.extend_from_slice(STAND_IN);
                }
            }
        }
    }
}

impl<T: AsyncRead + Unpin> Inspect<T> {
    /// Reads more of a head into `pending` (end of stream: what there is goes to hyper as it is).
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut scratch = [0u8; 8192];
        let mut buf = ReadBuf::new(&mut scratch);
        ready!(Pin::new(&mut self.inner).poll_read(cx, &mut buf))?;
        if buf.filled().is_empty() {
            self.eof = true;
            let rest = self.pending.split();
            self.ready.extend_from_slice(&rest);
            return Poll::Ready(Ok(()));
        }
        self.pending.extend_from_slice(buf.filled());
        self.take_heads();
        Poll::Ready(Ok(()))
    }

    /// Reads and discards until the client's end of stream.
    fn poll_discard(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut scratch = [0u8; 8192];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            ready!(Pin::new(&mut self.inner).poll_read(cx, &mut buf))?;
            if buf.filled().is_empty() {
                self.eof = true;
                return Poll::Ready(Ok(()));
            }
        }
    }

    /// Reads body bytes straight into `buf`; bytes after the body's end start a head, held back.
    fn poll_body(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let got = &buf.filled()[before..];
        if got.is_empty() {
            self.eof = true;
            return Poll::Ready(Ok(()));
        }
        let body = self.follow_body(got);
        if body < got.len() {
            self.pending.extend_from_slice(&got[body..]);
            buf.set_filled(before + body);
            self.take_heads();
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Inspect<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.ready.is_empty() {
                let n = this.ready.len().min(buf.remaining());
                buf.put_slice(&this.ready.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.failed {
                return Poll::Ready(Err(chunk_too_large()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.scan == Scan::Refused {
                // Nothing after a refused head is read as a request; hyper must not see the end
                // of the stream either before it answered the stand-in (it would drop the
                // answer), so until the client closes, what it sends is discarded.
                return this.poll_discard(cx);
            }
            let before = buf.filled().len();
            if this.scan == Scan::Head {
                ready!(this.poll_head(cx))?;
            } else {
                ready!(this.poll_body(cx, buf))?;
                if buf.filled().len() > before || this.eof {
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Inspect<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Whether a head asks to switch protocols (`Upgrade`).
fn asks_upgrade(request: &httparse::Request<'_, '_>) -> bool {
    request
        .headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("upgrade"))
}

/// How the server frames the request head at the front of `data`: what [`Inspect`] (and the
/// server's own reader, which applies the same check) decides for it. For the differential fuzz
/// target and tests, which compare it with a reference reading of the same bytes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingVerdict {
    /// The head has not all arrived.
    Incomplete,
    /// `httparse` cannot read it (hyper answers it, 400 or 431).
    Unparsable,
    /// No body.
    NoBody,
    /// A body of this many bytes.
    Length(u64),
    /// A chunked body.
    Chunked,
    /// Refused with this status before its connection closes.
    Refused(u16),
}

/// The [`FramingVerdict`] on the head at the front of `data`.
#[doc(hidden)]
pub fn framing_verdict(data: &[u8]) -> FramingVerdict {
    let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut raw);
    match request.parse(data) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return FramingVerdict::Incomplete,
        Err(_) => return FramingVerdict::Unparsable,
    }
    match check(&request) {
        Ok(BodyFraming::None) => FramingVerdict::NoBody,
        Ok(BodyFraming::Length(n)) => FramingVerdict::Length(n),
        Ok(BodyFraming::Chunked) => FramingVerdict::Chunked,
        Err(refusal) => FramingVerdict::Refused(refusal.status.as_u16()),
    }
}

/// Follows `data` as a chunked body and as a sized one, whole and in two pieces split at every
/// point (for fuzzing): the same bytes are taken for the body and the same state reached either
/// way, never more bytes than given.
#[doc(hidden)]
pub fn fuzz_follow(data: &[u8]) {
    for start in [
        Scan::Chunk(Chunk::Size(0)),
        Scan::Length(data.len() as u64 / 2),
    ] {
        let mut whole = start;
        let taken = whole.body(data);
        if let Ok(n) = taken {
            assert!(n <= data.len());
        }
        for split in 0..=data.len().min(64) {
            let mut parts = start;
            let first = parts.body(&data[..split]);
            let taken_in_parts = match first {
                Ok(n) if n == split && parts != Scan::Head => {
                    parts.body(&data[split..]).map(|m| n + m)
                }
                other => other,
            };
            assert_eq!(taken.is_ok(), taken_in_parts.is_ok(), "split at {split}");
            if let (Ok(a), Ok(b)) = (&taken, &taken_in_parts) {
                assert_eq!((a, whole), (b, parts), "split at {split}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn framing_of(head: &[u8]) -> Result<BodyFraming, Refusal> {
        let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut raw);
        assert!(request.parse(head).unwrap().is_complete());
        check(&request)
    }

    #[test]
    fn a_head_has_one_framing_or_is_refused() {
        let ok = |head: &[u8]| framing_of(head).unwrap();
        assert_eq!(ok(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n"), BodyFraming::None);
        assert_eq!(ok(b"GET / HTTP/1.0\r\n\r\n"), BodyFraming::None);
        assert_eq!(
            ok(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 0012\r\n\r\n"),
            BodyFraming::Length(12)
        );
        assert_eq!(
            ok(b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: CHUNKED \r\n\r\n"),
            BodyFraming::Chunked
        );
        assert_eq!(
            ok(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1073741824\r\n\r\n"),
            BodyFraming::Length(MAX_DECLARED_BODY)
        );
        let status = |head: &[u8]| framing_of(head).unwrap_err().status.as_u16();
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1073741825\r\n\r\n"),
            413
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 00000000000018446744073709551616\r\n\r\n"),
            413
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n"),
            400
        );
        assert_eq!(status(b"GET http://u@a/ HTTP/1.1\r\nhost: a\r\n\r\n"), 400);
        assert!(!has_userinfo("http://a/x@y"));
        assert!(!has_userinfo("/x@y"));
        assert!(has_userinfo("a@b:443"));
        let refusal = framing_of(b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
        assert_eq!(refusal.code, "bad_request");
        assert_eq!(refusal.response().headers()[header::CONNECTION], "close");
    }

    #[test]
    fn a_chunked_body_is_followed_to_its_end_and_an_impossible_chunk_fails() {
        let mut scan = Scan::Chunk(Chunk::Size(0));
        let body = b"5;ext=\"x\"\r\nhello\r\n0\r\ntrailer: 1\r\n\r\nGET";
        assert_eq!(scan.body(body).unwrap(), body.len() - 3);
        assert_eq!(scan, Scan::Head);
        // Byte by byte, the same.
        let mut scan = Scan::Chunk(Chunk::Size(0));
        for (i, b) in body.iter().enumerate() {
            let n = scan.body(std::slice::from_ref(b)).unwrap();
            assert_eq!(n, usize::from(i < body.len() - 3), "byte {i}");
        }
        let mut scan = Scan::Chunk(Chunk::Size(0));
        assert!(scan.body(b"ffffffffffffffff\r\n").is_err());
        let mut scan = Scan::Chunk(Chunk::Size(0));
        assert!(
            scan.body(b"40000000\r\n").is_ok(),
            "the largest body is one chunk"
        );
        let mut scan = Scan::Chunk(Chunk::Size(0));
        assert!(scan.body(b"3fffffff\r\n").is_ok(), "one byte less");
        let mut scan = Scan::Chunk(Chunk::Size(0));
        assert!(scan.body(b"40000001\r\n").is_err(), "one byte more");
        let mut scan = Scan::Length(3);
        assert_eq!(scan.body(b"abcGET").unwrap(), 3);
    }

    #[test]
    fn the_fuzz_entry_follows_bodies_in_pieces_as_whole() {
        fuzz_follow(b"5;x\r\nhello\r\n0\r\na: b\r\n\r\nGET / HTTP/1.1");
        fuzz_follow(b"ffffffffffffffff\r\n");
        fuzz_follow(b"3\nabc");
        fuzz_follow(b"");
    }

    #[tokio::test]
    async fn a_refused_head_behind_a_good_one_becomes_the_stand_in_at_its_place() {
        let (mut client, server) = tokio::io::duplex(4096);
        let refused = Arc::new(Refused::default());
        let mut inspect = Inspect::new(server, 1024, Arc::clone(&refused));
        let good = b"POST /a HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\n\r\nabc";
        let bad =
            b"POST /b HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\nabc";
        client.write_all(good).await.unwrap();
        client.write_all(bad).await.unwrap();
        let mut read = vec![0u8; good.len() + STAND_IN.len()];
        inspect.read_exact(&mut read).await.unwrap();
        assert_eq!(&read[..good.len()], good);
        assert_eq!(&read[good.len()..], STAND_IN);
        assert_eq!(refused.at(0), None);
        assert_eq!(refused.at(1).unwrap().status, StatusCode::BAD_REQUEST);
        // Nothing more is read as a request; the client's end is the end.
        client
            .write_all(b"GET /c HTTP/1.1\r\nhost: a\r\n\r\n")
            .await
            .unwrap();
        drop(client);
        let mut rest = Vec::new();
        inspect.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    }

    #[tokio::test]
    async fn what_precedes_an_impossible_chunk_is_read_before_the_failure() {
        let (mut client, server) = tokio::io::duplex(4096);
        let mut inspect = Inspect::new(server, 1024, Arc::default());
        let head = b"POST /a HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n";
        client.write_all(head).await.unwrap();
        client
            .write_all(b"3\r\nabc\r\n1ffffffffffffffff\r\n")
            .await
            .unwrap();
        let mut read = vec![0u8; head.len()];
        inspect.read_exact(&mut read).await.unwrap();
        assert_eq!(&read, head);
        let mut rest = Vec::new();
        let error = inspect.read_to_end(&mut rest).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }
}
