//! `POST /api/v1/dry-run` against real Postgres: each kind of change reports what it would move,
//! and afterwards nothing has changed (tables, revision, audit log).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::http::StatusCode;
use common::{test_app, TestApp};
use serde_json::{json, Value};
use sqlx::PgPool;

async fn live_channel(app: &TestApp, name: &str) -> i64 {
    let id = app.channel(name).await;
    app.create(
        &format!("/api/v1/channels/{id}/credentials"),
        json!({"secret": "sk-test-0123456789abcdef"}),
    )
    .await;
    id
}

/// Everything a dry run must leave as it was: revision, audit rows, and every routing table.
async fn fingerprint(app: &TestApp) -> (i64, i64, String) {
    let tables: String = sqlx::query_scalar(
        "SELECT concat_ws('|', \
           (SELECT string_agg(concat_ws(',', id, name, status, max_concurrency), ';' ORDER BY id) FROM channels), \
           (SELECT string_agg(concat_ws(',', id, channel_id, enabled), ';' ORDER BY id) FROM credentials), \
           (SELECT string_agg(concat_ws(',', id, model_pattern, enabled, routing_mode), ';' ORDER BY id) FROM routes), \
           (SELECT string_agg(concat_ws(',', id, route_id, channel_id, group_name, priority, weight, enabled), ';' ORDER BY id) FROM route_members), \
           (SELECT string_agg(concat_ws(',', id, name, route_group_name, team_id, enabled, expires_at), ';' ORDER BY id) FROM tokens), \
           (SELECT string_agg(concat_ws(',', id, channel_id, model_pattern, input_per_million, output_per_million, cached_input_per_million), ';' ORDER BY id) FROM prices), \
           (SELECT string_agg(concat_ws(',', id, scope, scope_id, metric, period, value, mode), ';' ORDER BY id) FROM limits), \
           (SELECT string_agg(concat_ws(',', id, name), ';' ORDER BY id) FROM teams), \
           (SELECT string_agg(concat_ws(',', team_id, member_id), ';') FROM team_members), \
           (SELECT value::text FROM settings), \
           (SELECT count(*)::text FROM channel_status_events))",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    (app.revision().await, app.audit_rows().await, tables)
}

/// Runs a dry run, asserts 200 and that nothing changed, returns the report.
async fn dry_run(app: &TestApp, changes: Value) -> Value {
    let before = fingerprint(app).await;
    let reply = app
        .post("/api/v1/dry-run", json!({ "changes": changes }))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        fingerprint(app).await,
        before,
        "a dry run changed something"
    );
    reply.body
}

fn affected<'a>(report: &'a Value, model: &str, group: &str) -> &'a Value {
    report["affected"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["model"] == model && a["group"] == group && a["team_id"].is_null())
        .unwrap_or_else(|| panic!("({model}, {group}) not affected: {report}"))
}

