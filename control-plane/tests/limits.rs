//! Prices, limits, budgets and token expiry through the admin API, against a real Postgres.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_control_plane::usage::apply_batch;
use switchyard_engine::limit::{LimitMode, Metric, ScopeKind, Window};
use switchyard_proto::v1::{UsageBatch, UsageRecord};

use common::{test_app, Reply, TestApp};

async fn expect_invalid(reply: Reply, param: &str) {
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{param}: {}",
        reply.text
    );
    assert_eq!(reply.param(), Some(param), "{}", reply.text);
}

async fn audit_actions(app: &TestApp, resource: &str) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT action, revision FROM audit_log WHERE resource = $1 ORDER BY revision")
        .bind(resource)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

// ----------------------------------------------------------------------------------- prices

#[sqlx::test(migrations = "../migrations")]
async fn price_crud_is_exact_audited_and_bumps_the_revision(pool: PgPool) {
    let app = test_app(pool);
    let channel = app.channel("openai").await;
    let before = app.revision().await;
    let created = app
        .post(
            "/api/v1/prices",
            json!({"channel_id": channel, "model_pattern": "gpt-4o*",
                   "input_per_million": 2.5, "output_per_million": "10.00",
                   "cached_input_per_million": 1.25}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.revision(), Some(before + 1));
    let id = created.body["id"].as_i64().unwrap();
    assert_eq!(created.body["input_per_million"], "2.5");
    assert_eq!(created.body["output_per_million"], "10");
    assert_eq!(created.body["cached_input_per_million"], "1.25");
    let stored: (i64, i64, Option<i64>) = sqlx::query_as(
        "SELECT input_per_million, output_per_million, cached_input_per_million FROM prices",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(stored, (2_500_000, 10_000_000, Some(1_250_000)));

    // Patch: a number with many digits, still exact; null clears the cached price.
    let patched = app
        .patch(
            &format!("/api/v1/prices/{id}"),
            json!({"input_per_million": 0.075, "cached_input_per_million": null}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["input_per_million"], "0.075");
    assert_eq!(patched.body["output_per_million"], "10");
    assert_eq!(patched.body["cached_input_per_million"], Value::Null);
    assert_eq!(patched.revision(), Some(before + 2));

    let list = app.get("/api/v1/prices").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(list.body["next_cursor"], Value::Null);
    let one = app.get(&format!("/api/v1/prices/{id}")).await;
    assert_eq!(one.body["model_pattern"], "gpt-4o*");

    // The price reaches the snapshot.
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    let price = snapshot.price(channel, "gpt-4o-mini").unwrap();
    assert_eq!(
        (
            price.input_per_million,
            price.output_per_million,
            price.cached_input_per_million
        ),
        (75_000, 10_000_000, None)
    );

    let deleted = app.delete(&format!("/api/v1/prices/{id}")).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_eq!(deleted.revision(), Some(before + 3));
    assert_eq!(
        app.get(&format!("/api/v1/prices/{id}")).await.status,
        StatusCode::NOT_FOUND
    );
    let actions: Vec<String> = audit_actions(&app, "price")
        .await
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    assert_eq!(actions, ["create", "update", "delete"]);
    let detail: Value = sqlx::query_scalar(
        "SELECT detail FROM audit_log WHERE resource = 'price' AND action = 'create'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(detail["input_per_million"], "2.5");
}

#[sqlx::test(migrations = "../migrations")]
async fn invalid_prices_name_the_field_and_duplicates_conflict(pool: PgPool) {
    let app = test_app(pool);
    let channel = app.channel("openai").await;
    let base = json!({"channel_id": channel, "model_pattern": "gpt-4o",
                      "input_per_million": "2.50", "output_per_million": 10});
    let with = |key: &str, value: Value| {
        let mut body = base.clone();
        body[key] = value;
        body
    };
    for (body, param) in [
        (with("channel_id", json!(999_999)), "channel_id"),
        (with("model_pattern", json!("")), "model_pattern"),
        (with("model_pattern", json!("gpt **")), "model_pattern"),
        (with("input_per_million", json!(-1)), "input_per_million"),
        (
            with("input_per_million", json!("0.0000001")),
            "input_per_million",
        ),
        (
            with("output_per_million", json!("ten")),
            "output_per_million",
        ),
        (
            with("output_per_million", json!(1e12)),
            "output_per_million",
        ),
        (
            with("cached_input_per_million", json!("1,5")),
            "cached_input_per_million",
        ),
        (with("input_per_million", json!(true)), "input_per_million"),
        (with("colour", json!("red")), "colour"),
    ] {
        expect_invalid(app.post("/api/v1/prices", body).await, param).await;
    }
    let id = app.create("/api/v1/prices", base.clone()).await;
    let dup = app.post("/api/v1/prices", base.clone()).await;
    assert_eq!(dup.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", dup.text);
    assert_eq!(dup.param(), Some("model_pattern"), "{}", dup.text);
    assert!(dup.text.contains(&format!("price {id}")), "{}", dup.text);
    // Another pattern, then patched onto the first one's: a conflict too.
    let other = app
        .create("/api/v1/prices", with("model_pattern", json!("gpt-4o-*")))
        .await;
    let clash = app
        .patch(
            &format!("/api/v1/prices/{other}"),
            json!({"model_pattern": "gpt-4o"}),
        )
        .await;
    assert_eq!(
        clash.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        clash.text
    );
    expect_invalid(
        app.patch(
            &format!("/api/v1/prices/{other}"),
            json!({"channel_id": 424242}),
        )
        .await,
        "channel_id",
    )
    .await;
    assert_eq!(
        app.patch("/api/v1/prices/999999", json!({})).await.status,
        StatusCode::NOT_FOUND
    );
    // Nothing refused was written or audited.
    assert_eq!(audit_actions(&app, "price").await.len(), 2);
    // Deleting the channel deletes its prices.
    let deleted = app.delete(&format!("/api/v1/channels/{channel}")).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    assert_eq!(app.get("/api/v1/prices").await.body["data"], json!([]));
}

// ----------------------------------------------------------------------------------- limits

async fn token(app: &TestApp, name: &str, team: Option<i64>) -> i64 {
    app.create("/api/v1/tokens", json!({"name": name, "team_id": team}))
        .await
}

#[sqlx::test(migrations = "../migrations")]
async fn limit_crud_validates_audits_and_reaches_the_snapshot(pool: PgPool) {
    let app = test_app(pool);
    let team = app
        .create("/api/v1/teams", json!({"name": "research"}))
        .await;
    let token = token(&app, "app", Some(team)).await;
    let route = app.route("gpt-*").await;
    let channel = app.channel("openai").await;
    let member = app
        .member(
            route,
            json!({"channel_id": channel, "upstream_model": "gpt-4o"}),
        )
        .await;
    let before = app.revision().await;

    let rpm = app
        .post(
            "/api/v1/limits",
            json!({"scope": "token", "scope_id": token, "metric": "requests",
                   "window": "minute", "value": 60}),
        )
        .await;
    assert_eq!(rpm.status, StatusCode::CREATED, "{}", rpm.text);
    assert_eq!(rpm.revision(), Some(before + 1));
    assert_eq!(rpm.body["value"], 60);
    assert_eq!(rpm.body["mode"], "hard");
    assert_eq!(rpm.body["window"], "minute");
    let rpm = rpm.body["id"].as_i64().unwrap();

    let spend = app
        .post(
            "/api/v1/limits",
            json!({"scope": "team", "scope_id": team, "metric": "spend", "window": "month",
                   "value": 12.5, "mode": "soft"}),
        )
        .await;
    assert_eq!(spend.status, StatusCode::CREATED, "{}", spend.text);
    assert_eq!(spend.body["value"], "12.5");
    let spend = spend.body["id"].as_i64().unwrap();
    let stored: i64 = sqlx::query_scalar("SELECT value FROM limits WHERE id = $1")
        .bind(spend)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 12_500_000, "micro-USD");

    let conc = app
        .post(
            "/api/v1/limits",
            json!({"scope": "channel", "scope_id": channel, "metric": "concurrent", "value": "4"}),
        )
        .await;
    assert_eq!(conc.status, StatusCode::CREATED, "{}", conc.text);
    assert_eq!(conc.body["window"], "none");
    app.create(
        "/api/v1/limits",
        json!({"scope": "member", "scope_id": member, "metric": "tokens", "window": "hour",
               "value": 100000}),
    )
    .await;
    app.create(
        "/api/v1/limits",
        json!({"scope": "route", "scope_id": route, "metric": "requests", "window": "day",
               "value": 1000, "mode": "soft"}),
    )
    .await;

    // Patch: value and mode; a spend value as a string.
    let patched = app
        .patch(
            &format!("/api/v1/limits/{spend}"),
            json!({"value": "20.000001", "mode": "hard"}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["value"], "20.000001");
    assert_eq!(patched.body["mode"], "hard");
    let list = app.get("/api/v1/limits?limit=2").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 2);
    assert!(list.body["next_cursor"].is_string());

    // Every limit reaches the compiled snapshot, under its scope.
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    assert_eq!(snapshot.limits().len(), 5);
    let on_token = snapshot.limits_of(ScopeKind::Token, token);
    assert_eq!(on_token.len(), 1);
    assert_eq!(
        (
            on_token[0].key.metric,
            on_token[0].key.window,
            on_token[0].value,
            on_token[0].mode
        ),
        (Metric::Requests, Window::Minute, 60, LimitMode::Hard)
    );
    let on_team = snapshot.limits_of(ScopeKind::Team, team);
    assert_eq!(
        (on_team[0].key.metric, on_team[0].value, on_team[0].mode),
        (Metric::Spend, 20_000_001, LimitMode::Hard)
    );
    assert_eq!(snapshot.limits_of(ScopeKind::Channel, channel).len(), 1);
    assert_eq!(snapshot.limits_of(ScopeKind::Member, member).len(), 1);
    assert_eq!(snapshot.limits_of(ScopeKind::Route, route).len(), 1);
    assert!(snapshot.has_upstream_limits());

    // Deleting the token deletes its limits (and says so nowhere else: the team's stay).
    let deleted = app.delete(&format!("/api/v1/tokens/{token}")).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_eq!(
        app.get(&format!("/api/v1/limits/{rpm}")).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.get(&format!("/api/v1/limits/{spend}")).await.status,
        StatusCode::OK
    );
    // Deleting the member and the channel takes theirs too.
    assert_eq!(
        app.delete(&format!("/api/v1/members/{member}"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.delete(&format!("/api/v1/channels/{channel}"))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    assert_eq!(snapshot.limits().len(), 2, "the team's and the route's");
    assert!(!snapshot.has_upstream_limits());

    let removed = app.delete(&format!("/api/v1/limits/{spend}")).await;
    assert_eq!(removed.status, StatusCode::NO_CONTENT);
    let actions: Vec<String> = audit_actions(&app, "limit")
        .await
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    assert_eq!(
        actions,
        ["create", "create", "create", "create", "create", "update", "delete"]
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn invalid_limits_name_the_field_and_duplicates_conflict(pool: PgPool) {
    let app = test_app(pool);
    let token = token(&app, "app", None).await;
    let channel = app.channel("openai").await;
    let base = json!({"scope": "token", "scope_id": token, "metric": "requests",
                      "window": "minute", "value": 10});
    let with = |pairs: &[(&str, Value)]| {
        let mut body = base.clone();
        for (key, value) in pairs {
            if value.is_null() {
                body.as_object_mut().unwrap().remove(*key);
            } else {
                body[*key] = value.clone();
            }
        }
        body
    };
    for (body, param) in [
        (with(&[("scope", json!("user"))]), "scope"),
        (with(&[("scope_id", json!(987_654))]), "scope_id"),
        (with(&[("scope", json!("team"))]), "scope_id"),
        (with(&[("metric", json!("bytes"))]), "metric"),
        (with(&[("window", json!("fortnight"))]), "window"),
        (with(&[("window", json!("1d"))]), "window"),
        (with(&[("window", json!("91d"))]), "window"),
        (with(&[("route_id", json!(987_654))]), "route_id"),
        (with(&[("model_pattern", json!(""))]), "model_pattern"),
        (with(&[("model_pattern", json!("gpt 4"))]), "model_pattern"),
        (
            with(&[
                ("scope", json!("channel")),
                ("scope_id", json!(channel)),
                ("model_pattern", json!("gpt-4*")),
            ]),
            "model_pattern",
        ),
        (with(&[("window", Value::Null)]), "window"),
        (with(&[("window", json!("none"))]), "window"),
        (with(&[("metric", json!("spend"))]), "window"),
        (with(&[("metric", json!("concurrent"))]), "window"),
        (with(&[("mode", json!("strict"))]), "mode"),
        (with(&[("value", json!(0))]), "value"),
        (with(&[("value", json!(1.5))]), "value"),
        (with(&[("value", json!(-3))]), "value"),
        (with(&[("value", json!("ten"))]), "value"),
        (
            with(&[("value", json!(2_000_000_000_000_000_i64))]),
            "value",
        ),
        (
            with(&[
                ("metric", json!("spend")),
                ("window", json!("day")),
                ("value", json!(0)),
            ]),
            "value",
        ),
        (
            with(&[
                ("metric", json!("spend")),
                ("window", json!("day")),
                ("value", json!("0.0000001")),
            ]),
            "value",
        ),
        (
            with(&[
                ("scope", json!("channel")),
                ("scope_id", json!(channel)),
                ("metric", json!("spend")),
                ("window", json!("day")),
            ]),
            "metric",
        ),
        (with(&[("extra", json!(1))]), "extra"),
    ] {
        expect_invalid(app.post("/api/v1/limits", body.clone()).await, param).await;
    }
    let id = app.create("/api/v1/limits", base.clone()).await;
    let dup = app
        .post("/api/v1/limits", with(&[("value", json!(99))]))
        .await;
    assert_eq!(dup.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", dup.text);
    assert_eq!(dup.param(), Some("window"), "{}", dup.text);
    assert!(dup.text.contains(&format!("limit {id}")), "{}", dup.text);
    // Another window is another limit; patched onto the first's window it conflicts.
    let hourly = app
        .create("/api/v1/limits", with(&[("window", json!("hour"))]))
        .await;
    let clash = app
        .patch(
            &format!("/api/v1/limits/{hourly}"),
            json!({"window": "minute"}),
        )
        .await;
    assert_eq!(
        clash.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        clash.text
    );
    // Changing to spend needs a new value (its unit changes); with one, and a window, it is fine.
    expect_invalid(
        app.patch(
            &format!("/api/v1/limits/{hourly}"),
            json!({"metric": "spend", "window": "day"}),
        )
        .await,
        "value",
    )
    .await;
    let to_spend = app
        .patch(
            &format!("/api/v1/limits/{hourly}"),
            json!({"metric": "spend", "window": "day", "value": "3"}),
        )
        .await;
    assert_eq!(to_spend.status, StatusCode::OK, "{}", to_spend.text);
    assert_eq!(to_spend.body["value"], "3");
    // `window: null` is no window: only for concurrent.
    expect_invalid(
        app.patch(&format!("/api/v1/limits/{id}"), json!({"window": null}))
            .await,
        "window",
    )
    .await;
    let conc = app
        .patch(
            &format!("/api/v1/limits/{id}"),
            json!({"window": null, "metric": "concurrent"}),
        )
        .await;
    assert_eq!(conc.status, StatusCode::OK, "{}", conc.text);
    assert_eq!(conc.body["window"], "none");
    assert_eq!(conc.body["value"], 10);
    assert_eq!(
        app.delete("/api/v1/limits/424242").await.status,
        StatusCode::NOT_FOUND
    );
    // Only the accepted writes were audited.
    assert_eq!(audit_actions(&app, "limit").await.len(), 4);
}

// ---------------------------------------------------------------------------------- budgets

fn spend_record(bucket: i64, token: &str, team: &str, cost: u64, unpriced: u64) -> UsageRecord {
    UsageRecord {
        bucket_start_unix_s: bucket,
        token: token.to_owned(),
        team: team.to_owned(),
        route: "gpt-*".to_owned(),
        channel: "openai".to_owned(),
        model: "gpt-4o".to_owned(),
        requests: 1 + unpriced,
        input_tokens: 10,
        output_tokens: 10,
        cost_pico_usd: cost,
        unpriced_requests: unpriced,
        ..UsageRecord::default()
    }
}

/// A window whose requests were all unpriced has spent an unknown amount (`null`, never `0`);
/// the limit, which counts priced spend only, still has all of its value left.
#[sqlx::test(migrations = "../migrations")]
async fn a_budget_whose_requests_were_all_unpriced_has_no_spend(pool: PgPool) {
    let app = test_app(pool.clone());
    let token = token(&app, "app", None).await;
    let daily = app
        .create(
            "/api/v1/limits",
            json!({"scope": "token", "scope_id": token, "metric": "spend", "window": "day",
                   "value": "1.5"}),
        )
        .await;
    let minute = switchyard_proto::usage::unix_now_s() / 60 * 60;
    let record = UsageRecord {
        requests: 2,
        unpriced_requests: 2,
        ..spend_record(minute, "app", "", 0, 2)
    };
    apply_batch(
        &pool,
        &UsageBatch {
            batch_id: "b-unpriced".to_owned(),
            client_id: "test".to_owned(),
            records: vec![record],
            dropped_requests: 0,
            shadows: Vec::new(),
            requests: Vec::new(),
            semantic_trials: Vec::new(),
            guardrails: Vec::new(),
            events: Vec::new(),
        },
    )
    .await
    .unwrap();
    let reply = app.get("/api/v1/budgets").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let budget = &reply.body["data"][0];
    assert_eq!(budget["limit_id"], daily, "{}", reply.text);
    assert_eq!(budget["unpriced_requests"], 2, "{}", reply.text);
    assert_eq!(budget["spent_usd"], Value::Null, "{}", reply.text);
    assert_eq!(budget["remaining_usd"], "1.5", "{}", reply.text);
}

#[sqlx::test(migrations = "../migrations")]
async fn budgets_sum_the_reported_spend_of_the_current_window(pool: PgPool) {
    let app = test_app(pool.clone());
    let team = app
        .create("/api/v1/teams", json!({"name": "research"}))
        .await;
    let token = token(&app, "app", Some(team)).await;
    let route = app.route("gpt-*").await;
    let daily = app
        .create(
            "/api/v1/limits",
            json!({"scope": "token", "scope_id": token, "metric": "spend", "window": "day",
                   "value": "1.5"}),
        )
        .await;
    let monthly = app
        .create(
            "/api/v1/limits",
            json!({"scope": "team", "scope_id": team, "metric": "spend", "window": "month",
                   "value": 0.001, "mode": "soft"}),
        )
        .await;
    let on_route = app
        .create(
            "/api/v1/limits",
            json!({"scope": "route", "scope_id": route, "metric": "spend", "window": "day",
                   "value": 100}),
        )
        .await;
    // Not a budget.
    app.create(
        "/api/v1/limits",
        json!({"scope": "token", "scope_id": token, "metric": "requests", "window": "day",
               "value": 100}),
    )
    .await;

    let now_s = switchyard_proto::usage::unix_now_s();
    let minute = now_s / 60 * 60;
    let (day_start, day_end) = Window::Day.bounds(now_s as u64 * 1000);
    let (month_start, _) = Window::Month.bounds(now_s as u64 * 1000);
    // Yesterday (in this month unless today is the 1st) and a year ago: outside today's window.
    let yesterday = (day_start / 1000) as i64 - 60;
    let long_ago = (month_start / 1000) as i64 - 86_400 * 40;
    apply_batch(
        &pool,
        &UsageBatch {
            batch_id: "b-1".to_owned(),
            client_id: "test".to_owned(),
            records: vec![
                // 0.25 USD now, 2 unpriced requests.
                spend_record(minute, "app", "research", 250_000_000_000, 2),
                // 0.5 USD yesterday.
                spend_record(yesterday, "app", "research", 500_000_000_000, 0),
                spend_record(long_ago, "app", "research", 9_000_000_000_000, 0),
                // Another token of no team.
                spend_record(minute, "other", "", 1_000_000_000_000, 0),
            ],
            dropped_requests: 0,
            shadows: Vec::new(),
            requests: Vec::new(),
            semantic_trials: Vec::new(),
            guardrails: Vec::new(),
            events: Vec::new(),
        },
    )
    .await
    .unwrap();

    let reply = app.get("/api/v1/budgets").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let data = reply.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3, "spend limits only: {}", reply.body);
    let by_id = |id: i64| data.iter().find(|b| b["limit_id"] == id).unwrap();

    let d = by_id(daily);
    assert_eq!(d["scope"], "token");
    assert_eq!(d["scope_name"], "app");
    assert_eq!(d["window"], "day");
    assert_eq!(d["mode"], "hard");
    assert_eq!(d["value_usd"], "1.5");
    assert_eq!(d["spent_usd"], "0.25");
    assert_eq!(d["remaining_usd"], "1.25");
    assert_eq!(d["unpriced_requests"], 2);
    assert_eq!(
        d["resets_at"],
        switchyard_engine::limit::format_rfc3339(day_end)
    );

    let m = by_id(monthly);
    assert_eq!(m["scope_name"], "research");
    assert_eq!(m["value_usd"], "0.001");
    let month_spent = if yesterday as u64 * 1000 >= month_start {
        "0.75"
    } else {
        "0.25"
    };
    assert_eq!(m["spent_usd"], month_spent);
    assert_eq!(m["remaining_usd"], "0", "never below zero");

    let r = by_id(on_route);
    assert_eq!(r["scope_name"], "gpt-*");
    assert_eq!(r["spent_usd"], "1.25", "every token of the route today");
    assert_eq!(r["remaining_usd"], "98.75");
    assert!(reply.body["computed_at"].is_string());

    // Budgets need the admin token.
    let open = app.send(Method::GET, "/api/v1/budgets", None, None).await;
    assert_eq!(open.status, StatusCode::UNAUTHORIZED);
}

// ----------------------------------------------------------------------------- token expiry

/// A token cannot be given an expiry in the past (as an admin token cannot); a token whose
/// stored expiry has passed stays listed, expired, and can still be changed otherwise.
#[sqlx::test(migrations = "../migrations")]
async fn a_token_cannot_be_given_a_past_expiry(pool: PgPool) {
    let app = test_app(pool);
    for past in ["2000-01-01T00:00:00Z", "2026-01-01T00:00:00+02:00"] {
        let reply = app
            .post("/api/v1/tokens", json!({"name": "old", "expires_at": past}))
            .await;
        assert!(
            reply.text.contains("must be in the future"),
            "{}",
            reply.text
        );
        expect_invalid(reply, "expires_at").await;
    }
    let id = token(&app, "app", None).await;
    let reply = app
        .patch(
            &format!("/api/v1/tokens/{id}"),
            json!({"expires_at": "2000-01-01T00:00:00Z"}),
        )
        .await;
    expect_invalid(reply, "expires_at").await;
    let stored = app.get(&format!("/api/v1/tokens/{id}")).await;
    assert_eq!(
        stored.body["expires_at"],
        Value::Null,
        "nothing was written"
    );

    // Expired while stored: listed as it is, and a patch of another field keeps it.
    sqlx::query("UPDATE tokens SET expires_at = '2000-01-01T00:00:00Z' WHERE id = $1")
        .bind(id)
        .execute(&app.pool)
        .await
        .unwrap();
    let renamed = app
        .patch(&format!("/api/v1/tokens/{id}"), json!({"name": "app-2"}))
        .await;
    assert_eq!(renamed.status, StatusCode::OK, "{}", renamed.text);
    assert_eq!(renamed.body["expires_at"], "2000-01-01T00:00:00.000000Z");
}

#[sqlx::test(migrations = "../migrations")]
async fn tokens_take_an_expiry_show_it_and_clear_it(pool: PgPool) {
    let app = test_app(pool);
    let created = app
        .post(
            "/api/v1/tokens",
            json!({"name": "temp", "expires_at": "2027-01-31T23:59:59+02:00"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["expires_at"], "2027-01-31T21:59:59.000000Z");
    let id = created.body["id"].as_i64().unwrap();
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    let stored = snapshot.tokens().iter().find(|t| t.id == id).unwrap();
    assert_eq!(
        stored.expires_at,
        switchyard_engine::limit::parse_rfc3339("2027-01-31T21:59:59Z")
    );

    // A patch of something else keeps it; a new one replaces it (milliseconds kept); null clears.
    let renamed = app
        .patch(&format!("/api/v1/tokens/{id}"), json!({"name": "temp-2"}))
        .await;
    assert_eq!(renamed.body["expires_at"], "2027-01-31T21:59:59.000000Z");
    let moved = app
        .patch(
            &format!("/api/v1/tokens/{id}"),
            json!({"expires_at": "2036-06-01T00:00:00.250Z"}),
        )
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.text);
    assert_eq!(moved.body["expires_at"], "2036-06-01T00:00:00.250000Z");
    let cleared = app
        .patch(&format!("/api/v1/tokens/{id}"), json!({"expires_at": null}))
        .await;
    assert_eq!(cleared.body["expires_at"], Value::Null);
    assert_eq!(
        app.get(&format!("/api/v1/tokens/{id}")).await.body["expires_at"],
        Value::Null
    );
    let plain = app.post("/api/v1/tokens", json!({"name": "forever"})).await;
    assert_eq!(plain.body["expires_at"], Value::Null);

    for bad in [
        json!("tomorrow"),
        json!("2027-02-30T00:00:00Z"),
        json!("2027-01-31"),
        json!(5),
    ] {
        expect_invalid(
            app.post("/api/v1/tokens", json!({"name": "bad", "expires_at": bad}))
                .await,
            "expires_at",
        )
        .await;
        expect_invalid(
            app.patch(&format!("/api/v1/tokens/{id}"), json!({"expires_at": bad}))
                .await,
            "expires_at",
        )
        .await;
    }
    let detail: Value = sqlx::query_scalar(
        "SELECT detail FROM audit_log WHERE resource = 'token' AND action = 'create' \
         ORDER BY id LIMIT 1",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(detail["expires_at"], "2027-01-31T21:59:59Z");
}

/// A limit narrowed to a model pattern or a route is another limit of its scope: beside the
/// plain one of the same metric and window, once per narrowing, in the snapshot with its
/// counter of its own, and gone with its route.
#[sqlx::test(migrations = "../migrations")]
async fn narrowed_limits_sit_beside_plain_ones_and_follow_their_route(pool: PgPool) {
    let app = test_app(pool);
    let team = app
        .create("/api/v1/teams", json!({"name": "research"}))
        .await;
    let token = token(&app, "app", Some(team)).await;
    let route = app.route("claude-*").await;
    let plain = json!({"scope": "token", "scope_id": token, "metric": "requests",
                       "window": "7d", "value": 10});
    app.create("/api/v1/limits", plain.clone()).await;
    let mut on_model = plain.clone();
    on_model["model_pattern"] = json!("gpt-4*");
    let model_id = app.create("/api/v1/limits", on_model.clone()).await;
    let again = app.post("/api/v1/limits", on_model).await;
    assert_eq!(
        again.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        again.text
    );
    let team_route = app
        .create(
            "/api/v1/limits",
            json!({"scope": "team", "scope_id": team, "metric": "spend", "window": "week",
                   "value": "5", "route_id": route}),
        )
        .await;
    let shown = app.get(&format!("/api/v1/limits/{team_route}")).await;
    assert_eq!(shown.body["route_id"], route, "{}", shown.text);
    assert_eq!(shown.body["window"], "week");
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    let narrowed: Vec<Option<i64>> = snapshot
        .narrowed_limits_of(ScopeKind::Token, token, Some("gpt-4o"), None)
        .map(|l| l.key.rule)
        .collect();
    assert_eq!(narrowed, [Some(model_id)]);
    assert_eq!(snapshot.limits_of(ScopeKind::Token, token).len(), 1);
    assert_eq!(
        snapshot.limits_of(ScopeKind::Token, token)[0].key.window,
        Window::Rolling(7)
    );
    // Patching the narrowing away makes it a duplicate of the plain limit.
    let patched = app
        .patch(
            &format!("/api/v1/limits/{model_id}"),
            json!({"model_pattern": null}),
        )
        .await;
    assert_eq!(
        patched.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        patched.text
    );
    // Deleting the route deletes the limit narrowed to it.
    assert_eq!(
        app.delete(&format!("/api/v1/routes/{route}")).await.status,
        StatusCode::NO_CONTENT
    );
    let gone = app.get(&format!("/api/v1/limits/{team_route}")).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrations = "../migrations")]
async fn tag_and_end_user_limits_name_their_subject_and_reach_the_snapshot(pool: PgPool) {
    let app = test_app(pool);
    let token = token(&app, "app", None).await;
    let tag = app
        .create(
            "/api/v1/limits",
            json!({"scope": "tag", "tag": "acme", "metric": "spend", "window": "month",
                   "value": "5"}),
        )
        .await;
    let shown = app.get(&format!("/api/v1/limits/{tag}")).await;
    assert_eq!(shown.body["tag"], "acme", "{}", shown.text);
    assert_eq!(shown.body["end_user"], Value::Null);
    assert_eq!(shown.body["scope_id"], 0);
    let each = app
        .create(
            "/api/v1/limits",
            json!({"scope": "end_user", "metric": "requests", "window": "minute", "value": 20}),
        )
        .await;
    let alice = app
        .create(
            "/api/v1/limits",
            json!({"scope": "end_user", "end_user": "alice", "scope_id": 0,
                   "metric": "requests", "window": "minute", "value": 20}),
        )
        .await;
    // Another tag with the same metric and window is another limit; the same tag is a duplicate.
    app.create(
        "/api/v1/limits",
        json!({"scope": "tag", "tag": "beta", "metric": "spend", "window": "month", "value": 1}),
    )
    .await;
    let again = json!({"scope": "tag", "tag": "acme", "metric": "spend", "window": "month",
                       "value": 2});
    expect_invalid(app.post("/api/v1/limits", again).await, "window").await;
    let each_again = json!({"scope": "end_user", "metric": "requests", "window": "minute",
                            "value": 3});
    expect_invalid(app.post("/api/v1/limits", each_again).await, "window").await;
    // Precise 422s naming the field.
    let base = json!({"metric": "requests", "window": "minute", "value": 1});
    let with = |extra: Value| {
        let mut body = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    for (body, field) in [
        (with(json!({"scope": "tag"})), "tag"),
        (with(json!({"scope": "tag", "tag": "a b"})), "tag"),
        (with(json!({"scope": "tag", "tag": "x".repeat(65)})), "tag"),
        (
            with(json!({"scope": "tag", "tag": "a", "end_user": "u"})),
            "end_user",
        ),
        (
            with(json!({"scope": "tag", "tag": "a", "scope_id": 4})),
            "scope_id",
        ),
        (
            with(json!({"scope": "end_user", "end_user": ""})),
            "end_user",
        ),
        (
            with(json!({"scope": "end_user", "end_user": "x".repeat(257)})),
            "end_user",
        ),
        (with(json!({"scope": "end_user", "tag": "a"})), "tag"),
        (
            with(json!({"scope": "token", "scope_id": token, "tag": "a"})),
            "tag",
        ),
        (
            with(json!({"scope": "token", "scope_id": token, "end_user": "u"})),
            "end_user",
        ),
        (with(json!({"scope": "token"})), "scope_id"),
    ] {
        expect_invalid(app.post("/api/v1/limits", body.clone()).await, field).await;
    }
    // A patch keeps the subject, changes it, or refuses a bad one.
    let patched = app
        .patch(&format!("/api/v1/limits/{tag}"), json!({"tag": "acme-2"}))
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(patched.body["tag"], "acme-2");
    let kept = app
        .patch(&format!("/api/v1/limits/{alice}"), json!({"value": 30}))
        .await;
    assert_eq!(kept.body["end_user"], "alice", "{}", kept.text);
    expect_invalid(
        app.patch(&format!("/api/v1/limits/{tag}"), json!({"tag": null}))
            .await,
        "tag",
    )
    .await;
    // Turned into a token limit: it takes an id and drops the tag.
    let moved = app
        .patch(
            &format!("/api/v1/limits/{alice}"),
            json!({"scope": "token", "scope_id": token}),
        )
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.text);
    assert_eq!(moved.body["end_user"], Value::Null);
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    let subjects: Vec<(i64, ScopeKind, Option<String>)> = snapshot
        .limits()
        .iter()
        .map(|r| (r.id, r.limit.key.scope, r.subject.clone()))
        .collect();
    assert!(subjects.contains(&(tag, ScopeKind::Tag, Some("acme-2".into()))));
    assert!(subjects.contains(&(each, ScopeKind::EndUser, None)));
    assert!(subjects.contains(&(alice, ScopeKind::Token, None)));
    assert!(snapshot.subject_limits().counts_each_end_user());
    // Budgets list the tag's spend limit (nothing spent yet).
    let budgets = app.get("/api/v1/budgets").await;
    let entry = budgets.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["limit_id"] == tag)
        .cloned()
        .unwrap();
    assert_eq!(entry["scope"], "tag");
    assert_eq!(entry["scope_name"], "acme-2");
    assert_eq!(entry["spent_usd"], "0");
    assert_eq!(entry["end_users"], json!([]));
}

/// A request-log row of `end_user` with `tags`, costing `cost` pico-USD (`None`: unpriced), now.
async fn logged(app: &TestApp, id: &str, end_user: &str, tags: &[&str], cost: Option<i64>) {
    sqlx::query("SELECT request_log_partition((now() AT TIME ZONE 'UTC')::date)")
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO request_log (at, request_id, status, cost_pico_usd, tags, end_user) \
         VALUES (now(), $1, 200, $2, $3, $4)",
    )
    .bind(id)
    .bind(cost)
    .bind(
        tags.iter()
            .map(|t| (*t).to_owned())
            .collect::<Vec<String>>(),
    )
    .bind(end_user)
    .execute(&app.pool)
    .await
    .unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn budgets_of_tags_and_end_users_sum_the_request_log(pool: PgPool) {
    let app = test_app(pool);
    let tag = app
        .create(
            "/api/v1/limits",
            json!({"scope": "tag", "tag": "acme", "metric": "spend", "window": "day",
                   "value": "1"}),
        )
        .await;
    let each = app
        .create(
            "/api/v1/limits",
            json!({"scope": "end_user", "metric": "spend", "window": "month", "value": "2"}),
        )
        .await;
    let bob = app
        .create(
            "/api/v1/limits",
            json!({"scope": "end_user", "end_user": "bob", "metric": "spend", "window": "7d",
                   "value": "2"}),
        )
        .await;
    let usd = 1_000_000_000_000i64;
    logged(&app, "r1", "alice", &["acme", "x"], Some(usd / 2)).await;
    logged(&app, "r2", "alice", &[], Some(usd)).await;
    logged(&app, "r3", "bob", &["acme"], Some(usd / 4)).await;
    logged(&app, "r4", "bob", &["other"], None).await;
    logged(&app, "r5", "", &["acme"], None).await;
    let budgets = app.get("/api/v1/budgets").await;
    assert_eq!(budgets.status, StatusCode::OK, "{}", budgets.text);
    let of = |id: i64| {
        budgets.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["limit_id"] == id)
            .cloned()
            .unwrap()
    };
    let tag = of(tag);
    assert_eq!(tag["spent_usd"], "0.75", "{tag}");
    assert_eq!(tag["remaining_usd"], "0.25");
    assert_eq!(tag["unpriced_requests"], 1);
    let bob = of(bob);
    assert_eq!(
        (bob["scope_name"].as_str(), bob["spent_usd"].as_str()),
        (Some("bob"), Some("0.25"))
    );
    assert_eq!(bob["unpriced_requests"], 1);
    let each = of(each);
    assert_eq!(each["scope_name"], "");
    assert_eq!(
        each["end_users"],
        json!([
            {"end_user": "alice", "spent_usd": "1.5", "remaining_usd": "0.5"},
            {"end_user": "bob", "spent_usd": "0.25", "remaining_usd": "1.75"},
        ]),
        "most first; a request without an end user is nobody's"
    );
    assert_eq!(each["spent_usd"], "1.5", "the end user nearest the budget");
}
