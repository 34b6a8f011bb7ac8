//! Team admins against real Postgres: admin tokens limited to one team. Every route of the
//! router is checked against [`MATRIX`], written here by hand for five callers (fleet viewer,
//! operator and admin; team viewer and admin), never read from the server's tables; a team admin
//! manages its own team's tokens, limits, budgets and cache rules (the effect visible), reads
//! only its team's usage, request log and audit rows, gets 404 for every other team's resource
//! and 403 for every write that would reach outside its team; the audit log names the token and
//! its team; deleting a team removes its admin tokens.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;

use axum::http::StatusCode;
use serde_json::{json, Value};
use sqlx::PgPool;

use common::admin::{as_token, concrete, new_team_token, new_token, operations};
use common::{test_app, Reply, TestApp};

/// What one caller gets from one route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    /// Authorized: the handler runs (its answer depends on the ids and body, never 401 or 403).
    A,
    /// 403 `insufficient_role`: the token's role is below the route's.
    R,
    /// 403 `outside_team`: the token administers one team and the route is the fleet's.
    T,
}

use Cell::{A, R, T};

/// The callers, in the matrix's column order.
const CALLERS: [(&str, &str, bool); 5] = [
    ("fleet-viewer", "viewer", false),
    ("fleet-operator", "operator", false),
    ("fleet-admin", "admin", false),
    ("team-viewer", "viewer", true),
    ("team-admin", "admin", true),
];

// The rows' kinds, by the documented policy. Columns: fleet viewer, fleet operator, fleet admin,
// team viewer, team admin.
/// Says nothing of any team: everyone.
const OPEN: [Cell; 5] = [A, A, A, A, A];
/// A read of the fleet's (channels, routes, settings...): every fleet role, no team admin.
const FLEET_READ: [Cell; 5] = [A, A, A, T, T];
/// What only computes an answer (dry run, trial, plan): operator and up, fleet only.
const FLEET_OPERATE: [Cell; 5] = [R, A, A, R, T];
/// A write of the fleet's, or anything about admin tokens: fleet admin only.
const FLEET_WRITE: [Cell; 5] = [R, R, A, R, T];
/// A read of what a team owns (its tokens, limits, cache rules, itself) or a report filtered to
/// the team (usage, requests, budgets, audit): everyone, a team admin seeing its own only.
const OWN_READ: [Cell; 5] = [A, A, A, A, A];
/// A write of what a team owns: fleet admin and team admin.
const OWN_WRITE: [Cell; 5] = [R, R, A, R, A];

