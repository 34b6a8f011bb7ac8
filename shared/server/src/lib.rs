//! The hardened HTTP/1 accept loop both Switchyard binaries serve through.
//!
//! `axum::serve` has no header-read deadline, no idle deadline and no connection cap, so a client
//! without any credential could hold every file descriptor of a proxy with connections that send
//! nothing (or one byte a minute). This loop bounds each of those:
//!
//! - **Header deadline**: the request head must arrive within `header_read_timeout` of the moment
//!   the connection is ready for it — after accept, and again after every response on a
//!   keep-alive connection, so the same deadline is the keep-alive idle timeout.
//! - **Body deadline**: a request body must be read completely within `body_read_timeout` of the
//!   request head (a slow-drip upload cannot hold a handler forever).
//! - **Connection cap**: at most `max_connections` at once (and optionally
//!   `max_connections_per_ip`). At the cap a new connection first *evicts the connection that has
//!   been idle the longest* (no request in progress: a slowloris or an idle keep-alive), so an
//!   attacker's idle sockets can never lock a real client out; only when every connection is busy
//!   is the newcomer refused with a JSON 503 and closed.
//! - **Header size**: request heads over `max_header_bytes` get a JSON 431.
//! - **Framing**: a head whose body framing could be read two ways, without a `host` or with two,
//!   or with userinfo in its target gets a JSON 400 and the close; a declared length over
//!   [`MAX_DECLARED_BODY`] a 413 (`framing`, on every request of a connection, hyper's too).
//! - **Descriptors**: [`raise_fd_limit`] lifts the soft open-file limit to the hard one at start
//!   (as nginx does), and the default cap leaves room for one upstream socket per connection.
//!
//! Requests of the plain shape (HTTP/1.1, a small `content-length` body or none) are served by
//! this crate's own reader and writer (`h1`); the first request of any other shape hands the
//! connection to hyper, the bytes already read replayed in front of the socket. Both keep the
//! deadlines and caps above.
//!
//! The numbers are configuration ([`Limits`]); the defaults are safe for a public port.
//! Counters ([`Stats`]) are rendered into each binary's `/metrics`.
//!
//! The connection [`Registry`] (cap, eviction of the longest-idle connection, [`Activity`]) is
//! also used on its own by the control plane's gRPC accept path.

mod body;
mod framing;
mod h1;
mod limits;
mod registry;
mod service;
mod socket;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

pub use body::BodyTimeout;
pub use framing::{framing_verdict, FramingVerdict, MAX_DECLARED_BODY};
#[doc(hidden)]
pub use h1::fuzz_head;
pub use limits::{raise_fd_limit, LimitArgs, Limits};
pub use registry::{
    Activity, Admission, AtCapacity, Busy, MetricNames, NamedStats, Registry, Stats, HTTP_METRICS,
};

use body::{DeadlineBody, TrackedBody};
pub use service::Routes;
use service::{announce_close_or_idle_timeout, Settings};
use socket::ClientSocket;

/// A server with its limits and live counters; [`Server::stats`] can be handed to `/metrics`
/// before [`Server::serve`] starts.
#[derive(Clone)]
pub struct Server {
    limits: Limits,
    registry: Arc<Registry>,
}

impl Server {
    pub fn new(limits: Limits) -> Server {
        let max = limits.effective_max_connections();
        let registry = Arc::new(Registry::new(max, limits.max_connections_per_ip));
        Server { limits, registry }
    }

    pub fn stats(&self) -> Stats {
        self.registry.stats()
    }

    pub fn max_connections(&self) -> usize {
        self.registry.max()
    }

    /// Serves `router` (an axum `Router`, or any service of the same shape) on `listener` until
    /// `shutdown` fires, then stops accepting, lets every open connection finish its request in
    /// progress (idle ones close at once) and returns when all are closed. Callers bound that
    /// drain with their own grace period.
    pub async fn serve<S: Routes>(
        self,
        listener: TcpListener,
        router: S,
        shutdown: CancellationToken,
    ) -> std::io::Result<()> {
        let connections = TaskTracker::new();
        let settings = Arc::new(Settings {
            keep_alive: self.limits.keep_alive_value(),
            limits: self.limits,
        });
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(error) => {
                        accept_failed(&self.registry, &error).await;
                        continue;
                    }
                },
                () = shutdown.cancelled() => break,
            };
            let admission = match self.registry.admit(peer.ip()) {
                Ok(admission) => admission,
                Err(AtCapacity) => {
                    refuse(&stream);
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            connections.spawn(connection(
                stream,
                peer,
                router.clone(),
                Arc::clone(&settings),
                admission,
                shutdown.clone(),
            ));
        }
        drop(listener);
        connections.close();
        connections.wait().await;
        Ok(())
    }
}

