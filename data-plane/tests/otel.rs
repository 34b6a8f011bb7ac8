//! OTLP trace export: the real binary, with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at an
//! in-process OTLP/gRPC collector (tonic, the generated `TraceService`), exports one span per
//! proxied request carrying the route and the attempt trail, a child span per attempt, and no
//! secret. The batch delay is set to a minute, so the spans only arrive because SIGTERM flushes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::future::IntoFuture;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::{send, TOKEN};
use http::Method;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard-data-plane");
const UPSTREAM_SECRET: &str = "sk-upstream-secret-0tel";
const PROMPT: &str = "a private prompt 7f3a";

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

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn attr<'s>(attributes: &'s [KeyValue], key: &str) -> Option<&'s Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn string(attributes: &[KeyValue], key: &str) -> String {
    match attr(attributes, key) {
        Some(Value::StringValue(s)) => s.clone(),
        other => panic!("{key}: expected a string, got {other:?}"),
    }
}

fn int(attributes: &[KeyValue], key: &str) -> i64 {
    match attr(attributes, key) {
        Some(Value::IntValue(i)) => *i,
        other => panic!("{key}: expected an integer, got {other:?}"),
    }
}

/// The binary's stdout lines (its startup lines, then the rest as they arrive).
type Lines = Arc<Mutex<Vec<String>>>;

/// The binary on `config`, exporting to the collector at `collector_addr`: its URL once
/// listening, and its stdout lines.
fn spawn_exporting(
    path: &std::path::Path,
    collector_addr: std::net::SocketAddr,
) -> (Running, String, Lines) {
    spawn_with_protocol(path, collector_addr, None)
}

