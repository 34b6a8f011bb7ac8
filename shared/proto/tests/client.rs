//! `watch_snapshots` against an in-process gRPC server.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::Stream;
use switchyard_engine::{Snapshot, SnapshotParts};
use switchyard_proto::v1::snapshot_service_server::{SnapshotService, SnapshotServiceServer};
use switchyard_proto::v1::{self, WatchRequest};
use switchyard_proto::{snapshot_to_proto, watch_snapshots, WatchAuth, WatchError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// Sends a fixed script of messages on every stream, then holds the stream open (or ends it,
/// with `end`, so the client reconnects and says which revision it holds).
struct Scripted {
    script: Vec<v1::Snapshot>,
    requests: Arc<Mutex<Vec<u64>>>,
    end: bool,
}

#[tonic::async_trait]
impl SnapshotService for Scripted {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<v1::Snapshot, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let have = request.into_inner().have_revision;
        self.requests.lock().unwrap().push(have);
        let messages: Vec<_> = self
            .script
            .iter()
            .filter(|s| s.revision > have)
            .cloned()
            .map(Ok)
            .collect();
        let messages = futures_util::stream::iter(messages);
        if self.end {
            return Ok(Response::new(Box::pin(messages)));
        }
        let stream = futures_util::StreamExt::chain(messages, futures_util::stream::pending());
        Ok(Response::new(Box::pin(stream)))
    }

    async fn report_usage(
        &self,
        _request: Request<v1::UsageBatch>,
    ) -> Result<Response<v1::UsageAck>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

fn wire(revision: u64) -> v1::Snapshot {
    snapshot_to_proto(
        &Snapshot::new(SnapshotParts {
            revision,
            ..SnapshotParts::default()
        }),
        0,
    )
}

async fn serve(script: Vec<v1::Snapshot>) -> (String, Arc<Mutex<Vec<u64>>>) {
    serve_with(script, false).await
}

async fn serve_with(script: Vec<v1::Snapshot>, end: bool) -> (String, Arc<Mutex<Vec<u64>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let service = Scripted {
        script,
        requests: Arc::clone(&requests),
        end,
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SnapshotServiceServer::new(service))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (format!("http://{addr}"), requests)
}

async fn wait_revision(rx: &mut watch::Receiver<Option<Arc<Snapshot>>>, revision: u64) {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if rx
                .borrow_and_update()
                .as_ref()
                .is_some_and(|s| s.revision == revision)
            {
                return;
            }
            rx.changed().await.unwrap();
        }
    })
    .await
    .expect("revision never arrived");
}

#[tokio::test]
async fn installs_valid_snapshots_and_skips_invalid_ones() {
    let mut invalid = wire(3);
    invalid.settings.as_mut().unwrap().retry_times = Some(1_000);
    let (endpoint, requests) = serve(vec![wire(2), invalid.clone(), wire(4)]).await;
    let (tx, mut rx) = watch::channel(None);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(watch_snapshots(
        endpoint,
        1,
        WatchAuth::default(),
        tx,
        shutdown.clone(),
    ));
    wait_revision(&mut rx, 4).await;
    assert_eq!(
        requests.lock().unwrap().first(),
        Some(&1),
        "asks from the revision it holds"
    );
    shutdown.cancel();
    assert!(task.await.unwrap().is_ok());

    // A stream that ends after 2 and the invalid 3: the client reconnects asking for what is
    // newer than 2 — it never installed 3 — and still holds 2.
    let (endpoint, requests) = serve_with(vec![wire(2), invalid], true).await;
    let (tx, mut rx) = watch::channel(None);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(watch_snapshots(
        endpoint,
        1,
        WatchAuth::default(),
        tx,
        shutdown.clone(),
    ));
    wait_revision(&mut rx, 2).await;
    tokio::time::timeout(Duration::from_secs(60), async {
        while requests.lock().unwrap().len() < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the client never reconnected");
    let asked = requests.lock().unwrap().clone();
    assert_eq!(asked[..3], [1, 2, 2], "asked with {asked:?}");
    assert_eq!(rx.borrow().as_ref().map(|s| s.revision), Some(2));
    shutdown.cancel();
    assert!(task.await.unwrap().is_ok());
}

#[tokio::test]
async fn keeps_retrying_until_the_server_appears_then_stops_on_shutdown() {
    // Reserve a port, release it, and start the server there only after the client is trying.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (tx, mut rx) = watch::channel(None);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(watch_snapshots(
        format!("http://127.0.0.1:{port}"),
        0,
        WatchAuth::default(),
        tx,
        shutdown.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let service = Scripted {
        script: vec![wire(9)],
        requests: Arc::default(),
        end: false,
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SnapshotServiceServer::new(service))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    wait_revision(&mut rx, 9).await;
    shutdown.cancel();
    assert!(task.await.unwrap().is_ok());
}

#[tokio::test]
async fn an_unparseable_endpoint_is_an_error() {
    let (tx, _rx) = watch::channel(None);
    let result = watch_snapshots(
        "not a uri".into(),
        0,
        WatchAuth::default(),
        tx,
        CancellationToken::new(),
    )
    .await;
    assert!(matches!(result, Err(WatchError::InvalidEndpoint { .. })));
}
