//! HTTP/1.1 to plain `http://` upstreams without hyper: the request is written and the answer
//! read by the request's own task, on a connection it holds for the request's life.
//!
//! hyper's client runs each connection in a task of its own and hands requests and answers to it
//! through channels: two task switches and about as many instructions per request as all of the
//! rest of an upstream call. Here a request holds its connection: it writes the head and body in
//! one write, reads the answer's head (`httparse`), and the answer's body reads the rest from the
//! same socket, handing the connection back to the pool at the body's end.
//!
//! What an answer may be: any status (`1xx` interim answers such as `100` and `103` are skipped;
//! a `101` is an error, since no request asks for an upgrade, and its connection is dropped;
//! `204`, `304` have no body), its body delimited by `content-length`, by
//! `transfer-encoding: chunked` or by the connection's end. Only a body delimited by its length
//! or by chunks, on an answer that did not say `connection: close`, leaves the connection
//! reusable. Anything else (a malformed head, a head over [`MAX_HEAD`], two different lengths, a
//! bad chunk) is an error naming what was wrong.

use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::cause::TransportCause;

/// Largest answer head read (status line and headers).
pub const MAX_HEAD: usize = 64 * 1024;
/// Most headers an answer may have.
const MAX_HEADERS: usize = 100;
/// Longest chunk-size line (size, extensions) and longest trailer section.
const MAX_CHUNK_LINE: usize = 4 * 1024;
const MAX_TRAILERS: usize = 16 * 1024;
/// What the read buffer grows by.
const READ_CHUNK: usize = 8 * 1024;
/// Request bodies up to this size are copied beside the head (one write for both).
const COPY_BODY: usize = 16 * 1024;

/// What went wrong on an upstream connection, and what it came down to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
    cause: TransportCause,
}