/// Accept failed: most often out of descriptors. Free one by evicting the longest-idle
/// connection, and pause briefly so the loop does not spin.
async fn accept_failed(registry: &Registry, error: &std::io::Error) {
    registry.note_accept_error();
    if registry.evict_one_idle() {
        tracing::debug!(%error, "accept failed; evicted an idle connection");
    } else {
        tracing::warn!(%error, "accept failed");
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// The answer to a connection over the cap: a complete JSON 503, written without waiting.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 132\r\n\r\n{\"error\":{\"message\":\"The server is at its connection limit; retry shortly.\",\"type\":\"server_error\",\"param\":null,\"code\":\"overloaded\"}}";

fn refuse(stream: &TcpStream) {
    let _ = stream.try_write(REFUSAL);
}

/// One client connection: its plain requests served by `h1`, then, from the first request of
/// another shape, by hyper; the connection's admission is held to its end.
async fn connection<S: Routes>(
    stream: TcpStream,
    peer: SocketAddr,
    router: S,
    settings: Arc<Settings>,
    admission: Admission,
    shutdown: CancellationToken,
) {
    let activity = admission.activity();
    let evicted = admission.evicted();
    // The plain requests first; the connection is hyper's from the first one that is not.
    // The socket holds the admission: the connection counts towards the caps until the socket
    // closes, also when an upgraded connection outlives hyper's part in it.
    let mut socket = ClientSocket::new(stream, Arc::clone(&activity)).holding(admission);
    let plain = h1::Conn {
        socket: &mut socket,
        router: &router,
        settings: &settings,
        activity: &activity,
        shutdown: &shutdown,
        evicted: &evicted,
    };
    let read_ahead = match plain.serve().await {
        h1::Ended::Closed => {
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut socket).await;
            return;
        }
        h1::Ended::ToHyper(read_ahead) => read_ahead,
    };
    let rest = Hyper {
        router,
        settings,
        activity,
        shutdown,
        evicted,
    };
    rest.serve(socket, read_ahead, peer).await;
}

/// What the hyper path of one connection serves with.
struct Hyper<S> {
    router: S,
    settings: Arc<Settings>,
    activity: Arc<Activity>,
    shutdown: CancellationToken,
    evicted: CancellationToken,
}

impl<S: Routes> Hyper<S> {
    /// Serves the rest of the connection with hyper, the bytes `h1` read ahead replayed in front
    /// of the socket, until it ends, the server's shutdown has drained it, or it is evicted.
    async fn serve(self, socket: ClientSocket, read_ahead: bytes::Bytes, peer: SocketAddr) {
        let Hyper {
            router,
            settings,
            activity,
            shutdown,
            evicted,
        } = self;
        let service_settings = Arc::clone(&settings);
        // A head the inspection refused reaches the service as a stand-in request, at its place.
        let refused = Arc::new(framing::Refused::default());
        let service_refused = Arc::clone(&refused);
        let requests = Arc::new(AtomicU64::new(0));
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let refusal = service_refused.at(requests.fetch_add(1, Ordering::Relaxed));
            serve_request(
                request,
                router.clone(),
                Arc::clone(&activity),
                Arc::clone(&service_settings),
                refusal,
            )
        });
        let limits = &settings.limits;
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size((limits.max_header_bytes * 2).max(16 * 1024))
            .keep_alive(true);
        let head_limit = (limits.max_header_bytes * 2).max(16 * 1024);
        let io = framing::Inspect::new(h1::Rewind::new(read_ahead, socket), head_limit, refused);
        // With upgrades: a `101 Switching Protocols` answer hands the connection (the socket, and
        // with it the connection's admission) to whoever took the request's upgrade.
        let conn = builder
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        tokio::pin!(conn);
        let mut draining = false;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%error, %peer, "connection ended with an error");
                    }
                    break;
                }
                () = shutdown.cancelled(), if !draining => {
                    draining = true;
                    conn.as_mut().graceful_shutdown();
                }
                () = evicted.cancelled() => break,
            }
        }
    }
}

