//! Response cache rules on the control plane: `/api/v1/cache_rules` (validated with the field
//! named, audited, in the snapshot the proxies get), explain naming the rule that applies, and
//! the dry run taking them as changes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::StatusCode;
use common::test_app;
use serde_json::json;
use sqlx::PgPool;

/// A control plane with one simulated channel serving route `gpt-*`.
async fn with_route(pool: PgPool) -> common::TestApp {
    let app = test_app(pool);
    let channel = app
        .create(
            "/api/v1/channels",
            json!({"name": "sim", "provider": "mock", "base_url": "mock://sim"}),
        )
        .await;
    let route = app.route("gpt-*").await;
    app.member(route, json!({"channel_id": channel, "upstream_model": "m"}))
        .await;
    app
}

#[sqlx::test(migrations = "../migrations")]
async fn a_cache_rule_is_validated_stored_compiled_and_explained(pool: PgPool) {
    let app = with_route(pool).await;

    for (body, field) in [
        (
            json!({"name": "c", "model_pattern": "gpt-*", "endpoints": ["messages"], "ttl_seconds": 0}),
            "ttl_seconds",
        ),
        (
            json!({"name": "c", "model_pattern": "gpt-*", "endpoints": ["images"], "ttl_seconds": 60}),
            "endpoints",
        ),
        (
            json!({"name": "c", "model_pattern": "gpt-*", "endpoints": [], "ttl_seconds": 60}),
            "endpoints",
        ),
        (
            json!({"name": "c", "model_pattern": "", "endpoints": ["messages"], "ttl_seconds": 60}),
            "model_pattern",
        ),
        (
            json!({"name": "c", "model_pattern": "gpt-*", "endpoints": ["messages"], "ttl_seconds": 60, "scope": "fleet"}),
            "scope",
        ),
    ] {
        let reply = app.post("/api/v1/cache_rules", body).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.text
        );
        assert_eq!(reply.param(), Some(field), "{}", reply.text);
    }

    let reply = app
        .post(
            "/api/v1/cache_rules",
            json!({"name": "evals", "model_pattern": "gpt-*", "ttl_seconds": 600,
                   "endpoints": ["chat_completions", "messages"], "deterministic_only": true}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let id = reply.body["id"].as_i64().unwrap();
    assert_eq!(reply.body["scope"], "team", "the default scope");
    assert_eq!(reply.body["max_entry_bytes"], 1 << 20);
    let taken = app
        .post(
            "/api/v1/cache_rules",
            json!({"name": "evals", "model_pattern": "x", "ttl_seconds": 1, "endpoints": ["embeddings"]}),
        )
        .await;
    assert_eq!(taken.param(), Some("name"), "{}", taken.text);

    app.refresh().await;
    let explained = app
        .get("/api/v1/routes/explain?model=gpt-4o&endpoint=messages&seed=1")
        .await;
    assert_eq!(explained.status, StatusCode::OK, "{}", explained.text);
    let rule = &explained.body["cache_rule"];
    assert_eq!(rule["id"], id);
    assert_eq!(rule["scope"], "team");
    assert_eq!(rule["deterministic_only"], true);
    let other = app
        .get("/api/v1/routes/explain?model=gpt-4o&endpoint=embeddings&seed=1")
        .await;
    assert_eq!(
        other.body["cache_rule"],
        json!(null),
        "the rule does not cover embeddings"
    );

    let patched = app
        .patch(
            &format!("/api/v1/cache_rules/{id}"),
            json!({"scope": "token", "ttl_seconds": 30}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["scope"], "token");
    let bad_patch = app
        .patch(
            &format!("/api/v1/cache_rules/{id}"),
            json!({"endpoints": ["nope"]}),
        )
        .await;
    assert_eq!(bad_patch.param(), Some("endpoints"));
    app.refresh().await;
    let explained = app.get("/api/v1/routes/explain?model=gpt-4o&seed=1").await;
    assert_eq!(explained.body["cache_rule"]["scope"], "token");
    assert_eq!(explained.body["cache_rule"]["ttl_seconds"], 30);

    // The dry run takes a rule as a change, written nowhere.
    let dry = app
        .post(
            "/api/v1/dry-run",
            json!({"changes": [{"op": "create", "resource": "cache_rule",
                    "body": {"name": "more", "model_pattern": "*", "ttl_seconds": 5,
                             "endpoints": ["embeddings"]}}]}),
        )
        .await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    let listed = app.get("/api/v1/cache_rules").await;
    assert_eq!(
        listed.body["data"].as_array().map(Vec::len),
        Some(1),
        "{}",
        listed.text
    );

    assert_eq!(
        app.delete(&format!("/api/v1/cache_rules/{id}"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    app.refresh().await;
    let gone = app.get("/api/v1/routes/explain?model=gpt-4o&seed=1").await;
    assert_eq!(gone.body["cache_rule"], json!(null));
}

#[sqlx::test(migrations = "../migrations")]
async fn cache_rules_are_exported_planned_applied_and_removed_as_code(pool: PgPool) {
    let app = with_route(pool).await;
    let file = export(&app).await;
    let with_rule = format!(
        "{file}cache_rules:\n- name: evals\n  model_pattern: gpt-*\n  endpoints:\n  - chat_completions\n  ttl_seconds: 60\n  max_entry_bytes: 1000\n  scope: route\n"
    );
    let plan = app
        .post_yaml("/api/v1/config/plan", &with_rule, common::ADMIN_TOKEN)
        .await;
    assert_eq!(plan.status, StatusCode::OK, "{}", plan.text);
    let changes = plan.body["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{}", plan.text);
    assert_eq!(changes[0]["resource"], "cache_rule");
    assert_eq!(changes[0]["action"], "add");
    let applied = app
        .post_yaml("/api/v1/config/apply", &with_rule, common::ADMIN_TOKEN)
        .await;
    assert_eq!(applied.status, StatusCode::OK, "{}", applied.text);
    assert_eq!(
        export(&app).await,
        with_rule,
        "the export reads back as applied"
    );
    let again = app
        .post_yaml("/api/v1/config/plan", &with_rule, common::ADMIN_TOKEN)
        .await;
    assert_eq!(again.body["changes"], json!([]), "{}", again.text);

    let bad = with_rule.replace("ttl_seconds: 60", "ttl_seconds: 0");
    let refused = app
        .post_yaml("/api/v1/config/plan", &bad, common::ADMIN_TOKEN)
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert!(
        refused.text.contains("cache_rules[0].ttl_seconds"),
        "{}",
        refused.text
    );

    let removed = app
        .post_yaml("/api/v1/config/apply", &file, common::ADMIN_TOKEN)
        .await;
    assert_eq!(removed.status, StatusCode::OK, "{}", removed.text);
    let listed = app.get("/api/v1/cache_rules").await;
    assert_eq!(listed.body["data"], json!([]), "{}", listed.text);
}

async fn export(app: &common::TestApp) -> String {
    let reply = app.get("/api/v1/config").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.text
}
