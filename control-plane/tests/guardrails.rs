//! Guardrails on the control plane: `/api/v1/guardrails` (validated with the field named, what
//! they name checked to exist, audited without a webhook's URL, in the snapshot the proxies
//! get, following what they are attached to), explain naming the rules a request runs and what
//! each would do to a sample text, the dry run, and config export, plan and apply.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::StatusCode;
use common::test_app;
use serde_json::{json, Value};
use sqlx::PgPool;

/// A control plane with one simulated channel serving route `gpt-*`; the route's id.
async fn with_route(pool: PgPool) -> (common::TestApp, i64) {
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
    (app, route)
}

fn pii(route: i64) -> Value {
    json!({"name": "pii", "scope": "route", "scope_id": route, "stage": "request",
           "action": "redact", "restore": true,
           "checks": {"detectors": ["email", "card"],
                      "patterns": [{"regex": "EMP-[0-9]{6}", "label": "EMPLOYEE_ID"}]}})
}

#[sqlx::test(migrations = "../migrations")]
async fn bad_guardrails_are_refused_naming_the_field(pool: PgPool) {
    let (app, route) = with_route(pool).await;
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut body = pii(route);
        edit(&mut body);
        body
    };
    for (body, field, says) in [
        (
            with(&|b| b["checks"]["patterns"][0]["regex"] = json!("(")),
            "checks.patterns[0].regex",
            "unclosed group",
        ),
        (
            with(&|b| b["checks"]["detectors"] = json!(["ssn"])),
            "checks.detectors",
            "unknown detector \"ssn\"",
        ),
        (
            with(&|b| b["scope_id"] = json!(999_999)),
            "scope_id",
            "does not exist",
        ),
        (
            with(&|b| b["scope"] = json!("fleet")),
            "scope",
            "unknown scope",
        ),
        (
            with(&|b| b["action"] = json!("erase")),
            "action",
            "unknown action",
        ),
        (
            with(&|b| {
                b["action"] = json!("block");
                b["restore"] = json!(false);
                b["checks"] = json!({"max_messages": 0});
            }),
            "checks.max_messages",
            "1 or more",
        ),
        (
            with(&|b| {
                b["action"] = json!("block");
                b["restore"] = json!(false);
                b["checks"] =
                    json!({"webhook": {"url": "ftp://x", "timeout_ms": 5, "on_failure": "open"}});
            }),
            "checks.webhook.url",
            "http:// or https://",
        ),
        (
            with(&|b| {
                b["action"] = json!("block");
                b["restore"] = json!(false);
                b["checks"] = json!({"moderation": {"channel": "nope"}});
            }),
            "checks.moderation.channel",
            "unknown channel",
        ),
        (
            with(&|b| b["uninspectable"] = json!("sometimes")),
            "uninspectable",
            "allow or block",
        ),
    ] {
        let reply = app.post("/api/v1/guardrails", body).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.text
        );
        assert_eq!(reply.param(), Some(field), "{}", reply.text);
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{}", reply.text);
    }
    assert_eq!(app.get("/api/v1/guardrails").await.body["data"], json!([]));
}

