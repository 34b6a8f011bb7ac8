//! The gRPC edge: serves `SnapshotService.Watch` from the publisher's watch channel, and
//! `SnapshotService.ReportUsage` into Postgres ([`crate::usage`]). Both are authenticated by the
//! same fleet token check; with no fleet token configured, streams get snapshots without secrets
//! ([`crate::publisher::withhold_secrets`]) and usage reports are refused.
//!
//! The accept path ([`guarded_incoming`]) caps connections and gives each a deadline to carry an
//! authenticated request, so connections that say nothing cannot lock proxies out.
//!
//! Each stream holds its own receiver and only ever takes the latest snapshot, so a slow proxy
//! skips revisions and never holds anyone back. Each revision is encoded once by the publisher;
//! streams send those bytes as they are (a protobuf message is the concatenation of its encoded
//! fields), so serving N proxies costs N memory copies rather than N deep clones and encodings.
//! The service is hand-wired (not the generated `SnapshotServiceServer`) only so that its response
//! type can be the pre-encoded bytes; the path, service name and wire format are the generated
//! ones, and proxies use the generated client.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType};
use prost::DecodeError;
use sha2::{Digest, Sha256};
use switchyard_proto::v1;
use tokio_util::sync::CancellationToken;
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, ServerStreamingService, UnaryService};
use tonic::{Request, Response, Status};

use crate::metrics::Metrics;
use crate::proxies::{ProxyRegistry, Registration};
use crate::publisher::SnapshotFeed;

const WATCH_PATH: &str = "/switchyard.snapshot.v1.SnapshotService/Watch";
const REPORT_USAGE_PATH: &str = "/switchyard.snapshot.v1.SnapshotService/ReportUsage";
/// Largest usage batch accepted (a proxy sends 1 000 records, about 100 KB, per batch).
const MAX_USAGE_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// An already encoded `v1::Snapshot`, written to the wire as is.
#[derive(Debug, Clone, Default)]
pub struct PreEncoded(pub Bytes);

impl prost::Message for PreEncoded {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }

    /// Never decoded by the server; fields are skipped rather than misread.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0 = Bytes::new();
    }
}

/// `SnapshotService` over the publisher's feed.
#[derive(Clone)]
pub struct SnapshotWatchServer {
    feed: SnapshotFeed,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    fleet: Arc<FleetTokens>,
    /// Where `ReportUsage` batches go; without it the call is `UNIMPLEMENTED`.
    usage: Option<sqlx::PgPool>,
    /// The streams open on this replica.
    proxies: Arc<ProxyRegistry>,
}

impl SnapshotWatchServer {
    pub fn new(
        feed: SnapshotFeed,
        shutdown: CancellationToken,
        metrics: Arc<Metrics>,
        fleet: FleetTokens,
    ) -> Self {
        SnapshotWatchServer {
            feed,
            shutdown,
            metrics,
            fleet: Arc::new(fleet),
            usage: None,
            proxies: Arc::default(),
        }
    }

    /// The registry of the proxies connected to this server (for `/api/v1/state`).
    pub fn proxies(&self) -> Arc<ProxyRegistry> {
        Arc::clone(&self.proxies)
    }

    /// Serves `ReportUsage` into this database.
    pub fn with_usage(mut self, pool: sqlx::PgPool) -> Self {
        self.usage = Some(pool);
        self
    }
}

/// The fleet tokens proxies must present (`authorization: Bearer <token>`) to watch snapshots.
/// Several may be valid at once, for rotation: add the new one here, roll the proxies onto it,
/// then remove the old one. Stored as SHA-256 digests, compared in constant time.
#[derive(Debug, Clone, Default)]
pub struct FleetTokens(Vec<[u8; 32]>);

/// Who opened a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// Presented a valid fleet token: gets credentials.
    Fleet,
    /// No fleet token is configured: snapshots without secrets, and no usage reports.
    Anonymous,
}