impl Error {
    pub(crate) fn caused(cause: TransportCause, message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
            cause,
        }
    }

    /// A socket error while `doing` something: its cause follows its kind.
    fn io(doing: &str, e: &std::io::Error) -> Error {
        Error::caused(TransportCause::of_io(e.kind()), format!("{doing}: {e}"))
    }

    pub(crate) fn cause(&self) -> TransportCause {
        self.cause
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// An error of the answer's content (not HTTP as it should be).
impl From<String> for Error {
    fn from(message: String) -> Error {
        Error::caused(TransportCause::Other, message)
    }
}

fn error(message: impl Into<String>) -> Error {
    Error::caused(TransportCause::Other, message)
}

/// An open HTTP/1.1 connection to an upstream, between requests.
#[derive(Debug)]
pub struct Conn {
    tcp: TcpStream,
    /// Bytes read and not yet consumed (empty between requests).
    buf: BytesMut,
    out: Vec<u8>,
}

/// Why a request got no answer: `Again` when nothing of it reached the upstream (it may go on
/// another connection), `Failed` otherwise.
pub enum Unsent {
    Again(Box<Request<Full<Bytes>>>, Error),
    Failed(Error),
}

impl Conn {
    pub fn new(tcp: TcpStream) -> Conn {
        Conn {
            tcp,
            buf: BytesMut::new(),
            out: Vec::new(),
        }
    }

    /// Whether an idle connection can take a request: nothing has arrived on it since its last
    /// answer (the upstream closing it, or bytes it should not have sent). Costs no system call
    /// unless the socket became readable.
    pub fn is_reusable(&self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.tcp.poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => {
                let mut probe = [0u8; 1];
                matches!(self.tcp.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Sends `request` (its URI absolute or origin-form; `host` unless it has its own) and
    /// reads the answer's head. `reused`: the connection has served a request before, so a
    /// failure to write means the upstream had closed it (the request can go elsewhere).
    pub async fn send(
        mut self,
        request: Request<Full<Bytes>>,
        host: &HeaderValue,
        reused: bool,
    ) -> Result<Response<ResponseBody>, Unsent> {
        self.out.clear();
        let body = encode_request(&request, host, &mut self.out);
        let written = match body {
            Some(body) if body.len() > COPY_BODY => {
                let head = std::mem::take(&mut self.out);
                let result = write_two(&mut self.tcp, &head, &body).await;
                self.out = head;
                result
            }
            _ => self.tcp.write_all(&self.out).await,
        };
        if let Err(e) = written {
            let e = Error::io("cannot write the request", &e);
            return Err(if reused {
                Unsent::Again(Box::new(request), e)
            } else {
                Unsent::Failed(e)
            });
        }
        let head_request = request.method() == Method::HEAD;
        self.read_head(head_request).await.map_err(Unsent::Failed)
    }

    /// Reads answer heads until a final one (interim `1xx` answers are skipped).
    async fn read_head(mut self, head_request: bool) -> Result<Response<ResponseBody>, Error> {
        loop {
            match parse_head(&self.buf)? {
                Some((len, head)) => {
                    let bytes = self.buf.split_to(len).freeze();
                    // No request asks for an upgrade: a switch is the upstream's protocol
                    // error, and what follows it on the connection belongs to no request (the
                    // connection is dropped, never pooled).
                    if head.status == StatusCode::SWITCHING_PROTOCOLS {
                        return Err(error(
                            "the upstream switched protocols (101) though no upgrade was asked",
                        ));
                    }
                    if head.status.is_informational() {
                        continue;
                    }
                    return build_response(head, &bytes, head_request, self);
                }
                None if self.buf.len() > MAX_HEAD => {
                    return Err(error(format!("the answer's head exceeds {MAX_HEAD} bytes")))
                }
                None => {}
            }
            let n = std::future::poll_fn(|cx| read_more(&mut self.tcp, &mut self.buf, cx))
                .await
                .map_err(|e| Error::io("reading the answer failed", &e))?;
            if n == 0 {
                return Err(Error::caused(
                    TransportCause::Reset,
                    "the upstream closed the connection before a whole answer head",
                ));
            }
        }
    }
}

async fn write_two(tcp: &mut TcpStream, head: &[u8], body: &[u8]) -> std::io::Result<()> {
    tcp.write_all(head).await?;
    tcp.write_all(body).await
}

/// Reads what the socket has into `buf`'s spare room (grown when short): the count, 0 at the end.
fn read_more(
    tcp: &mut TcpStream,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<usize>> {
    if buf.capacity() - buf.len() < READ_CHUNK / 2 {
        buf.reserve(READ_CHUNK);
    }
    tokio_util::io::poll_read_buf(Pin::new(tcp), cx, buf)
}

/// Writes the request head (and a body up to [`COPY_BODY`]) into `out`; returns the body when
/// it is to be written after `out`.
fn encode_request(
    request: &Request<Full<Bytes>>,
    host: &HeaderValue,
    out: &mut Vec<u8>,
) -> Option<Bytes> {
    let body = full_bytes(request.body());
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(request.method().as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let headers = request.headers();
    if !headers.contains_key(HOST) {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in headers {
        if name == TRANSFER_ENCODING || name == CONTENT_LENGTH {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if sends_length(request.method(), &body) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if body.len() > COPY_BODY {
        return Some(body);
    }
    out.extend_from_slice(&body);
    None
}

/// Whether a request of `method` with `body` carries a `content-length`: every body does, and
/// so does an empty POST, PUT or PATCH (a method whose request is expected to have one).
pub(crate) fn sends_length(method: &Method, body: &Bytes) -> bool {
    !body.is_empty()
        || *method == Method::POST
        || *method == Method::PUT
        || *method == Method::PATCH
}

/// The bytes of a `Full` body (it yields them in one frame, at once).
pub(crate) fn full_bytes(body: &Full<Bytes>) -> Bytes {
    let mut body = body.clone();
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match Pin::new(&mut body).poll_frame(&mut cx) {
        Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        _ => Bytes::new(),
    }
}

/// An answer head: where its parts are in the bytes it was read from.
#[derive(Debug)]
pub(crate) struct Head {
    status: StatusCode,
    http10: bool,
    headers: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
}

/// The answer head at the front of `buf`: its length and parts once all of it is there.
pub(crate) fn parse_head(buf: &[u8]) -> Result<Option<(usize, Head)>, Error> {
    let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut raw);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(error(format!("the answer's head is malformed: {e}"))),
    };
    let code = response.code.unwrap_or(0);
    let status = StatusCode::from_u16(code)
        .map_err(|_| error(format!("the answer's status {code} is not valid")))?;
    let base = buf.as_ptr() as usize;
    let at = |part: &[u8]| {
        let start = part.as_ptr() as usize - base;
        start..start + part.len()
    };
    let headers = response
        .headers
        .iter()
        .map(|h| (at(h.name.as_bytes()), at(h.value)))
        .collect();
    Ok(Some((
        len,
        Head {
            status,
            http10: response.version == Some(0),
            headers,
        },
    )))
}

/// The answer for `head` (read from `bytes`), its body reading on from `conn`.
fn build_response(
    head: Head,
    bytes: &Bytes,
    head_request: bool,
    conn: Conn,
) -> Result<Response<ResponseBody>, Error> {
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    for (name, value) in &head.headers {
        let name = HeaderName::from_bytes(&bytes[name.clone()])
            .map_err(|_| error("the answer has an invalid header name"))?;
        let value = HeaderValue::from_maybe_shared(bytes.slice(value.clone()))
            .map_err(|_| error("the answer has an invalid header value"))?;
        headers.append(name, value);
    }
    let framing = framing(head.status, &headers, head_request)?;
    let keep = !head.http10 && !matches!(framing, Framing::Close) && !says_close(&headers);
    let mut response = Response::new(ResponseBody {
        conn: Some(conn),
        framing,
        keep,
    });
    *response.status_mut() = head.status;
    *response.version_mut() = if head.http10 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    *response.headers_mut() = headers;
    Ok(response)
}

fn says_close(headers: &HeaderMap) -> bool {
    headers.get_all(CONNECTION).iter().any(|value| {
        value
            .as_bytes()
            .split(|&b| b == b',')
            .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
    })
}

/// How an answer's body is delimited, and how much of it is left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Framing {
    Length(u64),
    Chunked(Chunked),
    /// Until the upstream closes the connection.
    Close,
}

/// The framing an answer's headers declare.
fn framing(status: StatusCode, headers: &HeaderMap, head_request: bool) -> Result<Framing, Error> {
    if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Length(0));
    }
    if let Some(last) = headers.get_all(TRANSFER_ENCODING).iter().next_back() {
        let chunked = last
            .as_bytes()
            .rsplit(|&b| b == b',')
            .next()
            .is_some_and(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        return Ok(if chunked {
            Framing::Chunked(Chunked::default())
        } else {
            Framing::Close
        });
    }
    let mut length = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        for part in value.as_bytes().split(|&b| b == b',') {
            let part = part.trim_ascii();
            let n = std::str::from_utf8(part)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| error("the answer's content-length is not a number"))?;
            if length.is_some_and(|l| l != n) {
                return Err(error("the answer has two different content-lengths"));
            }
            length = Some(n);
        }
    }
    Ok(length.map_or(Framing::Close, Framing::Length))
}

/// Where a chunked body's reading is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Chunked {
    /// Before a chunk-size line.
    #[default]
    Size,
    /// Inside a chunk's data: bytes left.
    Data(u64),
    /// After a chunk's data: its line end.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one (bytes of them so far).
    Trailers(usize),
    Done,
}

/// One step of a chunked body's decoding.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Data(Bytes),
    /// More bytes are needed.
    More,
    End,
}

impl Chunked {
    /// Decodes from the front of `buf`, consuming what it uses.
    pub(crate) fn step(&mut self, buf: &mut BytesMut) -> Result<Step, Error> {
        loop {
            match self {
                Chunked::Size => {
                    let Some(line) = take_line(buf, MAX_CHUNK_LINE)? else {
                        return Ok(Step::More);
                    };
                    let size = chunk_size(&line)?;
                    *self = if size == 0 {
                        Chunked::Trailers(0)
                    } else {
                        Chunked::Data(size)
                    };
                }
                Chunked::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
                    *left -= n as u64;
                    if *left == 0 {
                        *self = Chunked::DataEnd;
                    }
                    return Ok(Step::Data(buf.split_to(n).freeze()));
                }
                Chunked::DataEnd => {
                    let Some(line) = take_line(buf, 2)? else {
                        return Ok(Step::More);
                    };
                    if !line.is_empty() {
                        return Err(error("a chunk is longer than its size"));
                    }
                    *self = Chunked::Size;
                }
                Chunked::Trailers(seen) => {
                    let budget = MAX_TRAILERS.saturating_sub(*seen);
                    let Some(line) = take_line(buf, budget)? else {
                        return Ok(Step::More);
                    };
                    if line.is_empty() {
                        *self = Chunked::Done;
                    } else {
                        *seen += line.len() + 2;
                    }
                }
                Chunked::Done => return Ok(Step::End),
            }
        }
    }
}

