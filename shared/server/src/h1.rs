//! The plain HTTP/1.1 requests, served without hyper.
//!
//! Nearly every request either plane serves is the same shape: an HTTP/1.1 request with no body
//! or a small `content-length` body, on a keep-alive connection. This module serves those itself
//! — it reads the head with `httparse`, reads the whole body before calling the service, and
//! writes the answer — because hyper's general connection state machine cost a proxied request
//! about as many instructions as all of the gateway's own work on it.
//!
//! Anything else hands the connection to hyper for the rest of its life, with the bytes already
//! read replayed in front of the socket ([`Rewind`]), so hyper sees the connection exactly as
//! the client sent it: a head `httparse` rejects or that is too large, an HTTP version other
//! than 1.1, a method other than the common ones (`HEAD`, `CONNECT`, `TRACE`, extensions), a
//! request target that is not a path, `transfer-encoding: chunked`, `expect`, `upgrade`, a body
//! over [`MAX_BODY`], or more than [`MAX_HEADERS`] headers. Every rule those need (chunked bodies,
//! `100 Continue`, HTTP/1.0 keep-alive, the automatic 400/414/431 answers) stays hyper's. A head
//! refused for its framing, host or target (`framing`) is answered here and the connection
//! closed, whatever its shape.
//!
//! What a connection served here does, as hyper's server did:
//! - the head must arrive within the header deadline (also the keep-alive idle time), or the
//!   connection closes without an answer;
//! - the body must arrive within the body deadline from the end of the head; when it does not,
//!   the service gets a body that fails with [`BodyTimeout`] and the answer closes the connection;
//! - a client that closes its side while its request is in progress cancels it (the service's
//!   future is dropped);
//! - an answer is framed by its `content-length` (declared, or known from the body) or chunked,
//!   gets a `date` header, and says `connection: close` when the client asked for it or the
//!   server is shutting down; pipelined requests are answered in order.

use std::cell::Cell;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use axum::body::Body;
use axum::response::Response as AxumResponse;
use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version};
use http_body::{Body as _, Frame};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::body::BodyTimeout;
use crate::framing::{self, BodyFraming, Refusal};
use crate::registry::Activity;
use crate::service::{announce_close_or_idle_timeout, Routes, Settings};
use crate::socket::ClientSocket;

/// Most headers a request served here may have (more go to hyper, which allows 100).
pub const MAX_HEADERS: usize = 64;
/// Largest request body read here before the service is called (larger ones go to hyper, which
/// streams them to the service).
pub const MAX_BODY: usize = 64 * 1024;
/// What the read buffer grows by.
const READ_CHUNK: usize = 8 * 1024;
/// Body frames up to this size are copied beside the head (one write for both); larger ones are
/// written on their own.
const COPY_FRAME: usize = 16 * 1024;

/// What the bytes at the front of a connection's buffer are.
#[derive(Debug)]
pub(crate) enum Head {
    /// The head has not all arrived (and what has is within the size limit).
    Partial,
    /// A request served here.
    Plain(PlainHead),
    /// Anything else: hyper's.
    Other,
    /// A head refused for its framing, host or target (`framing`): answered and closed.
    Refused(Refusal),
}

/// A request head served here: positions in the buffer it was parsed from.
#[derive(Debug)]
pub(crate) struct PlainHead {
    /// Bytes of the head, request line to the blank line.
    pub len: usize,
    pub method: Method,
    pub target: Range<usize>,
    pub headers: Vec<(Range<usize>, Range<usize>)>,
    pub body_len: usize,
    /// The client asked to close the connection after this request.
    pub close: bool,
}

