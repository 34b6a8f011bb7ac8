//! A pooled HTTP client (Python's httpx, keep-alive on, as the OpenAI and Anthropic SDKs use it)
//! sends error-then-success pairs for every kind of error the gateway answers itself — several of
//! them answered before the request body is read — against a standalone proxy, a proxy sharing
//! state through Redis, and the control plane's admin port. No request may fail with a
//! disconnect: an answer that ends its connection must say so (`connection: close`), so the
//! client never sends its next request on a connection the server is closing.
//!
//! `SWITCHYARD_TEST_PYTHON` must name a python with `httpx` installed (scripts/test sets it; the
//! OpenAI SDK depends on httpx).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_e2e::fleet::{cleanup, free_port, http, unique, write_config, Proxy, TOKEN};
use switchyard_e2e::process::Process;

const DATA_PLANE: &str = env!("CARGO_BIN_EXE_e2e-data-plane");
const CONTROL_PLANE: &str = env!("CARGO_BIN_EXE_e2e-control-plane");
const PAIRS: usize = 5_000;

/// One httpx client (one connection pool) sends `pairs` pairs: an error request of each kind in
/// turn, then a success. Prints the counts of statuses and of exceptions per kind.
const SCRIPT: &str = r#"
import json, sys, collections
import httpx

base, pairs = sys.argv[1], int(sys.argv[2])
errors, success = json.loads(sys.argv[3]), json.loads(sys.argv[4])
statuses = collections.Counter()
failures = collections.Counter()
with httpx.Client(base_url=base, timeout=30.0) as client:
    for i in range(pairs):
        for req in (errors[i % len(errors)], success):
            try:
                r = client.request(req["method"], req["path"], headers=req["headers"],
                                   content=req["body"].encode())
                statuses[f'{req["name"]} {r.status_code}'] += 1
            except Exception as e:
                failures[f'{req["name"]} {type(e).__name__}: {e}'] += 1
print(json.dumps({"statuses": statuses, "failures": failures}))
"#;

fn request(name: &str, method: &str, path: &str, headers: Value, body: &str) -> Value {
    json!({"name": name, "method": method, "path": path, "headers": headers, "body": body})
}

/// Runs the script and asserts: no failures, and each kind answered with its status only.
fn run_pairs(base: &str, errors: &[(Value, u16)], success: (Value, u16)) {
    let python = std::env::var("SWITCHYARD_TEST_PYTHON")
        .unwrap_or_else(|_| panic!("SWITCHYARD_TEST_PYTHON is not set (scripts/test sets it up)"));
    let error_requests: Vec<Value> = errors.iter().map(|(r, _)| r.clone()).collect();
    let output = Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(base)
        .arg(PAIRS.to_string())
        .arg(Value::from(error_requests).to_string())
        .arg(success.0.to_string())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "the httpx script failed");
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        result["failures"],
        json!({}),
        "requests failed on a pooled connection"
    );
    let statuses = result["statuses"].as_object().unwrap();
    let per_kind = PAIRS / errors.len();
    for (req, status) in errors {
        let key = format!("{} {status}", req["name"].as_str().unwrap());
        let n = statuses.get(&key).and_then(Value::as_u64).unwrap_or(0) as usize;
        assert!(n >= per_kind, "{key}: {n} of {per_kind}; all: {statuses:?}");
    }
    let key = format!("{} {}", success.0["name"].as_str().unwrap(), success.1);
    assert_eq!(
        statuses.get(&key).and_then(Value::as_u64),
        Some(PAIRS as u64),
        "{statuses:?}"
    );
}

fn proxy_config() -> String {
    "settings:\n  max_request_body_bytes: 4096\nchannels:\n  - name: sim\n    provider: mock\n    mock: { latency_ms: 0 }\nroutes:\n  - model_pattern: m\n    members: [{ channel: sim }]\n".to_owned()
}

/// Every error the proxy answers itself, with a body (most of them before reading it).
fn proxy_errors() -> Vec<(Value, u16)> {
    let chat = r#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#;
    let bearer =
        json!({"authorization": format!("Bearer {TOKEN}"), "content-type": "application/json"});
    let big = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(16 * 1024)
    );
    vec![
        (
            request("no token", "POST", "/v1/chat/completions", json!({}), chat),
            401,
        ),
        (
            request(
                "wrong token",
                "POST",
                "/v1/chat/completions",
                json!({"authorization": "Bearer sk-wrong"}),
                chat,
            ),
            401,
        ),
        (
            request(
                "anthropic no key",
                "POST",
                "/v1/messages",
                json!({"anthropic-version": "2023-06-01"}),
                chat,
            ),
            401,
        ),
        (
            request("unknown path", "POST", "/v1/nope", bearer.clone(), chat),
            404,
        ),
        (
            request(
                "unknown model",
                "POST",
                "/v1/chat/completions",
                bearer.clone(),
                r#"{"model":"no-such","messages":[{"role":"user","content":"hi"}]}"#,
            ),
            404,
        ),
        (
            request(
                "malformed",
                "POST",
                "/v1/chat/completions",
                bearer.clone(),
                "{not json",
            ),
            400,
        ),
        (
            request("too large", "POST", "/v1/chat/completions", bearer, &big),
            413,
        ),
    ]
}

