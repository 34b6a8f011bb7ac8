//! Explain end to end: REST writes → compiled snapshot → the engine's decision, serialised.
// Helpers outside #[test] fns are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::StatusCode;
use common::{test_app, TestApp};
use serde_json::{json, Value};
use sqlx::PgPool;

/// A channel with one enabled credential (a channel without one is `credential_unavailable`).
async fn live_channel(app: &TestApp, name: &str) -> i64 {
    let id = app.channel(name).await;
    app.create(
        &format!("/api/v1/channels/{id}/credentials"),
        json!({"secret": "sk-test-0123456789abcdef"}),
    )
    .await;
    id
}

async fn explain(app: &TestApp, query: &str) -> (StatusCode, Value) {
    app.refresh().await;
    let reply = app.get(&format!("/api/v1/routes/explain?{query}")).await;
    (reply.status, reply.body)
}

fn candidate(body: &Value, member: i64) -> &Value {
    body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["member_id"] == member)
        .unwrap_or_else(|| panic!("member {member} not among candidates: {body}"))
}

#[sqlx::test(migrations = "../migrations")]
async fn exact_pattern_beats_wildcard_and_longest_wildcard_wins(pool: PgPool) {
    let app = test_app(pool);
    let ch = live_channel(&app, "c").await;
    for pattern in ["gpt-4o", "gpt-*", "gpt-4*"] {
        let route = app.route(pattern).await;
        app.member(route, json!({"channel_id": ch, "upstream_model": pattern}))
            .await;
    }
    let (status, body) = explain(&app, "model=gpt-4o").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["route"]["model_pattern"], "gpt-4o");
    assert_eq!(body["outcome"], "selected");
    let (_, body) = explain(&app, "model=gpt-4-turbo").await;
    assert_eq!(body["route"]["model_pattern"], "gpt-4*");
    let (_, body) = explain(&app, "model=gpt-3.5").await;
    assert_eq!(body["route"]["model_pattern"], "gpt-*");
}

#[sqlx::test(migrations = "../migrations")]
async fn group_selection_and_fallback(pool: PgPool) {
    let app = test_app(pool);
    let ch = live_channel(&app, "c").await;
    let route = app.route("m").await;
    let default = app
        .member(route, json!({"channel_id": ch, "upstream_model": "a"}))
        .await;
    let batch = app
        .member(
            route,
            json!({"channel_id": ch, "upstream_model": "b", "group_name": "batch"}),
        )
        .await;

    let (_, body) = explain(&app, "model=m&route_group=batch").await;
    assert_eq!(body["requested_group"], "batch");
    assert_eq!(body["route_group"], "batch");
    assert_eq!(body["group_fallback"], false);
    assert_eq!(body["member_id"], batch);
    assert_eq!(body["candidates"].as_array().unwrap().len(), 1);

    let (_, body) = explain(&app, "model=m&route_group=nightly").await;
    assert_eq!(body["requested_group"], "nightly");
    assert_eq!(body["route_group"], "default");
    assert_eq!(body["group_fallback"], true);
    assert_eq!(body["member_id"], default);

    let (_, body) = explain(&app, "model=m").await;
    assert_eq!(body["requested_group"], "default");
    assert_eq!(body["group_fallback"], false);
}