/// Reads the head at the front of `buf`, served here or not.
pub(crate) fn parse_head(buf: &[u8], max_head: usize) -> Head {
    let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut raw);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len <= max_head => len,
        Ok(httparse::Status::Partial) if buf.len() <= max_head => return Head::Partial,
        _ => return Head::Other,
    };
    let body_len = match framing::check(&request) {
        Err(refusal) => return Head::Refused(refusal),
        Ok(BodyFraming::None) => 0,
        Ok(BodyFraming::Length(n)) if n <= MAX_BODY as u64 => n as usize,
        Ok(_) => return Head::Other,
    };
    if request.version != Some(1) {
        return Head::Other;
    }
    let Some(method) = request.method.and_then(plain_method) else {
        return Head::Other;
    };
    let Some(path) = request.path.filter(|p| p.starts_with('/')) else {
        return Head::Other;
    };
    let base = buf.as_ptr() as usize;
    let at = |part: &[u8]| {
        let start = part.as_ptr() as usize - base;
        start..start + part.len()
    };
    let mut headers = Vec::with_capacity(request.headers.len());
    let mut close = false;
    for header in request.headers.iter() {
        let name = header.name.as_bytes();
        if name.eq_ignore_ascii_case(b"connection") {
            for token in header.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"upgrade") {
                    return Head::Other;
                }
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"expect")
            || name.eq_ignore_ascii_case(b"upgrade")
        {
            return Head::Other;
        }
        headers.push((at(name), at(header.value)));
    }
    Head::Plain(PlainHead {
        len,
        method,
        target: at(path.as_bytes()),
        headers,
        body_len,
        close,
    })
}

fn plain_method(method: &str) -> Option<Method> {
    Some(match method {
        "GET" => Method::GET,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        "DELETE" => Method::DELETE,
        "PATCH" => Method::PATCH,
        "OPTIONS" => Method::OPTIONS,
        _ => return None,
    })
}

/// A `content-length` value: ASCII digits only (no sign, no spaces, no list), at most 18 of them.
fn decimal(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 18 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value.iter().try_fold(0usize, |n, d| {
        n.checked_mul(10)?.checked_add(usize::from(d - b'0'))
    })
}

/// The request for `head`, its parts sharing `bytes` (the head as read); `None` when the target
/// or a header is not one `http` accepts (hyper then answers it).
pub(crate) fn build_request(head: &PlainHead, bytes: &Bytes, body: Body) -> Option<Request<Body>> {
    let uri = Uri::from_maybe_shared(bytes.slice(head.target.clone())).ok()?;
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    for (name, value) in &head.headers {
        let name = HeaderName::from_bytes(&bytes[name.clone()]).ok()?;
        let value = HeaderValue::from_maybe_shared(bytes.slice(value.clone())).ok()?;
        headers.append(name, value);
    }
    let mut request = Request::new(body);
    *request.method_mut() = head.method.clone();
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    Some(request)
}

/// How a connection served here ended.
pub(crate) enum Ended {
    /// Closed (or to be closed): nothing more is read from it.
    Closed,
    /// The next request is hyper's: these bytes were read and not consumed.
    ToHyper(Bytes),
}

/// The connection's side of things while it is served here.
pub(crate) struct Conn<'a, S> {
    pub socket: &'a mut ClientSocket,
    pub router: &'a S,
    pub settings: &'a Settings,
    pub activity: &'a Arc<Activity>,
    pub shutdown: &'a CancellationToken,
    pub evicted: &'a CancellationToken,
}

/// What waiting for more bytes from the client came to.
enum Read {
    Bytes,
    /// End of stream, a read error, eviction, or (while idle) shutdown.
    Gone,
    Deadline,
}