fn proxy_success() -> (Value, u16) {
    (
        request(
            "chat",
            "POST",
            "/v1/chat/completions",
            json!({"authorization": format!("Bearer {TOKEN}"), "content-type": "application/json"}),
            r#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#,
        ),
        200,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_client_never_meets_an_unannounced_close_on_a_standalone_proxy() {
    let config = write_config("keepalive-standalone", &proxy_config());
    let port = free_port();
    let mut command = Command::new(DATA_PLANE);
    command
        .arg("--config")
        .arg(&config)
        .args(["--http-addr", &format!("127.0.0.1:{port}")])
        .env_remove("REDIS_URL")
        .env_remove("SWITCHYARD_CONTROL_PLANE")
        .env("RUST_LOG", "warn");
    let _proxy = Process::spawn("data-plane", &mut command);
    let url = format!("127.0.0.1:{port}");
    wait_ready(&url).await;
    let base = format!("http://{url}");
    tokio::task::spawn_blocking(move || run_pairs(&base, &proxy_errors(), proxy_success()))
        .await
        .unwrap();
    let _ = std::fs::remove_file(config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_client_never_meets_an_unannounced_close_on_a_fleet_proxy() {
    let redis = switchyard_e2e::redis_url();
    let prefix = unique("keepalive");
    let config = write_config("keepalive-fleet", &proxy_config());
    let proxy = Proxy::start(DATA_PLANE, &config, &redis, &prefix).await;
    let base = format!("http://{}", proxy.url);
    tokio::task::spawn_blocking(move || run_pairs(&base, &proxy_errors(), proxy_success()))
        .await
        .unwrap();
    drop(proxy);
    cleanup(&redis, &prefix);
    let _ = std::fs::remove_file(config);
}

#[sqlx::test(migrations = false)]
async fn a_pooled_client_never_meets_an_unannounced_close_on_the_control_plane(
    _pool: sqlx::postgres::PgPoolOptions,
    options: sqlx::postgres::PgConnectOptions,
) {
    const ADMIN: &str = "keepalive-admin-token-0123456789";
    let db = options.get_database().unwrap_or("postgres");
    let database_url = format!(
        "postgres://{}@{}:{}/{db}",
        options.get_username(),
        options.get_host(),
        options.get_port()
    );
    let (http_port, grpc_port) = (free_port(), free_port());
    let mut command = Command::new(CONTROL_PLANE);
    command
        .env("DATABASE_URL", &database_url)
        .env("SWITCHYARD_ADMIN_TOKEN", ADMIN)
        .env("SWITCHYARD_FLEET_TOKEN", "keepalive-fleet-token-0123456789")
        .args(["--http-addr", &format!("127.0.0.1:{http_port}")])
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc_port}")])
        .env_remove("REDIS_URL")
        .env("RUST_LOG", "warn");
    let _control_plane = Process::spawn("control-plane", &mut command);
    let url = format!("127.0.0.1:{http_port}");
    wait_ready(&url).await;
    let base = format!("http://{url}");
    let team = r#"{"name":"t"}"#;
    let admin =
        json!({"authorization": format!("Bearer {ADMIN}"), "content-type": "application/json"});
    let errors = vec![
        (
            request("no token", "POST", "/api/v1/teams", json!({}), team),
            401,
        ),
        (
            request(
                "wrong token",
                "POST",
                "/api/v1/teams",
                json!({"authorization": "Bearer wrong"}),
                team,
            ),
            401,
        ),
        (
            request("unknown path", "POST", "/api/v1/nope", admin.clone(), team),
            404,
        ),
        (
            request("malformed", "POST", "/api/v1/teams", admin.clone(), "{nope"),
            400,
        ),
    ];
    let success = (request("list", "GET", "/api/v1/teams", admin, ""), 200);
    tokio::task::spawn_blocking(move || run_pairs(&base, &errors, success))
        .await
        .unwrap();
}

async fn wait_ready(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = http(url, "GET", "/readyz", "", &[]).await {
            if r.status == 200 {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{url} never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