#[sqlx::test(migrations = "../migrations")]
async fn reasons_tiers_and_probabilities(pool: PgPool) {
    let app = test_app(pool);
    let live = live_channel(&app, "live").await;
    let off = live_channel(&app, "off").await;
    app.patch(
        &format!("/api/v1/channels/{off}"),
        json!({"status": "disabled"}),
    )
    .await;
    let keyless = app.channel("keyless").await;
    let route = app.route("m").await;
    let top_a = app
        .member(
            route,
            json!({"channel_id": live, "upstream_model": "a", "priority": 10, "weight": 3}),
        )
        .await;
    let top_b = app
        .member(
            route,
            json!({"channel_id": live, "upstream_model": "b", "priority": 10, "weight": 1}),
        )
        .await;
    let disabled = app
        .member(
            route,
            json!({"channel_id": live, "upstream_model": "c", "priority": 10, "enabled": false}),
        )
        .await;
    let on_off_channel = app
        .member(
            route,
            json!({"channel_id": off, "upstream_model": "d", "priority": 10}),
        )
        .await;
    let no_key = app
        .member(
            route,
            json!({"channel_id": keyless, "upstream_model": "e", "priority": 10}),
        )
        .await;
    let lower = app
        .member(
            route,
            json!({"channel_id": live, "upstream_model": "f", "priority": 0}),
        )
        .await;

    let (status, body) = explain(&app, "model=m&seed=7").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["tier"], 10);
    assert_eq!(
        candidate(&body, disabled)["reasons"],
        json!(["member_disabled"])
    );
    assert_eq!(
        candidate(&body, on_off_channel)["reasons"],
        json!(["channel_disabled"])
    );
    assert_eq!(
        candidate(&body, no_key)["reasons"],
        json!(["credential_unavailable"])
    );
    assert_eq!(candidate(&body, top_a)["eligible"], true);
    assert_eq!(candidate(&body, top_a)["channel"], "live");
    let pa = candidate(&body, top_a)["probability"].as_f64().unwrap();
    let pb = candidate(&body, top_b)["probability"].as_f64().unwrap();
    assert!(
        (pa - 0.75).abs() < 1e-9 && (pb - 0.25).abs() < 1e-9,
        "{pa} {pb}"
    );
    assert_eq!(
        candidate(&body, lower)["probability"],
        0.0,
        "lower tiers are never mixed in"
    );
    assert_eq!(body["seed"], 7);
    assert_eq!(body["health_view"], "none");
    assert!(body["revision"].as_u64().unwrap() > 1);
    // Secrets never appear in explain output.
    assert!(!body.to_string().contains("sk-test-0123456789abcdef"));

    // The same seed reproduces the decision, through the console alias too.
    let again = app.get("/console/routes/explain?model=m&seed=7").await;
    assert_eq!(again.body["member_id"], body["member_id"]);
}

