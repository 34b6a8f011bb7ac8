//! The gRPC edge: serves `SnapshotService.Watch` from the publisher's watch channel. Each stream
//! holds its own receiver and only ever clones the latest snapshot, so a slow proxy skips
//! revisions and never holds anyone else back.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use switchyard_proto::v1;
use switchyard_proto::v1::snapshot_service_server::SnapshotService;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::metrics::Metrics;
use crate::publisher::SnapshotFeed;

pub use switchyard_proto::v1::snapshot_service_server::SnapshotServiceServer;

pub struct SnapshotGrpc {
    feed: SnapshotFeed,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
}

impl SnapshotGrpc {
    pub fn new(feed: SnapshotFeed, shutdown: CancellationToken, metrics: Arc<Metrics>) -> Self {
        SnapshotGrpc {
            feed,
            shutdown,
            metrics,
        }
    }

    /// The service, with no message size limit on what it sends (snapshots of large fleets).
    pub fn into_server(self) -> SnapshotServiceServer<SnapshotGrpc> {
        SnapshotServiceServer::new(self).max_encoding_message_size(usize::MAX)
    }
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

type WatchStream = Pin<Box<dyn Stream<Item = Result<v1::Snapshot, Status>> + Send>>;

#[tonic::async_trait]
impl SnapshotService for SnapshotGrpc {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<v1::WatchRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let request = request.into_inner();
        tracing::info!(
            have_revision = request.have_revision,
            client_id = %request.client_id,
            "proxy opened a snapshot stream"
        );
        self.metrics.stream_opened();
        let state = StreamState {
            feed: self.feed.clone(),
            sent: request.have_revision,
            shutdown: self.shutdown.clone(),
            metrics: Arc::clone(&self.metrics),
        };
        let stream = futures_util::stream::unfold(state, |mut state| async move {
            loop {
                let latest = state.feed.borrow_and_update().clone();
                if let Some(published) = latest {
                    if published.revision() > state.sent {
                        state.sent = published.revision();
                        let message = v1::Snapshot::clone(&published.wire);
                        return Some((Ok(message), state));
                    }
                }
                tokio::select! {
                    // Draining: end the stream so the server can stop; proxies reconnect.
                    _ = state.shutdown.cancelled() => return None,
                    changed = state.feed.changed() => {
                        if changed.is_err() {
                            return None;
                        }
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
