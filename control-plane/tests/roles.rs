//! Admin identities against real Postgres: named admin tokens with a role, created and revoked
//! through the API; every route of the router classified by role (enumerated from the OpenAPI
//! document the router is built from) and checked against [`EXPECTED_ROLES`], a matrix written
//! here by hand (never read from the server's own table); each role swept over every route; the
//! audit log naming the token; the secret never shown again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_control_plane::api::access::{route_access, Role, RouteAccess, ROUTE_ROLES};

use common::admin::{as_token, concrete, method, new_token, operations, UNDOCUMENTED};
use common::{test_app, TestApp};

/// The least role each (method, route template) of the admin API needs, written out by hand from
/// the documented policy: reads (and explain) are `viewer`; what only computes an answer (dry run,
/// trial call, configuration plan) is `operator`; every write, configuration apply and anything
/// about admin tokens is `admin`. Deliberately not derived from `ROUTE_ROLES`: a wrong row in
/// the server's table must disagree with this one.
const EXPECTED_ROLES: &[(&str, &str, &str)] = &[
    ("GET", "/api/v1/whoami", "viewer"),
    ("GET", "/api/v1/openapi.json", "viewer"),
    // Admin tokens: never below admin, reads included (names, roles and use of every token).
    ("GET", "/api/v1/admin-tokens", "admin"),
    ("POST", "/api/v1/admin-tokens", "admin"),
    ("GET", "/api/v1/admin-tokens/{id}", "admin"),
    ("DELETE", "/api/v1/admin-tokens/{id}", "admin"),
    ("GET", "/api/v1/channels", "viewer"),
    ("POST", "/api/v1/channels", "admin"),
    ("GET", "/api/v1/channels/{id}", "viewer"),
    ("PATCH", "/api/v1/channels/{id}", "admin"),
    ("DELETE", "/api/v1/channels/{id}", "admin"),
    ("GET", "/api/v1/channels/{id}/events", "viewer"),
    ("GET", "/api/v1/channels/{id}/credentials", "viewer"),
    ("POST", "/api/v1/channels/{id}/credentials", "admin"),
    ("GET", "/api/v1/credentials/{id}", "viewer"),
    ("PATCH", "/api/v1/credentials/{id}", "admin"),
    ("DELETE", "/api/v1/credentials/{id}", "admin"),
    ("GET", "/api/v1/routes", "viewer"),
    ("POST", "/api/v1/routes", "admin"),
    ("GET", "/api/v1/routes/{id}", "viewer"),
    ("PATCH", "/api/v1/routes/{id}", "admin"),
    ("DELETE", "/api/v1/routes/{id}", "admin"),
    ("GET", "/api/v1/routes/{id}/members", "viewer"),
    ("POST", "/api/v1/routes/{id}/members", "admin"),
    ("GET", "/api/v1/routes/explain", "viewer"),
    ("GET", "/console/routes/explain", "viewer"),
    ("GET", "/api/v1/members/{id}", "viewer"),
    ("PATCH", "/api/v1/members/{id}", "admin"),
    ("DELETE", "/api/v1/members/{id}", "admin"),
    ("POST", "/api/v1/members/{id}/trial", "operator"),
    ("GET", "/api/v1/tokens", "viewer"),
    ("POST", "/api/v1/tokens", "admin"),
    ("GET", "/api/v1/tokens/{id}", "viewer"),
    ("PATCH", "/api/v1/tokens/{id}", "admin"),
    ("DELETE", "/api/v1/tokens/{id}", "admin"),
    ("GET", "/api/v1/teams", "viewer"),
    ("POST", "/api/v1/teams", "admin"),
    ("GET", "/api/v1/teams/{id}", "viewer"),
    ("PATCH", "/api/v1/teams/{id}", "admin"),
    ("DELETE", "/api/v1/teams/{id}", "admin"),
    ("GET", "/api/v1/presets", "viewer"),
    ("GET", "/api/v1/prices", "viewer"),
    ("POST", "/api/v1/prices", "admin"),
    ("GET", "/api/v1/prices/{id}", "viewer"),
    ("PATCH", "/api/v1/prices/{id}", "admin"),
    ("DELETE", "/api/v1/prices/{id}", "admin"),
    ("GET", "/api/v1/shadows", "viewer"),
    ("POST", "/api/v1/shadows", "admin"),
    ("GET", "/api/v1/shadows/{id}", "viewer"),
    ("PATCH", "/api/v1/shadows/{id}", "admin"),
    ("DELETE", "/api/v1/shadows/{id}", "admin"),
    ("GET", "/api/v1/shadows/{id}/report", "viewer"),
    ("GET", "/api/v1/cache_rules", "viewer"),
    ("POST", "/api/v1/cache_rules", "admin"),
    ("GET", "/api/v1/cache_rules/{id}", "viewer"),
    ("PATCH", "/api/v1/cache_rules/{id}", "admin"),
    ("DELETE", "/api/v1/cache_rules/{id}", "admin"),
    ("GET", "/api/v1/cache_rules/{id}/trial", "viewer"),
    ("GET", "/api/v1/guardrails", "viewer"),
    ("POST", "/api/v1/guardrails", "admin"),
    ("GET", "/api/v1/guardrails/{id}", "viewer"),
    ("PATCH", "/api/v1/guardrails/{id}", "admin"),
    ("DELETE", "/api/v1/guardrails/{id}", "admin"),
    ("GET", "/api/v1/guardrails/{id}/report", "viewer"),
    ("GET", "/api/v1/webhooks", "viewer"),
    ("POST", "/api/v1/webhooks", "admin"),
    ("GET", "/api/v1/webhooks/{id}", "viewer"),
    ("PATCH", "/api/v1/webhooks/{id}", "admin"),
    ("DELETE", "/api/v1/webhooks/{id}", "admin"),
    ("GET", "/api/v1/webhooks/{id}/deliveries", "viewer"),
    ("GET", "/api/v1/limits", "viewer"),
    ("POST", "/api/v1/limits", "admin"),
    ("GET", "/api/v1/limits/{id}", "viewer"),
    ("PATCH", "/api/v1/limits/{id}", "admin"),
    ("DELETE", "/api/v1/limits/{id}", "admin"),
    ("GET", "/api/v1/budgets", "viewer"),
    ("GET", "/api/v1/settings", "viewer"),
    ("PUT", "/api/v1/settings", "admin"),
    ("PATCH", "/api/v1/settings", "admin"),
    ("POST", "/api/v1/dry-run", "operator"),
    ("GET", "/api/v1/config", "viewer"),
    ("POST", "/api/v1/config/plan", "operator"),
    ("POST", "/api/v1/config/apply", "admin"),
    ("GET", "/api/v1/state", "viewer"),
    ("GET", "/api/v1/audit", "viewer"),
    ("GET", "/api/v1/usage", "viewer"),
    ("GET", "/api/v1/requests", "viewer"),
];