/// One request on the hyper path: the stand-in answer of a head the inspection refused, the 431
/// of a head over the limit, or the router's answer; each leaves with the close-or-keep-alive
/// rule, and the connection counts as busy until its answer's body is sent.
async fn serve_request<S: Routes>(
    request: Request<Incoming>,
    router: S,
    activity: Arc<Activity>,
    settings: Arc<Settings>,
    refusal: Option<framing::Refusal>,
) -> Result<Response<Body>, std::convert::Infallible> {
    let guard = activity.begin();
    if let Some(refusal) = refusal {
        // The refused request's body may still be on its way: the close lingers.
        activity.set_unread_body(true);
        let response = refusal.response();
        return Ok(response.map(|b| Body::new(TrackedBody::new(b, guard))));
    }
    let limits = &settings.limits;
    // A request with a body marks its connection until the body has been read to its end (the
    // 431 below never reads it).
    let has_body = !http_body::Body::is_end_stream(request.body());
    activity.set_unread_body(has_body);
    let upgrade = request.headers().contains_key(header::UPGRADE);
    let mut response = if over_head_limit(&request, limits.max_header_bytes) {
        header_too_large(limits.max_header_bytes)
    } else {
        route(
            request,
            &router,
            limits,
            has_body.then(|| Arc::clone(&activity)),
        )
        .await
    };
    if upgrade {
        upgrade_answered(&mut response, &activity);
    }
    announce_close_or_idle_timeout(&mut response, &activity, &settings.keep_alive);
    Ok(response.map(|b| Body::new(TrackedBody::new(b, guard))))
}

/// The answer to a request that asked for an upgrade. Accepted (`101`): the connection stays
/// busy for the rest of its life (never evicted as idle; it is no longer HTTP). Refused: the
/// connection closes after the answer, because the framing inspection stopped following the
/// byte stream at the upgrade's head.
fn upgrade_answered(response: &mut Response<Body>, activity: &Arc<Activity>) {
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        activity.hold_upgraded();
    } else {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
}