/// [`spawn_exporting`] with `OTEL_EXPORTER_OTLP_PROTOCOL` set to `protocol`.
fn spawn_with_protocol(
    path: &std::path::Path,
    collector_addr: std::net::SocketAddr,
    protocol: Option<&str>,
) -> (Running, String, Lines) {
    let mut command = Command::new(BIN);
    if let Some(protocol) = protocol {
        command.env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
    } else {
        command.env_remove("OTEL_EXPORTER_OTLP_PROTOCOL");
    }
    let mut child = command
        .arg("--config")
        .arg(path)
        .env_remove("SWITCHYARD_CONTROL_PLANE")
        .env_remove("REDIS_URL")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .env_remove("OTEL_SDK_DISABLED")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://{collector_addr}"),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "60000")
        .env("SWITCHYARD_HTTP_ADDR", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let running = Running(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut url = None;
    let mut before = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while url.is_none() && Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        let log: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(log.get("spans").is_none(), "log lines stay flat: {line}");
        if log["message"] == "listening" {
            url = Some(format!("http://{}", log["addr"].as_str().unwrap()));
        }
        before.push(line);
    }
    let url = url.expect("the binary never logged its listen address");
    let lines = Lines::new(Mutex::new(before));
    let kept = Arc::clone(&lines);
    std::thread::spawn(move || {
        while let Ok(line) = rx.recv() {
            kept.lock().unwrap().push(line);
        }
    });
    (running, url, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_otlp_and_flushed_on_sigterm() {
    // The collector.
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector_addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );

    // "down" always answers 503, so the request fails over to "up": two attempts.
    let dir = std::env::temp_dir().join(format!("switchyard-dp-{}-otel", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "settings:\n  retry_times: 2\n  channel_retry_times: 0\nchannels:\n  - name: down\n    provider: mock\n    credentials: [\"{UPSTREAM_SECRET}\"]\n    mock: {{ failure_rate: 1.0, failure_status: 503 }}\n  - name: up\n    provider: mock\n    credentials: [\"{UPSTREAM_SECRET}\"]\nroutes:\n  - model_pattern: m\n    members:\n      - {{ channel: down, priority: 10 }}\n      - {{ channel: up, priority: 0 }}\ntokens:\n  - name: t\n    token: {TOKEN}\n"
        ),
    )
    .unwrap();

    let (mut running, url, _lines) = spawn_exporting(&path, collector_addr);

    let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{PROMPT}"}}]}}"#);
    let reply = send(
        Method::POST,
        &format!("{url}/v1/chat/completions"),
        Some(TOKEN),
        body.into(),
        &[],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-attempts"), "2");
    let request_id = reply.header("x-switchyard-request-id").to_owned();

    // SIGTERM: the process drains, flushes the batch and exits 0.
    stop(&mut running).await;

    let received = collector.received.lock().unwrap().clone();
    assert!(!received.is_empty(), "no span arrived at the collector");
    let everything = format!("{received:?}");
    for secret in [TOKEN, UPSTREAM_SECRET, PROMPT] {
        assert!(
            !everything.contains(secret),
            "{secret:?} leaked into the exported spans"
        );
    }

    let resource_spans = &received[0].resource_spans[0];
    let resource = resource_spans.resource.as_ref().unwrap();
    assert_eq!(
        string(&resource.attributes, "service.name"),
        "switchyard-data-plane"
    );
    let spans: Vec<&Span> = received
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect();
    // GenAI conventions: `{operation} {model}`, the client's model on the server span and
    // the upstream's on each attempt's client span.
    let request = spans
        .iter()
        .find(|s| s.name == "chat m" && s.kind == 2)
        .unwrap_or_else(|| panic!("no request (server) span in {spans:#?}"));
    let a = &request.attributes;
    assert_eq!(string(a, "request_id"), request_id);
    assert_eq!(string(a, "route"), "m");
    assert_eq!(string(a, "model"), "m");
    assert_eq!(int(a, "http.response.status_code"), 200);
    assert!(attr(a, "error.type").is_none());
    // The layer's bookkeeping stays out of the spans.
    for span in &spans {
        for kv in span.attributes.iter() {
            assert!(
                !["busy_ns", "idle_ns", "target"].contains(&kv.key.as_str())
                    && !kv.key.starts_with("thread.")
                    && !kv.key.starts_with("code."),
                "internal field {} on span {}",
                kv.key,
                span.name
            );
        }
    }
    assert_eq!(int(a, "attempt_count"), 2);
    assert_eq!(int(a, "switches"), 1);
    assert_eq!(string(a, "final_channel"), "up");
    assert!(matches!(
        attr(a, "breaker_tripped"),
        Some(Value::BoolValue(false))
    ));

    let mut attempts: Vec<&&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == request.span_id)
        .collect();
    attempts.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    // No upstream model configured: the client's model is sent, and names the client span.
    assert!(attempts.iter().all(|s| s.name == "chat m" && s.kind == 3));
    assert_eq!(string(&attempts[0].attributes, "channel"), "down");
    assert_eq!(
        int(&attempts[0].attributes, "http.response.status_code"),
        503
    );
    assert_eq!(
        string(&attempts[0].attributes, "error.type"),
        "retryable_status"
    );
    assert_eq!(string(&attempts[1].attributes, "channel"), "up");
    assert_eq!(
        int(&attempts[1].attributes, "http.response.status_code"),
        200
    );
    assert!(attr(&attempts[1].attributes, "error.type").is_none());
    assert!(attr(&attempts[1].attributes, "latency_ms").is_some());
    assert_eq!(
        string(&attempts[1].attributes, "gen_ai.operation.name"),
        "chat"
    );
    assert!(int(&attempts[1].attributes, "gen_ai.usage.output_tokens") > 0);
    assert!(attempts
        .iter()
        .all(|s| s.trace_id == request.trace_id && s.end_time_unix_nano >= s.start_time_unix_nano));
}

/// SIGTERM and wait for the exit: the last spans are flushed.
async fn stop(running: &mut Running) {
    let pid = running.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = running.0.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            return;
        }
        assert!(Instant::now() < deadline, "did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client's W3C trace context is continued by the request span, and the attempt's context
/// reaches the upstream — across a translation too (OpenAI client, Anthropic upstream). Spans
/// carry the GenAI attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_trace_continues_and_reaches_the_upstream() {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector_addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let upstream = switchyard_mock_upstream::MockUpstream::start()
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("switchyard-dp-{}-trace", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "channels:\n  - name: claude\n    provider: anthropic\n    base_url: {}\n    credentials: [\"{UPSTREAM_SECRET}\"]\nroutes:\n  - model_pattern: m\n    members:\n      - {{ channel: claude, upstream_model: claude-x }}\ntokens:\n  - name: t\n    token: {TOKEN}\n",
            upstream.base_url()
        ),
    )
    .unwrap();
    let (mut running, url, lines) = spawn_exporting(&path, collector_addr);

    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let reply = send(
        Method::POST,
        &format!("{url}/v1/chat/completions"),
        Some(TOKEN),
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#.into(),
        &[("traceparent", &format!("00-{trace_id}-{client_span}-01"))],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    stop(&mut running).await;

    // The upstream saw the same trace, with the attempt span as its parent.
    let seen = upstream.requests();
    let traceparent = seen[0].headers["traceparent"].to_str().unwrap().to_owned();
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts[1], trace_id, "{traceparent}");
    assert_ne!(
        parts[2], client_span,
        "the gateway's own span is the upstream's parent"
    );

    let received = collector.received.lock().unwrap().clone();
    let spans: Vec<Span> = received
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| s.spans.clone())
        .collect();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let request = spans
        .iter()
        .find(|s| s.name == "chat m" && s.kind == 2)
        .unwrap();
    assert_eq!(request.kind, 2, "a server span");
    assert_eq!(hex(&request.trace_id), trace_id);
    assert_eq!(
        hex(&request.parent_span_id),
        client_span,
        "continued, not a new root"
    );
    assert_eq!(string(&request.attributes, "gen_ai.request.model"), "m");
    assert_eq!(string(&request.attributes, "gen_ai.operation.name"), "chat");
    assert!(int(&request.attributes, "gen_ai.usage.output_tokens") > 0);
    let attempt = spans.iter().find(|s| s.name == "chat claude-x").unwrap();
    assert_eq!(hex(&attempt.span_id), parts[2]);
    assert_eq!(attempt.kind, 3, "a client span");
    // The upstream's address and what its answer said about itself.
    let upstream_url: http::Uri = upstream.base_url().parse().unwrap();
    assert_eq!(
        string(&attempt.attributes, "server.address"),
        upstream_url.host().unwrap()
    );
    assert_eq!(
        int(&attempt.attributes, "server.port"),
        i64::from(upstream_url.port_u16().unwrap())
    );
    assert_eq!(int(&attempt.attributes, "http.response.status_code"), 200);
    assert!(string(&attempt.attributes, "gen_ai.response.id").starts_with("msg_"));
    assert_eq!(
        string(&attempt.attributes, "gen_ai.response.model"),
        "claude-x"
    );
    match attr(&attempt.attributes, "gen_ai.response.finish_reasons") {
        Some(Value::ArrayValue(array)) => {
            let reasons: Vec<_> = array.values.iter().map(|v| v.value.clone()).collect();
            assert_eq!(
                reasons,
                vec![Some(Value::StringValue("end_turn".into()))],
                "{array:?}"
            );
        }
        other => panic!("finish reasons: expected an array, got {other:?}"),
    }

    // The request line names the trace and the request's span, so logs and traces join.
    let request_line = || {
        lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| l["message"] == "request")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while request_line().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let line = request_line().unwrap_or_else(|| panic!("no request line: {lines:?}"));
    assert_eq!(line["trace_id"], trace_id, "{line}");
    assert_eq!(line["span_id"], hex(&request.span_id), "{line}");
    assert_eq!(
        string(&attempt.attributes, "gen_ai.provider.name"),
        "anthropic"
    );
    assert_eq!(
        string(&attempt.attributes, "gen_ai.request.model"),
        "claude-x"
    );
}