/// The line at the front of `buf` without its end (`\r\n`, or a bare `\n`), consumed; `None`
/// until it has all arrived; an error when it is longer than `max`.
fn take_line(buf: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, Error> {
    match buf.iter().take(max + 2).position(|&b| b == b'\n') {
        Some(end) => {
            let mut line = buf.split_to(end + 1);
            line.truncate(end);
            if line.last() == Some(&b'\r') {
                line.truncate(end - 1);
            }
            Ok(Some(line))
        }
        None if buf.len() > max + 1 => Err(error("a chunk line or trailer is too long")),
        None => Ok(None),
    }
}

/// A chunk-size line's size (hex, at most 15 digits; extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> Result<u64, Error> {
    let digits = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(error("a chunk size is not a hex number"));
    }
    let text =
        std::str::from_utf8(digits).map_err(|_| error("a chunk size is not a hex number"))?;
    u64::from_str_radix(text, 16).map_err(|_| error("a chunk size is not a hex number"))
}

/// An answer's body, read from its connection. At its end the connection is reusable when
/// [`ResponseBody::take_conn`] gives it back.
#[derive(Debug)]
pub struct ResponseBody {
    conn: Option<Conn>,
    framing: Framing,
    /// The answer allows the connection to be reused (HTTP/1.1, no `connection: close`, a
    /// delimited body).
    keep: bool,
}

