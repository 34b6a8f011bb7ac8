//! `report_usage` against an in-process `ReportUsage` server that loses acknowledgements,
//! disappears and comes back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::Stream;
use switchyard_data_plane::usage::{report_usage, UsageBuffer, UsageConfig, UsageCounts, UsageKey};
use switchyard_proto::v1::snapshot_service_server::{SnapshotService, SnapshotServiceServer};
use switchyard_proto::v1::{self, WatchRequest};
use switchyard_proto::WatchAuth;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// Applies batches once per id, like the control plane; can be told to lose the answer of the
/// next calls (the batch is applied, the caller sees an error).
#[derive(Default)]
struct Sink {
    applied: Mutex<HashSet<String>>,
    calls: Mutex<Vec<String>>,
    totals: Mutex<HashMap<String, (u64, u64, u64, u64)>>,
    dropped: Mutex<u64>,
    lose_answers: Mutex<u32>,
}

#[derive(Clone)]
struct Server(Arc<Sink>);

#[tonic::async_trait]
impl SnapshotService for Server {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<v1::Snapshot, Status>> + Send>>;

    async fn watch(
        &self,
        _request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn report_usage(
        &self,
        request: Request<v1::UsageBatch>,
    ) -> Result<Response<v1::UsageAck>, Status> {
        let sink = &self.0;
        let batch = request.into_inner();
        sink.calls.lock().unwrap().push(batch.batch_id.clone());
        let fresh = sink.applied.lock().unwrap().insert(batch.batch_id.clone());
        if fresh {
            *sink.dropped.lock().unwrap() += batch.dropped_requests;
            let mut totals = sink.totals.lock().unwrap();
            for r in &batch.records {
                let t = totals.entry(r.token.clone()).or_default();
                t.0 += r.requests;
                t.1 += r.input_tokens;
                t.2 += r.output_tokens;
                t.3 += r.cached_tokens;
            }
        }
        let mut lose = sink.lose_answers.lock().unwrap();
        if *lose > 0 {
            *lose -= 1;
            return Err(Status::unavailable("answer lost"));
        }
        Ok(Response::new(v1::UsageAck {
            applied: if fresh { batch.records.len() as u32 } else { 0 },
            duplicate: !fresh,
        }))
    }
}

async fn serve_on(listener: tokio::net::TcpListener, sink: Arc<Sink>) -> CancellationToken {
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(SnapshotServiceServer::new(Server(sink)))
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                async move { stopped.cancelled().await },
            ),
    );
    stop
}

fn key(token: &str) -> UsageKey {
    UsageKey {
        token: token.to_owned(),
        team: None,
        route: "gpt-*".to_owned(),
        channel: "openai".to_owned(),
        model: "gpt-4o".to_owned(),
    }
}

fn one(input: u64, output: u64, cached: u64) -> UsageCounts {
    UsageCounts {
        requests: 1,
        input_tokens: input,
        output_tokens: output,
        cached_tokens: cached,
        ..Default::default()
    }
}

