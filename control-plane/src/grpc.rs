//! The gRPC edge: serves `SnapshotService.Watch` from the publisher's watch channel.
//!
//! Each stream holds its own receiver and only ever takes the latest snapshot, so a slow proxy
//! skips revisions and never holds anyone back. Each revision is encoded once by the publisher;
//! streams send those bytes as they are (a protobuf message is the concatenation of its encoded
//! fields), so serving N proxies costs N memory copies rather than N deep clones and encodings.
//! The service is hand-wired (not the generated `SnapshotServiceServer`) only so that its response
//! type can be the pre-encoded bytes; the path, service name and wire format are the generated
//! ones, and proxies use the generated client.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType};
use prost::DecodeError;
use switchyard_proto::v1;
use tokio_util::sync::CancellationToken;
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, ServerStreamingService};
use tonic::{Request, Response, Status};

use crate::metrics::Metrics;
use crate::publisher::SnapshotFeed;

const WATCH_PATH: &str = "/switchyard.snapshot.v1.SnapshotService/Watch";

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
}

impl SnapshotWatchServer {
    pub fn new(feed: SnapshotFeed, shutdown: CancellationToken, metrics: Arc<Metrics>) -> Self {
        SnapshotWatchServer {
            feed,
            shutdown,
            metrics,
        }
    }
}

impl NamedService for SnapshotWatchServer {
    const NAME: &'static str = v1::snapshot_service_server::SERVICE_NAME;
}

struct StreamState {
    feed: SnapshotFeed,
    sent: u64,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
}

impl Drop for StreamState {
    fn drop(&mut self) {
        self.metrics.stream_closed();
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<PreEncoded, Status>> + Send>>;

struct Watch(SnapshotWatchServer);

impl ServerStreamingService<v1::WatchRequest> for Watch {
    type Response = PreEncoded;
    type ResponseStream = WatchStream;
    type Future = BoxFuture<Response<WatchStream>, Status>;

    fn call(&mut self, request: Request<v1::WatchRequest>) -> Self::Future {
        let server = self.0.clone();
        Box::pin(async move { Ok(Response::new(watch_stream(&server, request.into_inner()))) })
    }
}

/// The current snapshot at once if newer than `have_revision`, then every newer one; ends when
/// the server drains.
fn watch_stream(server: &SnapshotWatchServer, request: v1::WatchRequest) -> WatchStream {
    tracing::info!(
        have_revision = request.have_revision,
        client_id = %request.client_id,
        "proxy opened a snapshot stream"
    );
    server.metrics.stream_opened();
    let state = StreamState {
        feed: server.feed.clone(),
        sent: request.have_revision,
        shutdown: server.shutdown.clone(),
        metrics: Arc::clone(&server.metrics),
    };
    Box::pin(futures_util::stream::unfold(
        state,
        |mut state| async move {
            loop {
                let latest = state.feed.borrow_and_update().clone();
                if let Some(published) = latest {
                    if published.revision() > state.sent {
                        state.sent = published.revision();
                        return Some((Ok(PreEncoded(published.encoded.clone())), state));
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
        if request.uri().path() == WATCH_PATH {
            let method = Watch(self.clone());
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