#[sqlx::test(migrations = "../migrations")]
async fn missing_model_is_400_and_unknown_model_404(pool: PgPool) {
    let app = test_app(pool);
    let (status, body) = explain(&app, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["param"], "model");
    let (status, body) = explain(&app, "model=%20").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = explain(&app, "model=nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "model_not_found");

    // A disabled route does not match.
    let route = app.route("nope").await;
    app.patch(
        &format!("/api/v1/routes/{route}"),
        json!({"enabled": false}),
    )
    .await;
    let (status, _) = explain(&app, "model=nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrations = "../migrations")]
async fn explain_changes_nothing(pool: PgPool) {
    let app = test_app(pool);
    let ch = live_channel(&app, "c").await;
    let route = app.route("m").await;
    app.member(route, json!({"channel_id": ch, "upstream_model": "a"}))
        .await;
    app.refresh().await;

    async fn fingerprint(app: &TestApp) -> Value {
        let row: (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT revision FROM snapshot_revision), (SELECT count(*) FROM audit_log), \
                    (SELECT count(*) FROM channel_status_events), \
                    (SELECT count(*) FROM route_members)",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap();
        // Every row of every table the explain could conceivably touch.
        let tables: String = sqlx::query_scalar(
            "SELECT concat_ws('|', \
               (SELECT json_agg(c ORDER BY id)::text FROM channels c), \
               (SELECT json_agg(r ORDER BY id)::text FROM routes r), \
               (SELECT json_agg(m ORDER BY id)::text FROM route_members m), \
               (SELECT json_agg(k ORDER BY id)::text FROM credentials k), \
               (SELECT value::text FROM settings))",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap();
        json!({"row": [row.0, row.1, row.2, row.3], "tables": tables,
               "published": app.publisher.current_revision()})
    }

    let before = fingerprint(&app).await;
    for query in [
        "model=m",
        "model=m&route_group=x&session=abc",
        "model=unknown",
        "",
    ] {
        app.get(&format!("/api/v1/routes/explain?{query}")).await;
        app.get(&format!("/console/routes/explain?{query}")).await;
    }
    assert_eq!(fingerprint(&app).await, before);
}

/// Explain with a token: its group and team apply, its limits are listed with their state in
/// the store, and members without room under channel or member limits are `rate_limited`,
/// as the proxy's selection makes them.
#[sqlx::test(migrations = "../migrations")]
async fn a_token_shows_its_limits_and_upstream_limits_rate_limit_members(pool: PgPool) {
    use std::sync::Arc;
    use switchyard_control_plane::live::LiveState;
    use switchyard_engine::limit::ScopeKind;
    use switchyard_state::{InMemoryStore, LimitRequest, StateStore};

    common::clear_of_a_window_end(std::time::Duration::from_secs(5)).await;

    let store = Arc::new(InMemoryStore::new());
    let live = LiveState::from_store(Arc::clone(&store) as Arc<dyn StateStore>);
    let app = common::test_app_with_live(pool, live);
    let busy = live_channel(&app, "busy").await;
    let calm = live_channel(&app, "calm").await;
    let route = app.route("m").await;
    let on_busy = app
        .member(route, json!({"channel_id": busy, "upstream_model": "a"}))
        .await;
    let on_calm = app
        .member(route, json!({"channel_id": calm, "upstream_model": "b"}))
        .await;
    let team = app
        .create(
            "/api/v1/teams",
            json!({"name": "research", "models": ["m"]}),
        )
        .await;
    let token = app
        .create("/api/v1/tokens", json!({"name": "app", "team_id": team}))
        .await;
    // A token is never given a past expiry; its stored one passes.
    sqlx::query("UPDATE tokens SET expires_at = '2000-01-01T00:00:00Z' WHERE id = $1")
        .bind(token)
        .execute(&app.pool)
        .await
        .unwrap();
    let per_minute = app
        .create(
            "/api/v1/limits",
            json!({"scope": "token", "scope_id": token, "metric": "requests",
                   "window": "minute", "value": 2}),
        )
        .await;
    let budget = app
        .create(
            "/api/v1/limits",
            json!({"scope": "team", "scope_id": team, "metric": "spend", "window": "month",
                   "value": "5", "mode": "soft"}),
        )
        .await;
    let on_route = app
        .create(
            "/api/v1/limits",
            json!({"scope": "route", "scope_id": route, "metric": "concurrent", "value": 10}),
        )
        .await;
    app.create(
        "/api/v1/limits",
        json!({"scope": "channel", "scope_id": busy, "metric": "requests", "window": "day",
               "value": 1}),
    )
    .await;
    // Another token's limit is not listed.
    let other = app.create("/api/v1/tokens", json!({"name": "other"})).await;
    app.create(
        "/api/v1/limits",
        json!({"scope": "token", "scope_id": other, "metric": "requests", "window": "day",
               "value": 7}),
    )
    .await;
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;

    // Nothing taken yet: every member eligible, no limit refuses.
    let (status, body) = explain(&app, &format!("model=m&seed=1&token={token}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(candidate(&body, on_busy)["eligible"], true, "{body}");
    assert_eq!(body["token"]["name"], "app");
    assert_eq!(body["token"]["team_id"], team);
    assert_eq!(body["token"]["expired"], true);
    assert_eq!(body["token"]["expires_at"], "2000-01-01T00:00:00Z");
    let limits = body["limits"].as_array().unwrap();
    let ids: Vec<i64> = limits
        .iter()
        .map(|l| l["limit_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [per_minute, budget, on_route]);
    assert_eq!(limits[0]["used"], 0);
    assert_eq!(limits[0]["remaining"], 2);
    assert_eq!(limits[0]["would_refuse"], false);
    assert!(limits[0]["reset_at"].is_string());
    assert_eq!(limits[1]["value"], "5");
    assert_eq!(limits[1]["remaining"], "5");
    assert_eq!(
        limits[2]["reset_at"],
        Value::Null,
        "concurrency has no window"
    );

    // The proxies' counting (here: the same store) fills the token's and the channel's limits.
    let token_limits = snapshot.limits_of(ScopeKind::Token, token);
    for _ in 0..2 {
        let taken = store.limit_take(
            &LimitRequest {
                limits: token_limits,
                tokens: 0,
            },
            now,
        );
        assert!(taken.admitted());
    }
    let channel_limits = snapshot.limits_of(ScopeKind::Channel, busy);
    assert!(store
        .limit_take(
            &LimitRequest {
                limits: channel_limits,
                tokens: 0,
            },
            now,
        )
        .admitted());
    let (status, body) = explain(&app, "model=m&seed=1&token=app").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        candidate(&body, on_busy)["reasons"],
        json!(["rate_limited"]),
        "{body}"
    );
    assert_eq!(candidate(&body, on_calm)["eligible"], true);
    assert_eq!(body["member_id"], on_calm);
    assert_eq!(body["limits"][0]["used"], 2);
    assert_eq!(body["limits"][0]["remaining"], 0);
    assert_eq!(body["limits"][0]["would_refuse"], true);
    // A soft limit never refuses.
    assert_eq!(body["limits"][1]["would_refuse"], false);

    // Without a token: members still rate-limited, no limits listed.
    let (_, body) = explain(&app, "model=m&seed=1").await;
    assert_eq!(
        candidate(&body, on_busy)["reasons"],
        json!(["rate_limited"])
    );
    assert!(body.get("limits").is_none() && body.get("token").is_none());
    // The explain response with a token matches its documented schema.
    let (_, body) = explain(&app, &format!("model=m&token={token}")).await;
    let _: switchyard_control_plane::api::schema::ExplainResponse =
        serde_json::from_value(body.clone()).unwrap_or_else(|e| panic!("{e}: {body}"));

    // An unknown token is a 400 naming it.
    let reply = app.get("/api/v1/routes/explain?model=m&token=nobody").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    assert_eq!(reply.param(), Some("token"));
}

/// Without shared state no member is rate-limited and a token's limits show no figures.
#[sqlx::test(migrations = "../migrations")]
async fn without_shared_state_limits_have_no_figures(pool: PgPool) {
    let app = test_app(pool);
    let channel = live_channel(&app, "c").await;
    let route = app.route("m").await;
    let member = app
        .member(route, json!({"channel_id": channel, "upstream_model": "a"}))
        .await;
    let token = app.create("/api/v1/tokens", json!({"name": "t"})).await;
    app.create(
        "/api/v1/limits",
        json!({"scope": "member", "scope_id": member, "metric": "requests", "window": "minute",
               "value": 1}),
    )
    .await;
    app.create(
        "/api/v1/limits",
        json!({"scope": "token", "scope_id": token, "metric": "tokens", "window": "hour",
               "value": 1000}),
    )
    .await;
    let (status, body) = explain(&app, &format!("model=m&token={token}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(candidate(&body, member)["eligible"], true);
    let limit = &body["limits"][0];
    assert_eq!(limit["value"], 1000);
    assert_eq!(limit["used"], Value::Null);
    assert_eq!(limit["would_refuse"], Value::Null);
    assert_eq!(body["token"]["expired"], false);
}

/// With Redis, explain reads the fleet's counters (what the proxies claimed), not the control
/// plane's own limiter, and reading them claims nothing: a proxy (here a store on the same
/// prefix) that used up a token's limit and a channel's quota makes the limit refuse and the
/// member `rate_limited` in explain, and the counters do not move for being read.
#[sqlx::test(migrations = "../migrations")]
async fn with_redis_explain_reads_the_fleets_counters(pool: PgPool) {
    use std::time::Duration;
    use switchyard_control_plane::live::LiveState;
    use switchyard_engine::limit::ScopeKind;
    use switchyard_state::{LimitRequest, RedisConfig, RedisStore, StateStore};

    common::clear_of_a_window_end(Duration::from_secs(15)).await;

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!(
        "explain-limits-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let live = LiveState::start_redis(&url, &prefix).unwrap();
    assert!(live.wait_synced(Duration::from_secs(10)).await);
    let app = common::test_app_with_live(pool, live);
    let busy = live_channel(&app, "busy").await;
    let calm = live_channel(&app, "calm").await;
    let route = app.route("m").await;
    let on_busy = app
        .member(route, json!({"channel_id": busy, "upstream_model": "a"}))
        .await;
    app.member(route, json!({"channel_id": calm, "upstream_model": "b"}))
        .await;
    let token = app.create("/api/v1/tokens", json!({"name": "app"})).await;
    app.create(
        "/api/v1/limits",
        json!({"scope": "token", "scope_id": token, "metric": "requests",
               "window": "minute", "value": 2}),
    )
    .await;
    app.create(
        "/api/v1/limits",
        json!({"scope": "channel", "scope_id": busy, "metric": "requests", "window": "day",
               "value": 1}),
    )
    .await;
    app.refresh().await;
    let snapshot = app.publisher.current().unwrap().snapshot.clone();

    let (_, body) = explain(&app, &format!("model=m&seed=1&token={token}")).await;
    assert_eq!(candidate(&body, on_busy)["eligible"], true, "{body}");
    assert_eq!(body["limits"][0]["used"], 0);
    assert_eq!(body["limits"][0]["would_refuse"], false);

    // A proxy of the fleet uses both up.
    let proxy = RedisStore::start(RedisConfig::new(url.as_str(), prefix.as_str())).unwrap();
    assert!(proxy.wait_resynced(1, Duration::from_secs(10)).await);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    for limits in [
        snapshot.limits_of(ScopeKind::Token, token),
        snapshot.limits_of(ScopeKind::Token, token),
        snapshot.limits_of(ScopeKind::Channel, busy),
    ] {
        let request = LimitRequest { limits, tokens: 0 };
        if !proxy.limit_take(&request, now).admitted() {
            assert!(proxy.wait_limits_settled(Duration::from_secs(10)).await);
            assert!(proxy.limit_take(&request, now).admitted());
        }
    }
    assert!(proxy.wait_limits_settled(Duration::from_secs(10)).await);
    let (_, body) = explain(&app, &format!("model=m&seed=1&token={token}")).await;
    assert_eq!(
        candidate(&body, on_busy)["reasons"],
        json!(["rate_limited"]),
        "{body}"
    );
    assert_eq!(body["limits"][0]["used"], 2, "{body}");
    assert_eq!(body["limits"][0]["remaining"], 0);
    assert_eq!(body["limits"][0]["would_refuse"], true);
    // Reading claimed nothing: the proxy's view of the fleet is unchanged, and so is explain's.
    let (_, again) = explain(&app, &format!("model=m&seed=1&token={token}")).await;
    assert_eq!(again["limits"], body["limits"]);
    proxy.close(Duration::from_secs(5)).await;
}

/// With `tags` and `end_user`, a token's listed limits include those of its tags and its end
/// user, with the figures of the counters the proxies count them on (an each-end-user limit:
/// the end user's own); a tag or end user no limit names adds nothing, and both need `token`.
#[sqlx::test(migrations = "../migrations")]
async fn a_tokens_request_lists_its_tags_and_end_users_limits(pool: PgPool) {
    use std::sync::Arc;
    use switchyard_control_plane::live::LiveState;
    use switchyard_engine::subject::end_user_counter;
    use switchyard_state::{InMemoryStore, LimitRequest, StateStore};

    common::clear_of_a_window_end(std::time::Duration::from_secs(5)).await;
    let store = Arc::new(InMemoryStore::new());
    let live = LiveState::from_store(Arc::clone(&store) as Arc<dyn StateStore>);
    let app = common::test_app_with_live(pool, live);
    let channel = live_channel(&app, "c").await;
    let route = app.route("m").await;
    app.member(route, json!({"channel_id": channel, "upstream_model": "a"}))
        .await;
    app.create("/api/v1/tokens", json!({"name": "app"})).await;
    let limit = |body: Value| {
        let app = &app;
        async move { app.create("/api/v1/limits", body).await }
    };
    let acme = limit(json!({"scope": "tag", "tag": "acme", "metric": "requests",
                            "window": "minute", "value": 5}))
    .await;
    limit(
        json!({"scope": "tag", "tag": "beta", "metric": "requests", "window": "minute",
                 "value": 6}),
    )
    .await;
    let alice = limit(
        json!({"scope": "end_user", "end_user": "alice", "metric": "requests",
                             "window": "minute", "value": 7}),
    )
    .await;
    let each = limit(
        json!({"scope": "end_user", "metric": "requests", "window": "minute",
                            "value": 3}),
    )
    .await;

    // Without them, the token's request is under none of these.
    let (status, body) = explain(&app, "model=m&token=app").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["limits"], json!([]), "{body}");

    // Alice's requests fill her own counter of the each-end-user limit.
    let snapshot = app.publisher.current().unwrap().snapshot.clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let who = snapshot.subject_limits().attribution(&[], Some("alice"));
    let hers: Vec<_> = snapshot
        .subject_limits()
        .of(who, Some("m"), Some(route))
        .collect();
    for _ in 0..2 {
        let taken = store.limit_take(
            &LimitRequest {
                limits: &hers,
                tokens: 0,
            },
            now,
        );
        assert!(taken.admitted());
    }

    let (status, body) = explain(
        &app,
        "model=m&token=app&tags=acme,,unlimited,acme&end_user=alice",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let limits = body["limits"].as_array().unwrap();
    let ids: Vec<i64> = limits
        .iter()
        .map(|l| l["limit_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [acme, alice, each], "{body}");
    assert_eq!(limits[0]["why"], "the limit of its tag \"acme\"");
    assert_eq!(limits[0]["used"], 0);
    assert_eq!(limits[1]["why"], "its end user's limit");
    assert_eq!(
        limits[1]["used"], 2,
        "alice's named limit counted her two: {body}"
    );
    assert_eq!(limits[2]["scope"], "end_user");
    assert_eq!(limits[2]["scope_id"], end_user_counter("alice"));
    assert_eq!(limits[2]["used"], 2);
    assert_eq!(limits[2]["remaining"], 1);
    assert_eq!(limits[2]["would_refuse"], false);

    // Another end user has a counter of their own.
    let (_, body) = explain(&app, "model=m&token=app&end_user=bob").await;
    let limits = body["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 1, "{body}");
    assert_eq!(limits[0]["limit_id"], each);
    assert_eq!(limits[0]["scope_id"], end_user_counter("bob"));
    assert_eq!(limits[0]["used"], 0);

    for (query, param) in [
        ("model=m&tags=acme", "tags"),
        ("model=m&end_user=alice", "end_user"),
        ("model=m&token=app&tags=a%20b", "tags"),
    ] {
        let reply = app.get(&format!("/api/v1/routes/explain?{query}")).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{query}: {}",
            reply.text
        );
        assert_eq!(reply.param(), Some(param), "{query}");
    }
}