/// Every (method, route template) of the admin API and what each caller gets, by hand.
const MATRIX: &[(&str, &str, [Cell; 5])] = &[
    ("GET", "/api/v1/whoami", OPEN),
    ("GET", "/api/v1/openapi.json", OPEN),
    ("GET", "/api/v1/admin-tokens", FLEET_WRITE),
    ("POST", "/api/v1/admin-tokens", FLEET_WRITE),
    ("GET", "/api/v1/admin-tokens/{id}", FLEET_WRITE),
    ("DELETE", "/api/v1/admin-tokens/{id}", FLEET_WRITE),
    ("GET", "/api/v1/channels", FLEET_READ),
    ("POST", "/api/v1/channels", FLEET_WRITE),
    ("GET", "/api/v1/channels/{id}", FLEET_READ),
    ("PATCH", "/api/v1/channels/{id}", FLEET_WRITE),
    ("DELETE", "/api/v1/channels/{id}", FLEET_WRITE),
    ("GET", "/api/v1/channels/{id}/events", FLEET_READ),
    ("GET", "/api/v1/channels/{id}/credentials", FLEET_READ),
    ("POST", "/api/v1/channels/{id}/credentials", FLEET_WRITE),
    ("GET", "/api/v1/credentials/{id}", FLEET_READ),
    ("PATCH", "/api/v1/credentials/{id}", FLEET_WRITE),
    ("DELETE", "/api/v1/credentials/{id}", FLEET_WRITE),
    ("GET", "/api/v1/routes", FLEET_READ),
    ("POST", "/api/v1/routes", FLEET_WRITE),
    ("GET", "/api/v1/routes/{id}", FLEET_READ),
    ("PATCH", "/api/v1/routes/{id}", FLEET_WRITE),
    ("DELETE", "/api/v1/routes/{id}", FLEET_WRITE),
    ("GET", "/api/v1/routes/{id}/members", FLEET_READ),
    ("POST", "/api/v1/routes/{id}/members", FLEET_WRITE),
    ("GET", "/api/v1/routes/explain", FLEET_READ),
    ("GET", "/console/routes/explain", FLEET_READ),
    ("GET", "/api/v1/members/{id}", FLEET_READ),
    ("PATCH", "/api/v1/members/{id}", FLEET_WRITE),
    ("DELETE", "/api/v1/members/{id}", FLEET_WRITE),
    ("POST", "/api/v1/members/{id}/trial", FLEET_OPERATE),
    ("GET", "/api/v1/tokens", OWN_READ),
    ("POST", "/api/v1/tokens", OWN_WRITE),
    ("GET", "/api/v1/tokens/{id}", OWN_READ),
    ("PATCH", "/api/v1/tokens/{id}", OWN_WRITE),
    ("DELETE", "/api/v1/tokens/{id}", OWN_WRITE),
    ("GET", "/api/v1/teams", OWN_READ),
    ("POST", "/api/v1/teams", FLEET_WRITE),
    ("GET", "/api/v1/teams/{id}", OWN_READ),
    ("PATCH", "/api/v1/teams/{id}", FLEET_WRITE),
    ("DELETE", "/api/v1/teams/{id}", FLEET_WRITE),
    ("GET", "/api/v1/presets", FLEET_READ),
    ("GET", "/api/v1/prices", FLEET_READ),
    ("POST", "/api/v1/prices", FLEET_WRITE),
    ("GET", "/api/v1/prices/{id}", FLEET_READ),
    ("PATCH", "/api/v1/prices/{id}", FLEET_WRITE),
    ("DELETE", "/api/v1/prices/{id}", FLEET_WRITE),
    ("GET", "/api/v1/shadows", FLEET_READ),
    ("POST", "/api/v1/shadows", FLEET_WRITE),
    ("GET", "/api/v1/shadows/{id}", FLEET_READ),
    ("PATCH", "/api/v1/shadows/{id}", FLEET_WRITE),
    ("DELETE", "/api/v1/shadows/{id}", FLEET_WRITE),
    ("GET", "/api/v1/shadows/{id}/report", FLEET_READ),
    ("GET", "/api/v1/cache_rules", OWN_READ),
    ("POST", "/api/v1/cache_rules", OWN_WRITE),
    ("GET", "/api/v1/cache_rules/{id}", OWN_READ),
    ("PATCH", "/api/v1/cache_rules/{id}", OWN_WRITE),
    ("DELETE", "/api/v1/cache_rules/{id}", OWN_WRITE),
    ("GET", "/api/v1/cache_rules/{id}/trial", OWN_READ),
    ("GET", "/api/v1/guardrails", FLEET_READ),
    ("POST", "/api/v1/guardrails", FLEET_WRITE),
    ("GET", "/api/v1/guardrails/{id}", FLEET_READ),
    ("PATCH", "/api/v1/guardrails/{id}", FLEET_WRITE),
    ("DELETE", "/api/v1/guardrails/{id}", FLEET_WRITE),
    ("GET", "/api/v1/guardrails/{id}/report", FLEET_READ),
    ("GET", "/api/v1/webhooks", FLEET_READ),
    ("POST", "/api/v1/webhooks", FLEET_WRITE),
    ("GET", "/api/v1/webhooks/{id}", FLEET_READ),
    ("PATCH", "/api/v1/webhooks/{id}", FLEET_WRITE),
    ("DELETE", "/api/v1/webhooks/{id}", FLEET_WRITE),
    ("GET", "/api/v1/webhooks/{id}/deliveries", FLEET_READ),
    ("GET", "/api/v1/limits", OWN_READ),
    ("POST", "/api/v1/limits", OWN_WRITE),
    ("GET", "/api/v1/limits/{id}", OWN_READ),
    ("PATCH", "/api/v1/limits/{id}", OWN_WRITE),
    ("DELETE", "/api/v1/limits/{id}", OWN_WRITE),
    ("GET", "/api/v1/budgets", OWN_READ),
    ("GET", "/api/v1/settings", FLEET_READ),
    ("PUT", "/api/v1/settings", FLEET_WRITE),
    ("PATCH", "/api/v1/settings", FLEET_WRITE),
    ("POST", "/api/v1/dry-run", FLEET_OPERATE),
    ("GET", "/api/v1/config", FLEET_READ),
    ("POST", "/api/v1/config/plan", FLEET_OPERATE),
    ("POST", "/api/v1/config/apply", FLEET_WRITE),
    ("GET", "/api/v1/state", FLEET_READ),
    ("GET", "/api/v1/audit", OWN_READ),
    ("GET", "/api/v1/usage", OWN_READ),
    ("GET", "/api/v1/requests", OWN_READ),
];

fn expected(method: &str, template: &str) -> [Cell; 5] {
    MATRIX
        .iter()
        .find(|(m, p, _)| *m == method && *p == template)
        .map(|(_, _, cells)| *cells)
        .unwrap_or_else(|| panic!("{method} {template} has no row in MATRIX"))
}

