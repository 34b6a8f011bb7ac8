//! The admin API's door with single sign-on on, against real Postgres: a console session's
//! cookie authenticates the person it was opened for, a write made with it needs the session's
//! CSRF token, a 403 names a person as a person, and a bearer shaped as a JWT goes to the
//! identity provider's check while an admin token stays ours. No provider runs: sessions are
//! stored as the sign-in's callback stores them, and the one JWT here is refused for its
//! algorithm before any key would be fetched (the issuer is a closed loopback port).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_control_plane::metrics::Metrics;
use switchyard_control_plane::publisher::Publisher;
use switchyard_control_plane::role::Role;
use switchyard_control_plane::sso::person::Person;
use switchyard_control_plane::sso::settings::SsoArgs;
use switchyard_control_plane::sso::{store, Sso};
use switchyard_control_plane::{app, AppState};
use tower::ServiceExt;

use common::ADMIN_TOKEN;

/// A JWT's shape (three base64url parts, the first `{"alg":"HS256"}`): the provider's check
/// refuses its algorithm before reading anything else.
const HS256_JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl";

/// The admin router with single sign-on on.
fn sso_router(pool: PgPool) -> axum::Router {
    let args = SsoArgs {
        issuer: Some("http://127.0.0.1:9".into()),
        client_id: Some("switchyard-console".into()),
        public_url: Some("http://127.0.0.1:8080".into()),
        scopes: "openid email".into(),
        groups_claim: "groups".into(),
        roles: Some("ops=admin".into()),
        session_hours: 8,
        keys_max_age_secs: 3600,
        keys_refetch_secs: 10,
        ..SsoArgs::default()
    };
    let settings = args.settings().unwrap().unwrap();
    let options = switchyard_upstream::ClientOptions::new(std::time::Duration::from_secs(2));
    let sso = Sso::new(
        settings,
        switchyard_upstream::HttpClient::new(options),
        ADMIN_TOKEN,
    );
    let metrics = Arc::new(Metrics::default());
    let publisher = Publisher::new(pool.clone(), Arc::clone(&metrics));
    let state = AppState::new(pool, ADMIN_TOKEN, publisher, metrics).with_sso(Some(Arc::new(sso)));
    app(state)
}

/// A console session for `name` with `role` (and `team`): the cookie's secret.
async fn session(pool: &PgPool, name: &str, role: Role, team: Option<i64>) -> String {
    let person = Person {
        subject: format!("sub-{name}"),
        name: name.to_owned(),
        role,
        team,
    };
    store::create(pool, &person, 3600).await.unwrap()
}

/// One request: `cookie` as the session cookie, `csrf` in its header, `authorization` as is.
struct Call<'a> {
    method: Method,
    path: &'a str,
    body: Option<Value>,
    cookie: Option<&'a str>,
    csrf: Option<&'a str>,
    authorization: Option<&'a str>,
}

impl<'a> Call<'a> {
    fn new(method: Method, path: &'a str) -> Self {
        Call {
            method,
            path,
            body: None,
            cookie: None,
            csrf: None,
            authorization: None,
        }
    }
}