fn fast() -> UsageConfig {
    UsageConfig {
        flush_interval: Duration::from_millis(50),
        batch_keys: 100,
        max_keys: 1000,
        final_flush: Duration::from_secs(3),
        max_log_rows: 1000,
    }
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_batch_whose_answer_was_lost_is_resent_with_the_same_id_and_counted_once() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let sink = Arc::new(Sink::default());
    *sink.lose_answers.lock().unwrap() = 2;
    let _server = serve_on(listener, Arc::clone(&sink)).await;

    let buffer = Arc::new(UsageBuffer::new(&fast()));
    buffer.add(key("app"), one(10, 20, 3));
    buffer.add(key("app"), one(1, 2, 0));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(report_usage(
        Arc::clone(&buffer),
        endpoint,
        WatchAuth::default(),
        fast(),
        shutdown.clone(),
    ));
    eventually("the acknowledged retry", || {
        sink.calls.lock().unwrap().len() >= 3
    })
    .await;
    let calls = sink.calls.lock().unwrap().clone();
    assert_eq!(calls[0], calls[1], "a retry keeps the batch id");
    assert_eq!(calls[1], calls[2]);
    assert_eq!(
        sink.totals.lock().unwrap()["app"],
        (2, 11, 22, 3),
        "applied once"
    );

    // The next usage goes in a new batch.
    buffer.add(key("app"), one(5, 5, 5));
    eventually("the next batch", || {
        sink.totals.lock().unwrap()["app"].0 == 3
    })
    .await;
    assert_ne!(sink.calls.lock().unwrap().last().unwrap(), &calls[0]);
    assert_eq!(sink.totals.lock().unwrap()["app"], (3, 16, 27, 8));
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn usage_keeps_aggregating_while_the_control_plane_is_away_and_arrives_when_it_is_back() {
    // Reserve a port, release it: nothing listens there until later.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let buffer = Arc::new(UsageBuffer::new(&fast()));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(report_usage(
        Arc::clone(&buffer),
        format!("http://127.0.0.1:{port}"),
        WatchAuth::default(),
        fast(),
        shutdown.clone(),
    ));
    for i in 0..50u64 {
        buffer.add(key(if i % 2 == 0 { "even" } else { "odd" }), one(i, 1, 0));
        if i == 10 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let sink = Arc::new(Sink::default());
    let _server = serve_on(listener, Arc::clone(&sink)).await;
    eventually("every request to arrive", || {
        let totals = sink.totals.lock().unwrap();
        totals.get("even").map(|t| t.0) == Some(25) && totals.get("odd").map(|t| t.0) == Some(25)
    })
    .await;
    let totals = sink.totals.lock().unwrap().clone();
    let input: u64 = (0..50).sum();
    assert_eq!(totals["even"].1 + totals["odd"].1, input);
    assert_eq!(totals["even"].2 + totals["odd"].2, 50);
    assert_eq!(buffer.pending_keys(), 0);
    assert_eq!(buffer.dropped_requests(), 0);
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_flushes_what_is_pending() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let sink = Arc::new(Sink::default());
    let _server = serve_on(listener, Arc::clone(&sink)).await;
    let config = UsageConfig {
        flush_interval: Duration::from_secs(3600),
        ..fast()
    };
    let buffer = Arc::new(UsageBuffer::new(&config));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(report_usage(
        Arc::clone(&buffer),
        endpoint,
        WatchAuth::default(),
        config,
        shutdown.clone(),
    ));
    buffer.add(key("late"), one(7, 8, 9));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        sink.totals.lock().unwrap().is_empty(),
        "not before the interval"
    );
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(sink.totals.lock().unwrap()["late"], (1, 7, 8, 9));
}

#[tokio::test]
async fn a_full_buffer_is_sent_early_and_drops_are_reported() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let sink = Arc::new(Sink::default());
    let _server = serve_on(listener, Arc::clone(&sink)).await;
    let config = UsageConfig {
        flush_interval: Duration::from_secs(3600),
        batch_keys: 5,
        max_keys: 5,
        final_flush: Duration::from_secs(3),
        max_log_rows: 5,
    };
    let buffer = Arc::new(UsageBuffer::new(&config));
    // Five distinct keys fill it; the sixth is dropped before the task even runs.
    for i in 0..6 {
        buffer.add(key(&format!("t{i}")), one(1, 1, 1));
    }
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(report_usage(
        Arc::clone(&buffer),
        endpoint,
        WatchAuth::default(),
        config,
        shutdown.clone(),
    ));
    eventually("the early batch", || sink.totals.lock().unwrap().len() == 5).await;
    assert_eq!(*sink.dropped.lock().unwrap(), 1);
    assert_eq!(buffer.dropped_requests(), 1);
    shutdown.cancel();
    task.await.unwrap().unwrap();
}