#[test]
fn the_matrix_lists_exactly_the_routers_routes_and_the_document_agrees() {
    let ops = operations();
    let served: BTreeSet<(&str, &str)> = ops
        .iter()
        .map(|(m, p, _)| (m.as_str(), p.as_str()))
        .collect();
    let matrix: BTreeSet<(&str, &str)> = MATRIX.iter().map(|(m, p, _)| (*m, *p)).collect();
    assert_eq!(matrix.len(), MATRIX.len(), "a route is listed twice");
    let missing: Vec<_> = served.difference(&matrix).collect();
    assert!(missing.is_empty(), "routes without a row: {missing:?}");
    let stale: Vec<_> = matrix.difference(&served).collect();
    assert!(
        stale.is_empty(),
        "rows the router does not serve: {stale:?}"
    );
    // The document states, for each operation, whether a team admin may call it.
    let doc = serde_json::to_value(switchyard_control_plane::api::openapi()).unwrap();
    for (m, template, cells) in MATRIX {
        let Some(op) = doc["paths"][template].get(m.to_lowercase()) else {
            continue; // served outside the document
        };
        let fleet_only = cells[4] == T;
        assert_eq!(
            op["x-switchyard-team"] == "fleet",
            fleet_only,
            "{m} {template}: {}",
            op["x-switchyard-team"]
        );
        if fleet_only {
            assert!(op["responses"]["403"].is_object(), "{m} {template}");
        }
    }
}

/// Two teams, each with a token, limits and a cache rule, and the fleet's own resources.
struct Fleet {
    alpha: i64,
    beta: i64,
    /// Tokens: alpha's, beta's, and one of no team.
    alpha_token: i64,
    beta_token: i64,
    loose_token: i64,
    /// Limits: on alpha, on alpha's token, on beta, on beta's token, on the route.
    alpha_limit: i64,
    alpha_token_limit: i64,
    beta_limit: i64,
    beta_token_limit: i64,
    route_limit: i64,
    /// Cache rules: alpha's, beta's and the fleet's.
    alpha_rule: i64,
    beta_rule: i64,
    fleet_rule: i64,
    route: i64,
}

async fn fleet(app: &TestApp) -> Fleet {
    let channel = app.channel("c").await;
    app.create(
        &format!("/api/v1/channels/{channel}/credentials"),
        json!({"secret": "sk-test-0123456789abcdef"}),
    )
    .await;
    let route = app.route("gpt-*").await;
    app.member(
        route,
        json!({"channel_id": channel, "upstream_model": "gpt-4o"}),
    )
    .await;
    let alpha = app
        .create("/api/v1/teams", json!({"name": "alpha", "models": ["*"]}))
        .await;
    let beta = app
        .create("/api/v1/teams", json!({"name": "beta", "models": ["*"]}))
        .await;
    let token = |name: &str, team: Option<i64>| json!({"name": name, "team_id": team});
    let alpha_token = app.create("/api/v1/tokens", token("a1", Some(alpha))).await;
    let beta_token = app.create("/api/v1/tokens", token("b1", Some(beta))).await;
    let loose_token = app.create("/api/v1/tokens", token("loose", None)).await;
    let limit = |scope: &str, id: i64| json!({"scope": scope, "scope_id": id, "metric": "spend", "window": "day", "value": "5"});
    let alpha_limit = app.create("/api/v1/limits", limit("team", alpha)).await;
    let alpha_token_limit = app
        .create("/api/v1/limits", limit("token", alpha_token))
        .await;
    let beta_limit = app.create("/api/v1/limits", limit("team", beta)).await;
    let beta_token_limit = app
        .create("/api/v1/limits", limit("token", beta_token))
        .await;
    let route_limit = app.create("/api/v1/limits", limit("route", route)).await;
    let rule = |name: &str, team: Option<i64>| {
        json!({"name": name, "model_pattern": "gpt-*", "endpoints": ["chat_completions"],
               "ttl_seconds": 60, "team_id": team})
    };
    let alpha_rule = app
        .create("/api/v1/cache_rules", rule("alpha-rule", Some(alpha)))
        .await;
    let beta_rule = app
        .create("/api/v1/cache_rules", rule("beta-rule", Some(beta)))
        .await;
    let fleet_rule = app
        .create("/api/v1/cache_rules", rule("fleet-rule", None))
        .await;
    Fleet {
        alpha,
        beta,
        alpha_token,
        beta_token,
        loose_token,
        alpha_limit,
        alpha_token_limit,
        beta_limit,
        beta_token_limit,
        route_limit,
        alpha_rule,
        beta_rule,
        fleet_rule,
        route,
    }
}

fn assert_refused(reply: &Reply, code: &str, what: &str) {
    assert_eq!(
        reply.status,
        StatusCode::FORBIDDEN,
        "{what}: {}",
        reply.text
    );
    assert_eq!(reply.body["error"]["type"], "permission_error", "{what}");
    assert_eq!(reply.body["error"]["code"], code, "{what}: {}", reply.text);
}