/// What an OTLP/HTTP receiver got: each export's path, content type and decoded request.
type HttpExports = Arc<Mutex<Vec<(String, String, ExportTraceServiceRequest)>>>;

/// An OTLP/HTTP receiver (protobuf bodies, as Langfuse and collectors on port 4318 take them).
async fn http_receiver() -> (std::net::SocketAddr, HttpExports) {
    let exports = HttpExports::default();
    let kept = Arc::clone(&exports);
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let kept = Arc::clone(&kept);
        async move {
            let path = request.uri().path().to_owned();
            let content_type = request
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let body = axum::body::to_bytes(request.into_body(), 1 << 24)
                .await
                .unwrap();
            let export = <ExportTraceServiceRequest as prost::Message>::decode(body).unwrap();
            kept.lock().unwrap().push((path, content_type, export));
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
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, app).into_future());
    (addr, exports)
}

fn simple_config(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-dp-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "channels:\n  - name: up\n    provider: mock\n    credentials: [\"{UPSTREAM_SECRET}\"]\nroutes:\n  - model_pattern: m\n    members:\n      - {{ channel: up }}\ntokens:\n  - name: t\n    token: {TOKEN}\n"
        ),
    )
    .unwrap();
    path
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`: spans are posted to `/v1/traces` under the
/// endpoint as protobuf, and carry what the gRPC export carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_otlp_http_protobuf() {
    let (addr, exports) = http_receiver().await;
    let path = simple_config("otel-http");
    let (mut running, url, _lines) = spawn_with_protocol(&path, addr, Some("http/protobuf"));
    let reply = send(
        Method::POST,
        &format!("{url}/v1/chat/completions"),
        Some(TOKEN),
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#.into(),
        &[],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let request_id = reply.header("x-switchyard-request-id").to_owned();
    stop(&mut running).await;

    let exports = exports.lock().unwrap().clone();
    assert!(
        !exports.is_empty(),
        "no span reached the OTLP/HTTP receiver"
    );
    for (path, content_type, _) in &exports {
        assert_eq!(path, "/v1/traces");
        assert_eq!(content_type, "application/x-protobuf");
    }
    let resource = exports[0].2.resource_spans[0].resource.as_ref().unwrap();
    assert_eq!(
        string(&resource.attributes, "service.name"),
        "switchyard-data-plane"
    );
    let spans: Vec<Span> = exports
        .iter()
        .flat_map(|(_, _, e)| &e.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| s.spans.clone())
        .collect();
    let request = spans
        .iter()
        .find(|s| s.name == "chat m" && s.kind == 2)
        .unwrap_or_else(|| panic!("no request span in {spans:#?}"));
    assert_eq!(string(&request.attributes, "request_id"), request_id);
    assert!(spans.iter().any(|s| s.parent_span_id == request.span_id));
}

/// A protocol this build cannot export with is refused at startup, at error level, naming the
/// variable and the values supported — never ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_otlp_protocol_is_refused_loudly() {
    let (addr, exports) = http_receiver().await;
    let path = simple_config("otel-json");
    let (mut running, _url, lines) = spawn_with_protocol(&path, addr, Some("http/json"));
    stop(&mut running).await;
    let lines = lines.lock().unwrap().clone();
    let refusal = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "trace export disabled")
        .unwrap_or_else(|| panic!("no refusal logged: {lines:#?}"));
    assert_eq!(refusal["level"], "ERROR", "{refusal}");
    assert_eq!(
        refusal["error"],
        "OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\" is not supported: set grpc (the default) or http/protobuf"
    );
    assert!(exports.lock().unwrap().is_empty());
}
