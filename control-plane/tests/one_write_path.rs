//! Every write of a resource goes through one layer, whichever way it comes in: a rule of a
//! resource refuses the same thing with the same 422 through its REST call, through a dry run's
//! change, and through a configuration file's plan and apply. One rule per resource kind, against
//! real Postgres.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use common::{test_app, TestApp, ADMIN_TOKEN};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use tower::ServiceExt;

/// Sends a configuration file (JSON is YAML) and returns (status, JSON body).
async fn send_file(app: &TestApp, path: &str, file: &Value) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .body(Body::from(file.to_string()))
        .unwrap();
    let response = app.router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A channel `c`, a route `m` with one member of it: (channel id, route id, member id).
async fn fleet(app: &TestApp) -> (i64, i64, i64) {
    let channel = app.channel("c").await;
    app.create(
        &format!("/api/v1/channels/{channel}/credentials"),
        json!({"secret_env": "OPENAI_API_KEY"}),
    )
    .await;
    let route = app.route("m").await;
    let member = app
        .member(route, json!({"channel_id": channel, "upstream_model": "m"}))
        .await;
    (channel, route, member)
}

/// The file of [`fleet`], exactly as it stands.
fn fleet_file(member: i64) -> Value {
    json!({
        "channels": [{"name": "c", "provider": "openai", "base_url": "https://upstream.test/v1",
                      "credentials": ["${OPENAI_API_KEY}"]}],
        "routes": [{"model_pattern": "m", "members": [
            {"id": member, "channel": "c", "upstream_model": "m"}
        ]}],
    })
}

/// One refusal as each path answers it: (status, code, message).
fn refusal(status: StatusCode, body: &Value) -> (StatusCode, String, String) {
    let error = &body["error"];
    (
        status,
        error["code"].as_str().unwrap_or_default().to_owned(),
        error["message"].as_str().unwrap_or_default().to_owned(),
    )
}

/// What a refusal says of the rule: its message without the place it names first (REST names
/// the body's field, `retry_times: ...`; a file its path, `routes[1].retry_times: ...`).
fn rule_of(message: &str, param: &str) -> String {
    message
        .strip_prefix(&format!("{param}: "))
        .unwrap_or(message)
        .to_owned()
}

