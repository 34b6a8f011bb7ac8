//! Configuration apply removes what the file no longer lists, checked by looking for it (not only
//! by a later apply succeeding): a member dropped from its route is gone from the database, the
//! API and the export while the others keep their ids; a channel and a route dropped together
//! are gone with their members; the file applied again plans nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::StatusCode;
use common::{test_app, TestApp, ADMIN_TOKEN};
use serde_json::{json, Value};
use sqlx::PgPool;

/// POSTs the configuration file to `path`; (status, JSON body).
async fn send_yaml(app: &TestApp, path: &str, yaml: &str) -> (StatusCode, Value) {
    let reply = app.post_yaml(path, yaml, ADMIN_TOKEN).await;
    let body = serde_json::from_str(&reply.text).unwrap_or(Value::String(reply.text));
    (reply.status, body)
}

async fn apply(app: &TestApp, yaml: &str) {
    let (status, body) = send_yaml(app, "/api/v1/config/apply", yaml).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn plans_nothing(app: &TestApp, yaml: &str) {
    let (status, plan) = send_yaml(app, "/api/v1/config/plan", yaml).await;
    assert_eq!(status, StatusCode::OK, "{plan}");
    assert_eq!(plan["changes"], json!([]), "{plan}");
}

/// Every stored member: (id, route pattern, channel name, upstream model).
async fn members(pool: &PgPool) -> Vec<(i64, String, String, String)> {
    sqlx::query_as(
        "SELECT m.id, r.model_pattern, c.name, m.upstream_model FROM route_members m \
         JOIN routes r ON r.id = m.route_id JOIN channels c ON c.id = m.channel_id ORDER BY m.id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn names(pool: &PgPool, sql: &str) -> Vec<String> {
    sqlx::query_scalar(sql).fetch_all(pool).await.unwrap()
}

const FULL: &str = "\
channels:
- name: a
  provider: openai
  base_url: https://a.test
  credentials: ['${A_KEY}']
- name: b
  provider: openai
  base_url: https://b.test
  credentials: ['${B_KEY}']
routes:
- model_pattern: gpt-4o
  members:
  - {channel: a, upstream_model: gpt-4o}
  - {channel: b, upstream_model: dropped-model}
  - {channel: b, upstream_model: gpt-4o-mini}
- model_pattern: claude
  members:
  - {channel: b, upstream_model: claude-3}
";

#[sqlx::test(migrations = "../migrations")]
async fn apply_removes_members_routes_and_channels_the_file_drops(pool: PgPool) {
    let app = test_app(pool.clone());
    apply(&app, FULL).await;
    let before = members(&pool).await;
    assert_eq!(before.len(), 4, "{before:?}");
    let dropped = before
        .iter()
        .find(|m| m.3 == "dropped-model")
        .unwrap()
        .clone();

    // One member dropped from its route: gone, and only it.
    let fewer = FULL.replace("  - {channel: b, upstream_model: dropped-model}\n", "");
    apply(&app, &fewer).await;
    let after = members(&pool).await;
    let kept: Vec<_> = before
        .iter()
        .filter(|m| m.0 != dropped.0)
        .cloned()
        .collect();
    assert_eq!(
        after, kept,
        "the dropped member is gone, the others keep their ids"
    );
    let reply = app.get(&format!("/api/v1/members/{}", dropped.0)).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.text);
    let export = app.get("/api/v1/config").await;
    assert!(!export.text.contains("dropped-model"), "{}", export.text);
    plans_nothing(&app, &fewer).await;
    // Nor does the compiled snapshot route to it.
    let explain = app.get("/api/v1/routes/explain?model=gpt-4o").await;
    assert!(!explain.text.contains("dropped-model"), "{}", explain.text);

    // A channel and the route only it served, dropped together: gone, with their members.
    let without_b = "\
channels:
- name: a
  provider: openai
  base_url: https://a.test
  credentials: ['${A_KEY}']
routes:
- model_pattern: gpt-4o
  members:
  - {channel: a, upstream_model: gpt-4o}
";
    apply(&app, without_b).await;
    let left = members(&pool).await;
    assert_eq!(
        left,
        vec![before.iter().find(|m| m.2 == "a").unwrap().clone()],
        "only channel a's member is left"
    );
    assert_eq!(
        names(&pool, "SELECT name FROM channels ORDER BY id").await,
        ["a"]
    );
    assert_eq!(
        names(&pool, "SELECT model_pattern FROM routes ORDER BY id").await,
        ["gpt-4o"]
    );
    let credentials: i64 = sqlx::query_scalar("SELECT count(*) FROM credentials")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(credentials, 1, "channel b's credential went with it");
    plans_nothing(&app, without_b).await;

    // The whole file again: everything back, and nothing stale in the way.
    apply(&app, FULL).await;
    assert_eq!(members(&pool).await.len(), 4);
    plans_nothing(&app, FULL).await;
}