impl<S: Routes> Conn<'_, S> {
    /// Serves requests until the connection closes or a request is not one served here.
    pub async fn serve(mut self) -> Ended {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        let mut out = Vec::with_capacity(READ_CHUNK);
        loop {
            let deadline = Instant::now() + self.settings.limits.header_read_timeout;
            let head = loop {
                match parse_head(&buf, self.settings.limits.max_header_bytes) {
                    Head::Plain(head) => break head,
                    Head::Other => return Ended::ToHyper(buf.freeze()),
                    Head::Refused(refusal) => {
                        self.refuse(refusal, &mut out).await;
                        return Ended::Closed;
                    }
                    Head::Partial => {}
                }
                let idle = buf.is_empty();
                match self.read(&mut buf, deadline, idle).await {
                    Read::Bytes => {}
                    Read::Gone | Read::Deadline => return Ended::Closed,
                }
            };
            let busy = self.activity.begin();
            let Some(timed_out) = self.read_body(&mut buf, &head).await else {
                return Ended::Closed;
            };
            let bytes = buf.split_to(head.len).freeze();
            let body = if timed_out {
                Body::new(TimedOut)
            } else if head.body_len == 0 {
                Body::empty()
            } else {
                Body::from(buf.split_to(head.body_len).freeze())
            };
            let Some(request) = build_request(&head, &bytes, body) else {
                drop(busy);
                let mut rest = BytesMut::from(&bytes[..]);
                rest.extend_from_slice(&buf);
                return Ended::ToHyper(rest.freeze());
            };
            if timed_out {
                // The rest of the body is still on its way: the answer closes the connection.
                self.activity.set_unread_body(true);
            }
            let Some(response) = self.call(request, &mut buf).await else {
                return Ended::Closed;
            };
            let close = head.close || timed_out || self.shutdown.is_cancelled();
            let (kept, clean) = self.answer(response, close, &mut out).await;
            drop(busy);
            if !kept || !clean {
                return Ended::Closed;
            }
        }
    }

    /// Answers a refused head and leaves the connection to close (lingering: a body may still be
    /// on its way).
    async fn refuse(&mut self, refusal: Refusal, out: &mut Vec<u8>) {
        let _busy = self.activity.begin();
        self.activity.set_unread_body(true);
        let _ = self.answer(refusal.response(), true, out).await;
    }

    /// Reads more of the request into `buf`, until `deadline`. While `idle` (no request begun),
    /// shutdown ends the connection too.
    async fn read(&mut self, buf: &mut BytesMut, deadline: Instant, idle: bool) -> Read {
        if buf.capacity() - buf.len() < READ_CHUNK / 2 {
            buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            biased;
            read = self.socket.read_buf(buf) => match read {
                Ok(0) | Err(_) => Read::Gone,
                Ok(_) => Read::Bytes,
            },
            () = sleep_until(deadline) => Read::Deadline,
            () = self.evicted.cancelled() => Read::Gone,
            () = self.shutdown.cancelled(), if idle => Read::Gone,
        }
    }

    /// Reads the rest of the body into `buf`: `Some(false)` once it is all there, `Some(true)`
    /// when the body deadline passed first, `None` when the client went away.
    async fn read_body(&mut self, buf: &mut BytesMut, head: &PlainHead) -> Option<bool> {
        let end = head.len + head.body_len;
        if buf.len() >= end {
            return Some(false);
        }
        buf.reserve(end - buf.len());
        let deadline = Instant::now() + self.settings.limits.body_read_timeout;
        while buf.len() < end {
            match self.read(buf, deadline, false).await {
                Read::Bytes => {}
                Read::Deadline => return Some(true),
                Read::Gone => return None,
            }
        }
        Some(false)
    }

    /// The service's answer to `request`; `None` when the client closed its side first (the
    /// request is cancelled). Bytes the client sends meanwhile (a pipelined request) are kept.
    /// (No watch for eviction: only idle connections are evicted, and this one is busy.)
    async fn call(&mut self, request: Request<Body>, buf: &mut BytesMut) -> Option<AxumResponse> {
        let answer = self.router.clone().oneshot(request);
        tokio::pin!(answer);
        if buf.capacity() - buf.len() < READ_CHUNK / 2 {
            buf.reserve(READ_CHUNK);
        }
        // As hyper does: a request already waiting behind this one means no watch for the end.
        let mut watching = buf.is_empty();
        loop {
            tokio::select! {
                biased;
                answer = answer.as_mut() => return Some(match answer {
                    Ok(response) => response,
                    Err(never) => match never {},
                }),
                read = self.socket.read_buf(buf), if watching => match read {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => watching = false,
                },
            }
        }
    }

    /// Writes `response`: `(kept, clean)` — whether the connection stays open for another
    /// request, and whether the answer was written whole.
    async fn answer(
        &mut self,
        mut response: AxumResponse,
        close: bool,
        out: &mut Vec<u8>,
    ) -> (bool, bool) {
        if close && !says_close(response.headers()) {
            response
                .headers_mut()
                .append(CONNECTION, HeaderValue::from_static("close"));
        }
        announce_close_or_idle_timeout(&mut response, self.activity, &self.settings.keep_alive);
        let kept = !says_close(response.headers());
        let (parts, mut body) = response.into_parts();
        out.clear();
        let framing = encode_head(parts.status, &parts.headers, &body, out);
        let clean = self.write_body(&mut body, framing, out).await.is_ok();
        (kept, clean)
    }

    /// Writes the body after the head already in `out`; an error when the body failed, did not
    /// match its declared length, or the client could not be written to.
    async fn write_body(
        &mut self,
        body: &mut Body,
        framing: Framing,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        let mut left = match framing {
            Framing::None => 0,
            Framing::Length(n) => n,
            Framing::Chunked => u64::MAX,
        };
        if !matches!(framing, Framing::None) {
            loop {
                // Frames ready at once are gathered with the head; what is gathered is written
                // before waiting for the next frame.
                let frame = std::future::poll_fn(|cx| match Pin::new(&mut *body).poll_frame(cx) {
                    Poll::Ready(frame) => Poll::Ready(Some(frame)),
                    Poll::Pending if !out.is_empty() => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                })
                .await;
                let data = match frame {
                    None => {
                        self.flush(out).await?;
                        continue;
                    }
                    Some(None) => break,
                    Some(Some(Err(_))) => return Err(io::ErrorKind::InvalidData.into()),
                    Some(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) => data,
                        Err(_) => continue,
                    },
                };
                if data.is_empty() {
                    continue;
                }
                let n = data.len() as u64;
                if matches!(framing, Framing::Chunked) {
                    hex_line(n, out);
                } else {
                    // More than the declared length would run into the next answer.
                    left = left.checked_sub(n).ok_or(io::ErrorKind::InvalidData)?;
                }
                if data.len() <= COPY_FRAME {
                    out.extend_from_slice(&data);
                } else {
                    self.flush(out).await?;
                    self.socket.write_all(&data).await?;
                }
                if matches!(framing, Framing::Chunked) {
                    out.extend_from_slice(b"\r\n");
                }
                if out.len() >= READ_CHUNK * 8 {
                    self.flush(out).await?;
                }
            }
        }
        if matches!(framing, Framing::Chunked) {
            out.extend_from_slice(b"0\r\n\r\n");
        } else if left != 0 {
            self.flush(out).await?;
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.flush(out).await
    }

    async fn flush(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        if !out.is_empty() {
            self.socket.write_all(out).await?;
            out.clear();
        }
        Ok(())
    }
}