impl FleetTokens {
    /// From a comma-separated list; blank entries are ignored.
    pub fn parse(list: Option<&str>) -> FleetTokens {
        FleetTokens(
            list.unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| Sha256::digest(t.as_bytes()).into())
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn caller(&self, headers: &http::HeaderMap) -> Result<Caller, Status> {
        if self.0.is_empty() {
            return Ok(Caller::Anonymous);
        }
        let presented = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| Status::unauthenticated("a fleet token is required"))?;
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // Every configured token is compared, each in constant time.
        let mut matched = false;
        for token in &self.0 {
            let same = token
                .iter()
                .zip(digest.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            matched |= same;
        }
        if matched {
            Ok(Caller::Fleet)
        } else {
            Err(Status::unauthenticated("invalid fleet token"))
        }
    }
}

impl NamedService for SnapshotWatchServer {
    const NAME: &'static str = v1::snapshot_service_server::SERVICE_NAME;
}

struct StreamState {
    feed: SnapshotFeed,
    caller: Caller,
    sent: u64,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    registration: Registration,
    /// Keeps the connection busy (not evictable at the cap) while the stream is open.
    _busy: Option<switchyard_server::Busy>,
}

impl Drop for StreamState {
    fn drop(&mut self) {
        self.metrics.stream_closed();
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<PreEncoded, Status>> + Send>>;

struct Watch {
    server: SnapshotWatchServer,
    caller: Caller,
    peer: Option<std::net::SocketAddr>,
    busy: Option<switchyard_server::Busy>,
}

impl ServerStreamingService<v1::WatchRequest> for Watch {
    type Response = PreEncoded;
    type ResponseStream = WatchStream;
    type Future = BoxFuture<Response<WatchStream>, Status>;

    fn call(&mut self, request: Request<v1::WatchRequest>) -> Self::Future {
        let server = self.server.clone();
        let caller = self.caller;
        let peer = self.peer.map(|addr| addr.to_string());
        let busy = self.busy.take();
        Box::pin(async move {
            Ok(Response::new(watch_stream(
                &server,
                caller,
                peer,
                busy,
                request.into_inner(),
            )))
        })
    }
}

/// The current snapshot at once if newer than `have_revision`, then every newer one; ends when
/// the server drains.
fn watch_stream(
    server: &SnapshotWatchServer,
    caller: Caller,
    peer: Option<String>,
    busy: Option<switchyard_server::Busy>,
    request: v1::WatchRequest,
) -> WatchStream {
    tracing::info!(
        have_revision = request.have_revision,
        client_id = %request.client_id,
        authenticated = caller == Caller::Fleet,
        "proxy opened a snapshot stream"
    );
    server.metrics.stream_opened();
    let state = StreamState {
        feed: server.feed.clone(),
        caller,
        sent: request.have_revision,
        shutdown: server.shutdown.clone(),
        metrics: Arc::clone(&server.metrics),
        registration: server.proxies.register(
            &request.client_id,
            peer,
            caller == Caller::Fleet,
            request.have_revision,
        ),
        _busy: busy,
    };
    Box::pin(futures_util::stream::unfold(
        state,
        |mut state| async move {
            loop {
                let latest = state.feed.borrow_and_update().clone();
                if let Some(published) = latest {
                    if published.revision() > state.sent {
                        state.sent = published.revision();
                        state.registration.sent(state.sent);
                        let bytes = match state.caller {
                            Caller::Fleet => published.encoded.clone(),
                            Caller::Anonymous => published.encoded_without_secrets(),
                        };
                        return Some((Ok(PreEncoded(bytes)), state));
                    }
                }
                tokio::select! {
                    // Draining: end the stream so the server can stop; proxies reconnect elsewhere.
                    _ = state.shutdown.cancelled() => return None,
                    changed = state.feed.changed() => {
                        if changed.is_err() {
                            return None;
                        }
                    }
                }
            }
        },
    ))
}

struct ReportUsage {
    /// Keeps the connection busy (not evictable at the cap) until the batch is answered.
    busy: Option<switchyard_server::Busy>,
    pool: Option<sqlx::PgPool>,
    metrics: Arc<Metrics>,
    proxies: Arc<ProxyRegistry>,
}

impl UnaryService<v1::UsageBatch> for ReportUsage {
    type Response = v1::UsageAck;
    type Future = BoxFuture<Response<v1::UsageAck>, Status>;

    fn call(&mut self, request: Request<v1::UsageBatch>) -> Self::Future {
        let pool = self.pool.clone();
        let metrics = Arc::clone(&self.metrics);
        let proxies = Arc::clone(&self.proxies);
        let busy = self.busy.take();
        Box::pin(async move {
            let _busy = busy;
            let Some(pool) = pool else {
                return Err(Status::unimplemented("usage accounting is not served here"));
            };
            let batch = request.into_inner();
            proxies.touch_client(&batch.client_id);
            match crate::usage::apply_batch(&pool, &batch).await {
                Ok(applied) => {
                    metrics.usage_applied(&applied, batch.dropped_requests);
                    if batch.dropped_requests > 0 && !applied.duplicate {
                        tracing::warn!(
                            client_id = %batch.client_id,
                            dropped_requests = batch.dropped_requests,
                            "a proxy dropped requests from usage accounting (its buffer was full)"
                        );
                    }
                    Ok(Response::new(v1::UsageAck {
                        applied: u32::try_from(applied.records).unwrap_or(u32::MAX),
                        duplicate: applied.duplicate,
                    }))
                }
                Err(crate::usage::UsageError::Invalid(message)) => {
                    metrics.usage_failed(true);
                    tracing::warn!(batch_id = %batch.batch_id, error = %message, "refused a usage batch");
                    Err(Status::invalid_argument(message))
                }
                Err(crate::usage::UsageError::Database(error)) => {
                    metrics.usage_failed(false);
                    tracing::warn!(error = %error, "could not store a usage batch; the proxy retries it");
                    if crate::error::is_unavailable(&error) {
                        Err(Status::unavailable("database unavailable"))
                    } else {
                        Err(Status::internal("could not store the usage batch"))
                    }
                }
            }
        })
    }
}

impl<B> Service<http::Request<B>> for SnapshotWatchServer
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let (connection, peer) = connection_of(&request);
        if request.uri().path() == REPORT_USAGE_PATH {
            // Usage becomes spend and budgets: only a proxy proven by a fleet token may report.
            // With no fleet token configured nobody can prove it, so every report is refused.
            match self.fleet.caller(request.headers()) {
                Ok(Caller::Fleet) => {}
                Ok(Caller::Anonymous) => {
                    tracing::warn!("refused a usage report: no fleet token is configured, so reports cannot be authenticated");
                    let status = Status::unauthenticated(
                        "usage reports need a fleet token, and this control plane has none: set SWITCHYARD_FLEET_TOKEN on the control plane and the proxies",
                    );
                    return Box::pin(async move { Ok(status.into_http()) });
                }
                Err(status) => {
                    tracing::warn!("refused a usage report without a valid fleet token");
                    return Box::pin(async move { Ok(status.into_http()) });
                }
            }
            let method = ReportUsage {
                busy: connection.map(|c| c.begin()),
                pool: self.usage.clone(),
                metrics: Arc::clone(&self.metrics),
                proxies: Arc::clone(&self.proxies),
            };
            Box::pin(async move {
                let codec = tonic_prost::ProstCodec::<v1::UsageAck, v1::UsageBatch>::default();
                Ok(Grpc::new(codec)
                    .max_decoding_message_size(MAX_USAGE_BATCH_BYTES)
                    .unary(method, request)
                    .await)
            })
        } else if request.uri().path() == WATCH_PATH {
            let caller = match self.fleet.caller(request.headers()) {
                Ok(caller) => caller,
                Err(status) => {
                    tracing::warn!("refused a snapshot stream without a valid fleet token");
                    return Box::pin(async move { Ok(status.into_http()) });
                }
            };
            let method = Watch {
                server: self.clone(),
                caller,
                peer,
                busy: connection.map(|c| c.begin()),
            };
            Box::pin(async move {
                let codec = tonic_prost::ProstCodec::<PreEncoded, v1::WatchRequest>::default();
                Ok(Grpc::new(codec).server_streaming(method, request).await)
            })
        } else {
            Box::pin(async move {
                let mut response = http::Response::new(tonic::body::Body::default());
                let headers = response.headers_mut();
                headers.insert(
                    Status::GRPC_STATUS,
                    (tonic::Code::Unimplemented as i32).into(),
                );
                headers.insert(
                    http::header::CONTENT_TYPE,
                    tonic::metadata::GRPC_CONTENT_TYPE,
                );
                Ok(response)
            })
        }
    }
}

/// The names of the gRPC port's connection counters in `/metrics`.
pub const GRPC_METRICS: switchyard_server::MetricNames = switchyard_server::MetricNames {
    what: "gRPC connections",
    open: "switchyard_cp_grpc_connections",
    max: "switchyard_cp_grpc_connections_max",
    refused: "switchyard_cp_grpc_connections_refused_total",
    evicted: "switchyard_cp_grpc_connections_evicted_total",
    accept_errors: "switchyard_cp_grpc_accept_errors_total",
};

/// The gRPC port's accept path: at most `registry.max()` connections at once, and a deadline for
/// each to carry an authenticated request (TLS and HTTP/2 handshakes included). At the cap a new
/// connection evicts the one idle the longest (no stream in progress: one that never sent a
/// request, or a proxy between streams), so silent connections cannot lock proxies out; only
/// when every connection carries a stream is the newcomer closed at once (proxies reconnect with
/// backoff). A connection still without an authenticated request when `handshake_timeout` passes
/// is closed.
pub fn guarded_incoming(
    listener: tokio::net::TcpListener,
    registry: Arc<switchyard_server::Registry>,
    handshake_timeout: std::time::Duration,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = std::io::Result<FleetIo>> {
    futures_util::stream::unfold(
        (listener, registry, metrics),
        move |(listener, registry, metrics)| async move {
            loop {
                match listener.accept().await {
                    Ok((tcp, peer)) => {
                        let Ok(admission) = registry.admit(peer.ip()) else {
                            tracing::warn!(
                                "gRPC connection refused: at the connection cap and every connection carries a stream"
                            );
                            drop(tcp);
                            continue;
                        };
                        let _ = tcp.set_nodelay(true);
                        let io = FleetIo::new(tcp, admission, handshake_timeout, &metrics);
                        return Some((Ok(io), (listener, registry, metrics)));
                    }
                    Err(error) => {
                        registry.note_accept_error();
                        // Most often out of descriptors: an idle connection makes room.
                        registry.evict_one_idle();
                        tracing::warn!(%error, "gRPC accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
            }
        },
    )
}

/// What the service sees of its connection (through the request's connect info): whether it has
/// carried an authenticated request, and its activity for eviction.
pub struct FleetConnection {
    activity: Arc<switchyard_server::Activity>,
    authenticated: AtomicBool,
}

impl FleetConnection {
    /// An authenticated request starts: the handshake deadline no longer applies, and the
    /// connection is busy (not evictable) until the returned guard is dropped.
    fn begin(&self) -> switchyard_server::Busy {
        self.authenticated.store(true, Ordering::Relaxed);
        self.activity.begin()
    }
}

/// The connect info of a [`FleetIo`].
#[derive(Clone)]
pub struct FleetConnectInfo {
    tcp: tonic::transport::server::TcpConnectInfo,
    connection: Arc<FleetConnection>,
}

/// The connection a request arrived on (plaintext or TLS), with its peer address.
fn connection_of<B>(
    request: &http::Request<B>,
) -> (Option<Arc<FleetConnection>>, Option<std::net::SocketAddr>) {
    use tonic::transport::server::TlsConnectInfo;
    let extensions = request.extensions();
    let info = extensions.get::<FleetConnectInfo>().or_else(|| {
        extensions
            .get::<TlsConnectInfo<FleetConnectInfo>>()
            .map(TlsConnectInfo::get_ref)
    });
    match info {
        Some(info) => (Some(Arc::clone(&info.connection)), info.tcp.remote_addr()),
        None => (None, None),
    }
}

/// A gRPC connection holding its place under the cap. Reads and writes fail once it is evicted,
/// or once its handshake deadline passes before an authenticated request; the server then drops
/// it, which closes the socket and frees the place.
pub struct FleetIo {
    tcp: tokio::net::TcpStream,
    connection: Arc<FleetConnection>,
    evicted: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    /// Until an authenticated request: when the connection is closed without one.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Set once the connection is condemned; every later read or write fails the same way.
    closed: Option<std::io::ErrorKind>,
    metrics: Arc<Metrics>,
    _admission: switchyard_server::Admission,
}

impl FleetIo {
    fn new(
        tcp: tokio::net::TcpStream,
        admission: switchyard_server::Admission,
        handshake_timeout: std::time::Duration,
        metrics: &Arc<Metrics>,
    ) -> FleetIo {
        FleetIo {
            tcp,
            connection: Arc::new(FleetConnection {
                activity: admission.activity(),
                authenticated: AtomicBool::new(false),
            }),
            evicted: Box::pin(admission.evicted().cancelled_owned()),
            deadline: Some(Box::pin(tokio::time::sleep(handshake_timeout))),
            closed: None,
            metrics: Arc::clone(metrics),
            _admission: admission,
        }
    }

    /// `Err` once the connection must close (registering wake-ups for both causes otherwise).
    fn check(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        if self.closed.is_none() {
            if self.evicted.as_mut().poll(cx).is_ready() {
                tracing::debug!("gRPC connection evicted to admit another at the cap");
                self.closed = Some(std::io::ErrorKind::ConnectionAborted);
            } else if self.connection.authenticated.load(Ordering::Relaxed) {
                self.deadline = None;
            } else if let Some(deadline) = &mut self.deadline {
                if deadline.as_mut().poll(cx).is_ready() {
                    tracing::debug!("gRPC connection closed: no authenticated request in time");
                    self.metrics.grpc_handshake_timed_out();
                    self.closed = Some(std::io::ErrorKind::TimedOut);
                }
            }
        }
        match self.closed {
            Some(kind) => Err(kind.into()),
            None => Ok(()),
        }
    }
}

impl tokio::io::AsyncRead for FleetIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for FleetIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for FleetIo {
    type ConnectInfo = FleetConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        FleetConnectInfo {
            tcp: self.tcp.connect_info(),
            connection: Arc::clone(&self.connection),
        }
    }
}