impl ResponseBody {
    /// The connection, once the body has been read to its end and the connection may carry
    /// another request (nothing beyond the body arrived).
    pub fn take_conn(&mut self) -> Option<Conn> {
        if !self.is_end_stream() || !self.keep {
            return None;
        }
        self.conn.take().filter(|c| c.buf.is_empty())
    }

    fn read(&mut self, cx: &mut Context<'_>) -> Poll<Result<usize, Error>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(Ok(0));
        };
        read_more(&mut conn.tcp, &mut conn.buf, cx)
            .map_err(|e| Error::io("reading the answer's body failed", &e))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            let buf = &mut conn.buf;
            match &mut this.framing {
                Framing::Length(0) => return Poll::Ready(None),
                Framing::Length(left) if !buf.is_empty() => {
                    let n = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
                    *left -= n as u64;
                    return Poll::Ready(Some(Ok(Frame::data(buf.split_to(n).freeze()))));
                }
                Framing::Chunked(chunked) => match chunked.step(buf) {
                    Ok(Step::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Step::End) => return Poll::Ready(None),
                    Ok(Step::More) => {}
                    Err(e) => {
                        this.conn = None;
                        return Poll::Ready(Some(Err(e)));
                    }
                },
                Framing::Close if !buf.is_empty() => {
                    let data = buf.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Framing::Length(_) | Framing::Close => {}
            }
            match ready!(this.read(cx)) {
                Ok(0) if matches!(this.framing, Framing::Close) => {
                    this.framing = Framing::Length(0);
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(error(
                        "the upstream closed the connection before the answer's end",
                    ))));
                }
                Ok(_) => {}
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.framing {
            Framing::Length(n) => *n == 0,
            Framing::Chunked(chunked) => *chunked == Chunked::Done,
            Framing::Close => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.framing {
            Framing::Length(n) => SizeHint::with_exact(*n),
            _ => SizeHint::default(),
        }
    }
}

/// Decodes `data` as a chunked body split at `splits` (for fuzzing): the data and the outcome
/// do not depend on how the bytes arrive, and nothing panics.
#[doc(hidden)]
pub fn fuzz_chunked(data: &[u8], splits: &[usize]) {
    let whole = decode_all(data, &[]);
    let split = decode_all(data, splits);
    assert_eq!(whole, split, "splits {splits:?}");
    let _ = parse_head(data);
}