/// Hands the request to the router, its body behind the body deadline; `watch` (the
/// connection's activity, for a request with a body) learns when the body has been read.
/// The peer's address is not put into the request's extensions: no handler of either plane
/// reads it, and the insert cost three allocations per request (the map, its table, the value).
async fn route<S: Routes>(
    request: Request<Incoming>,
    router: &S,
    limits: &Limits,
    watch: Option<Arc<Activity>>,
) -> Response<Body> {
    let request = request.map(|b| Body::new(DeadlineBody::new(b, limits.body_read_timeout, watch)));
    match router.clone().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// Whether the request's head is larger than `limit` bytes.
fn over_head_limit<B>(request: &Request<B>, limit: usize) -> bool {
    head_bytes(request) > limit
}

/// Bytes of the request line and headers, as the client sent them (approximately: each header
/// as `name: value\r\n`, the request line as the target plus 16 for the method, the version and
/// the line ends).
fn head_bytes<B>(request: &Request<B>) -> usize {
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    headers + request.uri().to_string().len() + 16
}

fn header_too_large(limit: usize) -> Response<Body> {
    let body = format!(
        "{{\"error\":{{\"message\":\"The request head exceeds {limit} bytes.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"request_header_too_large\"}}}}"
    );
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Resolves on SIGTERM (what Kubernetes sends) or Ctrl-C, whichever comes first; on a platform
/// without Unix signals, on Ctrl-C. Both binaries start their graceful shutdown on it.
pub async fn termination_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{FD_RESERVE, MAX_DERIVED_CONNECTIONS};

    #[test]
    fn the_refusal_is_a_complete_response() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let declared: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(declared, body.len());
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "overloaded");
    }

    #[test]
    fn the_head_counts_each_header_and_the_request_line() {
        let request = Request::builder()
            .uri("/v1/chat/completions?x=1")
            .header("host", "example")
            .header("x-pad", "0123456789")
            .body(())
            .unwrap();
        // host: 4 + 7 + 4, x-pad: 5 + 10 + 4, the target 24 + 16.
        let expected = 15 + 19 + 24 + 16;
        assert_eq!(head_bytes(&request), expected);
        assert!(
            !over_head_limit(&request, expected),
            "a head at the limit passes"
        );
        assert!(over_head_limit(&request, expected - 1));
    }

    #[tokio::test]
    async fn the_head_too_large_answer_is_json_and_closes() {
        let response = header_too_large(2048);
        assert_eq!(
            response.status(),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(response.headers()[header::CONNECTION], "close");
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"]["code"], "request_header_too_large");
        assert_eq!(json["error"]["type"], "invalid_request_error");
        assert!(json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2048 bytes"));
    }

    #[test]
    fn flags_become_limits_with_their_floors() {
        let args = LimitArgs {
            max_connections: 10,
            max_connections_per_ip: 3,
            header_timeout_ms: 2500,
            body_timeout_ms: 7000,
            max_header_bytes: 4096,
        };
        assert_eq!(
            args.limits(),
            Limits {
                max_connections: 10,
                max_connections_per_ip: 3,
                header_read_timeout: Duration::from_millis(2500),
                body_read_timeout: Duration::from_millis(7000),
                max_header_bytes: 4096,
            }
        );
        let zero = LimitArgs {
            max_connections: 0,
            max_connections_per_ip: 0,
            header_timeout_ms: 0,
            body_timeout_ms: 0,
            max_header_bytes: 10,
        };
        let limits = zero.limits();
        assert_eq!(limits.header_read_timeout, Duration::from_millis(1));
        assert_eq!(limits.body_read_timeout, Duration::from_millis(1));
        assert_eq!(limits.max_header_bytes, 1024);
    }

    #[test]
    fn a_configured_cap_is_used_as_it_is_and_a_derived_one_halves_the_spare_descriptors() {
        let configured = Limits {
            max_connections: 7,
            ..Limits::default()
        };
        assert_eq!(configured.effective_max_connections(), 7);
        assert_eq!(Server::new(configured).max_connections(), 7);
        let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
        let expected = (soft.saturating_sub(FD_RESERVE) / 2).clamp(64, MAX_DERIVED_CONNECTIONS);
        assert_eq!(
            Limits::default().effective_max_connections() as u64,
            expected
        );
    }

    #[test]
    fn raising_the_descriptor_limit_reports_the_limit_now_in_force() {
        let (soft, hard) = raise_fd_limit();
        assert_eq!(
            (soft, hard),
            rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap()
        );
        assert!(soft >= 64 && hard >= soft, "({soft}, {hard})");
    }

    #[tokio::test]
    async fn a_failed_accept_is_counted_and_frees_an_idle_connection() {
        let registry = Arc::new(Registry::new(4, 0));
        let idle = registry
            .admit(std::net::IpAddr::from([127, 0, 0, 1]))
            .unwrap();
        accept_failed(&registry, &std::io::Error::other("too many open files")).await;
        assert!(idle.evicted().is_cancelled());
        let mut out = String::new();
        registry.stats().render(&mut out);
        assert!(
            out.lines()
                .any(|l| l == "switchyard_http_accept_errors_total 1"),
            "{out}"
        );
    }

    #[tokio::test]
    async fn the_termination_signal_waits_for_sigterm() {
        let signal = termination_signal();
        tokio::pin!(signal);
        // Polled once, the handler is installed: the process no longer dies of SIGTERM.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), signal.as_mut())
                .await
                .is_err(),
            "resolved without a signal"
        );
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::time::timeout(Duration::from_secs(10), signal)
            .await
            .expect("SIGTERM did not end the wait");
    }

    #[test]
    fn a_derived_cap_fits_the_descriptor_limit() {
        let limits = Limits::default();
        let max = limits.effective_max_connections() as u64;
        let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
        assert!((64..=MAX_DERIVED_CONNECTIONS).contains(&max));
        assert!(max * 2 + FD_RESERVE <= soft.max(64 * 2 + FD_RESERVE));
    }
}