/// The hand-written least role of (`method`, `template`); fails the test for a route the matrix
/// does not list (a new route needs a row here as well as in the server's table).
fn expected_role(method: &str, template: &str) -> &'static str {
    EXPECTED_ROLES
        .iter()
        .find(|(m, p, _)| *m == method && *p == template)
        .map(|(_, _, role)| *role)
        .unwrap_or_else(|| panic!("{method} {template} has no row in EXPECTED_ROLES"))
}

/// Whether a caller with role `caller` may call what needs `needed`, by the documented order
/// viewer < operator < admin (spelled out here, not `Role`'s own ordering).
fn allows(caller: &str, needed: &str) -> bool {
    let rank = |role: &str| match role {
        "viewer" => 0,
        "operator" => 1,
        "admin" => 2,
        other => panic!("unknown role {other:?}"),
    };
    rank(caller) >= rank(needed)
}

async fn audit_log_text(app: &TestApp) -> String {
    let rows: Vec<(String, sqlx::types::Json<Value>)> =
        sqlx::query_as("SELECT actor, detail FROM audit_log ORDER BY id")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    rows.iter()
        .map(|(actor, detail)| format!("{actor} {}", detail.0))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_route_has_a_role_and_the_table_lists_only_real_routes() {
    let ops = operations();
    let served: BTreeSet<(String, String)> =
        ops.iter().map(|(m, p, _)| (m.clone(), p.clone())).collect();
    let table: BTreeSet<(String, String)> = ROUTE_ROLES
        .iter()
        .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    let unclassified: Vec<_> = served.difference(&table).collect();
    assert!(
        unclassified.is_empty(),
        "routes without a role: {unclassified:?}"
    );
    let stale: Vec<_> = table.difference(&served).collect();
    assert!(
        stale.is_empty(),
        "classified routes the router does not serve: {stale:?}"
    );
    assert_eq!(
        table.len(),
        ROUTE_ROLES.len(),
        "a route is classified twice"
    );
    for (m, path, documented) in &ops {
        let RouteAccess::Needs(role) = route_access(&method(m), path) else {
            panic!("{m} {path} is not classified");
        };
        if let Some(documented) = documented {
            assert_eq!(documented, role.as_str(), "{m} {path}");
        } else {
            assert!(
                UNDOCUMENTED.contains(&(m.as_str(), path.as_str())),
                "{m} {path}"
            );
        }
        // Only reads are open to viewers.
        if m != "GET" {
            assert!(role > Role::Viewer, "{m} {path} is open to viewers");
        }
    }
    // What the operator role adds over viewer: exactly the calls that store nothing.
    let operator: BTreeSet<(&str, &str)> = ROUTE_ROLES
        .iter()
        .filter(|(_, _, role)| *role == Role::Operator)
        .map(|(m, p, _)| (*m, *p))
        .collect();
    assert_eq!(
        operator,
        BTreeSet::from([
            ("POST", "/api/v1/dry-run"),
            ("POST", "/api/v1/members/{id}/trial"),
            ("POST", "/api/v1/config/plan"),
        ])
    );
}

#[test]
fn the_server_enforces_and_documents_the_hand_written_role_of_every_route() {
    let ops = operations();
    for (m, template, documented) in &ops {
        let expected = expected_role(m, template);
        let RouteAccess::Needs(served) = route_access(&method(m), template) else {
            panic!("{m} {template} is not classified");
        };
        assert_eq!(
            served.as_str(),
            expected,
            "{m} {template}: the server's role"
        );
        if let Some(documented) = documented {
            assert_eq!(documented, expected, "{m} {template}: the documented role");
        }
        if *m == "GET" {
            // HEAD is answered as GET, with GET's role.
            assert_eq!(
                route_access(&Method::HEAD, template),
                RouteAccess::Needs(served),
                "HEAD {template}"
            );
        }
    }
    // The matrix lists only routes the router serves, each once.
    let served: BTreeSet<(&str, &str)> = ops
        .iter()
        .map(|(m, p, _)| (m.as_str(), p.as_str()))
        .collect();
    let matrix: BTreeSet<(&str, &str)> = EXPECTED_ROLES.iter().map(|(m, p, _)| (*m, *p)).collect();
    assert_eq!(
        matrix.len(),
        EXPECTED_ROLES.len(),
        "a route is listed twice"
    );
    let stale: Vec<_> = matrix.difference(&served).collect();
    assert!(
        stale.is_empty(),
        "EXPECTED_ROLES lists routes the router does not serve: {stale:?}"
    );
    // And the server's table holds exactly these rows (a row added there with another role, or a
    // route listed twice, disagrees here).
    let table: BTreeSet<(&str, &str, &str)> = ROUTE_ROLES
        .iter()
        .map(|(m, p, role)| (*m, *p, role.as_str()))
        .collect();
    let expected: BTreeSet<(&str, &str, &str)> = EXPECTED_ROLES.iter().copied().collect();
    assert_eq!(table, expected);
    assert_eq!(ROUTE_ROLES.len(), EXPECTED_ROLES.len());
}

/// A fleet to read and explain: one channel with a credential, one route with one member.
async fn small_fleet(app: &TestApp) -> (i64, i64, i64) {
    let channel = app.channel("c").await;
    app.create(
        &format!("/api/v1/channels/{channel}/credentials"),
        json!({"secret": "sk-test-0123456789abcdef"}),
    )
    .await;
    let route = app.route("gpt-4o").await;
    let member = app
        .member(
            route,
            json!({"channel_id": channel, "upstream_model": "gpt-4o"}),
        )
        .await;
    app.refresh().await;
    (channel, route, member)
}

/// Calls every route of the router (`{id}` = `id`) with `token` (named `name`, of role `role`):
/// each route the hand-written matrix allows the role is not refused (no 401, no 403), each it
/// does not is a 403 `insufficient_role` naming the route, the role it needs and the token.
/// Returns how many were refused.
async fn sweep(app: &TestApp, token: &str, name: &str, role: &str, id: i64) -> usize {
    let mut refused = 0;
    for (m, template, _) in operations() {
        let needed = expected_role(&m, &template);
        let path = concrete(&template, id);
        // A body that would be valid for no route: authorization comes before the body is read.
        let body = (m != "GET").then(|| json!({}));
        let reply = as_token(app, token, &m, &path, body).await;
        if allows(role, needed) {
            assert_ne!(
                reply.status,
                StatusCode::FORBIDDEN,
                "{role}: {m} {path}: {}",
                reply.text
            );
            assert_ne!(reply.status, StatusCode::UNAUTHORIZED, "{role}: {m} {path}");
        } else {
            refused += 1;
            assert_eq!(
                reply.status,
                StatusCode::FORBIDDEN,
                "{role}: {m} {path}: {}",
                reply.text
            );
            assert_eq!(
                reply.body["error"]["type"], "permission_error",
                "{m} {path}"
            );
            assert_eq!(
                reply.body["error"]["code"], "insufficient_role",
                "{m} {path}"
            );
            let message = reply.body["error"]["message"].as_str().unwrap();
            assert_eq!(
                message,
                format!(
                    "{m} {template} needs the {needed} role; the admin token \"{name}\" has the \
                     {role} role"
                )
            );
        }
    }
    refused
}

#[sqlx::test(migrations = "../migrations")]
async fn a_viewer_reads_and_explains_and_every_other_route_refuses_it(pool: PgPool) {
    let app = test_app(pool);
    let (channel, _, _) = small_fleet(&app).await;
    let (_, viewer) = new_token(&app, "oncall-viewer", "viewer").await;
    let revision = app.revision().await;
    let audit = app.audit_rows().await;

    let refused = sweep(&app, &viewer, "oncall-viewer", "viewer", channel).await;
    let above_viewer = EXPECTED_ROLES
        .iter()
        .filter(|(_, _, role)| *role != "viewer")
        .count();
    assert_eq!(refused, above_viewer);
    assert!(refused >= 30, "only {refused} routes refused a viewer");
    // Nothing a viewer did was written.
    assert_eq!(app.revision().await, revision);
    assert_eq!(app.audit_rows().await, audit);

    // Reads and explain answer as for an admin.
    let reply = as_token(
        &app,
        &viewer,
        "GET",
        "/api/v1/routes/explain?model=gpt-4o",
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["outcome"], "selected", "{}", reply.text);
    let reply = as_token(
        &app,
        &viewer,
        "GET",
        "/console/routes/explain?model=gpt-4o",
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = as_token(&app, &viewer, "GET", "/api/v1/channels", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["data"].as_array().unwrap().len(), 1);
    let reply = as_token(&app, &viewer, "GET", "/api/v1/audit", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    // A wrong method is still a 405 (nothing runs), not a 403.
    let reply = as_token(&app, &viewer, "DELETE", "/api/v1/channels", None).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);

    // The viewer learns its own name and role.
    let reply = as_token(&app, &viewer, "GET", "/api/v1/whoami", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["name"], "oncall-viewer");
    assert_eq!(reply.body["role"], "viewer");
}

#[sqlx::test(migrations = "../migrations")]
async fn an_operator_and_an_admin_are_each_refused_exactly_what_the_matrix_says(pool: PgPool) {
    let app = test_app(pool);
    let (channel, _, _) = small_fleet(&app).await;
    let (_, operator) = new_token(&app, "sre-operator", "operator").await;
    let revision = app.revision().await;
    let refused = sweep(&app, &operator, "sre-operator", "operator", channel).await;
    let above_operator = EXPECTED_ROLES
        .iter()
        .filter(|(_, _, role)| *role == "admin")
        .count();
    assert_eq!(refused, above_operator);
    // What an operator may call stores nothing (the dry run, trial and plan bodies were empty).
    assert_eq!(
        app.revision().await,
        revision,
        "an operator changed something"
    );

    // An admin is refused nothing. On ids no resource has, so the writes it is allowed change
    // nothing the sweep depends on.
    let (_, admin) = new_token(&app, "root-admin", "admin").await;
    assert_eq!(sweep(&app, &admin, "root-admin", "admin", 999_999).await, 0);
}

#[sqlx::test(migrations = "../migrations")]
async fn an_operator_dry_runs_trials_and_plans_but_cannot_write(pool: PgPool) {
    let app = test_app(pool);
    let (channel, route, _) = small_fleet(&app).await;
    let (_, operator) = new_token(&app, "sre-operator", "operator").await;
    let revision = app.revision().await;

    // Dry run: answered, and nothing stored.
    let reply = as_token(
        &app,
        &operator,
        "POST",
        "/api/v1/dry-run",
        Some(json!({"changes": [{"op": "delete", "resource": "route", "id": route}]})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    // Trial: authorized (no such member in the snapshot is a 404, not a 403).
    let reply = as_token(
        &app,
        &operator,
        "POST",
        "/api/v1/members/999999/trial",
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.text);
    // Configuration plan: the exported file plans to nothing.
    let export = as_token(&app, &operator, "GET", "/api/v1/config", None).await;
    assert_eq!(export.status, StatusCode::OK);
    let plan = post_yaml(&app, "/api/v1/config/plan", &operator, &export.text).await;
    assert_eq!(plan.0, StatusCode::OK, "{}", plan.1);
    assert_eq!(plan.1["changes"], json!([]));
    let apply = post_yaml(&app, "/api/v1/config/apply", &operator, &export.text).await;
    assert_eq!(apply.0, StatusCode::FORBIDDEN, "{}", apply.1);

    // Writes and admin tokens: refused.
    for (m, path, body) in [
        (
            "POST",
            "/api/v1/channels".to_owned(),
            json!({"name": "x", "provider": "openai", "base_url": "https://x.test/v1"}),
        ),
        (
            "PATCH",
            format!("/api/v1/routes/{route}"),
            json!({"cooldown_seconds": 5}),
        ),
        ("DELETE", format!("/api/v1/channels/{channel}"), json!({})),
        ("PATCH", "/api/v1/settings".to_owned(), json!({})),
        (
            "POST",
            "/api/v1/admin-tokens".to_owned(),
            json!({"name": "me-too", "role": "admin"}),
        ),
    ] {
        let reply = as_token(&app, &operator, m, &path, Some(body)).await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{m} {path}: {}",
            reply.text
        );
    }
    let reply = as_token(&app, &operator, "GET", "/api/v1/admin-tokens", None).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert_eq!(
        app.revision().await,
        revision,
        "an operator changed something"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn an_admin_token_writes_under_its_name_and_revocation_is_immediate(pool: PgPool) {
    let app = test_app(pool);
    // The bootstrap token is an admin named `bootstrap`.
    let me = app.get("/api/v1/whoami").await;
    assert_eq!(
        me.body,
        json!({"name": "bootstrap", "role": "admin", "token_id": null, "team_id": null,
               "expires_at": null})
    );

    let (admin_id, admin) = new_token(&app, "alice", "admin").await;
    let (viewer_id, viewer) = new_token(&app, "bob", "viewer").await;

    // Alice writes; the audit log names her (and the header as a note).
    let reply = as_token(
        &app,
        &admin,
        "POST",
        "/api/v1/channels",
        Some(json!({"name": "c", "provider": "openai", "base_url": "https://upstream.test/v1"})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let actor: String = sqlx::query_scalar("SELECT actor FROM audit_log ORDER BY id DESC LIMIT 1")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(actor, "alice");
    let entries = app.get("/api/v1/audit?resource=admin_token").await;
    let entries = entries.body["data"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 2);
    assert!(entries
        .iter()
        .all(|e| e["actor"] == "bootstrap" && e["action"] == "create"));
    assert_eq!(entries[1]["detail"]["name"], "bob");
    assert_eq!(entries[1]["detail"]["role"], "viewer");

    // Alice manages admin tokens: creates one, lists them, revokes Bob's.
    let (_, carol) = {
        let reply = as_token(
            &app,
            &admin,
            "POST",
            "/api/v1/admin-tokens",
            Some(
                json!({"name": "carol", "role": "operator", "expires_at": "2999-01-01T00:00:00Z"}),
            ),
        )
        .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        assert_eq!(reply.body["created_by"], "alice");
        assert_eq!(reply.body["expires_at"], "2999-01-01T00:00:00.000000Z");
        (
            reply.body["id"].as_i64().unwrap(),
            reply.body["token"].as_str().unwrap().to_owned(),
        )
    };
    // Bob has used his token once: last_used_at is set.
    assert_eq!(
        as_token(&app, &viewer, "GET", "/api/v1/channels", None)
            .await
            .status,
        StatusCode::OK
    );
    let list = as_token(&app, &admin, "GET", "/api/v1/admin-tokens", None).await;
    assert_eq!(list.status, StatusCode::OK);
    let rows = list.body["data"].as_array().unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["alice", "bob", "carol"]
    );
    let bob = &rows[1];
    assert!(bob["last_used_at"].is_string(), "{bob}");
    assert!(rows[2]["last_used_at"].is_null());
    assert_eq!(bob["role"], "viewer");
    assert!(
        bob.get("token").is_none() && bob.get("hash").is_none(),
        "{bob}"
    );
    for secret in [&admin, &viewer, &carol] {
        assert!(!list.text.contains(secret.as_str()), "a secret in the list");
    }
    let hashes: Vec<String> = sqlx::query_scalar("SELECT hash FROM admin_tokens")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    for hash in &hashes {
        assert!(!list.text.contains(hash.as_str()), "a hash in the list");
    }

    let reply = as_token(
        &app,
        &admin,
        "DELETE",
        &format!("/api/v1/admin-tokens/{viewer_id}"),
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    // Refused from the very next request.
    let reply = as_token(&app, &viewer, "GET", "/api/v1/channels", None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.body["error"]["code"], "invalid_admin_token");
    // Revoked once; the row stays, with when.
    let reply = as_token(
        &app,
        &admin,
        "DELETE",
        &format!("/api/v1/admin-tokens/{viewer_id}"),
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    let row = as_token(
        &app,
        &admin,
        "GET",
        &format!("/api/v1/admin-tokens/{viewer_id}"),
        None,
    )
    .await;
    assert!(row.body["revoked_at"].is_string(), "{}", row.text);
    // The name is free again once its token is revoked.
    new_token(&app, "bob", "viewer").await;

    // An expired token is refused like an unknown one.
    sqlx::query(
        "UPDATE admin_tokens SET expires_at = now() - interval '1 second' WHERE name = 'carol'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let reply = as_token(&app, &carol, "GET", "/api/v1/whoami", None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);

    // An admin may revoke itself; then it is refused too.
    let reply = as_token(
        &app,
        &admin,
        "DELETE",
        &format!("/api/v1/admin-tokens/{admin_id}"),
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    let reply = as_token(&app, &admin, "GET", "/api/v1/whoami", None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let revoked = app.get("/api/v1/audit?resource=admin_token").await;
    let last = revoked.body["data"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["actor"], "alice");
    assert_eq!(last["action"], "delete");
    assert_eq!(
        last["detail"],
        json!({"name": "alice", "role": "admin", "team_id": null})
    );

    // No secret (nor its hash) ever reached the audit log.
    let audit = audit_log_text(&app).await;
    for secret in [&admin, &viewer, &carol] {
        assert!(
            !audit.contains(secret.as_str()),
            "a secret in the audit log"
        );
        assert!(
            !audit.contains(&secret[..20]),
            "part of a secret in the audit log"
        );
    }
    for hash in &hashes {
        assert!(!audit.contains(hash.as_str()), "a hash in the audit log");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn admin_token_bodies_are_validated(pool: PgPool) {
    let app = test_app(pool);
    for (body, param) in [
        (json!({"name": "bootstrap", "role": "admin"}), "name"),
        (
            json!({"name": "system:recovery-probe", "role": "admin"}),
            "name",
        ),
        (json!({"name": "", "role": "admin"}), "name"),
        (json!({"name": "x", "role": "root"}), "role"),
        (
            json!({"name": "x", "role": "viewer", "expires_at": "tomorrow"}),
            "expires_at",
        ),
        (
            json!({"name": "x", "role": "viewer", "expires_at": "2001-01-01T00:00:00Z"}),
            "expires_at",
        ),
        (
            json!({"name": "x", "role": "viewer", "secret": "mine"}),
            "secret",
        ),
    ] {
        let reply = app.post("/api/v1/admin-tokens", body.clone()).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            reply.text
        );
        assert_eq!(reply.param(), Some(param), "{body}: {}", reply.text);
    }
    // A missing field is a malformed request, as for every body of this API.
    let reply = app.post("/api/v1/admin-tokens", json!({"name": "x"})).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    new_token(&app, "dup", "viewer").await;
    let reply = app
        .post(
            "/api/v1/admin-tokens",
            json!({"name": "dup", "role": "admin"}),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    assert_eq!(reply.param(), Some("name"));
    // Unknown tokens and the wrong scheme are 401s, as before.
    let reply = app
        .send(Method::GET, "/api/v1/whoami", None, Some("sy-admin-nope"))
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let reply = app.send(Method::GET, "/api/v1/whoami", None, None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.get("/api/v1/whoami").await.body["name"], "bootstrap");
}

/// POSTs a YAML body with `token`; (status, JSON body).
async fn post_yaml(app: &TestApp, path: &str, token: &str, yaml: &str) -> (StatusCode, Value) {
    let reply = app.post_yaml(path, yaml, token).await;
    (reply.status, reply.body)
}
