//! Shared helpers: an in-process proxy on a loopback port and a tiny HTTP client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(dead_code)]

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use switchyard_data_plane::config::parse_yaml;
use switchyard_data_plane::snapshot::SnapshotSender;
use switchyard_data_plane::usage::{UsageConfig, UsageReporter};
use switchyard_data_plane::{app, AppState};
use switchyard_engine::Snapshot;
use switchyard_state::{InMemoryStore, StateDump, StateStore};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub const TOKEN: &str = "sk-test-token";

/// Waits, when less than `needed` is left of the current UTC minute, until the next minute has
/// begun. Every limit window (minute, hour, day, month) ends on a whole minute, so a test that
/// counts against one across several requests calls this first and no window ends mid-test
/// (which would start the count over and admit a request the test expects refused).
pub async fn clear_of_a_window_end(needed: Duration) {
    let into = Duration::from_millis(switchyard_data_plane::unix_ms() % 60_000);
    let left = Duration::from_secs(60).saturating_sub(into);
    if left < needed {
        tokio::time::sleep(left + Duration::from_millis(100)).await;
    }
}

pub struct Proxy {
    pub url: String,
    pub state: Arc<AppState>,
    pub store: Arc<dyn StateStore>,
    pub snapshots: SnapshotSender,
}

impl Proxy {
    pub fn dump(&self) -> StateDump {
        self.store.dump(switchyard_data_plane::unix_ms())
    }

    pub fn reload(&self, yaml: &str, revision: u64) {
        let parts = parse_yaml(yaml, revision).unwrap();
        self.snapshots
            .send_replace(Some(Arc::new(Snapshot::new(parts))));
    }
}

/// `yaml` with a token `TOKEN` appended unless it has `tokens:`.
fn with_token(yaml: &str) -> String {
    if yaml.contains("\ntokens:") {
        yaml.to_owned()
    } else {
        format!("{yaml}\ntokens:\n  - name: test\n    token: {TOKEN}\n    allow_pinning: true\n")
    }
}

/// A proxy serving `yaml` (with a token `TOKEN` appended unless the YAML has `tokens:`).
pub async fn start(yaml: &str) -> Proxy {
    start_on(&with_token(yaml), Arc::new(InMemoryStore::new())).await
}

/// A proxy serving `yaml` as [`start`] does, whose usage (and shadow comparisons) wait in a
/// reporter nobody sends.
pub async fn start_accounted(yaml: &str) -> (Proxy, Arc<UsageReporter>) {
    start_accounted_on(&with_token(yaml), Arc::new(InMemoryStore::new())).await
}

/// A proxy serving `yaml` as it is on `store` (one proxy of a fleet), whose usage waits in a
/// reporter nobody sends.
pub async fn start_accounted_on(
    yaml: &str,
    store: Arc<dyn StateStore>,
) -> (Proxy, Arc<UsageReporter>) {
    let reporter = Arc::new(UsageReporter::unstarted(&UsageConfig::default()));
    let proxy = serve(yaml, store, Some(Arc::clone(&reporter))).await;
    (proxy, reporter)
}

/// A proxy serving `yaml` as it is on `store` (in memory, or a Redis store: one proxy of a
/// fleet).
pub async fn start_on(yaml: &str, store: Arc<dyn StateStore>) -> Proxy {
    serve(yaml, store, None).await
}

/// A proxy serving `yaml` as it is on `store`, accounting usage to `usage` when given.
async fn serve(yaml: &str, store: Arc<dyn StateStore>, usage: Option<Arc<UsageReporter>>) -> Proxy {
    let parts = parse_yaml(yaml, 1).unwrap_or_else(|e| panic!("test yaml: {e}\n{yaml}"));
    let (snapshots, rx) = watch::channel(Some(Arc::new(Snapshot::new(parts))));
    let state = AppState::with_usage(rx, store.clone(), usage);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        axum::serve(
            listener,
            axum::ServiceExt::<axum::extract::Request>::into_make_service(app(state.clone())),
        )
        .into_future(),
    );
    Proxy {
        url: format!("http://{addr}"),
        state,
        store,
        snapshots,
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn attempts(&self) -> usize {
        self.header("x-switchyard-attempts").parse().unwrap()
    }
}

