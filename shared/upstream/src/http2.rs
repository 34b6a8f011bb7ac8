//! HTTP/2 to TLS upstreams, spoken through the `h2` crate directly.
//!
//! One task per connection drives the socket (it reads and writes frames and sends the
//! keep-alive pings); everything else happens on the request's own task: it opens its stream,
//! writes its body, waits for the answer's head and reads the answer's body. hyper's HTTP/2
//! client puts a channel to its connection task and one more spawned task per request between
//! the two; this path has neither, so a request costs one wake-up each way.
//!
//! - A connection that refuses new streams (the upstream's GOAWAY, a connection error, its
//!   task ended) is closed for the pool; a request found it so before anything was written and
//!   goes to another connection untouched.
//! - An answer dropped before its end resets its stream (the `h2` crate does that when the
//!   last handle of a stream goes); the connection stays.
//! - Connection-specific headers (`connection` and the headers it names, `keep-alive`,
//!   `proxy-connection`, `transfer-encoding`, `upgrade`, a `te` other than `trailers`) are
//!   illegal in HTTP/2 and are not sent.

use std::future::poll_fn;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, TE, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderValue, Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::cause::TransportCause;
use crate::h1::{full_bytes, sends_length, Error, Unsent};

/// The receive windows hyper's HTTP/2 client used (larger than the protocol's 64 KiB default,
/// which would hold a fast upstream back): 2 MiB per stream, 5 MiB per connection.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// Largest frame we accept, and the largest answer head (the protocol's defaults).
const MAX_FRAME: u32 = 16 * 1024;
const MAX_HEADER_LIST: u32 = 16 * 1024;
/// Request body bytes buffered on a connection beyond what the upstream's window takes.
const MAX_SEND_BUFFER: usize = 1024 * 1024;

/// An HTTP/2 connection's request side; clones share it.
#[derive(Clone)]
pub struct Conn {
    send: h2::client::SendRequest<Bytes>,
    /// Set when the connection's task ends.
    ended: Arc<AtomicBool>,
}

impl Conn {
    /// The HTTP/2 handshake on `io` (TLS that chose `h2`), and the connection's task spawned on
    /// the calling runtime. `streams` counts the streams open on it (the pool's count, at most
    /// `max_streams`, which also bounds the streams opened before the upstream's settings say
    /// how many it allows): it pings the upstream every `ping_every` while any is open, and
    /// gives the connection up when a ping is not answered within `ping_timeout`.
    pub async fn handshake<T>(
        io: T,
        streams: Arc<AtomicUsize>,
        max_streams: usize,
        ping_every: Duration,
        ping_timeout: Duration,
    ) -> Result<Conn, Error>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME)
            .max_header_list_size(MAX_HEADER_LIST)
            .max_send_buffer_size(MAX_SEND_BUFFER)
            .initial_max_send_streams(max_streams)
            .enable_push(false)
            .handshake::<T, Bytes>(io)
            .await
            .map_err(|e| Error::caused(cause_of(&e), format!("HTTP handshake failed: {e}")))?;
        let ended = Arc::new(AtomicBool::new(false));
        let keep = Keepalive {
            streams,
            every: ping_every,
            timeout: ping_timeout,
        };
        tokio::spawn(drive(connection, keep, Arc::clone(&ended)));
        Ok(Conn { send, ended })
    }

    /// The connection takes no new streams: its task ended, or the upstream said it is going
    /// away, or the connection failed.
    pub fn is_closed(&mut self) -> bool {
        if self.ended.load(Ordering::Relaxed) {
            return true;
        }
        // The pool's handle never opens a stream, so it has nothing pending: this only checks
        // the connection's error state and registers nothing.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        matches!(self.send.poll_ready(&mut cx), Poll::Ready(Err(_)))
    }

    /// Sends `request` (an absolute URI: scheme and authority become its pseudo-headers) on a
    /// new stream and waits for the answer's head.
    pub async fn send(
        mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<RecvBody>, Unsent> {
        // Refused before anything is written: the request goes to another connection as it is.
        if let Err(e) = poll_fn(|cx| self.send.poll_ready(cx)).await {
            return Err(Unsent::Again(Box::new(request), failed(&e)));
        }
        let (parts, body) = request.into_parts();
        let body = full_bytes(&body);
        let mut head = Request::from_parts(parts, ());
        *head.version_mut() = Version::HTTP_2;
        strip_connection_headers(head.headers_mut());
        if sends_length(head.method(), &body) {
            head.headers_mut()
                .entry(CONTENT_LENGTH)
                .or_insert_with(|| HeaderValue::from(body.len()));
        }
        let end = body.is_empty();
        let (answer, mut stream) = self
            .send
            .send_request(head, end)
            .map_err(|e| Unsent::Failed(failed(&e)))?;
        if !end {
            stream
                .send_data(body, true)
                .map_err(|e| Unsent::Failed(failed(&e)))?;
        }
        let answer = answer.await.map_err(|e| Unsent::Failed(failed(&e)))?;
        let length = content_length(answer.headers());
        Ok(answer.map(|stream| RecvBody {
            stream,
            remaining: length,
            data_done: false,
        }))
    }
}