#[sqlx::test(migrations = "../migrations")]
async fn a_guardrail_is_stored_compiled_explained_and_follows_its_route(pool: PgPool) {
    let (app, route) = with_route(pool).await;
    let reply = app.post("/api/v1/guardrails", pii(route)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let id = reply.body["id"].as_i64().unwrap();
    assert_eq!(reply.body["mode"], "enforce", "the default mode");
    assert_eq!(reply.body["checks"]["patterns"][0]["max_match_bytes"], 256);
    let taken = app.post("/api/v1/guardrails", pii(route)).await;
    assert_eq!(taken.param(), Some("name"), "{}", taken.text);
    let everyone = app
        .post(
            "/api/v1/guardrails",
            json!({"name": "size", "stage": "request", "action": "block", "mode": "shadow",
                   "checks": {"max_input_tokens": 5},
                   "webhook_url_is_not_a_field": null}),
        )
        .await;
    assert_eq!(
        everyone.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "unknown fields are refused"
    );
    let hook = app
        .post(
            "/api/v1/guardrails",
            json!({"name": "size", "stage": "request", "action": "block", "mode": "shadow",
                   "checks": {"max_input_tokens": 5,
                              "webhook": {"url": "https://guard.example/check?key=s3cret",
                                          "timeout_ms": 500, "on_failure": "closed"}}}),
        )
        .await;
    assert_eq!(hook.status, StatusCode::CREATED, "{}", hook.text);
    assert_eq!(hook.body["scope"], "all");
    let audited: Vec<String> =
        sqlx::query_scalar("SELECT detail::text FROM audit_log WHERE resource = 'guardrail'")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(audited.len(), 2, "{audited:?}");
    assert!(audited.iter().all(|d| !d.contains("s3cret")), "{audited:?}");

    app.refresh().await;
    let text = "mail a@b.io about EMP-123456, card 4111 1111 1111 1111";
    let explained = app
        .get(&format!(
            "/api/v1/routes/explain?model=gpt-4o&seed=1&text={}",
            text.replace(' ', "%20")
                .replace('@', "%40")
                .replace(',', "%2C")
        ))
        .await;
    assert_eq!(explained.status, StatusCode::OK, "{}", explained.text);
    let rules = explained.body["guardrails"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "{}", explained.text);
    assert_eq!(rules[0]["id"], id);
    assert_eq!(rules[0]["stages"], json!(["request"]));
    let sample = &rules[0]["sample"];
    assert_eq!(sample["outcome"], "redact", "{sample}");
    assert_eq!(
        sample["redacted_text"],
        "mail [EMAIL_1] about [EMPLOYEE_ID_1], card [CARD_1]"
    );
    assert_eq!(sample["findings"][0]["kind"], "EMAIL");
    let size = &rules[1];
    assert_eq!(size["effective_action"], "log", "a shadow rule only logs");
    assert_eq!(size["sample"]["outcome"], "log");
    assert_eq!(size["sample"]["violation"]["check"], "max_input_tokens");
    let other = app.get("/api/v1/routes/explain?model=claude&seed=1").await;
    assert_eq!(
        other.status,
        StatusCode::NOT_FOUND,
        "no route serves claude"
    );

    let patched = app
        .patch(
            &format!("/api/v1/guardrails/{id}"),
            json!({"scope": "all", "enabled": false}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["scope_id"], json!(null));
    let bad = app
        .patch(
            &format!("/api/v1/guardrails/{id}"),
            json!({"checks": {"detectors": []}}),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
    assert_eq!(bad.param(), Some("checks"), "no check left: {}", bad.text);
    app.refresh().await;
    let explained = app.get("/api/v1/routes/explain?model=gpt-4o&seed=1").await;
    let ids: Vec<&Value> = explained.body["guardrails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["id"])
        .collect();
    assert_eq!(ids.len(), 1, "a disabled rule does not run");

    // Attached to the route again, the rule goes with the route.
    let reattached = app
        .patch(
            &format!("/api/v1/guardrails/{id}"),
            json!({"scope": "route", "scope_id": route, "enabled": true}),
        )
        .await;
    assert_eq!(reattached.status, StatusCode::OK, "{}", reattached.text);
    let deleted = app.delete(&format!("/api/v1/routes/{route}")).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    let gone = app.get(&format!("/api/v1/guardrails/{id}")).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.text);
}

#[sqlx::test(migrations = "../migrations")]
async fn the_dry_run_takes_a_guardrail_as_a_change_written_nowhere(pool: PgPool) {
    let (app, route) = with_route(pool).await;
    let dry = app
        .post(
            "/api/v1/dry-run",
            json!({"changes": [{"op": "create", "resource": "guardrail", "body": pii(route)}]}),
        )
        .await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    let mut bad = pii(route);
    bad["checks"]["patterns"][0]["regex"] = json!("[");
    let refused = app
        .post(
            "/api/v1/dry-run",
            json!({"changes": [{"op": "create", "resource": "guardrail", "body": bad}]}),
        )
        .await;
    assert!(
        refused.text.contains("checks.patterns[0].regex"),
        "{}",
        refused.text
    );
    let listed = app.get("/api/v1/guardrails").await;
    assert_eq!(listed.body["data"], json!([]), "{}", listed.text);
}

#[sqlx::test(migrations = "../migrations")]
async fn guardrails_are_exported_planned_applied_and_removed_as_code(pool: PgPool) {
    let (app, _) = with_route(pool).await;
    let file = export(&app).await;
    let with_rules = format!(
        "{file}guardrails:\n- name: pii\n  route: gpt-*\n  stage: request\n  action: redact\n  restore: true\n  checks:\n    patterns:\n    - regex: EMP-[0-9]{{6}}\n      max_match_bytes: 16\n      label: EMPLOYEE_ID\n    detectors:\n    - email\n- name: size\n  action: block\n  mode: shadow\n  checks:\n    max_messages: 20\n  uninspectable: block\n"
    );
    let plan = app
        .post_yaml("/api/v1/config/plan", &with_rules, common::ADMIN_TOKEN)
        .await;
    assert_eq!(plan.status, StatusCode::OK, "{}", plan.text);
    let changes = plan.body["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{}", plan.text);
    assert_eq!(changes[0]["resource"], "guardrail");
    assert_eq!(changes[0]["action"], "add");
    let applied = app
        .post_yaml("/api/v1/config/apply", &with_rules, common::ADMIN_TOKEN)
        .await;
    assert_eq!(applied.status, StatusCode::OK, "{}", applied.text);
    assert_eq!(
        export(&app).await,
        with_rules,
        "the export reads back as applied"
    );
    let again = app
        .post_yaml("/api/v1/config/plan", &with_rules, common::ADMIN_TOKEN)
        .await;
    assert_eq!(again.body["changes"], json!([]), "{}", again.text);

    let changed = with_rules.replace("max_messages: 20", "max_messages: 30");
    let plan = app
        .post_yaml("/api/v1/config/plan", &changed, common::ADMIN_TOKEN)
        .await;
    let changes = plan.body["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{}", plan.text);
    assert_eq!(changes[0]["action"], "change");
    assert_eq!(changes[0]["key"], "size");

    let bad = with_rules.replace("- email", "- ssn");
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
        refused.text.contains("guardrails[0].checks"),
        "{}",
        refused.text
    );

    let removed = app
        .post_yaml("/api/v1/config/apply", &file, common::ADMIN_TOKEN)
        .await;
    assert_eq!(removed.status, StatusCode::OK, "{}", removed.text);
    let listed = app.get("/api/v1/guardrails").await;
    assert_eq!(listed.body["data"], json!([]), "{}", listed.text);
}

async fn export(app: &common::TestApp) -> String {
    let reply = app.get("/api/v1/config").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.text
}

/// `uninspectable` defaults to `allow`, is stored, patched, audited and sent to the proxies.
#[sqlx::test(migrations = "../migrations")]
async fn what_a_rule_does_with_uninspectable_content_is_stored_and_patched(pool: PgPool) {
    let (app, route) = with_route(pool).await;
    let reply = app.post("/api/v1/guardrails", pii(route)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["uninspectable"], "allow", "the default");
    let id = reply.body["id"].as_i64().unwrap();
    let patched = app
        .patch(
            &format!("/api/v1/guardrails/{id}"),
            json!({"uninspectable": "block"}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    let read = app.get(&format!("/api/v1/guardrails/{id}")).await;
    assert_eq!(read.body["uninspectable"], "block", "{}", read.text);
    app.refresh().await;
    let explained = app.get("/api/v1/routes/explain?model=gpt-4o&seed=1").await;
    assert_eq!(
        explained.body["guardrails"][0]["uninspectable"], "block",
        "{}",
        explained.text
    );
}