fn decode_all(data: &[u8], splits: &[usize]) -> (Vec<u8>, Result<bool, Error>) {
    let mut chunked = Chunked::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut cuts: Vec<usize> = splits.iter().map(|s| s % (data.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(data.len());
    for cut in cuts {
        if cut < at {
            continue;
        }
        buf.extend_from_slice(&data[at..cut]);
        at = cut;
        loop {
            match chunked.step(&mut buf) {
                Ok(Step::Data(d)) => out.extend_from_slice(&d),
                Ok(Step::More) => break,
                Ok(Step::End) => return (out, Ok(true)),
                Err(e) => return (out, Err(e)),
            }
        }
    }
    (out, Ok(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(data: &[u8]) -> (Vec<u8>, Result<bool, Error>) {
        decode_all(data, &[])
    }

    #[test]
    fn a_chunked_body_decodes_to_its_data_however_it_arrives() {
        let body =
            b"5\r\nhello\r\n6;ext=1\r\n world\r\nA\r\n0123456789\r\n0\r\nx-trailer: 1\r\n\r\n";
        let (data, end) = decode(body);
        assert_eq!(data, b"hello world0123456789");
        assert_eq!(end, Ok(true));
        for split in 0..body.len() {
            assert_eq!(
                decode_all(body, &[split]),
                (data.clone(), Ok(true)),
                "split at {split}"
            );
        }
        // Bare line feeds are accepted as line ends.
        assert_eq!(decode(b"3\nabc\n0\n\n"), (b"abc".to_vec(), Ok(true)));
        // A line of exactly the limit, its line end arriving in a later read.
        let at_limit = format!("3;{}\r\nabc\r\n0\r\n\r\n", "e".repeat(MAX_CHUNK_LINE - 2));
        let split = MAX_CHUNK_LINE + 1;
        assert_eq!(
            decode_all(at_limit.as_bytes(), &[split]),
            (b"abc".to_vec(), Ok(true))
        );
        // Not all there yet: no end, no error.
        assert_eq!(decode(b"5\r\nhel"), (b"hel".to_vec(), Ok(false)));
    }

    #[test]
    fn a_bad_chunk_is_an_error_naming_it() {
        let error_of = |data: &[u8]| decode(data).1.unwrap_err().to_string();
        assert!(error_of(b"zz\r\n").contains("not a hex number"));
        assert!(error_of(b"\r\n").contains("not a hex number"));
        assert!(error_of(b"1234567890abcdef0\r\n").contains("not a hex number"));
        assert!(error_of(b"3\r\nabcd\r\n").contains("longer than its size"));
        let long = [b"1;".as_slice(), &[b'x'; MAX_CHUNK_LINE + 8]].concat();
        assert!(error_of(&long).contains("too long"));
        // A chunk-size line over the limit is refused even when its end has arrived.
        let over = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(MAX_CHUNK_LINE + 3));
        assert!(error_of(over.as_bytes()).contains("too long"));
        // Sizes: at most 15 hex digits.
        assert!(error_of(b"ffffffffffffffff\r\n").contains("not a hex number"));
        assert_eq!(decode(b"00000000000000a\r\n"), (Vec::new(), Ok(false)));
        let trailers = [
            b"0\r\n".as_slice(),
            &b"x: y\r\n".repeat(MAX_TRAILERS / 6 + 2),
        ]
        .concat();
        assert!(error_of(&trailers).contains("too long"));
        // A trailer line of exactly the trailers' budget is read; one byte more is not.
        let trailer = |len: usize| format!("0\r\nt: {}\r\n\r\n", "v".repeat(len - 3));
        for len in [MAX_TRAILERS - 1, MAX_TRAILERS] {
            assert_eq!(
                decode(trailer(len).as_bytes()),
                (Vec::new(), Ok(true)),
                "{len}"
            );
        }
        assert!(error_of(trailer(MAX_TRAILERS + 1).as_bytes()).contains("too long"));
        // And a chunk-size line one byte over its limit.
        let one_over = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(MAX_CHUNK_LINE - 1));
        assert!(error_of(one_over.as_bytes()).contains("too long"));
    }

    fn head(text: &[u8]) -> Head {
        parse_head(text).unwrap().unwrap().1
    }

    fn framing_of(text: &[u8], head_request: bool) -> Result<Framing, Error> {
        let bytes = Bytes::copy_from_slice(text);
        let h = head(text);
        let mut headers = HeaderMap::new();
        for (name, value) in &h.headers {
            headers.append(
                HeaderName::from_bytes(&bytes[name.clone()]).unwrap(),
                HeaderValue::from_maybe_shared(bytes.slice(value.clone())).unwrap(),
            );
        }
        framing(h.status, &headers, head_request)
    }

    #[test]
    fn an_answer_is_delimited_by_chunks_its_length_or_the_close() {
        let chunked = Framing::Chunked(Chunked::default());
        assert_eq!(
            framing_of(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n", false),
            Ok(Framing::Length(12))
        );
        assert_eq!(
            framing_of(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\ncontent-length: 3\r\n\r\n",
                false
            ),
            Ok(chunked)
        );
        assert_eq!(
            framing_of(b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n", false),
            Ok(Framing::Close)
        );
        assert_eq!(
            framing_of(b"HTTP/1.1 200 OK\r\n\r\n", false),
            Ok(Framing::Close)
        );
        assert_eq!(
            framing_of(
                b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n",
                false
            ),
            Ok(Framing::Length(0))
        );
        assert_eq!(
            framing_of(b"HTTP/1.1 304 Not Modified\r\n\r\n", false),
            Ok(Framing::Length(0))
        );
        assert_eq!(
            framing_of(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", true),
            Ok(Framing::Length(0))
        );
        assert_eq!(
            framing_of(b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\n", false),
            Ok(Framing::Length(5))
        );
        assert!(framing_of(
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            false
        )
        .is_err());
        assert!(framing_of(b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\n", false).is_err());
        // A sign is not a digit (Rust's integer parser would take `+5`).
        assert!(framing_of(b"HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\n", false).is_err());
        assert!(framing_of(
            b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n",
            false
        )
        .is_err());
    }

    #[test]
    fn an_answer_head_is_read_once_it_is_all_there() {
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nx: y\r\n")
            .unwrap()
            .is_none());
        let (len, h) = parse_head(b"HTTP/1.0 404 Not Found\r\nx: y\r\n\r\nbody")
            .unwrap()
            .unwrap();
        assert_eq!(len, 32);
        assert_eq!(h.status, StatusCode::NOT_FOUND);
        assert!(h.http10);
        assert!(parse_head(b"HTTP/1.1 abc OK\r\n\r\n")
            .unwrap_err()
            .to_string()
            .contains("malformed"));
        assert!(parse_head(b"SMTP ready\r\n\r\n").is_err());
        for n in [MAX_HEADERS - 1, MAX_HEADERS] {
            let some: String = (0..n).map(|i| format!("x{i}: y\r\n")).collect();
            assert!(
                matches!(
                    parse_head(format!("HTTP/1.1 200 OK\r\n{some}\r\n").as_bytes()),
                    Ok(Some(_))
                ),
                "{n} headers"
            );
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x{i}: y\r\n")).collect();
        assert!(parse_head(format!("HTTP/1.1 200 OK\r\n{many}\r\n").as_bytes()).is_err());
    }

    #[test]
    fn a_request_is_written_in_origin_form_with_host_and_length() {
        let request = Request::post("http://upstream:8080/v1/chat?x=1")
            .header("authorization", "Bearer k")
            .header("content-length", "999")
            .header("transfer-encoding", "chunked")
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        let mut out = Vec::new();
        let rest = encode_request(
            &request,
            &HeaderValue::from_static("upstream:8080"),
            &mut out,
        );
        assert!(rest.is_none());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /v1/chat?x=1 HTTP/1.1\r\nhost: upstream:8080\r\nauthorization: Bearer k\r\ncontent-length: 2\r\n\r\n{}"
        );
        let get = Request::get("http://a/models")
            .header("host", "b")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let mut out = Vec::new();
        encode_request(&get, &HeaderValue::from_static("a"), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /models HTTP/1.1\r\nhost: b\r\n\r\n"
        );
        let big = Request::post("http://a/")
            .body(Full::new(Bytes::from(vec![b'x'; COPY_BODY + 1])))
            .unwrap();
        let mut out = Vec::new();
        let rest = encode_request(&big, &HeaderValue::from_static("a"), &mut out);
        assert_eq!(rest.map(|b| b.len()), Some(COPY_BODY + 1));
        assert!(String::from_utf8(out)
            .unwrap()
            .ends_with(&format!("content-length: {}\r\n\r\n", COPY_BODY + 1)));
    }

    /// An upstream on a socket that answers each request with `answers` in turn, then closes.
    async fn upstream(
        answers: Vec<&'static [u8]>,
    ) -> (TcpStream, tokio::task::JoinHandle<Vec<u8>>) {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            for answer in answers {
                let mut buf = [0u8; 4096];
                let n = socket.read(&mut buf).await.unwrap();
                seen.extend_from_slice(&buf[..n]);
                socket.write_all(answer).await.unwrap();
            }
            seen
        });
        (TcpStream::connect(addr).await.unwrap(), server)
    }

    fn get() -> Request<Full<Bytes>> {
        Request::get("http://a/x")
            .body(Full::new(Bytes::new()))
            .unwrap()
    }

    async fn body_of(response: &mut Response<ResponseBody>) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        while let Some(frame) =
            std::future::poll_fn(|cx| Pin::new(response.body_mut()).poll_frame(cx)).await
        {
            out.extend_from_slice(&frame?.into_data().unwrap());
        }
        Ok(out)
    }

    #[tokio::test]
    async fn a_connection_carries_request_after_request_and_skips_interim_answers() {
        let (tcp, server) = upstream(vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-a: 1\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 2\r\n\r\nno",
        ])
        .await;
        let host = HeaderValue::from_static("a");
        let mut conn = Conn::new(tcp);
        for (expected_status, expected_body) in [(200, &b"hello"[..]), (200, b"abc")] {
            let Ok(mut response) = conn.send(get(), &host, false).await else {
                panic!("not sent")
            };
            assert_eq!(response.status().as_u16(), expected_status);
            assert_eq!(body_of(&mut response).await.unwrap(), expected_body);
            conn = response.body_mut().take_conn().expect("reusable");
            assert!(conn.is_reusable());
        }
        let Ok(mut response) = conn.send(get(), &host, true).await else {
            panic!("not sent")
        };
        assert_eq!(response.status().as_u16(), 503);
        assert_eq!(body_of(&mut response).await.unwrap(), b"no");
        assert!(
            response.body_mut().take_conn().is_none(),
            "it said connection: close"
        );
        let seen = String::from_utf8(server.await.unwrap()).unwrap();
        assert_eq!(
            seen.matches("GET /x HTTP/1.1\r\nhost: a\r\n\r\n").count(),
            3,
            "{seen}"
        );
    }

    #[tokio::test]
    async fn an_answer_cut_short_is_an_error_and_a_closed_idle_connection_is_not_reused() {
        let (tcp, server) =
            upstream(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"]).await;
        let Ok(mut response) = Conn::new(tcp)
            .send(get(), &HeaderValue::from_static("a"), false)
            .await
        else {
            panic!("not sent")
        };
        server.await.unwrap();
        let error = body_of(&mut response).await.unwrap_err();
        assert!(
            error.to_string().contains("before the answer's end"),
            "{error}"
        );
        assert!(response.body_mut().take_conn().is_none());

        // A body delimited by the close ends cleanly there, and the connection is not kept.
        let (tcp, server) = upstream(vec![b"HTTP/1.1 200 OK\r\n\r\nuntil the end"]).await;
        let Ok(mut response) = Conn::new(tcp)
            .send(get(), &HeaderValue::from_static("a"), false)
            .await
        else {
            panic!("not sent")
        };
        server.await.unwrap();
        assert_eq!(body_of(&mut response).await.unwrap(), b"until the end");
        assert!(response.body_mut().take_conn().is_none());

        // An idle connection the upstream has closed says so before it is used.
        let (tcp, server) = upstream(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]).await;
        let Ok(mut response) = Conn::new(tcp)
            .send(get(), &HeaderValue::from_static("a"), false)
            .await
        else {
            panic!("not sent")
        };
        let conn = response
            .body_mut()
            .take_conn()
            .expect("an empty body is at its end");
        server.await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!conn.is_reusable());
    }

    #[tokio::test]
    async fn garbage_instead_of_an_answer_is_an_error_naming_it() {
        for (answer, expected) in [
            (&b"SSH-2.0-OpenSSH\r\n\r\n"[..], "malformed"),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
                "not a number",
            ),
            (b"HTTP/1.1 200 OK\r\ncont", "before a whole answer head"),
        ] {
            let (tcp, server) = upstream(vec![answer]).await;
            let result = Conn::new(tcp)
                .send(get(), &HeaderValue::from_static("a"), false)
                .await;
            server.await.unwrap();
            match result {
                Err(Unsent::Failed(e)) => assert!(e.to_string().contains(expected), "{e}"),
                _ => panic!("{expected}: not a failure"),
            }
        }
    }

    #[tokio::test]
    async fn interim_answers_are_read_past_and_an_unasked_switch_of_protocols_is_an_error() {
        let (tcp, server) = upstream(vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        ])
        .await;
        let Ok(mut response) = Conn::new(tcp)
            .send(get(), &HeaderValue::from_static("a"), false)
            .await
        else {
            panic!("not sent")
        };
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("link").is_none(), "a hint's header");
        assert_eq!(body_of(&mut response).await.unwrap(), b"ok");
        server.await.unwrap();

        // A 101, with what the upstream sends after it on the same write or later: never an
        // answer, and the connection is not handed back.
        let (tcp, server) = upstream(vec![
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nLEFTOVER",
        ])
        .await;
        match Conn::new(tcp)
            .send(get(), &HeaderValue::from_static("a"), false)
            .await
        {
            Err(Unsent::Failed(e)) => assert!(e.to_string().contains("switched protocols"), "{e}"),
            Ok(response) => panic!("a {} was taken as the answer", response.status()),
            Err(Unsent::Again(..)) => panic!("sent again"),
        }
        server.await.unwrap();
    }

    #[test]
    fn a_length_is_sent_for_every_body_and_for_empty_posts_puts_and_patches() {
        let length_of = |method: Method, body: &'static [u8]| {
            let request = Request::builder()
                .method(method)
                .uri("http://a/x")
                .body(Full::new(Bytes::from_static(body)))
                .unwrap();
            let mut out = Vec::new();
            encode_request(&request, &HeaderValue::from_static("a"), &mut out);
            let text = String::from_utf8(out).unwrap();
            text.lines()
                .find_map(|l| l.strip_prefix("content-length: ").map(str::to_owned))
        };
        for method in [Method::POST, Method::PUT, Method::PATCH] {
            assert_eq!(
                length_of(method.clone(), b""),
                Some("0".to_owned()),
                "{method}"
            );
        }
        assert_eq!(length_of(Method::GET, b""), None);
        assert_eq!(length_of(Method::DELETE, b""), None);
        assert_eq!(length_of(Method::DELETE, b"{}"), Some("2".to_owned()));
        // A body of exactly the copy limit is still written with the head.
        let at_limit = Request::post("http://a/")
            .body(Full::new(Bytes::from(vec![b'x'; COPY_BODY])))
            .unwrap();
        let mut out = Vec::new();
        assert!(encode_request(&at_limit, &HeaderValue::from_static("a"), &mut out).is_none());
        assert!(out.ends_with(&[b'x'; COPY_BODY]));
    }

    #[test]
    fn long_heads_chunk_lines_and_trailers_within_their_limits_are_read() {
        let headers: String = (0..60)
            .map(|i| format!("x-h{i}: {}\r\n", "v".repeat(900)))
            .collect();
        let head = format!("HTTP/1.1 200 OK\r\n{headers}\r\n");
        assert!(head.len() > 50_000 && head.len() < MAX_HEAD);
        assert!(parse_head(head.as_bytes()).unwrap().is_some());
        let extension = "e".repeat(MAX_CHUNK_LINE - 10);
        let body = format!("3;{extension}\r\nabc\r\n0\r\n");
        let trailers: String = (0..20)
            .map(|i| format!("t{i}: {}\r\n", "v".repeat(700)))
            .collect();
        let body = format!("{body}{trailers}\r\n");
        assert_eq!(decode(body.as_bytes()), (b"abc".to_vec(), Ok(true)));
    }

    #[tokio::test]
    async fn a_large_body_reaches_the_upstream_whole_and_a_head_over_the_limit_is_refused() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 65536];
            loop {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended early");
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen);
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .unwrap()
                        .parse()
                        .unwrap();
                    if body.len() >= length {
                        let received = body.len().to_string();
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{received}",
                            received.len()
                        );
                        socket.write_all(answer.as_bytes()).await.unwrap();
                        break;
                    }
                }
            }
            // Then an answer whose head never ends within the limit.
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0);
            let line = format!("x-a: {}\r\n", "b".repeat(8000));
            let endless = format!("HTTP/1.1 200 OK\r\n{}", line.repeat(MAX_HEAD / 8000 + 2));
            let _ = socket.write_all(endless.as_bytes()).await;
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let size = COPY_BODY * 3 + 7;
        let request = Request::post("http://a/x")
            .body(Full::new(Bytes::from(vec![b'y'; size])))
            .unwrap();
        let Ok(mut response) = Conn::new(tcp)
            .send(request, &HeaderValue::from_static("a"), false)
            .await
        else {
            panic!("not sent")
        };
        assert_eq!(
            body_of(&mut response).await.unwrap(),
            size.to_string().as_bytes()
        );
        let conn = response.body_mut().take_conn().expect("reusable");
        match conn.send(get(), &HeaderValue::from_static("a"), true).await {
            Err(Unsent::Failed(e)) => assert!(e.to_string().contains("exceeds"), "{e}"),
            _ => panic!("a head over the limit was accepted"),
        }
        server.await.unwrap();
    }

    /// Both framings in one answer, in either order, with the names and values in any case and
    /// the length given once or twice: the chunks delimit the body, never the length (a client
    /// that let the length win would read part of the chunked body and then take the rest of it
    /// for the next answer's head). A coding other than a final `chunked` makes the body run to
    /// the close, whatever the length says.
    #[tokio::test]
    async fn chunks_delimit_the_body_whatever_the_order_and_case_of_both_framings() {
        let host = HeaderValue::from_static("a");
        let mut cases = 0;
        for te_name in [
            "transfer-encoding",
            "Transfer-Encoding",
            "TRANSFER-ENCODING",
            "tRaNsFeR-eNcOdInG",
        ] {
            for te_value in [
                "chunked",
                "Chunked",
                "CHUNKED",
                "gzip, chunked",
                "  chunked  ",
            ] {
                for cl_name in ["content-length", "Content-Length", "CONTENT-LENGTH"] {
                    for cl_lines in [
                        format!("{cl_name}: 3\r\n"),
                        format!("{cl_name}: 0\r\n"),
                        format!("{cl_name}: 3\r\n{cl_name}: 3\r\n"),
                    ] {
                        let te_line = format!("{te_name}: {te_value}\r\n");
                        for (first, second) in [(&te_line, &cl_lines), (&cl_lines, &te_line)] {
                            cases += 1;
                            let answer = format!(
                                "HTTP/1.1 200 OK\r\nx-a: 1\r\n{first}{second}\r\n5\r\nhello\r\n0\r\n\r\n"
                            );
                            let (tcp, server) = upstream(vec![
                                Box::leak(answer.clone().into_bytes().into_boxed_slice()),
                                b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecond",
                            ])
                            .await;
                            let Ok(mut response) = Conn::new(tcp).send(get(), &host, false).await
                            else {
                                panic!("not sent: {answer:?}")
                            };
                            assert_eq!(
                                body_of(&mut response).await.unwrap(),
                                b"hello",
                                "{answer:?}"
                            );
                            // The connection is at the next answer's start.
                            let conn = response.body_mut().take_conn().expect("reusable");
                            let Ok(mut next) = conn.send(get(), &host, true).await else {
                                panic!("not sent after {answer:?}")
                            };
                            assert_eq!(body_of(&mut next).await.unwrap(), b"second", "{answer:?}");
                            server.await.unwrap();
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 4 * 5 * 3 * 3 * 2);
        for answer in [
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: 3\r\n\r\nabcdef"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked, gzip\r\n\r\nabcdef",
            b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 3\r\nTRANSFER-ENCODING: identity\r\n\r\nabcdef",
        ] {
            let (tcp, server) = upstream(vec![answer]).await;
            let Ok(mut response) = Conn::new(tcp).send(get(), &host, false).await else {
                panic!("not sent")
            };
            server.await.unwrap();
            let text = String::from_utf8_lossy(answer);
            assert_eq!(body_of(&mut response).await.unwrap(), b"abcdef", "{text}");
            assert!(response.body_mut().take_conn().is_none(), "{text}");
        }
    }
}