fn assert_missing(reply: &Reply, what: &str) {
    assert_eq!(
        reply.status,
        StatusCode::NOT_FOUND,
        "{what}: {}",
        reply.text
    );
    assert_eq!(reply.body["error"]["code"], "not_found", "{what}");
}

fn ids(reply: &Reply) -> Vec<i64> {
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let rows = reply.body["data"].as_array().unwrap();
    rows.iter().map(|r| r["id"].as_i64().unwrap()).collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn every_route_answers_each_of_the_five_callers_as_the_matrix_says(pool: PgPool) {
    let app = test_app(pool);
    let f = fleet(&app).await;
    let mut tokens = Vec::new();
    for (name, role, team) in CALLERS {
        let team = team.then_some(f.alpha);
        tokens.push(new_team_token(&app, name, role, team).await.1);
    }
    // A team admin's 404 for a missing id (below) is the same as for another team's resource.
    let team_admin = &tokens[4];
    for path in [
        format!("/api/v1/tokens/{}", f.beta_token),
        format!("/api/v1/teams/{}", f.beta),
    ] {
        let reply = as_token(&app, team_admin, "GET", &path, None).await;
        assert_missing(&reply, &path);
    }
    // The fleet admin last: the writes it may make with an empty body (a configuration apply,
    // a settings replace) are real.
    for column in [0, 1, 3, 4, 2] {
        let revision = app.revision().await;
        let refused = sweep(&app, &tokens[column], column, f.alpha).await;
        let (name, _, _) = CALLERS[column];
        let expected_refusals = MATRIX.iter().filter(|(_, _, c)| c[column] != A).count();
        assert_eq!(refused, expected_refusals, "{name}");
        if column != 2 {
            // Nothing changed: every write allowed met a missing id or an empty body.
            assert_eq!(app.revision().await, revision, "{name} changed something");
        }
    }
}

/// Calls every route of the router with `token`, the caller of `column`, on ids no resource has
/// and with a body valid for no route (authorization comes before either is read): each answers
/// as the matrix says. Returns how many were refused.
async fn sweep(app: &TestApp, token: &str, column: usize, team: i64) -> usize {
    let (name, role, _) = CALLERS[column];
    let mut refused = 0;
    for (m, template, _) in operations() {
        let cell = expected(&m, &template)[column];
        let path = concrete(&template, 999_999);
        let body = (m != "GET").then(|| json!({}));
        let reply = as_token(app, token, &m, &path, body).await;
        let what = format!("{name}: {m} {path}");
        match cell {
            A => {
                assert_ne!(
                    reply.status,
                    StatusCode::FORBIDDEN,
                    "{what}: {}",
                    reply.text
                );
                assert_ne!(reply.status, StatusCode::UNAUTHORIZED, "{what}");
            }
            R => {
                refused += 1;
                assert_refused(&reply, "insufficient_role", &what);
                let message = reply.body["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains(&format!("has the {role} role")),
                    "{message}"
                );
            }
            T => {
                refused += 1;
                assert_refused(&reply, "outside_team", &what);
                let message = reply.body["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains(&format!("{m} {template} is for fleet admins"))
                        && message.contains(&format!("{name:?} administers team {team}")),
                    "{message}"
                );
            }
        }
    }
    refused
}

#[sqlx::test(migrations = "../migrations")]
async fn a_team_admin_manages_its_teams_tokens_limits_and_cache_rules(pool: PgPool) {
    let app = test_app(pool);
    let f = fleet(&app).await;
    let (_, admin) = new_team_token(&app, "alpha-admin", "admin", Some(f.alpha)).await;
    let call = |m: &'static str, path: String, body: Option<Value>| {
        let admin = admin.clone();
        let app = &app;
        async move { as_token(app, &admin, m, &path, body).await }
    };

    // Tokens: only its team's are listed; a new one is its team's without saying so.
    let listed = call("GET", "/api/v1/tokens".into(), None).await;
    assert_eq!(ids(&listed), [f.alpha_token]);
    let created = call("POST", "/api/v1/tokens".into(), Some(json!({"name": "a2"}))).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["team_id"], f.alpha);
    assert!(created.body["token"]
        .as_str()
        .unwrap()
        .starts_with("sk-sy-"));
    let a2 = created.body["id"].as_i64().unwrap();
    let patched = call(
        "PATCH",
        format!("/api/v1/tokens/{a2}"),
        Some(json!({"enabled": false, "team_id": f.alpha})),
    )
    .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    let read = call("GET", format!("/api/v1/tokens/{a2}"), None).await;
    assert_eq!(read.body["enabled"], false);
    let listed = call("GET", "/api/v1/tokens".into(), None).await;
    assert_eq!(ids(&listed), [f.alpha_token, a2]);
    let deleted = call("DELETE", format!("/api/v1/tokens/{a2}"), None).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    assert_missing(&app.get(&format!("/api/v1/tokens/{a2}")).await, "deleted");

    // Limits: the team's and its tokens' only; new ones on either.
    let listed = call("GET", "/api/v1/limits".into(), None).await;
    assert_eq!(ids(&listed), [f.alpha_limit, f.alpha_token_limit]);
    let body = json!({"scope": "token", "scope_id": f.alpha_token, "metric": "requests",
                      "window": "minute", "value": 60});
    let created = call("POST", "/api/v1/limits".into(), Some(body)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let limit = created.body["id"].as_i64().unwrap();
    let patched = call(
        "PATCH",
        format!("/api/v1/limits/{limit}"),
        Some(json!({"value": 30, "scope": "team", "scope_id": f.alpha})),
    )
    .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    let read = app.get(&format!("/api/v1/limits/{limit}")).await;
    assert_eq!(
        (read.body["scope"].clone(), read.body["value"].clone()),
        (json!("team"), json!(30))
    );
    let deleted = call("DELETE", format!("/api/v1/limits/{limit}"), None).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);
    assert_missing(
        &app.get(&format!("/api/v1/limits/{limit}")).await,
        "deleted",
    );

    // Budgets: the team's spend limits only (the fleet admin sees all five).
    let budgets = call("GET", "/api/v1/budgets".into(), None).await;
    assert_eq!(budgets.status, StatusCode::OK, "{}", budgets.text);
    let of = |reply: &Reply| -> Vec<i64> {
        let rows = reply.body["data"].as_array().unwrap();
        rows.iter()
            .map(|b| b["limit_id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(of(&budgets), [f.alpha_limit, f.alpha_token_limit]);
    assert_eq!(of(&app.get("/api/v1/budgets").await).len(), 5);

    // Cache rules: its team's only; a new one covers its team without saying so.
    let listed = call("GET", "/api/v1/cache_rules".into(), None).await;
    assert_eq!(ids(&listed), [f.alpha_rule]);
    let body = json!({"name": "alpha-embed", "model_pattern": "text-*",
                      "endpoints": ["embeddings"], "ttl_seconds": 30});
    let created = call("POST", "/api/v1/cache_rules".into(), Some(body)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["team_id"], f.alpha);
    let rule = created.body["id"].as_i64().unwrap();
    let patched = call(
        "PATCH",
        format!("/api/v1/cache_rules/{rule}"),
        Some(json!({"ttl_seconds": 90})),
    )
    .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    assert_eq!(
        app.get(&format!("/api/v1/cache_rules/{rule}")).await.body["ttl_seconds"],
        90
    );
    // Its rule's trial report: found (a rule without a semantic part has none to show).
    let trial = call(
        "GET",
        format!("/api/v1/cache_rules/{}/trial", f.alpha_rule),
        None,
    )
    .await;
    assert_eq!(trial.status, StatusCode::CONFLICT, "{}", trial.text);
    let deleted = call("DELETE", format!("/api/v1/cache_rules/{rule}"), None).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{}", deleted.text);

    // Its own team, read only.
    let teams = call("GET", "/api/v1/teams".into(), None).await;
    assert_eq!(ids(&teams), [f.alpha]);
    let team = call("GET", format!("/api/v1/teams/{}", f.alpha), None).await;
    assert_eq!(team.body["name"], "alpha", "{}", team.text);
}

#[sqlx::test(migrations = "../migrations")]
async fn another_teams_resources_are_missing_and_writes_leaving_the_team_are_refused(pool: PgPool) {
    let app = test_app(pool);
    let f = fleet(&app).await;
    let (_, admin) = new_team_token(&app, "alpha-admin", "admin", Some(f.alpha)).await;
    let revision = app.revision().await;

    // Every route naming a resource of another team, or of no team, by its id: 404, as for a
    // resource that does not exist.
    let foreign = [
        ("/api/v1/tokens/{id}", vec![f.beta_token, f.loose_token]),
        (
            "/api/v1/limits/{id}",
            vec![f.beta_limit, f.beta_token_limit, f.route_limit],
        ),
        ("/api/v1/cache_rules/{id}", vec![f.beta_rule, f.fleet_rule]),
        (
            "/api/v1/cache_rules/{id}/trial",
            vec![f.beta_rule, f.fleet_rule],
        ),
        ("/api/v1/teams/{id}", vec![f.beta]),
    ];
    for (template, others) in &foreign {
        // The methods a team admin may call on the path (the others are the sweep's 403s).
        for (m, _, _) in MATRIX.iter().filter(|(_, p, c)| p == template && c[4] == A) {
            for id in others {
                let path = concrete(template, *id);
                let body = (*m != "GET").then(|| json!({}));
                let reply = as_token(&app, &admin, m, &path, body).await;
                assert_missing(&reply, &format!("{m} {path}"));
            }
        }
    }
    // The routes a team admin may call with an id are exactly those above.
    let with_id: BTreeSet<&str> = MATRIX
        .iter()
        .filter(|(_, p, c)| p.contains("{id}") && c[4] == A)
        .map(|(_, p, _)| *p)
        .collect();
    let checked: BTreeSet<&str> = foreign.iter().map(|(p, _)| *p).collect();
    assert_eq!(with_id, checked);

    // Writes that would name or move to another team, or to the fleet: 403 `outside_team`.
    let one_a_minute = |scope: &str, id: i64| {
        json!({"scope": scope, "scope_id": id, "metric": "requests",
               "window": "minute", "value": 1})
    };
    let a1 = f.alpha_token;
    let writes = [
        (
            "POST",
            "/api/v1/tokens".to_owned(),
            json!({"name": "x", "team_id": f.beta}),
        ),
        (
            "PATCH",
            format!("/api/v1/tokens/{a1}"),
            json!({"team_id": f.beta}),
        ),
        (
            "PATCH",
            format!("/api/v1/tokens/{a1}"),
            json!({"team_id": null}),
        ),
        (
            "PATCH",
            format!("/api/v1/tokens/{a1}"),
            json!({"team_id": 999_999}),
        ),
        (
            "POST",
            "/api/v1/limits".to_owned(),
            one_a_minute("team", f.beta),
        ),
        (
            "POST",
            "/api/v1/limits".to_owned(),
            one_a_minute("token", f.beta_token),
        ),
        (
            "POST",
            "/api/v1/limits".to_owned(),
            one_a_minute("token", f.loose_token),
        ),
        (
            "POST",
            "/api/v1/limits".to_owned(),
            one_a_minute("token", 999_999),
        ),
        (
            "POST",
            "/api/v1/limits".to_owned(),
            one_a_minute("route", f.route),
        ),
        (
            "PATCH",
            format!("/api/v1/limits/{}", f.alpha_limit),
            json!({"scope_id": f.beta}),
        ),
        (
            "PATCH",
            format!("/api/v1/limits/{}", f.alpha_token_limit),
            json!({"scope_id": f.beta_token}),
        ),
        (
            "POST",
            "/api/v1/cache_rules".to_owned(),
            json!({"name": "x", "model_pattern": "*", "endpoints": ["embeddings"],
                   "ttl_seconds": 5, "team_id": f.beta}),
        ),
        (
            "PATCH",
            format!("/api/v1/cache_rules/{}", f.alpha_rule),
            json!({"team_id": null}),
        ),
        (
            "PATCH",
            format!("/api/v1/cache_rules/{}", f.alpha_rule),
            json!({"team_id": f.beta}),
        ),
        (
            "PATCH",
            format!("/api/v1/cache_rules/{}", f.alpha_rule),
            json!({"semantic": {"channel": 1, "model": "e", "threshold": 0.9}}),
        ),
    ];
    for (m, path, body) in &writes {
        let reply = as_token(&app, &admin, m, path, Some(body.clone())).await;
        assert_refused(&reply, "outside_team", &format!("{m} {path} {body}"));
    }
    // The request log of another team: refused, not silently emptied.
    let reply = as_token(&app, &admin, "GET", "/api/v1/requests?team=beta", None).await;
    assert_refused(&reply, "outside_team", "requests of beta");
    // Nothing was written; the resources kept their teams.
    assert_eq!(app.revision().await, revision);
    assert_eq!(
        app.get(&format!("/api/v1/tokens/{a1}")).await.body["team_id"],
        f.alpha
    );
    let rule = app
        .get(&format!("/api/v1/cache_rules/{}", f.alpha_rule))
        .await;
    assert_eq!(rule.body["team_id"], f.alpha);
}

/// A team admin cannot tell another team's resource from one that does not exist: the 404 says
/// what a fleet admin's says for an id no row has, naming the resource by its own name. A limit
/// whose scope is another team, or another team's token, says which.
#[sqlx::test(migrations = "../migrations")]
async fn another_teams_resource_is_missing_in_the_words_of_one_that_does_not_exist(pool: PgPool) {
    let app = test_app(pool);
    let f = fleet(&app).await;
    let (_, admin) = new_team_token(&app, "alpha-admin", "admin", Some(f.alpha)).await;
    let missing = 999_999;
    let cases = [
        ("/api/v1/tokens/{id}", f.beta_token, "token"),
        ("/api/v1/limits/{id}", f.beta_token_limit, "limit"),
        ("/api/v1/cache_rules/{id}", f.fleet_rule, "cache rule"),
        ("/api/v1/teams/{id}", f.beta, "team"),
    ];
    for (template, other, noun) in cases {
        let reply = as_token(&app, &admin, "GET", &concrete(template, other), None).await;
        assert_missing(&reply, template);
        assert_eq!(
            reply.body["error"]["message"],
            format!("{noun} {other} not found"),
            "{template}"
        );
        let reply = app.get(&concrete(template, missing)).await;
        assert_missing(&reply, template);
        assert_eq!(
            reply.body["error"]["message"],
            format!("{noun} {missing} not found"),
            "{template}"
        );
    }

    let administers = "the only team this admin token administers";
    let (alpha, beta) = (f.alpha, f.beta);
    let one_a_minute = |scope: &str, id: i64| {
        json!({"scope": scope, "scope_id": id, "metric": "requests",
               "window": "minute", "value": 1})
    };
    let writes = [
        (
            "POST",
            "/api/v1/limits".to_owned(),
            one_a_minute("team", beta),
            format!("scope_id: team {beta} is not of team {alpha}, {administers}"),
        ),
        (
            "POST",
            "/api/v1/limits".to_owned(),
            one_a_minute("token", f.beta_token),
            format!(
                "scope_id: token {} is not of team {alpha}, {administers}",
                f.beta_token
            ),
        ),
    ];
    for (m, path, body, message) in writes {
        let reply = as_token(&app, &admin, m, &path, Some(body.clone())).await;
        assert_refused(&reply, "outside_team", &format!("{m} {path} {body}"));
        assert_eq!(reply.body["error"]["message"], message, "{m} {path} {body}");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_team_admin_reads_only_its_teams_usage_requests_and_audit(pool: PgPool) {
    let app = test_app(pool.clone());
    let f = fleet(&app).await;
    let (_, admin) = new_team_token(&app, "alpha-admin", "admin", Some(f.alpha)).await;
    let (_, viewer) = new_team_token(&app, "alpha-viewer", "viewer", Some(f.alpha)).await;
    let (_, beta_admin) = new_team_token(&app, "beta-admin", "admin", Some(f.beta)).await;
    for (token, team, requests) in [("a1", "alpha", 3), ("b1", "beta", 5), ("loose", "", 7)] {
        sqlx::query(
            "INSERT INTO usage_minutes (bucket, token, team, route, channel, model, requests) \
             VALUES (date_trunc('minute', now()) - interval '1 hour', $1, $2, 'gpt-*', 'c', \
                     'gpt-4o', $3)",
        )
        .bind(token)
        .bind(team)
        .bind(requests)
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("SELECT request_log_partition((now() - interval '1 hour')::date)")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO request_log (at, request_id, token, team, status) \
             VALUES (now() - interval '1 hour', $1, $1, $2, 200)",
        )
        .bind(token)
        .bind(team)
        .execute(&pool)
        .await
        .unwrap();
    }
    for token in [&admin, &viewer] {
        let usage = as_token(&app, token, "GET", "/api/v1/usage?group_by=team", None).await;
        assert_eq!(usage.status, StatusCode::OK, "{}", usage.text);
        assert_eq!(usage.body["total"]["requests"], 3, "{}", usage.text);
        let groups = usage.body["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 1, "{}", usage.text);
        assert_eq!(groups[0]["team"], "alpha");
        let requests = as_token(&app, token, "GET", "/api/v1/requests", None).await;
        let rows = requests.body["data"].as_array().unwrap();
        let teams: Vec<&str> = rows.iter().map(|r| r["team"].as_str().unwrap()).collect();
        assert_eq!(teams, ["alpha"], "{}", requests.text);
    }
    assert_eq!(app.get("/api/v1/usage").await.body["total"]["requests"], 15);

    // The audit log: the team's admins' writes only, each naming the token and its team.
    let reply = as_token(
        &app,
        &admin,
        "POST",
        "/api/v1/tokens",
        Some(json!({"name": "a3"})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let reply = as_token(
        &app,
        &beta_admin,
        "POST",
        "/api/v1/tokens",
        Some(json!({"name": "b3"})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let audit = as_token(&app, &viewer, "GET", "/api/v1/audit", None).await;
    assert_eq!(audit.status, StatusCode::OK, "{}", audit.text);
    let rows = audit.body["data"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{}", audit.text);
    assert_eq!(rows[0]["actor"], "alpha-admin");
    assert_eq!(rows[0]["actor_team_id"], f.alpha);
    assert_eq!(rows[0]["detail"]["name"], "a3");
    // The fleet sees every row, the team admins' with their teams, its own with none.
    let all = app.get("/api/v1/audit?resource=token").await;
    let rows = all.body["data"].as_array().unwrap();
    let actors: Vec<(String, Value)> = rows
        .iter()
        .map(|r| {
            (
                r["actor"].as_str().unwrap().to_owned(),
                r["actor_team_id"].clone(),
            )
        })
        .collect();
    assert_eq!(
        actors,
        [
            ("bootstrap".to_owned(), Value::Null),
            ("bootstrap".to_owned(), Value::Null),
            ("bootstrap".to_owned(), Value::Null),
            ("alpha-admin".to_owned(), json!(f.alpha)),
            ("beta-admin".to_owned(), json!(f.beta)),
        ]
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn team_admin_tokens_are_made_by_fleet_admins_and_go_with_their_team(pool: PgPool) {
    let app = test_app(pool);
    let gamma = app
        .create("/api/v1/teams", json!({"name": "gamma", "models": ["*"]}))
        .await;
    // A team that does not exist is named.
    let reply = app
        .post(
            "/api/v1/admin-tokens",
            json!({"name": "x", "role": "admin", "team_id": 999_999}),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    assert_eq!(reply.param(), Some("team_id"));
    let (id, admin) = new_team_token(&app, "gamma-admin", "admin", Some(gamma)).await;
    let me = as_token(&app, &admin, "GET", "/api/v1/whoami", None).await;
    assert_eq!(
        me.body,
        json!({"name": "gamma-admin", "role": "admin", "token_id": id, "team_id": gamma,
               "expires_at": null})
    );
    let row = app.get(&format!("/api/v1/admin-tokens/{id}")).await;
    assert_eq!(row.body["team_id"], gamma);
    // A team admin makes no admin token, not even for its own team.
    let reply = as_token(
        &app,
        &admin,
        "POST",
        "/api/v1/admin-tokens",
        Some(json!({"name": "y", "role": "viewer", "team_id": gamma})),
    )
    .await;
    assert_refused(&reply, "outside_team", "admin token by a team admin");
    // A fleet token has no team.
    let (_, fleet) = new_token(&app, "fleet", "viewer").await;
    let me = as_token(&app, &fleet, "GET", "/api/v1/whoami", None).await;
    assert_eq!(me.body["team_id"], Value::Null);

    // Deleting the team removes its admin tokens: refused from the next request, and the
    // audit row of the delete names them.
    let reply = app.delete(&format!("/api/v1/teams/{gamma}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let reply = as_token(&app, &admin, "GET", "/api/v1/whoami", None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_missing(
        &app.get(&format!("/api/v1/admin-tokens/{id}")).await,
        "removed",
    );
    let audit = app.get("/api/v1/audit?resource=team").await;
    let last = audit.body["data"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["action"], "delete");
    assert_eq!(
        last["detail"]["removed_admin_tokens"],
        json!(["gamma-admin"])
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_teams_cache_rule_covers_only_its_tokens_and_travels_in_the_file(pool: PgPool) {
    let app = test_app(pool);
    let f = fleet(&app).await;
    app.refresh().await;
    // Explain asks the proxies' question: alpha's token gets alpha's rule, beta's gets its own,
    // a token of no team the fleet's (the team rules are passed over, whatever their order).
    for (token, rule) in [
        (f.alpha_token, f.alpha_rule),
        (f.beta_token, f.beta_rule),
        (f.loose_token, f.fleet_rule),
    ] {
        let reply = app
            .get(&format!(
                "/api/v1/routes/explain?model=gpt-4o&endpoint=chat_completions&token={token}"
            ))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(
            reply.body["cache_rule"]["id"], rule,
            "token {token}: {}",
            reply.text
        );
    }
    // The configuration file names the team; the export plans to nothing, and without the
    // team the plan takes the rule out of it.
    let export = app.get("/api/v1/config").await;
    let at = export.text.find("cache_rules:").unwrap();
    let (head, rules) = export.text.split_at(at);
    assert!(rules.contains("team: alpha"), "{}", export.text);
    // The file with alpha's rule's team line dropped, or its value replaced.
    let with = |value: Option<&str>| {
        let mut done = false;
        let lines: Vec<String> = rules
            .lines()
            .filter_map(|l| {
                if done || l.trim() != "team: alpha" {
                    return Some(l.to_owned());
                }
                done = true;
                value.map(|v| l.replace("alpha", v))
            })
            .collect();
        format!("{head}{}\n", lines.join("\n"))
    };
    let (_, bootstrap) = new_token(&app, "ci", "admin").await;
    let plan = app
        .post_yaml("/api/v1/config/plan", &export.text, &bootstrap)
        .await;
    assert_eq!(plan.status, StatusCode::OK, "{}", plan.text);
    assert_eq!(plan.body["changes"], json!([]), "{}", plan.text);
    let without = with(None);
    let plan = app
        .post_yaml("/api/v1/config/plan", &without, &bootstrap)
        .await;
    assert_eq!(plan.status, StatusCode::OK, "{}", plan.text);
    assert_eq!(
        plan.body["changes"],
        json!([{"resource": "cache_rule", "key": "alpha-rule", "action": "change",
                "fields": [{"field": "team", "before": "alpha", "after": null}]}]),
        "{}",
        plan.text
    );
    let unknown = with(Some("nobody"));
    let plan = app
        .post_yaml("/api/v1/config/plan", &unknown, &bootstrap)
        .await;
    assert_eq!(
        plan.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        plan.text
    );
    assert!(plan.param().unwrap().ends_with(".team"), "{}", plan.text);
}
