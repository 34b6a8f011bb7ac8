//! OTLP trace export: the real binary, with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at an
//! in-process OTLP/gRPC collector (or, with `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`, an
//! OTLP/HTTP receiver), exports a span per admin API request (method, matched route, status;
//! never the admin token), flushed on SIGTERM (the batch delay is a minute).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "otel-test-admin-token-0123456789";

#[derive(Clone, Default)]
struct Collector {
    received: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.received.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// One HTTP/1.1 GET with the admin token; returns the status line.
async fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    reply.lines().next().unwrap_or_default().to_owned()
}

/// The binary exporting to `collector_addr` over `protocol`: one admin request, then SIGTERM
/// (which flushes the batch) and its exit.
async fn one_request_exported(opts: &PgConnectOptions, collector_addr: SocketAddr, protocol: &str) {
    let url = common::database_url(opts, &common::postgres_addr(opts));
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard-control-plane"))
        .env_remove("REDIS_URL")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env_remove("OTEL_SDK_DISABLED")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://{collector_addr}"),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
        .env("DATABASE_URL", url)
        .env("SWITCHYARD_ADMIN_TOKEN", TOKEN)
        .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
        .env("SWITCHYARD_GRPC_ADDR", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let log: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert!(log.get("spans").is_none(), "log lines unchanged: {line}");
            if log["message"] == "listening" {
                let http: SocketAddr = log["http_addr"].as_str().unwrap().parse().unwrap();
                if let Some(tx) = tx.take() {
                    let _ = tx.send(http);
                }
            }
        }
    });
    let http = tokio::time::timeout(Duration::from_secs(60), rx)
        .await
        .expect("control plane did not start listening in time")
        .unwrap();

    let status = get(http, "/api/v1/channels").await;
    assert!(status.contains(" 200 "), "{status}");

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("did not exit after SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn admin_requests_are_exported_as_spans_and_flushed_on_sigterm(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector_addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );

    one_request_exported(&opts, collector_addr, "grpc").await;

    let received = collector.received.lock().unwrap().clone();
    assert!(
        !format!("{received:?}").contains(TOKEN),
        "the admin token leaked"
    );
    let resource = received[0].resource_spans[0].resource.clone().unwrap();
    assert!(resource.attributes.iter().any(|kv| kv.key == "service.name"
        && matches!(kv.value.as_ref().and_then(|v| v.value.as_ref()),
            Some(Value::StringValue(s)) if s == "switchyard-control-plane")));
    let span = received
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .find(|s| s.name == "GET /api/v1/channels")
        .unwrap_or_else(|| panic!("no admin request span in {received:#?}"));
    let attr = |key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.clone())
    };
    assert_eq!(
        attr("http.route"),
        Some(Value::StringValue("/api/v1/channels".into()))
    );
    assert_eq!(
        attr("http.response.status_code"),
        Some(Value::IntValue(200))
    );
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`: the same span, posted as protobuf to
/// `/v1/traces` under the endpoint.
#[sqlx::test(migrations = "../migrations")]
async fn admin_requests_are_exported_over_otlp_http_protobuf(
    _pool: PgPoolOptions,
    opts: PgConnectOptions,
) {
    type Exports = Arc<Mutex<Vec<(String, ExportTraceServiceRequest)>>>;
    let exports = Exports::default();
    let kept = Arc::clone(&exports);
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let kept = Arc::clone(&kept);
        async move {
            let path = request.uri().path().to_owned();
            let body = axum::body::to_bytes(request.into_body(), 1 << 24)
                .await
                .unwrap();
            let export = <ExportTraceServiceRequest as prost::Message>::decode(body).unwrap();
            kept.lock().unwrap().push((path, export));
            let answer = ExportTraceServiceResponse {
                partial_success: None,
            };
            (
                [("content-type", "application/x-protobuf")],
                prost::Message::encode_to_vec(&answer),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let receiver = listener.local_addr().unwrap();
    tokio::spawn(std::future::IntoFuture::into_future(axum::serve(
        listener, app,
    )));

    one_request_exported(&opts, receiver, "http/protobuf").await;

    let exports = exports.lock().unwrap().clone();
    assert!(
        !exports.is_empty(),
        "no span reached the OTLP/HTTP receiver"
    );
    assert!(exports.iter().all(|(path, _)| path == "/v1/traces"));
    assert!(
        !format!("{exports:?}").contains(TOKEN),
        "the admin token leaked"
    );
    assert!(
        exports
            .iter()
            .flat_map(|(_, e)| &e.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .any(|s| s.name == "GET /api/v1/channels"),
        "{exports:#?}"
    );
}