/// Appends `n` in hex and a line end (a chunk's size line).
fn hex_line(n: u64, out: &mut Vec<u8>) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = [0u8; 16];
    let mut at = text.len();
    let mut rest = n;
    loop {
        at -= 1;
        text[at] = DIGITS[(rest & 0xf) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&text[at..]);
    out.extend_from_slice(b"\r\n");
}

/// Whether any `connection` header of `headers` asks to close.
fn says_close(headers: &HeaderMap) -> bool {
    headers.get_all(CONNECTION).iter().any(|value| {
        value
            .as_bytes()
            .split(|&b| b == b',')
            .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
    })
}

/// How an answer's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body (1xx, 204, 304).
    None,
    Length(u64),
    Chunked,
}

/// Writes the status line and headers of an answer into `out`, adding the framing header it
/// needs (unless it declares its own `content-length`) and a `date`.
pub(crate) fn encode_head(
    status: StatusCode,
    headers: &HeaderMap,
    body: &Body,
    out: &mut Vec<u8>,
) -> Framing {
    if status == StatusCode::OK {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| decimal(v.as_bytes()))
        .map(|n| n as u64);
    for (name, value) in headers {
        if name == TRANSFER_ENCODING || (name == CONTENT_LENGTH && (bodiless || declared.is_none()))
        {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let framing = if bodiless {
        Framing::None
    } else if let Some(n) = declared {
        Framing::Length(n)
    } else {
        let n = if body.is_end_stream() {
            Some(0)
        } else {
            body.size_hint().exact()
        };
        match n {
            Some(n) => {
                out.extend_from_slice(b"content-length: ");
                out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                out.extend_from_slice(b"\r\n");
                Framing::Length(n)
            }
            None => {
                out.extend_from_slice(b"transfer-encoding: chunked\r\n");
                Framing::Chunked
            }
        }
    };
    if !headers.contains_key(DATE) {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(&DATE_NOW.with(CachedDate::now));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    framing
}

thread_local! {
    static DATE_NOW: CachedDate = CachedDate::default();
}

/// The `date` header's value, formatted once a second per thread.
#[derive(Default)]
struct CachedDate {
    /// The second it was formatted for, and the text (`Sun, 06 Nov 1994 08:49:37 GMT`).
    cached: Cell<(u64, [u8; 29])>,
}

impl CachedDate {
    fn now(&self) -> [u8; 29] {
        let now = SystemTime::now();
        let second = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (at, mut text) = self.cached.get();
        if at != second {
            let formatted = httpdate::fmt_http_date(now);
            if formatted.len() == text.len() {
                text.copy_from_slice(formatted.as_bytes());
                self.cached.set((second, text));
            }
        }
        text
    }
}

/// A request body whose deadline passed before it arrived.
struct TimedOut;

impl http_body::Body for TimedOut {
    type Data = Bytes;
    type Error = BodyTimeout;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyTimeout>>> {
        Poll::Ready(Some(Err(BodyTimeout)))
    }
}

/// A socket with bytes already read from it put back in front: what hyper reads when a
/// connection is handed to it.
pub(crate) struct Rewind<T> {
    prefix: Bytes,
    inner: T,
}

impl<T> Rewind<T> {
    pub fn new(prefix: Bytes, inner: T) -> Rewind<T> {
        Rewind { prefix, inner }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
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

/// Reads `data` as a request head and builds its request, as a connection would (for fuzzing):
/// checks that a head served here lies within `data`, that its body fits [`MAX_BODY`], that its
/// framing is the one the reader in front of hyper finds, and that building it never panics.
#[doc(hidden)]
pub fn fuzz_head(data: &[u8]) {
    crate::framing::fuzz_follow(data);
    // The reader here and the one in front of hyper judge a head alike.
    let verdict = crate::framing::framing_verdict(data);
    let head = match parse_head(data, 32 * 1024) {
        Head::Plain(head) => head,
        Head::Refused(refusal) => {
            assert!(matches!(refusal.status.as_u16(), 400 | 413));
            assert_eq!(
                verdict,
                crate::framing::FramingVerdict::Refused(refusal.status.as_u16())
            );
            return;
        }
        Head::Partial | Head::Other => return,
    };
    {
        use crate::framing::FramingVerdict::{Length, NoBody};
        let body = head.body_len as u64;
        assert!(verdict == Length(body) || (body == 0 && verdict == NoBody));
        let count = |name: &[u8]| {
            head.headers
                .iter()
                .filter(|(n, _)| data[n.clone()].eq_ignore_ascii_case(name))
                .count()
        };
        assert_eq!(count(b"host"), 1, "a served head has one host");
        assert!(count(b"content-length") <= 1);
        assert!(head.len <= data.len());
        assert!(head.body_len <= MAX_BODY);
        assert!(head.target.end <= head.len);
        for (name, value) in &head.headers {
            assert!(name.end <= head.len && value.end <= head.len);
        }
        let bytes = Bytes::copy_from_slice(&data[..head.len]);
        if let Some(request) = build_request(&head, &bytes, Body::empty()) {
            assert_eq!(request.method(), head.method);
            assert_eq!(request.headers().len(), head.headers.len());
            assert!(!request.headers().contains_key(TRANSFER_ENCODING));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(head: &[u8]) -> PlainHead {
        match parse_head(head, 32 * 1024) {
            Head::Plain(head) => head,
            other => panic!("{other:?} for {:?}", String::from_utf8_lossy(head)),
        }
    }

    fn is_other(head: &[u8]) -> bool {
        matches!(parse_head(head, 32 * 1024), Head::Other)
    }

    #[test]
    fn a_plain_request_is_read_with_its_parts_in_place() {
        let text = b"POST /v1/chat?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: keep-alive, Close\r\n\r\n{}";
        let head = plain(text);
        assert_eq!(head.len, text.len() - 2);
        assert_eq!(head.method, Method::POST);
        assert_eq!(&text[head.target.clone()], b"/v1/chat?x=1");
        assert_eq!(head.body_len, 2);
        assert!(head.close);
        let names: Vec<&[u8]> = head.headers.iter().map(|(n, _)| &text[n.clone()]).collect();
        assert_eq!(names, [&b"Host"[..], b"Content-Length", b"Connection"]);
        let bytes = Bytes::copy_from_slice(&text[..head.len]);
        let request = build_request(&head, &bytes, Body::empty()).unwrap();
        assert_eq!(request.uri().path(), "/v1/chat");
        assert_eq!(request.uri().query(), Some("x=1"));
        assert_eq!(request.headers()["content-length"], "2");
        assert_eq!(request.version(), Version::HTTP_11);
        let head = plain(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n");
        assert_eq!((head.body_len, head.close), (0, false));
        for method in [Method::PUT, Method::DELETE, Method::PATCH, Method::OPTIONS] {
            let text = format!("{method} /x HTTP/1.1\r\nhost: a\r\n\r\n");
            assert_eq!(plain(text.as_bytes()).method, method);
        }
    }

    #[test]
    fn a_head_not_all_here_is_partial_until_it_outgrows_the_limit() {
        assert!(matches!(parse_head(b"", 100), Head::Partial));
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\nhost: a\r\n", 100),
            Head::Partial
        ));
        let long = [b"GET / HTTP/1.1\r\nhost: a\r\nx: ".as_slice(), &[b'a'; 200]].concat();
        assert!(matches!(parse_head(&long, 100), Head::Other));
        let whole = [long.as_slice(), b"\r\n\r\n"].concat();
        assert!(matches!(parse_head(&whole, 100), Head::Other));
        assert!(matches!(parse_head(&whole, 1000), Head::Plain(_)));
    }

    #[test]
    fn everything_but_the_plain_shape_is_left_to_hyper() {
        for head in [
            &b"GET / HTTP/1.0\r\n\r\n"[..],
            b"HEAD / HTTP/1.1\r\nhost: a\r\n\r\n",
            b"CONNECT a:443 HTTP/1.1\r\nhost: a\r\n\r\n",
            b"BREW / HTTP/1.1\r\nhost: a\r\n\r\n",
            b"GET http://a/ HTTP/1.1\r\nhost: a\r\n\r\n",
            b"OPTIONS * HTTP/1.1\r\nhost: a\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\nexpect: 100-continue\r\ncontent-length: 1\r\n\r\n",
            b"GET / HTTP/1.1\r\nhost: a\r\nupgrade: websocket\r\n\r\n",
            b"GET / HTTP/1.1\r\nhost: a\r\nconnection: Upgrade\r\n\r\n",
            b"GET / HTTP/1.1\r\nbad header\r\n\r\n",
            b"GET / HTTP/1.1\r\nx: a\r\n b\r\n\r\n",
            b"\x00GET / HTTP/1.1\r\n\r\n",
        ] {
            assert!(is_other(head), "{:?}", String::from_utf8_lossy(head));
        }
        let over = format!(
            "POST / HTTP/1.1\r\nhost: a\r\ncontent-length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert!(is_other(over.as_bytes()));
        let at = format!("POST / HTTP/1.1\r\nhost: a\r\ncontent-length: {MAX_BODY}\r\n\r\n");
        assert_eq!(plain(at.as_bytes()).body_len, MAX_BODY);
        // `host` and the others: at most MAX_HEADERS on the plain path, one more goes to hyper.
        let headers = |n: usize| -> String { (1..n).map(|i| format!("x{i}: y\r\n")).collect() };
        for n in [MAX_HEADERS - 1, MAX_HEADERS] {
            let head = format!("GET / HTTP/1.1\r\nhost: a\r\n{}\r\n", headers(n));
            assert_eq!(plain(head.as_bytes()).len, head.len(), "{n} headers");
        }
        let one_more = format!(
            "GET / HTTP/1.1\r\nhost: a\r\n{}\r\n",
            headers(MAX_HEADERS + 1)
        );
        assert!(is_other(one_more.as_bytes()));
        // The limit is 64 KiB: a body of that size is read here, one byte more is hyper's.
        assert_eq!(
            plain(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 65536\r\n\r\n").body_len,
            65_536
        );
        assert!(is_other(
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 65537\r\n\r\n"
        ));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x{i}: y\r\n")).collect();
        assert!(is_other(
            format!("GET / HTTP/1.1\r\nhost: a\r\n{many}\r\n").as_bytes()
        ));
    }

    #[test]
    fn an_ambiguous_framing_a_missing_or_second_host_and_userinfo_are_refused() {
        let refusal = |head: &[u8]| match parse_head(head, 32 * 1024) {
            Head::Refused(refusal) => refusal.status.as_u16(),
            other => panic!("{other:?} for {:?}", String::from_utf8_lossy(head)),
        };
        for head in [
            &b"POST / HTTP/1.1\r\nhost: a\r\nTransfer-Encoding: gzip\r\ncontent-length: 1\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\ncontent-length: 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: identity, chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: +1\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1 1\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1,1\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: \r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nhost: a\r\nhost: a\r\n\r\n",
            b"GET / HTTP/1.0\r\nhost: a\r\nHost: b\r\n\r\n",
            b"GET http://u:p@a/ HTTP/1.1\r\nhost: a\r\n\r\n",
            b"CONNECT u@a:443 HTTP/1.1\r\nhost: a\r\n\r\n",
        ] {
            assert_eq!(refusal(head), 400, "{:?}", String::from_utf8_lossy(head));
        }
        for head in [
            &b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 18446744073709551615\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 99999999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1073741825\r\n\r\n",
        ] {
            assert_eq!(refusal(head), 413, "{:?}", String::from_utf8_lossy(head));
        }
        // At the largest body any setting allows, and with leading zeros: hyper's to read.
        assert!(is_other(
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1073741824\r\n\r\n"
        ));
        assert!(is_other(
            b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 0000000000000000000070000\r\n\r\n"
        ));
        assert_eq!(
            plain(b"POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 007\r\n\r\n").body_len,
            7
        );
    }

    #[test]
    fn a_content_length_is_plain_decimal_digits() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"007"), Some(7));
        assert_eq!(
            decimal(b"123456789012345678"),
            Some(123_456_789_012_345_678)
        );
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b"1e3",
            b" 1",
            b"0x10",
            b"1234567890123456789",
        ] {
            assert_eq!(decimal(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn head_of(
        status: StatusCode,
        headers: &[(&'static str, &'static str)],
        body: Body,
    ) -> (String, Framing) {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(*name, HeaderValue::from_static(value));
        }
        let mut out = Vec::new();
        let framing = encode_head(status, &map, &body, &mut out);
        (String::from_utf8(out).unwrap(), framing)
    }

    #[test]
    fn an_answer_is_framed_by_its_length_known_or_declared_else_chunked() {
        let (text, framing) = head_of(
            StatusCode::OK,
            &[("content-type", "text/plain")],
            Body::from("hey"),
        );
        assert!(
            text.starts_with(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\ndate: "
            ),
            "{text}"
        );
        assert!(text.ends_with(" GMT\r\n\r\n"), "{text}");
        assert_eq!(framing, Framing::Length(3));
        let (text, framing) = head_of(StatusCode::NOT_FOUND, &[], Body::empty());
        assert!(
            text.starts_with("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n"),
            "{text}"
        );
        assert_eq!(framing, Framing::Length(0));
        let (text, framing) = head_of(
            StatusCode::OK,
            &[("transfer-encoding", "gzip")],
            unsized_body(),
        );
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        assert!(!text.contains("gzip"), "{text}");
        assert_eq!(framing, Framing::Chunked);
        let (text, framing) = head_of(StatusCode::OK, &[("content-length", "7")], unsized_body());
        assert_eq!(text.matches("content-length").count(), 1, "{text}");
        assert_eq!(framing, Framing::Length(7));
        let (text, framing) = head_of(
            StatusCode::NO_CONTENT,
            &[("content-length", "3")],
            Body::from("abc"),
        );
        assert!(!text.contains("content-length"), "{text}");
        assert_eq!(framing, Framing::None);
        let (text, _) = head_of(
            StatusCode::OK,
            &[("date", "Tue, 01 Dec 2026 00:00:00 GMT")],
            Body::empty(),
        );
        assert_eq!(text.matches("date: ").count(), 1, "{text}");
    }

    /// A body whose length is not known up front.
    fn unsized_body() -> Body {
        struct Unsized(Option<Bytes>);
        impl http_body::Body for Unsized {
            type Data = Bytes;
            type Error = std::convert::Infallible;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
                Poll::Ready(self.0.take().map(|b| Ok(Frame::data(b))))
            }
        }
        Body::new(Unsized(Some(Bytes::from_static(b"x"))))
    }

    #[test]
    fn a_chunk_size_line_is_lowercase_hex() {
        for (n, text) in [
            (0, "0\r\n"),
            (9, "9\r\n"),
            (255, "ff\r\n"),
            (4096, "1000\r\n"),
            (u64::MAX, "ffffffffffffffff\r\n"),
        ] {
            let mut out = Vec::new();
            hex_line(n, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), text);
        }
    }

    #[test]
    fn the_date_is_an_http_date_of_now() {
        // A date formatted for an earlier second is formatted again.
        let stale = CachedDate::default();
        let mut old = [0u8; 29];
        old.copy_from_slice(b"Thu, 01 Jan 1970 00:00:01 GMT");
        stale.cached.set((1, old));
        let text = stale.now();
        assert_ne!(text, old);
        let parsed = httpdate::parse_http_date(std::str::from_utf8(&text).unwrap()).unwrap();
        assert!(SystemTime::now().duration_since(parsed).unwrap().as_secs() <= 2);
        let text = DATE_NOW.with(CachedDate::now);
        let parsed = httpdate::parse_http_date(std::str::from_utf8(&text).unwrap()).unwrap();
        let age = SystemTime::now().duration_since(parsed).unwrap();
        assert!(age.as_secs() <= 2, "{age:?}");
    }

    #[tokio::test]
    async fn a_rewound_socket_reads_what_was_put_back_first() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b" world").await.unwrap();
        drop(a);
        let mut rewound = Rewind::new(Bytes::from_static(b"hello"), b);
        let mut out = String::new();
        rewound.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
        // Writes go to the socket as they are, and so does the shutdown: the peer sees the end
        // of the stream while the rewound socket is still there.
        let (mut a, b) = tokio::io::duplex(64);
        let mut rewound = Rewind::new(Bytes::new(), b);
        rewound.write_all(b"answer").await.unwrap();
        rewound.shutdown().await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            a.read_to_string(&mut out),
        )
        .await
        .expect("the shutdown never reached the socket")
        .unwrap();
        assert_eq!(out, "answer");
        drop(rewound);
    }

    #[test]
    fn the_fuzz_entry_accepts_anything() {
        fuzz_head(b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\nx: \xff\r\n\r\n");
        fuzz_head(b"GET /%zz HTTP/1.1\r\nhost: a\r\n\r\n");
        fuzz_head(b"GET / HTTP/1.1\r\n\r\n");
        fuzz_head(&[0xff; 100]);
    }
}
