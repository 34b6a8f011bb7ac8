//! Shadow rules end to end: created through the admin API, compiled into the snapshot two
//! in-process proxies serve, live traffic through them with a 50 % shadow to a member that answers
//! differently (slower, sometimes failing, other text), the proxy's comparisons applied through
//! the usage-batch path, and `GET /api/v1/shadows/{id}/report` checked against what the mocks
//! were scripted to do. Also the API's validation and the control plane's automatic stops.
//!
//! No timing decides a pass or fail beyond an ordering the mocks make certain by a wide margin
//! (the shadow target waits 300 ms before answering, the live one not at all).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{proxy, test_app, TestApp};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_control_plane::usage::apply_batch;
use switchyard_data_plane::usage::UsageReporter;
use switchyard_data_plane::AppState as ProxyState;
use tower::ServiceExt;

const LIVE_URL: &str = "mock://sim?content=the%20live%20answer%20is%20here";
const SHADOW_URL: &str =
    "mock://sim?latency_ms=300&failure_rate=0.3&content=a%20different%20reply%20entirely";

struct Fleet {
    app: TestApp,
    token: String,
    shadow: i64,
    cand_channel: i64,
}

async fn mock_channel(app: &TestApp, name: &str, url: &str) -> i64 {
    app.create(
        "/api/v1/channels",
        json!({"name": name, "provider": "mock", "base_url": url}),
    )
    .await
}

async fn fleet(pool: PgPool, shadow_url: &str, rule: Value) -> Fleet {
    let app = test_app(pool);
    let live = mock_channel(&app, "live", LIVE_URL).await;
    let cand = mock_channel(&app, "cand", shadow_url).await;
    let route = app.route("m").await;
    app.member(
        route,
        json!({"channel_id": live, "upstream_model": "live-model"}),
    )
    .await;
    let candidates = app.route("candidate").await;
    let target = app
        .member(
            candidates,
            json!({"channel_id": cand, "upstream_model": "cand-model"}),
        )
        .await;
    for channel in [live, cand] {
        app.create(
            "/api/v1/prices",
            json!({"channel_id": channel, "model_pattern": "*",
                   "input_per_million": "1", "output_per_million": "2"}),
        )
        .await;
    }
    let reply = app.post("/api/v1/tokens", json!({"name": "app"})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let token = reply.body["token"].as_str().unwrap().to_owned();
    let mut body = json!({"name": "trial", "model_pattern": "m", "target_member_id": target,
                          "sample_percent": 50, "max_rps": 1000});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), rule.as_object()) {
        body.extend(extra.clone());
    }
    let shadow = app.create("/api/v1/shadows", body).await;
    Fleet {
        app,
        token,
        shadow,
        cand_channel: cand,
    }
}

async fn chat(state: &Arc<ProxyState>, token: &str) -> (StatusCode, axum::http::HeaderMap, Value) {
    let request = Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Body::from(
            r#"{"model":"m","messages":[{"role":"user","content":"hello there"}]}"#,
        ))
        .unwrap();
    let response = switchyard_data_plane::app(Arc::clone(state))
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, serde_json::from_slice(&bytes).unwrap())
}

