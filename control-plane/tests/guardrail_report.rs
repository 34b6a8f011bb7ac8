//! A guardrail's report end to end: a shadow-mode rule created through the admin API, compiled
//! into the snapshot an in-process proxy serves, requests through the proxy (which the rule
//! never changes), the proxy's guardrail counts applied through the usage-batch path (twice: a
//! batch is applied once), and `GET /api/v1/guardrails/{id}/report` (viewer-readable: the roles test holds that).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{proxy, test_app};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_control_plane::usage::apply_batch;
use switchyard_data_plane::AppState as ProxyState;
use tower::ServiceExt;

async fn chat(state: &Arc<ProxyState>, token: &str, content: &str) -> (StatusCode, Value) {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": content}]});
    let request = Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = switchyard_data_plane::app(Arc::clone(state))
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[sqlx::test(migrations = "../migrations")]
async fn a_shadow_guardrails_report_counts_what_it_would_have_done(pool: PgPool) {
    let app = test_app(pool.clone());
    let channel = app
        .create(
            "/api/v1/channels",
            json!({"name": "live", "provider": "mock", "base_url": "mock://sim?content=ok"}),
        )
        .await;
    let route = app.route("m").await;
    app.member(route, json!({"channel_id": channel, "upstream_model": "x"}))
        .await;
    let reply = app.post("/api/v1/tokens", json!({"name": "app"})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let token = reply.body["token"].as_str().unwrap().to_owned();
    let rule = app
        .create(
            "/api/v1/guardrails",
            json!({"name": "pii-trial", "scope": "route", "scope_id": route, "stage": "request",
                   "action": "block", "mode": "shadow",
                   "checks": {"detectors": ["email", "card"]}}),
        )
        .await;
    let (state, usage) = proxy(&pool).await;

    let prompts = [
        "write to jane.doe@example.com",
        "charge 4242 4242 4242 4242 and tell bob@example.org",
        "nothing to see",
    ];
    for prompt in prompts {
        let (status, body) = chat(&state, &token, prompt).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["choices"][0]["message"]["content"], "ok");
    }
    let batch = usage.take_batch().unwrap();
    apply_batch(&pool, &batch).await.unwrap();
    // A batch sent again is applied once.
    assert!(apply_batch(&pool, &batch).await.unwrap().duplicate);

    let report = app.get(&format!("/api/v1/guardrails/{rule}/report")).await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.text);
    let r = &report.body;
    assert_eq!(r["checked"], 3, "{r}");
    assert_eq!(r["would_block"], 2, "{r}");
    assert_eq!(r["blocked"], 0, "{r}");
    assert_eq!(r["findings"]["EMAIL"], 2, "{r}");
    assert_eq!(r["findings"]["CARD"], 1, "{r}");
    let examples: Vec<&str> = r["examples"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(examples.contains(&"j***@e***.com"), "{r}");
    assert!(examples.contains(&"**** **** **** 4242"), "{r}");
    assert!(!report.text.contains("jane.doe") && !report.text.contains("4242 4242 4242 4242 "));

    let missing = app.get("/api/v1/guardrails/999999/report").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.text);
}