pub async fn send(
    method: Method,
    url: &str,
    token: Option<&str>,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> Reply {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut req = Request::builder().method(method).uri(url);
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        req = req.header("content-type", "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let response = tokio::time::timeout(
        Duration::from_secs(30),
        client.request(req.body(Full::new(Bytes::from(body))).unwrap()),
    )
    .await
    .expect("request timed out")
    .expect("request failed");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub async fn post(proxy: &Proxy, path: &str, body: &str) -> Reply {
    post_with(proxy, path, body, &[]).await
}

pub async fn post_with(proxy: &Proxy, path: &str, body: &str, headers: &[(&str, &str)]) -> Reply {
    send(
        Method::POST,
        &format!("{}{path}", proxy.url),
        Some(TOKEN),
        body.as_bytes().to_vec(),
        headers,
    )
    .await
}

pub const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hello"}]}"#;
pub const CHAT_STREAM: &str =
    r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}"#;

/// A channel block for a mock upstream URL with the given credentials.
pub fn channel(name: &str, url: &str, keys: &[&str]) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("\"{k}\"")).collect();
    format!(
        "  - name: {name}\n    provider: openai\n    base_url: {url}\n    credentials: [{}]\n",
        keys.join(", ")
    )
}

/// Runs `script` with `SWITCHYARD_TEST_PYTHON` (a python with the official SDKs: scripts/test
/// sets it up; without it the test fails rather than skips), the proxy's URL and `TOKEN` as its
/// arguments, and reads the one JSON value it prints.
pub async fn run_python(proxy: &Proxy, script: &'static str) -> serde_json::Value {
    run_python_at(&proxy.url, TOKEN, script).await
}

/// [`run_python`] against the proxy at `url` with the key `token`.
pub async fn run_python_at(url: &str, token: &str, script: &'static str) -> serde_json::Value {
    let args = ["-c", script, url, token];
    run_python_with(args.iter().map(|a| (*a).to_owned()).collect()).await
}

/// `SWITCHYARD_TEST_PYTHON` run with `args`; the JSON it printed.
pub async fn run_python_with(args: Vec<String>) -> serde_json::Value {
    let python = std::env::var("SWITCHYARD_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("SWITCHYARD_TEST_PYTHON is not set: it must name a python with the SDKs (scripts/test sets it up)")
    });
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python).args(&args).output()
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("cannot run SWITCHYARD_TEST_PYTHON: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "python failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

/// A cloud identity endpoint run by a test (a fake STS, metadata server or Entra ID token
/// endpoint) on a loopback port: request `n` (from 1) is answered `answer(n, body)`, a status, a
/// content type and a body. Each request's method, path, headers and body are kept.
pub struct FakeIdentity {
    /// `http://127.0.0.1:PORT` (no path).
    pub url: String,
    pub requests: Arc<std::sync::Mutex<Vec<IdentityRequest>>>,
}

#[derive(Debug, Clone)]
pub struct IdentityRequest {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: String,
    pub at: std::time::Instant,
}

impl FakeIdentity {
    pub async fn start<F>(answer: F) -> FakeIdentity
    where
        F: Fn(usize, &str) -> (u16, &'static str, String) + Send + Sync + 'static,
    {
        let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let answer = Arc::new(answer);
        let handler = move |request: axum::extract::Request| {
            let (seen, answer) = (Arc::clone(&seen), Arc::clone(&answer));
            async move {
                let (parts, body) = request.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                let body = String::from_utf8_lossy(&body).into_owned();
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(IdentityRequest {
                        method: parts.method.to_string(),
                        path: parts.uri.path().to_owned(),
                        headers: parts.headers,
                        body: body.clone(),
                        at: std::time::Instant::now(),
                    });
                    seen.len()
                };
                let (status, content_type, text) = answer(n, &body);
                http::Response::builder()
                    .status(status)
                    .header("content-type", content_type)
                    .body(axum::body::Body::from(text))
                    .unwrap()
            }
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let router = axum::Router::new().fallback(handler);
        tokio::spawn(axum::serve(listener, router).into_future());
        FakeIdentity { url, requests }
    }

    pub fn requests(&self) -> Vec<IdentityRequest> {
        self.requests.lock().unwrap().clone()
    }
}

/// A loopback URL where nothing listens (a port bound, then released).
pub async fn nothing_listens() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

/// Serialises the tests of one binary that set the workload identity's environment variables
/// and start a proxy (the proxy reads them when it compiles its channels).
pub fn identity_env() -> &'static tokio::sync::Mutex<()> {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// Sets `vars` (and removes `unset`) in this process's environment.
pub fn set_env(vars: &[(&str, &str)], unset: &[&str]) {
    for name in unset {
        std::env::remove_var(name);
    }
    for (name, value) in vars {
        std::env::set_var(name, value);
    }
}

/// A file with `text` in the temporary directory, named after `name` and this process.
pub fn temp_file(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("switchyard-{name}-{}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}