fn metric(state: &ProxyState, outcome: &str) -> u64 {
    let prefix =
        format!("switchyard_shadow_requests_total{{rule=\"trial\",outcome=\"{outcome}\"}} ");
    state
        .metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

async fn until(what: &str, ok: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends every pending batch through the control plane's usage path.
async fn flush(pool: &PgPool, usage: &UsageReporter) {
    while let Some(batch) = usage.take_batch() {
        apply_batch(pool, &batch).await.unwrap();
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn live_and_shadow_side_by_side_match_what_the_mocks_do(pool: PgPool) {
    let f = fleet(pool.clone(), SHADOW_URL, json!({})).await;
    // Two proxies serving the same snapshot, taking turns.
    let proxies = [proxy(&pool).await, proxy(&pool).await];
    const REQUESTS: u64 = 120;
    let mut client_ms = Vec::new();
    for i in 0..REQUESTS {
        let state = &proxies[(i % 2) as usize].0;
        let sent = Instant::now();
        let (status, headers, body) = chat(state, &f.token).await;
        client_ms.push(sent.elapsed().as_millis());
        // The client always gets the live answer, whole, and nothing of the shadow.
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            body["choices"][0]["message"]["content"],
            "the live answer is here"
        );
        assert_eq!(headers["x-switchyard-channel"], "live");
        assert!(!headers.keys().any(|k| k.as_str().contains("shadow")));
        assert!(!body.to_string().contains("different reply"));
    }
    // The clients never waited for a shadow (the target takes 300 ms, the live member
    // nothing): measured and printed, never asserted (timings do not decide a test).
    client_ms.sort_unstable();
    eprintln!(
        "client latency with the rule: median {} ms, max {} ms",
        client_ms[client_ms.len() / 2],
        client_ms[client_ms.len() - 1]
    );
    let both = |outcome: &str| {
        proxies
            .iter()
            .map(|(state, _)| metric(state, outcome))
            .sum::<u64>()
    };
    let (ok, failed) = (|| both("success"), || both("failure"));
    // About half were sampled (the draw is random: a wide band).
    for (state, _) in &proxies {
        settle(state).await;
    }
    let sampled = ok() + failed();
    assert!(
        (30..=90).contains(&sampled),
        "{sampled} of {REQUESTS} sampled at 50 %"
    );
    for (_, usage) in &proxies {
        flush(&pool, usage).await;
    }

    let report = f
        .app
        .get(&format!("/api/v1/shadows/{}/report", f.shadow))
        .await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.text);
    let r = &report.body;
    assert_eq!(r["pairs"], sampled);
    assert_eq!(r["live"]["requests"], sampled);
    assert_eq!(r["live"]["succeeded"], sampled);
    assert_eq!(r["live"]["success_rate"], 1.0);
    assert_eq!(r["shadow_side"]["succeeded"], ok());
    // The target fails 30 % of its requests: its error rate is near that.
    let error_rate = 1.0 - r["shadow_side"]["success_rate"].as_f64().unwrap();
    assert!(
        (0.1..=0.55).contains(&error_rate),
        "shadow error rate {error_rate}"
    );
    // The target waits 300 ms before it answers (a floor the mock guarantees), the live
    // member answers at once: the ordering, not a timing bound on the live side.
    let live_p50 = r["live"]["latency_p50_ms"].as_u64().unwrap();
    let shadow_p50 = r["shadow_side"]["latency_p50_ms"].as_u64().unwrap();
    assert!(
        shadow_p50 >= 300 && live_p50 < shadow_p50,
        "{live_p50} vs {shadow_p50}"
    );
    assert!(r["shadow_side"]["latency_p95_ms"].as_u64().unwrap() >= shadow_p50);
    // Both sides are priced; the costs per 1 000 requests are present.
    assert!(r["live"]["cost_per_1000_usd"].is_string());
    assert!(r["shadow_side"]["cost_per_1000_usd"].is_string());
    assert_eq!(r["live"]["unpriced_requests"], 0);
    // Every pair where both answered was compared: same finish reason, no tool calls on either
    // side, and texts with no word in common.
    let a = &r["agreement"];
    assert_eq!(a["compared"], ok());
    assert_eq!(a["same_finish_reason"], 1.0);
    assert_eq!(a["same_tool_names"], 1.0);
    assert_eq!(a["shadow_tool_args_valid"], 1.0);
    assert_eq!(a["json_mode_asked"], 0);
    assert_eq!(a["mean_similarity"], 0.0);
    // "a different reply entirely" (26) against "the live answer is here" (23).
    let ratio = a["mean_length_ratio"].as_f64().unwrap();
    assert!((ratio - 26.0 / 23.0).abs() < 0.01, "{ratio}");
    assert_eq!(r["stopped_reason"], Value::Null);
    // A range from the future holds no pair; a bad one is refused naming it.
    let later = f
        .app
        .get(&format!(
            "/api/v1/shadows/{}/report?since=2099-01-01T00:00:00Z",
            f.shadow
        ))
        .await;
    assert_eq!(later.body["pairs"], 0, "{}", later.text);
    let bad = f
        .app
        .get(&format!(
            "/api/v1/shadows/{}/report?since=yesterday",
            f.shadow
        ))
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
    assert_eq!(bad.param(), Some("since"));

    // The client's usage holds the live requests only.
    let usage_report = f.app.get("/api/v1/usage?group_by=channel").await;
    assert_eq!(usage_report.status, StatusCode::OK, "{}", usage_report.text);
    let groups = usage_report.body["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{}", usage_report.text);
    assert_eq!(groups[0]["channel"], "live");
    assert_eq!(groups[0]["requests"], REQUESTS);
    let _ = f.cand_channel;
}

/// Waits until every shadow copy offered so far has been sent and its comparison recorded.
async fn settle(state: &ProxyState) {
    until("the shadow copies to be sent and compared", || {
        state.shadows.pending() == 0
    })
    .await;
}

#[sqlx::test(migrations = "../migrations")]
async fn the_error_rate_stop_is_recorded_and_reported(pool: PgPool) {
    let f = fleet(
        pool.clone(),
        "mock://sim?failure_rate=1&failure_status=503",
        json!({"sample_percent": 100, "error_rate_stop": 0.5, "error_rate_min_sample": 5}),
    )
    .await;
    let (state, usage) = proxy(&pool).await;
    for _ in 0..5 {
        assert_eq!(chat(&state, &f.token).await.0, StatusCode::OK);
    }
    until("five shadow failures", || metric(&state, "failure") == 5).await;
    flush(&pool, &usage).await;
    let report = f
        .app
        .get(&format!("/api/v1/shadows/{}/report", f.shadow))
        .await;
    assert_eq!(
        report.body["stopped_reason"], "error_rate",
        "{}",
        report.text
    );
    assert_eq!(report.body["shadow"]["stopped_reason"], "error_rate");
    assert_eq!(report.body["shadow_side"]["success_rate"], 0.0);
    // The stop is an audited write: the next snapshot carries it and a proxy shadows no more.
    let (state, _usage) = proxy(&pool).await;
    assert_eq!(chat(&state, &f.token).await.0, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(metric(&state, "failure") + metric(&state, "success"), 0);
    let audit = f.app.get("/api/v1/audit?resource=shadow").await;
    assert!(
        audit.text.contains(r#""stopped_reason":"error_rate""#),
        "{}",
        audit.text
    );
    // Enabling it again clears the stop.
    let resumed = f
        .app
        .patch(
            &format!("/api/v1/shadows/{}", f.shadow),
            json!({"enabled": true}),
        )
        .await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.text);
    assert_eq!(resumed.body["stopped_reason"], Value::Null);
}

#[sqlx::test(migrations = "../migrations")]
async fn the_spend_cap_stops_the_rule_fleet_wide(pool: PgPool) {
    // 1 USD / 2 USD per million tokens: a mock answer costs a few micro-USD, so a cap of one
    // micro-USD is spent by the first pair.
    let f = fleet(
        pool.clone(),
        "mock://sim",
        json!({"sample_percent": 100, "max_daily_spend_usd": "0.000001"}),
    )
    .await;
    let (state, usage) = proxy(&pool).await;
    assert_eq!(chat(&state, &f.token).await.0, StatusCode::OK);
    until("the shadow", || metric(&state, "success") == 1).await;
    flush(&pool, &usage).await;
    let report = f
        .app
        .get(&format!("/api/v1/shadows/{}/report", f.shadow))
        .await;
    assert_eq!(
        report.body["stopped_reason"], "spend_cap",
        "{}",
        report.text
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn an_expired_rule_reports_why_it_stopped(pool: PgPool) {
    let f = fleet(pool.clone(), "mock://sim", json!({})).await;
    // A rule is never given a past expiry; its stored one passes.
    sqlx::query("UPDATE shadows SET expires_at = '2020-01-01T00:00:00Z' WHERE id = $1")
        .bind(f.shadow)
        .execute(&pool)
        .await
        .unwrap();
    let report = f
        .app
        .get(&format!("/api/v1/shadows/{}/report", f.shadow))
        .await;
    assert_eq!(report.body["stopped_reason"], "expired", "{}", report.text);
    assert_eq!(report.body["pairs"], 0);
}

#[sqlx::test(migrations = "../migrations")]
async fn bad_input_is_refused_naming_the_field(pool: PgPool) {
    let f = fleet(pool.clone(), "mock://sim", json!({})).await;
    let post = |body: Value| {
        let app = &f.app;
        async move { app.post("/api/v1/shadows", body).await }
    };
    let base = json!({"name": "t2", "model_pattern": "m", "target_member_id": 999_999,
                      "sample_percent": 10, "max_rps": 5});
    let with = |patch: Value| {
        let mut b = base.clone();
        b.as_object_mut()
            .unwrap()
            .extend(patch.as_object().unwrap().clone());
        b
    };
    let r = post(base.clone()).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.param(), Some("target_member_id"));
    assert!(r.text.contains("999999 does not exist"), "{}", r.text);
    let r = post(with(
        json!({"target_member_id": null, "target_channel_id": 424_242,
                              "target_model": "x"}),
    ))
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.param(), Some("target_channel_id"));
    for (field, value) in [
        ("sample_percent", json!(0)),
        ("sample_percent", json!(100.5)),
        ("sample_percent", json!(-3)),
        ("error_rate_stop", json!(1.5)),
        ("max_rps", json!(0)),
        ("expires_at", json!("tomorrow")),
        ("max_daily_spend_usd", json!("-1")),
    ] {
        let r = post(with(json!({field: value, "target_member_id": null,
                                 "target_channel_id": f.cand_channel, "target_model": "x"})))
        .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}={value}: {}",
            r.text
        );
        assert_eq!(r.param(), Some(field), "{field}={value}: {}", r.text);
    }
    let r = post(with(json!({"name": "trial", "target_member_id": null,
                              "target_channel_id": f.cand_channel, "target_model": "x"})))
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.param(), Some("name"));
    assert_eq!(
        f.app.get("/api/v1/shadows/424242/report").await.status,
        StatusCode::NOT_FOUND
    );
    // The rule created is listed, audited and deleted with its comparisons.
    let list = f.app.get("/api/v1/shadows").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(list.body["data"][0]["sample_percent"], 50.0);
    let audit = f.app.get("/api/v1/audit?resource=shadow").await;
    assert!(audit.text.contains("\"create\""), "{}", audit.text);
    let gone = f.app.delete(&format!("/api/v1/shadows/{}", f.shadow)).await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dry_run_validates_shadow_changes_and_writes_nothing(pool: PgPool) {
    let f = fleet(pool.clone(), "mock://sim", json!({})).await;
    let revision = f.app.revision().await;
    let reply = f
        .app
        .post(
            "/api/v1/dry-run",
            json!({"changes": [
                {"op": "create", "resource": "shadow",
                 "body": {"name": "t2", "model_pattern": "m", "target_channel_id": f.cand_channel,
                          "target_model": "x", "sample_percent": 5, "max_rps": 1}},
                {"op": "patch", "resource": "shadow", "id": f.shadow, "body": {"sample_percent": 20}},
            ]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = f
        .app
        .post(
            "/api/v1/dry-run",
            json!({"changes": [
                {"op": "patch", "resource": "shadow", "id": f.shadow, "body": {"sample_percent": 0}},
            ]}),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    assert_eq!(reply.param(), Some("changes[0].body.sample_percent"));
    assert_eq!(f.app.revision().await, revision);
    let list = f.app.get("/api/v1/shadows").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(list.body["data"][0]["sample_percent"], 50.0);
}

#[sqlx::test(migrations = "../migrations")]
async fn config_plan_shows_the_shadow_rules_a_file_adds_and_removes(pool: PgPool) {
    let f = fleet(pool.clone(), "mock://sim", json!({})).await;
    // The export holds the fleet's rule, by name, its target by member id.
    let export = f.app.get("/api/v1/config").await;
    assert!(
        export.text.contains("shadows:\n- name: trial"),
        "{}",
        export.text
    );
    let yaml = "channels:\n  - { name: live, provider: mock }\nroutes:\n  - model_pattern: m\n    members:\n      - { id: 1, channel: live }\nshadows:\n  - { name: t, model_pattern: m, target_member: 1, sample_percent: 5, max_rps: 1 }\n";
    let reply = f
        .app
        .post_yaml("/api/v1/config/plan", yaml, common::ADMIN_TOKEN)
        .await;
    let body: Value = serde_json::from_str(&reply.text).unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{body}");
    let shadows: Vec<(&str, &str)> = body["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["resource"] == "shadow")
        .map(|c| (c["key"].as_str().unwrap(), c["action"].as_str().unwrap()))
        .collect();
    assert_eq!(shadows, [("t", "add"), ("trial", "remove")], "{body}");
}

/// A side whose requests were all unpriced has no cost (`null`, never `0`); a side with priced
/// and unpriced requests reports the priced requests' cost with the unpriced count beside it.
#[sqlx::test(migrations = "../migrations")]
async fn a_side_whose_requests_were_all_unpriced_reports_no_cost(pool: PgPool) {
    let f = fleet(pool.clone(), "mock://sim", json!({})).await;
    let report = f
        .app
        .get(&format!("/api/v1/shadows/{}/report", f.shadow))
        .await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.text);
    // No request at all: nothing was spent.
    assert_eq!(
        report.body["shadow_side"]["cost_usd"], "0",
        "{}",
        report.text
    );
    // Two pairs: one live request priced at 1.5 micro-USD and one unpriced; both shadow
    // requests unpriced.
    sqlx::query(
        "INSERT INTO shadow_minutes (bucket, shadow_id, pairs, live_ok, shadow_ok, \
         live_cost_pico_usd, live_unpriced, shadow_unpriced) \
         VALUES (date_trunc('minute', now()), $1, 2, 2, 2, 1500000, 1, 2)",
    )
    .bind(f.shadow)
    .execute(&pool)
    .await
    .unwrap();
    let report = f
        .app
        .get(&format!("/api/v1/shadows/{}/report", f.shadow))
        .await;
    assert_eq!(report.status, StatusCode::OK, "{}", report.text);
    let (live, shadow) = (&report.body["live"], &report.body["shadow_side"]);
    assert_eq!(shadow["unpriced_requests"], 2, "{}", report.text);
    assert_eq!(shadow["cost_usd"], Value::Null, "{}", report.text);
    assert_eq!(shadow["cost_per_1000_usd"], Value::Null, "{}", report.text);
    assert_eq!(live["unpriced_requests"], 1, "{}", report.text);
    assert_eq!(live["cost_usd"], "0.0000015", "{}", report.text);
    assert_eq!(live["cost_per_1000_usd"], "0.0015", "{}", report.text);
}

/// A shadow rule cannot be given an expiry in the past, on create or patch; a rule whose stored
/// expiry has passed stays, reported as expired, and can still be changed otherwise.
#[sqlx::test(migrations = "../migrations")]
async fn a_shadow_rule_cannot_be_given_a_past_expiry(pool: PgPool) {
    let f = fleet(pool.clone(), "mock://sim", json!({})).await;
    let r = f
        .app
        .post(
            "/api/v1/shadows",
            json!({"name": "t2", "model_pattern": "m", "target_channel_id": f.cand_channel,
                   "target_model": "x", "sample_percent": 10, "max_rps": 5,
                   "expires_at": "2000-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.param(), Some("expires_at"), "{}", r.text);
    assert!(r.text.contains("must be in the future"), "{}", r.text);
    let path = format!("/api/v1/shadows/{}", f.shadow);
    let r = f
        .app
        .patch(&path, json!({"expires_at": "2000-01-01T00:00:00Z"}))
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.param(), Some("expires_at"), "{}", r.text);
    assert_eq!(f.app.get(&path).await.body["expires_at"], Value::Null);

    sqlx::query("UPDATE shadows SET expires_at = '2000-01-01T00:00:00Z' WHERE id = $1")
        .bind(f.shadow)
        .execute(&pool)
        .await
        .unwrap();
    let r = f.app.patch(&path, json!({"max_rps": 7})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["max_rps"], 7);
    assert!(r.body["expires_at"].is_string(), "{}", r.text);
}