/// The router's answer to `call`: status and JSON body (`Null` when there is none).
async fn send(router: &axum::Router, call: Call<'_>) -> (StatusCode, Value) {
    let mut request = Request::builder().method(call.method).uri(call.path);
    if let Some(secret) = call.cookie {
        request = request.header("cookie", format!("theme=dark; switchyard-session={secret}"));
    }
    if let Some(csrf) = call.csrf {
        request = request.header("x-switchyard-csrf", csrf);
    }
    if let Some(authorization) = call.authorization {
        request = request.header("authorization", authorization);
    }
    let request = match call.body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
        None => request.body(Body::empty()).unwrap(),
    };
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn team_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM teams")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_session_cookie_is_the_person_it_was_opened_for(pool: PgPool) {
    let router = sso_router(pool.clone());
    let bootstrap = format!("Bearer {ADMIN_TOKEN}");
    let mut create = Call::new(Method::POST, "/api/v1/teams");
    create.body = Some(json!({"name": "research", "models": ["*"]}));
    create.authorization = Some(&bootstrap);
    let (status, team) = send(&router, create).await;
    assert_eq!(status, StatusCode::CREATED, "{team}");
    let team = team["id"].as_i64().unwrap();

    let secret = session(&pool, "alice@example.com", Role::Operator, None).await;
    let mut whoami = Call::new(Method::GET, "/api/v1/whoami");
    whoami.cookie = Some(&secret);
    let (status, body) = send(&router, whoami).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["name"], "alice@example.com");
    assert_eq!(body["role"], "operator");
    assert_eq!(body["token_id"], Value::Null);
    assert_eq!(body["team_id"], Value::Null);
    assert!(body["expires_at"].as_str().is_some(), "{body}");
    assert_eq!(body["csrf_token"], store::csrf_token(&secret).as_str());

    let secret = session(&pool, "bob@example.com", Role::Admin, Some(team)).await;
    let mut whoami = Call::new(Method::GET, "/api/v1/whoami");
    whoami.cookie = Some(&secret);
    let (status, body) = send(&router, whoami).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["name"], "bob@example.com");
    assert_eq!(body["role"], "admin");
    assert_eq!(body["team_id"], team);

    // A secret no session has, and no credential at all.
    let mut unknown = Call::new(Method::GET, "/api/v1/whoami");
    unknown.cookie = Some("no-such-session");
    let (status, body) = send(&router, unknown).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"]["code"], "invalid_admin_token");
    let (status, _) = send(&router, Call::new(Method::GET, "/api/v1/whoami")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_write_made_with_the_session_cookie_needs_its_csrf_token(pool: PgPool) {
    let router = sso_router(pool.clone());
    let bootstrap = format!("Bearer {ADMIN_TOKEN}");
    let secret = session(&pool, "ops@example.com", Role::Admin, None).await;
    let other = session(&pool, "other@example.com", Role::Admin, None).await;
    let csrf = store::csrf_token(&secret);

    // Reads need no CSRF token.
    for method in [Method::GET, Method::HEAD] {
        let mut read = Call::new(method.clone(), "/api/v1/teams");
        read.cookie = Some(&secret);
        let (status, body) = send(&router, read).await;
        assert_eq!(status, StatusCode::OK, "{method}: {body}");
    }

    // A write without it, or with another session's, is refused before anything is stored.
    for sent in [None, Some(store::csrf_token(&other)), Some(String::new())] {
        let mut write = Call::new(Method::POST, "/api/v1/teams");
        write.body = Some(json!({"name": "research", "models": ["*"]}));
        write.cookie = Some(&secret);
        write.csrf = sent.as_deref();
        let (status, body) = send(&router, write).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{sent:?}: {body}");
        assert_eq!(body["error"]["code"], "csrf_token_invalid", "{sent:?}");
    }
    assert_eq!(team_count(&pool).await, 0);

    // With the session's own token, the write is made.
    let mut write = Call::new(Method::POST, "/api/v1/teams");
    write.body = Some(json!({"name": "research", "models": ["*"]}));
    write.cookie = Some(&secret);
    write.csrf = Some(&csrf);
    let (status, body) = send(&router, write).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(team_count(&pool).await, 1);

    // A bearer credential needs none: only a cookie is sent by a browser on its own.
    let mut write = Call::new(Method::POST, "/api/v1/teams");
    write.body = Some(json!({"name": "platform", "models": ["*"]}));
    write.authorization = Some(&bootstrap);
    let (status, body) = send(&router, write).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_person_below_the_routes_role_is_named_as_a_person(pool: PgPool) {
    let router = sso_router(pool.clone());
    let secret = session(&pool, "alice@example.com", Role::Viewer, None).await;
    let csrf = store::csrf_token(&secret);
    let mut write = Call::new(Method::POST, "/api/v1/teams");
    write.body = Some(json!({"name": "research", "models": ["*"]}));
    write.cookie = Some(&secret);
    write.csrf = Some(&csrf);
    let (status, body) = send(&router, write).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "insufficient_role");
    assert_eq!(
        body["error"]["message"],
        "POST /api/v1/teams needs the admin role; \"alice@example.com\" (single sign-on) has the \
         viewer role"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn an_empty_bearer_is_no_credential_and_the_session_cookie_counts(pool: PgPool) {
    let router = sso_router(pool.clone());
    let secret = session(&pool, "alice@example.com", Role::Viewer, None).await;
    for authorization in ["Bearer ", "Bearer    "] {
        let mut whoami = Call::new(Method::GET, "/api/v1/whoami");
        whoami.cookie = Some(&secret);
        whoami.authorization = Some(authorization);
        let (status, body) = send(&router, whoami).await;
        assert_eq!(status, StatusCode::OK, "{authorization:?}: {body}");
        assert_eq!(body["name"], "alice@example.com");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_jwt_is_checked_as_the_providers_and_an_admin_token_as_ours(pool: PgPool) {
    let router = sso_router(pool.clone());
    let bootstrap = format!("Bearer {ADMIN_TOKEN}");

    // The bootstrap token is no JWT: it is ours, whatever single sign-on says.
    let mut whoami = Call::new(Method::GET, "/api/v1/whoami");
    whoami.authorization = Some(&bootstrap);
    let (status, body) = send(&router, whoami).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["name"], "bootstrap");
    assert_eq!(body["role"], "admin");

    // A JWT goes to the provider's check, which refuses this one as a JWT (not as an unknown
    // admin token).
    let bearer = format!("Bearer {HS256_JWT}");
    let mut whoami = Call::new(Method::GET, "/api/v1/whoami");
    whoami.authorization = Some(&bearer);
    let (status, body) = send(&router, whoami).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"]["code"], "sso_token_refused", "{body}");

    // Without single sign-on, the same bearer is just a token no one issued.
    let plain = common::test_app(pool.clone());
    let mut whoami = Call::new(Method::GET, "/api/v1/whoami");
    whoami.authorization = Some(&bearer);
    let (status, body) = send(&plain.router, whoami).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"]["code"], "invalid_admin_token", "{body}");
}
