//! Helpers shared by the control plane's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod admin;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::Value;
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;
use switchyard_control_plane::live::LiveState;
use switchyard_control_plane::metrics::Metrics;
use switchyard_control_plane::publisher::Publisher;
use switchyard_control_plane::{app, AppState};
use tower::ServiceExt;

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// Waits, when less than `needed` is left of the current UTC minute, until the next minute has
/// begun. Every limit window ends on a whole minute, so a test that counts against one and then
/// reads the count back calls this first and no window ends in between.
pub async fn clear_of_a_window_end(needed: std::time::Duration) {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into = std::time::Duration::from_millis((since_epoch.as_millis() % 60_000) as u64);
    let left = std::time::Duration::from_secs(60).saturating_sub(into);
    if left < needed {
        tokio::time::sleep(left + std::time::Duration::from_millis(100)).await;
    }
}

/// The test database's URL, reached through `host:port` (Postgres itself or a gate in front).
pub fn database_url(opts: &PgConnectOptions, host_port: &str) -> String {
    let db = opts.get_database().unwrap_or("postgres");
    let user = opts.get_username();
    format!("postgres://{user}@{host_port}/{db}")
}

/// Where the test database's Postgres listens, as `host:port`.
pub fn postgres_addr(opts: &PgConnectOptions) -> String {
    format!("{}:{}", opts.get_host(), opts.get_port())
}

pub struct TestApp {
    pub router: Router,
    pub pool: PgPool,
    pub publisher: Arc<Publisher>,
}

pub fn test_app(pool: PgPool) -> TestApp {
    build_app(pool, None)
}

/// An app whose explain and `/api/v1/state` read this shared state.
pub fn test_app_with_live(pool: PgPool, live: LiveState) -> TestApp {
    build_app(pool, Some(live))
}

/// An app whose trial calls connect as `upstream` says (extra trusted roots, HTTP/2).
#[allow(dead_code)]
pub fn test_app_with_upstream(
    pool: PgPool,
    upstream: switchyard_upstream::ClientOptions,
) -> TestApp {
    build_app_with(pool, None, Some(upstream))
}

fn build_app(pool: PgPool, live: Option<LiveState>) -> TestApp {
    build_app_with(pool, live, None)
}

fn build_app_with(
    pool: PgPool,
    live: Option<LiveState>,
    upstream: Option<switchyard_upstream::ClientOptions>,
) -> TestApp {
    let metrics = Arc::new(Metrics::default());
    let publisher = Publisher::new(pool.clone(), Arc::clone(&metrics));
    let mut state = AppState::new(pool.clone(), ADMIN_TOKEN, Arc::clone(&publisher), metrics);
    if let Some(live) = live {
        state = state.with_live(live);
    }
    if let Some(upstream) = upstream {
        state = state.with_upstream(upstream);
    }
    TestApp {
        router: app(state),
        pool,
        publisher,
    }
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    /// The field an error names (`error.param`).
    pub fn param(&self) -> Option<&str> {
        self.body["error"]["param"].as_str()
    }

    pub fn revision(&self) -> Option<i64> {
        self.headers
            .get("x-switchyard-revision")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    }
}

impl TestApp {
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = match body {
            Some(body) => request
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .unwrap(),
            None => request.body(Body::empty()).unwrap(),
        };
        self.reply(request).await
    }

    /// POSTs a configuration file (YAML) to `path` with `token`.
    pub async fn post_yaml(&self, path: &str, yaml: &str, token: &str) -> Reply {
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/yaml")
            .body(Body::from(yaml.to_owned()))
            .unwrap();
        self.reply(request).await
    }

    /// The router's answer to `request`, read whole.
    async fn reply(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    pub async fn send_with_actor(&self, path: &str, body: Value, actor: &str) -> StatusCode {
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .header("x-switchyard-actor", actor)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        self.router.clone().oneshot(request).await.unwrap().status()
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, None, Some(ADMIN_TOKEN)).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(Method::POST, path, Some(body), Some(ADMIN_TOKEN))
            .await
    }

    pub async fn patch(&self, path: &str, body: Value) -> Reply {
        self.send(Method::PATCH, path, Some(body), Some(ADMIN_TOKEN))
            .await
    }

    pub async fn put(&self, path: &str, body: Value) -> Reply {
        self.send(Method::PUT, path, Some(body), Some(ADMIN_TOKEN))
            .await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.send(Method::DELETE, path, None, Some(ADMIN_TOKEN))
            .await
    }

    /// Creates a resource and returns its id, asserting 201.
    pub async fn create(&self, path: &str, body: Value) -> i64 {
        let reply = self.post(path, body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{path}: {}", reply.text);
        reply.body["id"].as_i64().unwrap()
    }

    pub async fn channel(&self, name: &str) -> i64 {
        self.create(
            "/api/v1/channels",
            serde_json::json!({"name": name, "provider": "openai", "base_url": "https://upstream.test/v1"}),
        )
        .await
    }

    pub async fn route(&self, pattern: &str) -> i64 {
        self.create(
            "/api/v1/routes",
            serde_json::json!({"model_pattern": pattern}),
        )
        .await
    }

    pub async fn member(&self, route: i64, body: Value) -> i64 {
        self.create(&format!("/api/v1/routes/{route}/members"), body)
            .await
    }

    /// Compiles and publishes the current tables (what the LISTEN task does on a NOTIFY).
    pub async fn refresh(&self) -> u64 {
        self.publisher.refresh().await.unwrap()
    }

    pub async fn revision(&self) -> i64 {
        sqlx::query_scalar("SELECT revision FROM snapshot_revision")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    pub async fn audit_rows(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM audit_log")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}

/// A proxy serving the control plane's current snapshot (compiled from `pool`), its usage and
/// request log waiting in a reporter the test sends with `apply_batch`.
pub async fn proxy(
    pool: &PgPool,
) -> (
    Arc<switchyard_data_plane::AppState>,
    Arc<switchyard_data_plane::usage::UsageReporter>,
) {
    use switchyard_data_plane::usage::{UsageConfig, UsageReporter};
    use switchyard_state::{InMemoryStore, StateStore};
    let snapshot = switchyard_control_plane::compile::compile(pool)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::watch::channel(Some(Arc::new(snapshot)));
    // The sender must outlive the proxy's follower; leaking it keeps the tests simple.
    std::mem::forget(tx);
    let store: Arc<dyn StateStore> = Arc::new(InMemoryStore::new());
    let usage = Arc::new(UsageReporter::unstarted(&UsageConfig::default()));
    let state = switchyard_data_plane::AppState::with_usage(rx, store, Some(Arc::clone(&usage)));
    (state, usage)
}