/// The REST call refuses with a 422; the dry run's change, the plan and the apply of the file
/// refuse with the same code and the same message, behind the place they name (`changes[0].body.`,
/// `routes[1].`...). Nothing is written.
async fn same_refusal(
    app: &TestApp,
    (method, path, body): (Method, &str, Value),
    change: Value,
    file: Value,
) {
    let revision = app.revision().await;
    let rest = app.send(method, path, Some(body), Some(ADMIN_TOKEN)).await;
    let (status, code, message) = refusal(rest.status, &rest.body);
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "REST: {}",
        rest.text
    );
    let rule = rule_of(&message, rest.param().unwrap_or_default());
    assert!(!rule.is_empty(), "REST: {}", rest.text);

    let dry = app
        .post("/api/v1/dry-run", json!({ "changes": [change] }))
        .await;
    let (dry_status, dry_code, dry_message) = refusal(dry.status, &dry.body);
    assert_eq!(
        (dry_status, dry_code.as_str()),
        (status, code.as_str()),
        "dry run: {}",
        dry.text
    );
    assert!(
        dry_message.starts_with("changes[0]") && dry_message.ends_with(&format!(": {rule}")),
        "dry run: {dry_message:?}, REST: {message:?}"
    );

    for path in ["/api/v1/config/plan", "/api/v1/config/apply"] {
        let (file_status, body) = send_file(app, path, &file).await;
        let (file_status, file_code, file_message) = refusal(file_status, &body);
        assert_eq!(
            (file_status, file_code.as_str()),
            (status, code.as_str()),
            "{path}: {body}"
        );
        assert!(
            file_message.ends_with(&format!(": {rule}")),
            "{path}: {file_message:?}, REST: {message:?}"
        );
    }
    assert_eq!(app.revision().await, revision, "a refusal wrote nothing");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_channels_rule_refuses_alike_everywhere(pool: PgPool) {
    let app = test_app(pool);
    let (_, _, member) = fleet(&app).await;
    let bad = json!({"name": "d", "provider": "openai", "base_url": "https://d.test/v1",
                     "headers": {"x-note": "one\ntwo"}});
    let mut file = fleet_file(member);
    let mut in_file = bad.clone();
    in_file["credentials"] = json!(["${OPENAI_API_KEY}"]);
    file["channels"].as_array_mut().unwrap().push(in_file);
    let change = json!({"op": "create", "resource": "channel", "body": bad});
    same_refusal(&app, (Method::POST, "/api/v1/channels", bad), change, file).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_credentials_rule_refuses_alike_everywhere(pool: PgPool) {
    let app = test_app(pool);
    let (channel, _, member) = fleet(&app).await;
    let secret = "line one\nline two";
    let mut file = fleet_file(member);
    file["channels"][0]["credentials"] = json!(["${OPENAI_API_KEY}", secret]);
    let body = json!({ "secret": secret });
    let change = json!({"op": "create", "resource": "credential", "parent_id": channel,
                        "body": body});
    let path = format!("/api/v1/channels/{channel}/credentials");
    same_refusal(&app, (Method::POST, &path, body), change, file).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_routes_rule_refuses_alike_everywhere(pool: PgPool) {
    let app = test_app(pool);
    let (_, _, member) = fleet(&app).await;
    let body = json!({"model_pattern": "n", "retry_times": 1000});
    let mut file = fleet_file(member);
    file["routes"].as_array_mut().unwrap().push(body.clone());
    let change = json!({"op": "create", "resource": "route", "body": body});
    same_refusal(&app, (Method::POST, "/api/v1/routes", body), change, file).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_members_rule_refuses_alike_everywhere(pool: PgPool) {
    let app = test_app(pool);
    let (channel, route, member) = fleet(&app).await;
    let body = json!({"channel_id": channel, "upstream_model": "m", "weight": -1});
    let mut file = fleet_file(member);
    file["routes"][0]["members"]
        .as_array_mut()
        .unwrap()
        .push(json!({"channel": "c", "upstream_model": "m", "weight": -1}));
    let change = json!({"op": "create", "resource": "member", "parent_id": route, "body": body});
    let path = format!("/api/v1/routes/{route}/members");
    same_refusal(&app, (Method::POST, &path, body), change, file).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_teams_rule_refuses_alike_everywhere(pool: PgPool) {
    let app = test_app(pool);
    let (_, _, member) = fleet(&app).await;
    let body = json!({"name": "t", "retry_limit": 101});
    let mut file = fleet_file(member);
    file["teams"] = json!([body.clone()]);
    let change = json!({"op": "create", "resource": "team", "body": body});
    same_refusal(&app, (Method::POST, "/api/v1/teams", body), change, file).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_tokens_rule_refuses_alike_everywhere(pool: PgPool) {
    let app = test_app(pool);
    let (_, _, member) = fleet(&app).await;
    let body = json!({"name": "k", "expires_at": "2020-01-01T00:00:00Z"});
    let mut file = fleet_file(member);
    file["tokens"] = json!([{"name": "k", "token_sha256": "ab".repeat(32),
                             "expires_at": "2020-01-01T00:00:00Z"}]);
    let change = json!({"op": "create", "resource": "token", "body": body});
    same_refusal(&app, (Method::POST, "/api/v1/tokens", body), change, file).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_prices_rule_refuses_alike_everywhere(pool: PgPool) {
    let app = test_app(pool);
    let (channel, _, member) = fleet(&app).await;
    let body = json!({"channel_id": channel, "model_pattern": "m",
                      "input_per_million": "1.1234567", "output_per_million": "1"});
    let mut file = fleet_file(member);
    file["prices"] = json!([{"channel": "c", "model_pattern": "m",
                             "input_per_million": "1.1234567", "output_per_million": "1"}]);
    let change = json!({"op": "create", "resource": "price", "body": body});
    same_refusal(&app, (Method::POST, "/api/v1/prices", body), change, file).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_limits_rule_refuses_alike_everywhere(pool: PgPool) {
    let app = test_app(pool);
    let (_, route, member) = fleet(&app).await;
    let body = json!({"scope": "route", "scope_id": route, "metric": "requests",
                      "window": "month", "value": 10});
    let mut file = fleet_file(member);
    file["limits"] = json!([{"route": "m", "metric": "requests", "window": "month",
                             "value": 10}]);
    let change = json!({"op": "create", "resource": "limit", "body": body});
    same_refusal(&app, (Method::POST, "/api/v1/limits", body), change, file).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_shadow_rules_rule_refuses_alike_everywhere(pool: PgPool) {
    let app = test_app(pool);
    let (_, _, member) = fleet(&app).await;
    let body = json!({"name": "s", "model_pattern": "m", "target_member_id": member,
                      "sample_percent": 10, "max_rps": 0});
    let mut file = fleet_file(member);
    file["shadows"] = json!([{"name": "s", "model_pattern": "m", "target_member": member,
                              "sample_percent": 10, "max_rps": 0}]);
    let change = json!({"op": "create", "resource": "shadow", "body": body});
    same_refusal(&app, (Method::POST, "/api/v1/shadows", body), change, file).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_settings_rule_refuses_alike_everywhere(pool: PgPool) {
    let app = test_app(pool);
    let (_, _, member) = fleet(&app).await;
    let body = json!({"retry_times": 1000});
    let mut file = fleet_file(member);
    file["settings"] = body.clone();
    let change = json!({"op": "patch", "resource": "settings", "body": body});
    same_refusal(
        &app,
        (Method::PATCH, "/api/v1/settings", body),
        change,
        file,
    )
    .await;
}