fn member_move(entry: &Value, member: i64) -> &Value {
    entry["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["member_id"] == member)
        .unwrap_or_else(|| panic!("member {member} not in {entry}"))
}

/// Whether any affected selection has `field` equal to `value`.
fn lists(report: &Value, field: &str, value: &str) -> bool {
    report["affected"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a[field] == value)
}

/// The ids of the members reported unreachable.
fn unreachable(report: &Value) -> Vec<i64> {
    report["unreachable_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["member_id"].as_i64().unwrap())
        .collect()
}

fn close(value: &Value, expected: f64) -> bool {
    value.as_f64().is_some_and(|v| (v - expected).abs() < 1e-9)
}

/// A route `m` with two members of weight 1 on one live channel.
async fn two_members(app: &TestApp) -> (i64, i64, i64, i64) {
    let ch = live_channel(app, "c").await;
    let route = app.route("m").await;
    let a = app
        .member(route, json!({"channel_id": ch, "upstream_model": "a"}))
        .await;
    let b = app
        .member(route, json!({"channel_id": ch, "upstream_model": "b"}))
        .await;
    (ch, route, a, b)
}

#[sqlx::test(migrations = "../migrations")]
async fn a_weight_patch_moves_probabilities_and_changes_nothing(pool: PgPool) {
    let app = test_app(pool);
    let (_, _, a, b) = two_members(&app).await;
    let report = dry_run(
        &app,
        json!([{"op": "patch", "resource": "member", "id": a, "body": {"weight": 3}}]),
    )
    .await;
    assert_eq!(report["results"][0]["status"], 200, "{report}");
    let entry = affected(&report, "m", "default");
    assert!(close(&member_move(entry, a)["before"], 0.5), "{entry}");
    assert!(close(&member_move(entry, a)["after"], 0.75), "{entry}");
    assert!(close(&member_move(entry, b)["after"], 0.25), "{entry}");
    assert_eq!(report["newly_failing"], json!([]));
    assert_eq!(report["unreachable_members"], json!([]));
    // The real write afterwards still works and is the first to bump the revision.
    let revision = app.revision().await;
    let reply = app
        .patch(&format!("/api/v1/members/{a}"), json!({"weight": 3}))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.revision(), Some(revision + 1));
}

#[sqlx::test(migrations = "../migrations")]
async fn disabling_the_only_channel_makes_requests_fail(pool: PgPool) {
    let app = test_app(pool);
    let (ch, _, a, b) = two_members(&app).await;
    let report = dry_run(
        &app,
        json!([{"op": "patch", "resource": "channel", "id": ch, "body": {"status": "disabled"}}]),
    )
    .await;
    let entry = affected(&report, "m", "default");
    assert_eq!(entry["outcome_before"], "selected");
    assert_eq!(entry["outcome_after"], "no_eligible_member");
    assert_eq!(entry["newly_failing"], true);
    assert_eq!(
        member_move(entry, a)["reasons_after"],
        json!(["channel_disabled"])
    );
    assert_eq!(unreachable(&report), vec![a, b]);
    assert!(report["newly_failing"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["model"] == "m" && f["outcome"] == "no_eligible_member"));
}

#[sqlx::test(migrations = "../migrations")]
async fn deleting_a_route_unresolves_and_a_wildcard_reroutes(pool: PgPool) {
    let app = test_app(pool);
    let ch = live_channel(&app, "c").await;
    let exact = app.route("gpt-4o").await;
    app.member(exact, json!({"channel_id": ch, "upstream_model": "x"}))
        .await;
    let report = dry_run(
        &app,
        json!([{"op": "delete", "resource": "route", "id": exact}]),
    )
    .await;
    assert_eq!(report["results"][0]["status"], 204);
    assert_eq!(
        report["models_unresolved"],
        json!([{"model": "gpt-4o", "route_before": exact, "route_after": null}])
    );
    assert!(
        report["unreachable_members"][0]["deleted"] == true,
        "{report}"
    );

    // Deleting the exact route while a wildcard exists: the model moves to the wildcard.
    let wild = app.route("gpt-*").await;
    app.member(wild, json!({"channel_id": ch, "upstream_model": "y"}))
        .await;
    let report = dry_run(
        &app,
        json!([{"op": "delete", "resource": "route", "id": exact}]),
    )
    .await;
    assert_eq!(
        report["models_rerouted"],
        json!([{"model": "gpt-4o", "route_before": exact, "route_after": wild}])
    );
    assert_eq!(report["newly_failing"], json!([]));
}

#[sqlx::test(migrations = "../migrations")]
async fn creating_a_route_and_members_newly_resolves(pool: PgPool) {
    let app = test_app(pool);
    let ch = live_channel(&app, "c").await;
    let route = app.route("existing").await;
    let report = dry_run(
        &app,
        json!([
            {"op": "create", "resource": "route", "body": {"model_pattern": "new-model"}},
            {"op": "create", "resource": "member", "parent_id": route,
             "body": {"channel_id": ch, "upstream_model": "u", "group_name": "batch"}},
        ]),
    )
    .await;
    assert_eq!(report["results"][0]["status"], 201);
    let new_route = report["results"][0]["id"].as_i64().unwrap();
    assert!(report["models_rerouted"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["model"] == "new-model" && m["route_after"] == new_route));
    // The new member is the only one in its route: it gets all of `existing`'s traffic.
    let entry = affected(&report, "existing", "batch");
    assert_eq!(entry["outcome_before"], "no_eligible_member");
    assert_eq!(entry["outcome_after"], "selected");
    assert_eq!(entry["members"][0]["before"], Value::Null);
    assert!(close(&entry["members"][0]["after"], 1.0));
    // Nothing was created: the route does not exist.
    assert_eq!(
        app.get(&format!("/api/v1/routes/{new_route}")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn credential_changes_reach_eligibility(pool: PgPool) {
    let app = test_app(pool);
    let ch = app.channel("keyless").await;
    let route = app.route("m").await;
    let a = app
        .member(route, json!({"channel_id": ch, "upstream_model": "a"}))
        .await;
    let report = dry_run(
        &app,
        json!([{"op": "create", "resource": "credential", "parent_id": ch,
                "body": {"secret": "sk-new-0123456789abcdef"}}]),
    )
    .await;
    let entry = affected(&report, "m", "default");
    assert_eq!(
        member_move(entry, a)["reasons_before"],
        json!(["credential_unavailable"])
    );
    assert_eq!(member_move(entry, a)["reasons_after"], json!([]));
    // The secret never appears in the answer.
    assert!(!report.to_string().contains("sk-new-0123456789abcdef"));
}

#[sqlx::test(migrations = "../migrations")]
async fn team_and_token_changes_are_reported(pool: PgPool) {
    let app = test_app(pool);
    let (_, _, a, b) = two_members(&app).await;
    let team = app
        .create(
            "/api/v1/teams",
            json!({"name": "t", "models": ["m"], "members": [a, b]}),
        )
        .await;
    let token = app
        .create("/api/v1/tokens", json!({"name": "tok", "team_id": team}))
        .await;
    let report = dry_run(
        &app,
        json!([{"op": "patch", "resource": "team", "id": team, "body": {"members": [a]}}]),
    )
    .await;
    let entry = report["affected"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["team_id"] == team && e["group"] == "default")
        .unwrap_or_else(|| panic!("team selection not affected: {report}"));
    assert!(close(&member_move(entry, a)["after"], 1.0), "{entry}");
    assert!(member_move(entry, b)["after"].is_null(), "{entry}");

    let report = dry_run(
        &app,
        json!([{"op": "patch", "resource": "token", "id": token,
                "body": {"route_group_name": "batch", "team_id": null}}]),
    )
    .await;
    assert_eq!(
        report["tokens"],
        json!([{"token_id": token, "name": "tok",
                "before": {"group": "default", "team_id": team, "enabled": true, "expires_at": null},
                "after": {"group": "batch", "team_id": null, "enabled": true, "expires_at": null}}])
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn price_limit_and_expiry_changes_are_previewed_and_kept_from_the_tables(pool: PgPool) {
    let app = test_app(pool);
    let (channel, _, a, _) = two_members(&app).await;
    let token = app.create("/api/v1/tokens", json!({"name": "tok"})).await;
    let price = app
        .create(
            "/api/v1/prices",
            json!({"channel_id": channel, "model_pattern": "*", "input_per_million": 1,
                   "output_per_million": 2}),
        )
        .await;
    let limit = app
        .create(
            "/api/v1/limits",
            json!({"scope": "member", "scope_id": a, "metric": "requests", "window": "minute",
                   "value": 5}),
        )
        .await;
    let report = dry_run(
        &app,
        json!([
            {"op": "create", "resource": "price",
             "body": {"channel_id": channel, "model_pattern": "m-large", "input_per_million": 2.5,
                      "output_per_million": "10", "cached_input_per_million": 1.25}},
            {"op": "patch", "resource": "price", "id": price, "body": {"output_per_million": 3}},
            {"op": "create", "resource": "limit",
             "body": {"scope": "token", "scope_id": token, "metric": "spend", "window": "month",
                      "value": "50"}},
            {"op": "patch", "resource": "token", "id": token,
             "body": {"expires_at": "2030-01-01T00:00:00Z"}},
            // Deleting the member deletes its limit.
            {"op": "delete", "resource": "member", "id": a},
        ]),
    )
    .await;
    let statuses: Vec<i64> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_i64().unwrap())
        .collect();
    assert_eq!(statuses, [201, 200, 201, 200, 204]);
    let prices = report["prices"].as_array().unwrap();
    assert_eq!(prices.len(), 2, "{report}");
    assert_eq!(prices[0]["price_id"], price);
    assert_eq!(prices[0]["before"]["output_per_million"], "2");
    assert_eq!(prices[0]["after"]["output_per_million"], "3");
    assert_eq!(prices[1]["before"], Value::Null);
    assert_eq!(
        prices[1]["after"],
        json!({"channel_id": channel, "model_pattern": "m-large", "input_per_million": "2.5",
               "output_per_million": "10", "cached_input_per_million": "1.25"})
    );
    let limits = report["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 2, "{report}");
    assert_eq!(limits[0]["limit_id"], limit);
    assert_eq!(limits[0]["before"]["scope"], "member");
    assert_eq!(limits[0]["before"]["value"], 5);
    assert_eq!(limits[0]["after"], Value::Null);
    assert_eq!(
        limits[1]["after"],
        json!({"scope": "token", "scope_id": token, "metric": "spend", "window": "month",
               "value": "50", "mode": "hard"})
    );
    assert_eq!(
        report["tokens"][0]["after"]["expires_at"],
        "2030-01-01T00:00:00Z"
    );
    // An invalid limit names the change and the field.
    let reply = app
        .post(
            "/api/v1/dry-run",
            json!({"changes": [{"op": "create", "resource": "limit",
                                "body": {"scope": "token", "scope_id": token,
                                         "metric": "requests", "value": 1}}]}),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    assert_eq!(reply.param(), Some("changes[0].body.window"));
}

#[sqlx::test(migrations = "../migrations")]
async fn settings_changes_move_strategy(pool: PgPool) {
    let app = test_app(pool);
    let (_, route, a, _) = two_members(&app).await;
    app.patch(&format!("/api/v1/members/{a}"), json!({"weight": 0}))
        .await;
    app.patch(
        &format!("/api/v1/routes/{route}"),
        json!({"routing_mode": "auto"}),
    )
    .await;
    // In latency-aware mode a weight of 0 counts as 1: member a gets a chance again.
    let report = dry_run(
        &app,
        json!([{"op": "patch", "resource": "settings", "body": {"latency_aware_enabled": true}}]),
    )
    .await;
    let entry = affected(&report, "m", "default");
    assert!(close(&member_move(entry, a)["before"], 0.0), "{entry}");
    assert!(close(&member_move(entry, a)["after"], 0.5), "{entry}");
}

#[sqlx::test(migrations = "../migrations")]
async fn validation_errors_name_the_change_and_field(pool: PgPool) {
    let app = test_app(pool);
    let (_, _, a, _) = two_members(&app).await;
    let before = fingerprint(&app).await;
    let cases = [
        (
            json!([{"op": "patch", "resource": "member", "id": a, "body": {"weight": -1}}]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "changes[0].body.weight",
        ),
        (
            json!([
                {"op": "patch", "resource": "member", "id": a, "body": {"weight": 2}},
                {"op": "patch", "resource": "member", "id": a, "body": {"colour": "red"}},
            ]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "changes[1].body.colour",
        ),
        (
            json!([{"op": "patch", "resource": "member", "id": 999_999, "body": {"weight": 2}}]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "changes[0].id",
        ),
        (
            json!([{"op": "create", "resource": "member", "body": {"channel_id": 1, "upstream_model": "x"}}]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "changes[0].parent_id",
        ),
        (
            json!([{"op": "patch", "resource": "settings", "body": {"retry_times": 1000}}]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "changes[0].body.retry_times",
        ),
        (
            json!([{"op": "put", "resource": "route", "body": {}}]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "changes[0].op",
        ),
        (
            json!([{"op": "remove", "resource": "route", "id": 1}]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "changes[0].op",
        ),
    ];
    for (changes, status, param) in cases {
        let reply = app
            .post("/api/v1/dry-run", json!({ "changes": changes }))
            .await;
        assert_eq!(reply.status, status, "{changes}: {}", reply.text);
        assert_eq!(reply.param(), Some(param), "{changes}: {}", reply.text);
    }
    // A change that cannot be applied is a conflict naming the change.
    let reply = app
        .post(
            "/api/v1/dry-run",
            json!({"changes": [{"op": "delete", "resource": "channel", "id": 1}]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text);
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("changes[0]:"));
    assert_eq!(fingerprint(&app).await, before);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dry_run_takes_at_most_a_hundred_changes(pool: PgPool) {
    let app = test_app(pool);
    let change = json!({"op": "patch", "resource": "settings", "body": {"retry_times": 1}});
    let hundred = Value::Array(vec![change.clone(); 100]);
    let report = dry_run(&app, hundred).await;
    assert_eq!(report["results"].as_array().unwrap().len(), 100);
    let reply = app
        .post("/api/v1/dry-run", json!({ "changes": vec![change; 101] }))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    assert_eq!(reply.param(), Some("changes"));
    assert!(reply.text.contains("at most 100 changes"), "{}", reply.text);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_created_resource_reports_its_id_however_large_its_answer(pool: PgPool) {
    let app = test_app(pool);
    // A team whose model patterns fill the request body to just under its limit of 1 MiB: the
    // answer of its creation (the patterns and every other field) is larger still. (A channel's
    // retry patterns no longer can: they are bounded at 64 of 1 KiB.)
    let change = |models: Vec<String>| json!([{"op": "create", "resource": "team", "body": {"name": "big", "models": models}}]);
    let envelope = json!({ "changes": change(Vec::new()) }).to_string().len();
    let pattern = |i: usize| format!("model-{i:07}-{}", "p".repeat(180));
    let each = json!(pattern(0)).to_string().len() + 1;
    let count = (1024 * 1024 - envelope - 1) / each;
    let models: Vec<String> = (0..count).map(pattern).collect();
    assert!(
        json!({ "changes": change(models.clone()) })
            .to_string()
            .len()
            < 1024 * 1024
    );
    let report = dry_run(&app, change(models.clone())).await;
    let result = &report["results"][0];
    assert_eq!(result["status"], 201, "{result}");
    assert!(result["id"].as_i64().is_some_and(|id| id > 0), "{result}");
    // The premise: that creation's answer is over the body limit (made for real, as the dry run
    // made it in its rolled-back transaction).
    let created = app
        .post("/api/v1/teams", json!({"name": "big", "models": models}))
        .await;
    assert_eq!(created.status, 201);
    assert!(created.text.len() > 1024 * 1024, "{}", created.text.len());
}

#[sqlx::test(migrations = "../migrations")]
async fn each_route_group_is_compared_among_its_own_members(pool: PgPool) {
    let app = test_app(pool);
    let (ch, route, _, _) = two_members(&app).await;
    let vip = |model: &str| json!({"channel_id": ch, "upstream_model": model, "group_name": "vip"});
    let c = app.member(route, vip("c")).await;
    let d = app.member(route, vip("d")).await;
    let report = dry_run(
        &app,
        json!([{"op": "patch", "resource": "member", "id": c, "body": {"weight": 3}}]),
    )
    .await;
    let entry = affected(&report, "m", "vip");
    assert!(close(&member_move(entry, c)["before"], 0.5), "{entry}");
    assert!(close(&member_move(entry, c)["after"], 0.75), "{entry}");
    assert!(close(&member_move(entry, d)["after"], 0.25), "{entry}");
    // The default group's members never met c: nothing moved there.
    assert!(!lists(&report, "group", "default"), "{report}");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_member_moving_without_a_probability_change_is_reported(pool: PgPool) {
    let app = test_app(pool);
    let (ch, _, a, b) = two_members(&app).await;
    let other = live_channel(&app, "other").await;
    // Another channel or another upstream model at the same chance: requests go elsewhere.
    for body in [
        json!({"channel_id": other}),
        json!({"upstream_model": "a2"}),
    ] {
        let report = dry_run(
            &app,
            json!([{"op": "patch", "resource": "member", "id": a, "body": body}]),
        )
        .await;
        let entry = affected(&report, "m", "default");
        assert!(close(&member_move(entry, a)["before"], 0.5), "{entry}");
        assert!(close(&member_move(entry, a)["after"], 0.5), "{entry}");
    }
    // Only the reasons change: both members stay at no chance, now for one more reason.
    app.patch(
        &format!("/api/v1/channels/{ch}"),
        json!({"status": "disabled"}),
    )
    .await;
    let report = dry_run(
        &app,
        json!([{"op": "patch", "resource": "member", "id": b, "body": {"enabled": false}}]),
    )
    .await;
    let entry = affected(&report, "m", "default");
    assert_eq!(entry["outcome_before"], entry["outcome_after"]);
    let moved = member_move(entry, b);
    assert_ne!(moved["reasons_before"], moved["reasons_after"], "{entry}");
}

#[sqlx::test(migrations = "../migrations")]
async fn another_route_with_the_same_outcome_is_reported(pool: PgPool) {
    let app = test_app(pool);
    // Two routes without members: "m" exactly, and every model.
    let exact = app.route("m").await;
    let wildcard = app.route("*").await;
    let report = dry_run(
        &app,
        json!([{"op": "delete", "resource": "route", "id": exact}]),
    )
    .await;
    let entry = affected(&report, "m", "default");
    assert_eq!(entry["route_before"], exact);
    assert_eq!(entry["route_after"], wildcard);
    assert_eq!(entry["outcome_before"], "no_eligible_member");
    assert_eq!(entry["outcome_after"], "no_eligible_member");
    // The wildcard's own model resolves as before: not listed.
    assert!(!lists(&report, "model", "*"), "{report}");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_chance_of_one_in_a_billion_counts_as_none(pool: PgPool) {
    let app = test_app(pool);
    let (_, _, a, b) = two_members(&app).await;
    app.patch(&format!("/api/v1/members/{a}"), json!({"weight": 1}))
        .await;
    app.patch(
        &format!("/api/v1/members/{b}"),
        json!({"weight": 999_999_999}),
    )
    .await;
    let report = dry_run(
        &app,
        json!([{"op": "patch", "resource": "member", "id": a, "body": {"enabled": false}}]),
    )
    .await;
    let entry = affected(&report, "m", "default");
    assert_eq!(
        member_move(entry, a)["before"].as_f64(),
        Some(1e-9),
        "{entry}"
    );
    // Reachable means a chance above one in a billion: a had none before either.
    assert_eq!(report["unreachable_members"], json!([]), "{report}");
    // From two in a billion (and a bit) down to one: a loses its chance.
    app.patch(&format!("/api/v1/members/{a}"), json!({"weight": 2}))
        .await;
    let report = dry_run(
        &app,
        json!([{"op": "patch", "resource": "member", "id": a, "body": {"weight": 1}}]),
    )
    .await;
    // (A move of less than one in a billion: no affected selection is listed for it.)
    assert_eq!(report["affected"], json!([]), "{report}");
    assert_eq!(unreachable(&report), vec![a]);
}

#[sqlx::test(migrations = "../migrations")]
async fn more_selections_than_the_limit_are_compared_up_to_it_and_say_so(pool: PgPool) {
    let app = test_app(pool);
    two_members(&app).await;
    let change = json!([{"op": "patch", "resource": "settings", "body": {"retry_times": 1}}]);
    // One model and one group: a selection per team, and one without a team. 4 999 teams make
    // exactly the limit of 5 000.
    sqlx::query("INSERT INTO teams (name) SELECT 'team-' || g FROM generate_series(1, 4999) g")
        .execute(&app.pool)
        .await
        .unwrap();
    let report = dry_run(&app, change.clone()).await;
    assert_eq!(report["truncated"], false, "{}", report["truncated"]);
    sqlx::query("INSERT INTO teams (name) VALUES ('one-more')")
        .execute(&app.pool)
        .await
        .unwrap();
    let report = dry_run(&app, change).await;
    assert_eq!(report["truncated"], true, "{}", report["truncated"]);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dry_run_needs_the_admin_token(pool: PgPool) {
    let app = test_app(pool);
    let reply = app
        .send(
            axum::http::Method::POST,
            "/api/v1/dry-run",
            Some(json!({"changes": []})),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
}