fn failed(e: &h2::Error) -> Error {
    Error::caused(cause_of(e), format!("http2 error: {e}"))
}

/// What an HTTP/2 failure came down to: its socket error's cause, or a connection or stream the
/// upstream ended (reset).
fn cause_of(e: &h2::Error) -> TransportCause {
    match e.get_io() {
        Some(io) => TransportCause::of_io(io.kind()),
        None if e.is_go_away() || e.is_reset() => TransportCause::Reset,
        None => TransportCause::Other,
    }
}

/// Removes what HTTP/2 forbids in a request: the connection-specific headers, the ones
/// `connection` names, and a `te` other than `trailers`.
fn strip_connection_headers(headers: &mut HeaderMap) {
    // The pool's callers have already left the client's hop-by-hop headers out; only a
    // channel's configured extra headers can bring one, so one look over the names usually ends
    // here instead of six removals.
    let specific = |name: &http::HeaderName| {
        matches!(
            name.as_str(),
            "connection"
                | "keep-alive"
                | "proxy-connection"
                | "transfer-encoding"
                | "upgrade"
                | "te"
        )
    };
    if !headers.keys().any(specific) {
        return;
    }
    if let Some(connection) = headers.remove(CONNECTION) {
        if let Ok(names) = connection.to_str() {
            for name in names.split(',') {
                headers.remove(name.trim());
            }
        }
    }
    for name in ["keep-alive", "proxy-connection"] {
        headers.remove(name);
    }
    headers.remove(TRANSFER_ENCODING);
    headers.remove(UPGRADE);
    if headers.get(TE).is_some_and(|te| te != "trailers") {
        headers.remove(TE);
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

struct Keepalive {
    streams: Arc<AtomicUsize>,
    every: Duration,
    timeout: Duration,
}

impl Keepalive {
    /// Waits `every`, then, while a stream is open, pings: `false` when no pong came within
    /// `timeout`.
    async fn tick(&self, pings: Option<&mut h2::PingPong>) -> bool {
        tokio::time::sleep(self.every).await;
        match pings {
            Some(pings) if self.streams.load(Ordering::Relaxed) > 0 => matches!(
                tokio::time::timeout(self.timeout, pings.ping(h2::Ping::opaque())).await,
                Ok(Ok(_))
            ),
            _ => true,
        }
    }
}

/// The connection's task: drives it until it ends, pinging as [`Keepalive::tick`] says (the
/// connection goes on being driven while a ping waits for its pong).
async fn drive<T>(
    mut connection: h2::client::Connection<T, Bytes>,
    keep: Keepalive,
    ended: Arc<AtomicBool>,
) where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut pings = connection.ping_pong();
    let mut connection = pin!(connection);
    loop {
        tokio::select! {
            result = &mut connection => {
                if let Err(error) = result {
                    tracing::debug!(%error, "upstream HTTP/2 connection ended");
                }
                break;
            }
            answered = keep.tick(pings.as_mut()) => {
                if !answered {
                    tracing::debug!("upstream HTTP/2 connection did not answer a ping; closed");
                    break;
                }
            }
        }
    }
    ended.store(true, Ordering::Relaxed);
}

/// An HTTP/2 answer's body: its data frames (each one's room handed back to the upstream's
/// window as it is read), then its trailers if any.
pub struct RecvBody {
    stream: h2::RecvStream,
    /// What the answer's `content-length` leaves to read.
    remaining: Option<u64>,
    data_done: bool,
}

impl Body for RecvBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        if !this.data_done {
            match std::task::ready!(this.stream.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = this.stream.flow_control().release_capacity(data.len());
                    if let Some(left) = &mut this.remaining {
                        *left = left.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(failed(&e)))),
                None => this.data_done = true,
            }
        }
        match std::task::ready!(this.stream.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(failed(&e)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stream.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(left) => SizeHint::with_exact(left),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use http_body_util::BodyExt;
    use tokio::io::DuplexStream;
    use tokio::sync::oneshot;

    const SLOW: Duration = Duration::from_secs(30);

    type Server = h2::server::Connection<DuplexStream, Bytes>;

    /// A connection to an in-process HTTP/2 server over a pipe: the client's `Conn` (pinging
    /// every `ping` while `open` says streams are open) and the server's connection.
    async fn pair(open: usize, ping: Duration) -> (Conn, Server) {
        let (near, far) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(h2::server::handshake(far));
        let open = Arc::new(AtomicUsize::new(open));
        let conn = Conn::handshake(near, open, 100, ping, ping).await.unwrap();
        (conn, server.await.unwrap().unwrap())
    }

    /// Keeps the server's connection going (pings, resets, the client's going) once its test
    /// has what it needs.
    fn keep_serving(mut server: Server) {
        tokio::spawn(async move { while server.accept().await.is_some() {} });
    }

    fn post(body: Bytes) -> Request<Full<Bytes>> {
        Request::builder()
            .method(Method::POST)
            .uri("https://upstream.test/v1/chat")
            .header(CONNECTION, "close")
            .body(Full::new(body))
            .unwrap()
    }

    /// The whole of a request body as the server reads it.
    async fn read_all(body: &mut h2::RecvStream) -> Vec<u8> {
        let mut got = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            body.flow_control().release_capacity(chunk.len()).unwrap();
            got.extend_from_slice(&chunk);
        }
        got
    }

    #[tokio::test]
    async fn a_request_and_its_answer_with_trailers() {
        let (conn, mut server) = pair(0, SLOW).await;
        let (seen, saw) = oneshot::channel();
        tokio::spawn(async move {
            let (request, mut respond) = server.accept().await.unwrap().unwrap();
            let (head, mut body) = request.into_parts();
            let got = read_all(&mut body).await;
            let answer = Response::builder()
                .header("content-length", "5")
                .body(())
                .unwrap();
            let mut out = respond.send_response(answer, false).unwrap();
            out.send_data(Bytes::from_static(b"hello"), false).unwrap();
            let mut trailers = HeaderMap::new();
            trailers.insert("x-done", HeaderValue::from_static("1"));
            out.send_trailers(trailers).unwrap();
            seen.send((head, got)).unwrap();
            keep_serving(server);
        });
        let answer = conn
            .send(post(Bytes::from_static(b"{}")))
            .await
            .ok()
            .unwrap();
        assert_eq!(answer.version(), Version::HTTP_2);
        let mut body = answer.into_body();
        assert!(!body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(5));
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "hello");
        assert_eq!(body.size_hint().exact(), Some(0));
        let last = body.frame().await.unwrap().unwrap();
        assert_eq!(last.into_trailers().unwrap()["x-done"], "1");
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
        let (head, got) = saw.await.unwrap();
        assert_eq!(got, b"{}");
        assert_eq!(head.uri.to_string(), "https://upstream.test/v1/chat");
        assert_eq!(head.headers["content-length"], "2");
        assert!(head.headers.get(CONNECTION).is_none());
    }

    /// The `content-length` the server saw for a request of `method` with `body`.
    async fn length_sent(method: Method, body: &'static [u8]) -> Option<String> {
        let (conn, mut server) = pair(0, SLOW).await;
        let (seen, saw) = oneshot::channel();
        tokio::spawn(async move {
            let (request, mut respond) = server.accept().await.unwrap().unwrap();
            let length = request.headers().get(CONTENT_LENGTH).cloned();
            respond.send_response(Response::new(()), true).unwrap();
            seen.send(length).unwrap();
            keep_serving(server);
        });
        let mut request = post(Bytes::from_static(body));
        *request.method_mut() = method;
        conn.send(request).await.ok().unwrap();
        saw.await.unwrap().map(|v| v.to_str().unwrap().to_owned())
    }

    #[tokio::test]
    async fn a_length_goes_with_every_body_and_with_empty_posts_puts_and_patches() {
        assert_eq!(length_sent(Method::POST, b"").await.as_deref(), Some("0"));
        assert_eq!(length_sent(Method::PATCH, b"").await.as_deref(), Some("0"));
        assert_eq!(length_sent(Method::GET, b"").await, None);
        assert_eq!(
            length_sent(Method::DELETE, b"abc").await.as_deref(),
            Some("3")
        );
    }

    /// The answer to a request whose answer head carries a header of `size` bytes.
    async fn answer_with_header_of(size: usize) -> Result<Response<RecvBody>, Unsent> {
        let (conn, mut server) = pair(0, SLOW).await;
        tokio::spawn(async move {
            let (_, mut respond) = server.accept().await.unwrap().unwrap();
            let answer = Response::builder()
                .header("x-big", "a".repeat(size))
                .body(())
                .unwrap();
            respond.send_response(answer, true).unwrap();
            keep_serving(server);
        });
        conn.send(post(Bytes::new())).await
    }

    #[tokio::test]
    async fn an_answer_head_within_16_kib_is_read_and_a_larger_one_is_refused() {
        let answer = answer_with_header_of(8 * 1024).await.ok().unwrap();
        assert_eq!(answer.headers()["x-big"].len(), 8 * 1024);
        assert!(matches!(
            answer_with_header_of(20 * 1024).await,
            Err(Unsent::Failed(_))
        ));
    }

    #[tokio::test]
    async fn a_body_larger_than_the_upstreams_window_arrives_whole() {
        let (conn, mut server) = pair(0, SLOW).await;
        let big = Bytes::from((0..3_000_000u32).map(|i| i as u8).collect::<Vec<_>>());
        let (seen, saw) = oneshot::channel();
        tokio::spawn(async move {
            let (request, mut respond) = server.accept().await.unwrap().unwrap();
            // The connection is driven while the body is read (its frames come through it).
            keep_serving(server);
            let got = read_all(&mut request.into_body()).await;
            respond.send_response(Response::new(()), true).unwrap();
            seen.send(got).unwrap();
        });
        let answer = conn.send(post(big.clone())).await.ok().unwrap();
        assert!(answer
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .is_empty());
        assert_eq!(saw.await.unwrap(), big);
    }

    #[tokio::test]
    async fn an_answer_dropped_early_resets_its_stream_and_the_connection_stays() {
        let (conn, mut server) = pair(0, SLOW).await;
        let (reset, was_reset) = oneshot::channel();
        let pool = conn.clone();
        tokio::spawn(async move {
            let (_, mut respond) = server.accept().await.unwrap().unwrap();
            let mut out = respond.send_response(Response::new(()), false).unwrap();
            out.send_data(Bytes::from_static(b"part"), false).unwrap();
            let (server, reason) = tokio::join!(
                async move {
                    // The next stream on the same connection is served.
                    let (_, mut respond) = server.accept().await.unwrap().unwrap();
                    respond.send_response(Response::new(()), true).unwrap();
                    server
                },
                std::future::poll_fn(|cx| out.poll_reset(cx))
            );
            reset.send(reason.unwrap()).unwrap();
            keep_serving(server);
        });
        let answer = conn.send(post(Bytes::new())).await.ok().unwrap();
        drop(answer);
        let mut again = pool.clone();
        assert!(!again.is_closed());
        let answer = again.send(post(Bytes::new())).await.ok().unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(was_reset.await.unwrap(), h2::Reason::CANCEL);
    }

    #[tokio::test]
    async fn a_connection_going_away_is_closed_and_its_request_comes_back_unsent() {
        let (mut conn, mut server) = pair(0, SLOW).await;
        server.graceful_shutdown();
        tokio::spawn(async move { while server.accept().await.is_some() {} });
        tokio::time::timeout(Duration::from_secs(5), async {
            while !conn.is_closed() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        match conn.send(post(Bytes::from_static(b"{}"))).await {
            Err(Unsent::Again(request, _)) => {
                assert_eq!(full_bytes(request.body()), "{}");
            }
            Err(Unsent::Failed(e)) => panic!("failed, not unsent: {e}"),
            Ok(_) => panic!("a connection going away took a new stream"),
        }
    }

    #[tokio::test]
    async fn an_upstream_that_stops_answering_pings_is_given_up() {
        // One stream open, a ping every 50 ms, and a server that accepts the stream and then
        // reads nothing more.
        let (conn, mut server) = pair(1, Duration::from_millis(50)).await;
        let (held, hold) = oneshot::channel();
        tokio::spawn(async move {
            let stream = server.accept().await.unwrap().unwrap();
            held.send((server, stream)).ok();
        });
        let mut pool = conn.clone();
        let sent = tokio::time::timeout(Duration::from_secs(5), conn.send(post(Bytes::new())))
            .await
            .unwrap();
        assert!(matches!(sent, Err(Unsent::Failed(_))));
        assert!(pool.is_closed());
        drop(hold);
    }

    #[test]
    fn connection_specific_headers_are_not_sent() {
        let mut headers = HeaderMap::new();
        headers.insert(CONNECTION, HeaderValue::from_static("keep-alive, x-hop"));
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("proxy-connection", HeaderValue::from_static("close"));
        headers.insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(TE, HeaderValue::from_static("gzip"));
        headers.insert("x-kept", HeaderValue::from_static("yes"));
        strip_connection_headers(&mut headers);
        let left: Vec<_> = headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x-kept"]);
        let mut headers = HeaderMap::new();
        headers.insert(TE, HeaderValue::from_static("trailers"));
        strip_connection_headers(&mut headers);
        assert_eq!(headers.get(TE).unwrap(), "trailers");
    }
}
