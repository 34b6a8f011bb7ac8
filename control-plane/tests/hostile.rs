//! The admin API against hostile or careless input: invented methods and paths, NUL and control
//! characters in every string field, secrets in channel headers and URLs, malformed requests of
//! every kind, and huge values. Each test reproduces the attack and checks the defence.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use common::{test_app, Reply, TestApp, ADMIN_TOKEN};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use tower::ServiceExt;

/// Sends anything: any method, any content type, any bytes.
async fn raw(
    app: &TestApp,
    method: &str,
    uri: &str,
    content_type: Option<&str>,
    body: impl Into<Body>,
    token: bool,
) -> Reply {
    let mut request = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(uri);
    if token {
        request = request.header("authorization", format!("Bearer {ADMIN_TOKEN}"));
    }
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let response = app
        .router
        .clone()
        .oneshot(request.body(body.into()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
        text,
    }
}

/// The reply is the API's JSON error shape with this status.
fn assert_json_error(reply: &Reply, status: StatusCode, what: &str) {
    assert_eq!(reply.status, status, "{what}: {}", reply.text);
    let content_type = reply
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(
        content_type.starts_with("application/json"),
        "{what}: content-type {content_type:?}, body {}",
        reply.text
    );
    let error = &reply.body["error"];
    for key in ["message", "type", "code"] {
        assert!(
            error[key].as_str().is_some_and(|v| !v.is_empty()),
            "{what}: error.{key} missing in {}",
            reply.text
        );
    }
}

async fn metrics_page(app: &TestApp) -> String {
    raw(app, "GET", "/metrics", None, Body::empty(), false)
        .await
        .text
}

// ----------------------------------------------------------------------- 1: metric labels

#[sqlx::test(migrations = "../migrations")]
async fn invented_methods_and_paths_do_not_grow_metrics(pool: PgPool) {
    let app = test_app(pool);
    // One of each kind first, so every label combination the flood can produce exists.
    raw(&app, "FOO0", "/x/0", None, Body::empty(), false).await;
    raw(&app, "GET", "/x/0", None, Body::empty(), false).await;
    raw(
        &app,
        "FOO0",
        "/api/v1/channels/0",
        None,
        Body::empty(),
        false,
    )
    .await;
    raw(
        &app,
        "GET",
        "/api/v1/channels/0",
        None,
        Body::empty(),
        false,
    )
    .await;
    metrics_page(&app).await; // counts itself only after answering
    let before = metrics_page(&app).await;

    for i in 0..300 {
        let method = format!("FOO{i}");
        let path = format!("/x/{i}/{}", "y".repeat(i % 17));
        let reply = raw(&app, &method, &path, None, Body::empty(), false).await;
        assert_json_error(&reply, StatusCode::NOT_FOUND, &path);
        raw(&app, "GET", &path, None, Body::empty(), false).await;
        raw(
            &app,
            &method,
            &format!("/api/v1/channels/{i}"),
            None,
            Body::empty(),
            false,
        )
        .await;
        raw(
            &app,
            "GET",
            &format!("/api/v1/channels/{i}"),
            None,
            Body::empty(),
            false,
        )
        .await;
    }
    let after = metrics_page(&app).await;
    // Only counter values changed: same number of series, and nearly the same size.
    assert_eq!(before.lines().count(), after.lines().count(), "{after}");
    assert!(after.len() < before.len() + 64, "{after}");
    assert!(!after.contains("FOO"), "{after}");
    assert!(!after.contains("/x/"), "{after}");
    assert!(
        after.contains(r#"method="other",route="unmatched",status="404""#),
        "{after}"
    );
    assert!(
        after.contains(r#"method="GET",route="/api/v1/channels/{id}",status="401""#),
        "{after}"
    );
}

// --------------------------------------------------------------- 2, 3: NUL and control chars

/// Ids of one of everything, to PATCH.
struct World {
    channel: i64,
    credential: i64,
    route: i64,
    member: i64,
    token: i64,
    team: i64,
}

async fn world(app: &TestApp) -> World {
    let channel = app.channel("c").await;
    let credential = app
        .create(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({"secret": "sk-world-0000000000"}),
        )
        .await;
    let route = app.route("gpt-4o").await;
    let member = app
        .member(
            route,
            json!({"channel_id": channel, "upstream_model": "gpt-4o"}),
        )
        .await;
    let token = app.create("/api/v1/tokens", json!({"name": "t"})).await;
    let team = app.create("/api/v1/teams", json!({"name": "team"})).await;
    World {
        channel,
        credential,
        route,
        member,
        token,
        team,
    }
}

/// Every (method, path, body, field) a string field can be written through, with `bad` in it.
fn string_fields(w: &World, bad: &str) -> Vec<(Method, String, Value, String)> {
    let channel = |key: &str, value: Value| {
        let mut body = json!({"name": "n", "provider": "openai", "base_url": "https://x.test"});
        body[key] = value;
        body
    };
    let c = w.channel;
    let post = Method::POST;
    let patch = Method::PATCH;
    vec![
        (
            post.clone(),
            "/api/v1/channels".into(),
            channel("name", json!(bad)),
            "name".into(),
        ),
        (
            post.clone(),
            "/api/v1/channels".into(),
            channel("base_url", json!(format!("https://x.test/{bad}v1"))),
            "base_url".into(),
        ),
        (
            post.clone(),
            "/api/v1/channels".into(),
            channel("retry_error_patterns", json!([format!("over{bad}loaded")])),
            "retry_error_patterns[0]".into(),
        ),
        (
            post.clone(),
            "/api/v1/channels".into(),
            channel("headers", json!({format!("x-{bad}"): "v"})),
            "headers".into(),
        ),
        (
            post.clone(),
            "/api/v1/channels".into(),
            channel("headers", json!({"x-key": format!("v{bad}v")})),
            "headers.x-key".into(),
        ),
        (
            patch.clone(),
            format!("/api/v1/channels/{c}"),
            json!({"name": format!("a{bad}")}),
            "name".into(),
        ),
        (
            patch.clone(),
            format!("/api/v1/channels/{c}"),
            json!({"base_url": format!("https://x.test/{bad}v1")}),
            "base_url".into(),
        ),
        (
            patch.clone(),
            format!("/api/v1/channels/{c}"),
            json!({"headers": {"x-key": format!("v{bad}v")}}),
            "headers.x-key".into(),
        ),
        (
            post.clone(),
            format!("/api/v1/channels/{c}/credentials"),
            json!({"secret": format!("sk-{bad}-abc")}),
            "secret".into(),
        ),
        (
            post.clone(),
            format!("/api/v1/channels/{c}/credentials"),
            json!({"secret_env": format!("KEY{bad}")}),
            "secret_env".into(),
        ),
        (
            patch.clone(),
            format!("/api/v1/credentials/{}", w.credential),
            json!({"secret": format!("sk-{bad}-abc")}),
            "secret".into(),
        ),
        (
            post.clone(),
            "/api/v1/routes".into(),
            json!({"model_pattern": format!("m{bad}")}),
            "model_pattern".into(),
        ),
        (
            patch.clone(),
            format!("/api/v1/routes/{}", w.route),
            json!({"model_pattern": format!("m{bad}")}),
            "model_pattern".into(),
        ),
        (
            post.clone(),
            format!("/api/v1/routes/{}/members", w.route),
            json!({"channel_id": c, "upstream_model": format!("m{bad}x")}),
            "upstream_model".into(),
        ),
        (
            post.clone(),
            format!("/api/v1/routes/{}/members", w.route),
            json!({"channel_id": c, "upstream_model": "m", "group_name": format!("g{bad}")}),
            "group_name".into(),
        ),
        (
            patch.clone(),
            format!("/api/v1/members/{}", w.member),
            json!({"upstream_model": format!("m{bad}x")}),
            "upstream_model".into(),
        ),
        (
            patch.clone(),
            format!("/api/v1/members/{}", w.member),
            json!({"group_name": format!("g{bad}")}),
            "group_name".into(),
        ),
        (
            post.clone(),
            "/api/v1/tokens".into(),
            json!({"name": format!("t{bad}")}),
            "name".into(),
        ),
        (
            post.clone(),
            "/api/v1/tokens".into(),
            json!({"name": "t", "route_group_name": format!("g{bad}")}),
            "route_group_name".into(),
        ),
        (
            patch.clone(),
            format!("/api/v1/tokens/{}", w.token),
            json!({"name": format!("t{bad}")}),
            "name".into(),
        ),
        (
            post.clone(),
            "/api/v1/teams".into(),
            json!({"name": format!("t{bad}")}),
            "name".into(),
        ),
        (
            post.clone(),
            "/api/v1/teams".into(),
            json!({"name": "t2", "models": [format!("m{bad}")]}),
            "models[0]".into(),
        ),
        (
            patch.clone(),
            format!("/api/v1/teams/{}", w.team),
            json!({"name": format!("t{bad}")}),
            "name".into(),
        ),
    ]
}

async fn expect_422_naming(app: &TestApp, method: Method, path: &str, body: Value, param: &str) {
    let reply = app
        .send(method.clone(), path, Some(body.clone()), Some(ADMIN_TOKEN))
        .await;
    assert_json_error(
        &reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        &format!("{method} {path} {body}"),
    );
    assert_eq!(
        reply.param(),
        Some(param),
        "{method} {path}: {}",
        reply.text
    );
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(param.split(['[', '.']).next().unwrap()),
        "{message}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn nul_in_any_string_field_is_a_422_naming_it(pool: PgPool) {
    let app = test_app(pool);
    let w = world(&app).await;
    let audited = app.audit_rows().await;
    for (method, path, body, param) in string_fields(&w, "\0") {
        expect_422_naming(&app, method, &path, body, &param).await;
    }
    // Nothing was written.
    assert_eq!(app.audit_rows().await, audited);
    // A NUL in a query parameter that reaches SQL is a 400, not a 500.
    let reply = app.get("/api/v1/audit?resource=%00").await;
    assert_json_error(&reply, StatusCode::BAD_REQUEST, "audit resource NUL");
    assert_eq!(reply.param(), Some("resource"));
}

#[sqlx::test(migrations = "../migrations")]
async fn control_characters_in_single_line_fields_are_a_422(pool: PgPool) {
    let app = test_app(pool);
    let w = world(&app).await;
    for bad in ["\r\n", "\n", "\r", "\x1b"] {
        for (method, path, body, param) in string_fields(&w, bad) {
            // Error patterns match multi-line upstream bodies: only NUL is refused there.
            if param == "retry_error_patterns[0]" {
                continue;
            }
            expect_422_naming(&app, method, &path, body, &param).await;
        }
    }
    // A header name must be a token: no spaces, no colon.
    for name in ["x key", "x:key", "", "clé"] {
        let reply = app
            .post(
                "/api/v1/channels",
                json!({"name": "n", "provider": "openai", "base_url": "https://x.test",
                       "headers": {name: "v"}}),
            )
            .await;
        assert_json_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, name);
        assert_eq!(reply.param(), Some("headers"), "{}", reply.text);
    }
    // A tab is fine in a header value (HTTP allows it), and in an error pattern.
    let ok = app
        .post(
            "/api/v1/channels",
            json!({"name": "tabs", "provider": "openai", "base_url": "https://x.test",
                   "headers": {"x-a": "a\tb"}, "retry_error_patterns": ["a\nb"]}),
        )
        .await;
    assert_eq!(ok.status, StatusCode::CREATED, "{}", ok.text);
}

#[sqlx::test(migrations = "../migrations")]
async fn rejected_secrets_are_never_echoed(pool: PgPool) {
    let app = test_app(pool);
    let channel = app.channel("c").await;
    let secret = "sk-LEAKME-0123456789\r\nx-injected: yes";
    let reply = app
        .post(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({ "secret": secret }),
        )
        .await;
    assert_json_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, "secret");
    assert_eq!(reply.param(), Some("secret"));
    assert!(!reply.text.contains("LEAKME"), "{}", reply.text);
    let reply = app
        .post(
            "/api/v1/channels",
            json!({"name": "n", "provider": "openai", "base_url": "https://x.test",
                   "headers": {"x-api-key": "LEAKME-value\r\nx-injected: yes"}}),
        )
        .await;
    assert_json_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, "header");
    assert!(!reply.text.contains("LEAKME"), "{}", reply.text);
    // A trailing newline from a copy-paste is trimmed, not refused.
    let reply = app
        .post(
            &format!("/api/v1/channels/{channel}/credentials"),
            json!({ "secret": "sk-pasted-0123456789\n" }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

// ------------------------------------------------------------- 4: secrets in headers and URLs

const HEADER_SECRET: &str = "pk-HEADERSECRET-9f8e7d6c";
const URL_PASSWORD: &str = "URLPASSWORD-hunter2";

#[sqlx::test(migrations = "../migrations")]
async fn channel_header_values_and_url_passwords_are_masked(pool: PgPool) {
    let app = test_app(pool.clone());
    let base_url = format!("https://svc:{URL_PASSWORD}@gw.test/v1");
    let created = app
        .post(
            "/api/v1/channels",
            json!({"name": "portkey", "provider": "openai", "base_url": base_url,
                   "headers": {"x-portkey-api-key": HEADER_SECRET, "x-org": "acme"}}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let id = created.body["id"].as_i64().unwrap();
    let check = |reply: &Reply, what: &str| {
        assert!(
            !reply.text.contains(HEADER_SECRET),
            "{what}: {}",
            reply.text
        );
        assert!(
            !reply.text.contains("HEADERSECRET"),
            "{what}: {}",
            reply.text
        );
        assert!(!reply.text.contains(URL_PASSWORD), "{what}: {}", reply.text);
    };
    check(&created, "create");
    assert_eq!(created.body["base_url"], "https://svc:***@gw.test/v1");
    // Names shown, values masked like credential secrets.
    assert_eq!(created.body["headers"]["x-portkey-api-key"], "****7d6c");
    assert_eq!(created.body["headers"]["x-org"], "****");

    check(&app.get(&format!("/api/v1/channels/{id}")).await, "get");
    check(&app.get("/api/v1/channels").await, "list");

    // A PATCH that does not send them keeps the real values, not the masks.
    let patched = app
        .patch(
            &format!("/api/v1/channels/{id}"),
            json!({"name": "portkey-2"}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    check(&patched, "patch");
    let (stored_url, stored_headers): (String, Value) =
        sqlx::query_as("SELECT base_url, headers FROM channels WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(stored_url, base_url);
    assert_eq!(stored_headers["x-portkey-api-key"], HEADER_SECRET);

    // A PATCH that sends new ones answers masked too.
    let rotated = app
        .patch(
            &format!("/api/v1/channels/{id}"),
            json!({"headers": {"x-portkey-api-key": format!("{HEADER_SECRET}-2")}}),
        )
        .await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.text);
    check(&rotated, "patch headers");

    // The audit log, through the API and in the table, never holds them.
    let audit = app.get("/api/v1/audit?resource=channel").await;
    assert_eq!(audit.body["data"].as_array().unwrap().len(), 3);
    check(&audit, "audit");
    assert!(audit.text.contains("svc:***@gw.test"), "{}", audit.text);
    let details: Vec<Value> = sqlx::query_scalar("SELECT detail FROM audit_log")
        .fetch_all(&pool)
        .await
        .unwrap();
    for detail in details {
        let text = detail.to_string();
        assert!(!text.contains("HEADERSECRET"), "{text}");
        assert!(!text.contains(URL_PASSWORD), "{text}");
    }

    // The snapshot the proxies receive still carries the real values: they need them.
    app.refresh().await;
    let published = app.publisher.current().unwrap();
    let channel = published.snapshot.channel(id).unwrap();
    assert_eq!(channel.base_url, base_url);
    assert!(
        channel
            .headers
            .iter()
            .any(|(name, value)| name == "x-portkey-api-key"
                && *value == format!("{HEADER_SECRET}-2"))
    );
}

/// The SQL mask of `base_url` and the engine's `redact_url_userinfo` (used for audit details)
/// are the same rule.
#[sqlx::test(migrations = "../migrations")]
async fn url_masking_in_sql_matches_the_engine_rule(pool: PgPool) {
    let app = test_app(pool.clone());
    for url in [
        "https://user:pw@h.test/v1",
        "https://user:p@ss@h.test/v1",
        "https://a@b:c@h.test",
        "http://:pw@h.test?x=1",
        "https://user@h.test/v1",
        "https://h.test:8080/v1",
        "https://h.test:8080/p@x:y",
        "https://u@h.test:8080/",
    ] {
        // The API refuses a query string now; one stored before that is still masked by the
        // same rule, so it is written straight into the table.
        let id = app
            .create(
                "/api/v1/channels",
                json!({"name": url, "provider": "openai", "base_url": "https://h.test"}),
            )
            .await;
        sqlx::query("UPDATE channels SET base_url = $1 WHERE id = $2")
            .bind(url)
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
        let shown = app.get(&format!("/api/v1/channels/{id}")).await;
        assert_eq!(
            shown.body["base_url"],
            switchyard_engine::validate::redact_url_userinfo(url),
            "{url}"
        );
    }
}

// --------------------------------------------------------------------- 5: JSON rejections

#[sqlx::test(migrations = "../migrations")]
async fn every_rejection_answers_the_json_error_shape(pool: PgPool) {
    let app = test_app(pool);
    let channel = app.channel("c").await;
    let get = |uri: &'static str| raw(&app, "GET", uri, None, Body::empty(), true);

    let reply = get("/api/v1/channels/abc").await;
    assert_json_error(&reply, StatusCode::BAD_REQUEST, "non-numeric id");
    assert_eq!(reply.param(), Some("id"));
    let reply = get("/api/v1/channels/99999999999999999999999").await;
    assert_json_error(&reply, StatusCode::BAD_REQUEST, "id out of range");
    let reply = get("/api/v1/channels?limit=x").await;
    assert_json_error(&reply, StatusCode::BAD_REQUEST, "limit=x");
    assert_eq!(reply.param(), Some("limit"), "{}", reply.text);
    let reply = get("/api/v1/audit?resource_id=x").await;
    assert_json_error(&reply, StatusCode::BAD_REQUEST, "resource_id=x");
    let reply = get("/api/v1/routes/explain?model=m&seed=-1").await;
    assert_json_error(&reply, StatusCode::BAD_REQUEST, "seed=-1");

    let body = r#"{"name": "n", "provider": "openai", "base_url": "https://x.test"}"#;
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ] {
        let reply = raw(
            &app,
            "POST",
            "/api/v1/channels",
            Some(content_type),
            body,
            true,
        )
        .await;
        assert_json_error(&reply, StatusCode::UNSUPPORTED_MEDIA_TYPE, content_type);
    }
    for content_type in [
        "application/json",
        "application/json; charset=utf-8",
        "application/merge-patch+json",
    ] {
        let reply = raw(
            &app,
            "PATCH",
            &format!("/api/v1/channels/{channel}"),
            Some(content_type),
            r#"{"auto_ban": true}"#,
            true,
        )
        .await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "{content_type}: {}",
            reply.text
        );
    }
    let reply = raw(
        &app,
        "POST",
        "/api/v1/channels",
        Some("application/json"),
        "{nope",
        true,
    )
    .await;
    assert_json_error(&reply, StatusCode::BAD_REQUEST, "invalid JSON");
    let reply = raw(
        &app,
        "POST",
        "/api/v1/channels",
        Some("application/json"),
        "",
        true,
    )
    .await;
    assert_json_error(&reply, StatusCode::BAD_REQUEST, "empty body");

    // Unknown paths and methods, with and without a token.
    for token in [true, false] {
        let reply = raw(&app, "GET", "/nope", None, Body::empty(), token).await;
        assert_json_error(&reply, StatusCode::NOT_FOUND, "/nope");
        assert_eq!(reply.body["error"]["code"], "unknown_endpoint");
        let reply = raw(&app, "PUT", "/healthz", None, Body::empty(), token).await;
        assert_json_error(&reply, StatusCode::METHOD_NOT_ALLOWED, "PUT /healthz");
    }
    let reply = raw(&app, "GET", "/api/v1/nope", None, Body::empty(), true).await;
    assert_json_error(&reply, StatusCode::NOT_FOUND, "/api/v1/nope");
    let reply = raw(&app, "PUT", "/api/v1/channels", None, Body::empty(), true).await;
    assert_json_error(
        &reply,
        StatusCode::METHOD_NOT_ALLOWED,
        "PUT /api/v1/channels",
    );
    assert_eq!(reply.body["error"]["code"], "method_not_allowed");
    // Without a token an admin path still says 401 before anything else.
    let reply = raw(&app, "PUT", "/api/v1/channels", None, Body::empty(), false).await;
    assert_json_error(&reply, StatusCode::UNAUTHORIZED, "PUT without token");
    let reply = raw(
        &app,
        "GET",
        "/api/v1/channels/abc",
        None,
        Body::empty(),
        false,
    )
    .await;
    assert_json_error(&reply, StatusCode::UNAUTHORIZED, "bad id without token");
}

/// The API's own `Path`/`Query` extractors keep the OpenAPI document's parameters.
#[sqlx::test(migrations = "../migrations")]
async fn openapi_still_lists_path_and_query_parameters(pool: PgPool) {
    let app = test_app(pool);
    let doc = app.get("/api/v1/openapi.json").await;
    let names = |path: &str, method: &str| -> Vec<String> {
        doc.body["paths"][path][method]["parameters"]
            .as_array()
            .map(|params| {
                params
                    .iter()
                    .map(|p| p["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(names("/api/v1/channels/{id}", "get").contains(&"id".to_owned()));
    assert!(names("/api/v1/channels", "get").contains(&"limit".to_owned()));
    assert!(names("/api/v1/channels/{id}/events", "get").contains(&"cursor".to_owned()));
}

// ------------------------------------------------------------ 6: body limit and echo bounds

#[sqlx::test(migrations = "../migrations")]
async fn oversized_bodies_are_a_json_413(pool: PgPool) {
    let app = test_app(pool);
    let huge = format!(r#"{{"name": "{}"}}"#, "a".repeat(10 * 1024 * 1024));
    let reply = raw(
        &app,
        "POST",
        "/api/v1/channels",
        Some("application/json"),
        huge.clone(),
        true,
    )
    .await;
    assert_json_error(&reply, StatusCode::PAYLOAD_TOO_LARGE, "10 MB body");
    assert_eq!(reply.body["error"]["code"], "payload_too_large");
    assert!(reply.text.len() < 1024, "{}", reply.text.len());
    // Without a Content-Length (a streamed body) too.
    let stream = futures_util::stream::iter(
        huge.into_bytes()
            .chunks(64 * 1024)
            .map(|c| Ok::<_, std::io::Error>(axum::body::Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    );
    let reply = raw(
        &app,
        "PUT",
        "/api/v1/settings",
        Some("application/json"),
        Body::from_stream(stream),
        true,
    )
    .await;
    assert_json_error(&reply, StatusCode::PAYLOAD_TOO_LARGE, "streamed body");
    assert_eq!(app.audit_rows().await, 0);
}

#[sqlx::test(migrations = "../migrations")]
async fn huge_values_are_not_echoed_whole(pool: PgPool) {
    let app = test_app(pool);
    let big = "Z".repeat(900 * 1024);
    let channel = |key: &str, value: Value| {
        let mut body = json!({"name": "n", "provider": "openai", "base_url": "https://x.test"});
        body[key] = value;
        body
    };
    let cases = [
        ("provider", channel("provider", json!(big))),
        ("status", channel("status", json!(big))),
        ("max_concurrency", channel("max_concurrency", json!(big))),
        ("unknown field", channel(&big, json!(1))),
        (
            "capabilities",
            channel("capabilities", json!({ big.as_str(): 1 })),
        ),
    ];
    for (what, body) in cases {
        let reply = app.post("/api/v1/channels", body).await;
        assert!(reply.status.is_client_error(), "{what}: {}", reply.status);
        assert_json_error(&reply, reply.status, what);
        assert!(
            reply.text.len() < 4096,
            "{what}: {} bytes echoed",
            reply.text.len()
        );
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains('…') || !message.contains("ZZZZ"),
            "{what}: {message}"
        );
    }
    let reply = app
        .post(
            "/api/v1/routes",
            json!({"model_pattern": "m", "routing_mode": big}),
        )
        .await;
    assert_json_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, "routing_mode");
    assert!(reply.text.len() < 4096);
    let reply = app
        .post(
            "/api/v1/teams",
            json!({"name": "t", "plan": { big.as_str(): {} }}),
        )
        .await;
    assert_json_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, "plan key");
    assert!(reply.text.len() < 4096);
    let reply = app
        .put("/api/v1/settings", json!({ big.as_str(): 1 }))
        .await;
    assert_json_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, "settings key");
    assert!(reply.text.len() < 4096);
}

// --------------------------------------------------------------------------- mock channels

#[sqlx::test(migrations = "../migrations")]
async fn mock_channels_need_no_credential_in_the_api(pool: PgPool) {
    let app = test_app(pool);
    let channel = app
        .create(
            "/api/v1/channels",
            json!({"name": "sim", "provider": "mock", "base_url": "mock://sim"}),
        )
        .await;
    let route = app.route("m").await;
    app.member(route, json!({"channel_id": channel, "upstream_model": "m"}))
        .await;
    let patched = app
        .patch(
            &format!("/api/v1/channels/{channel}"),
            json!({"status": "enabled"}),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.text);
    app.refresh().await;
}

/// A body that the server's body deadline cut off is a 408 naming the timeout, as on the proxy
/// (it was a 400 "cannot read the request body").
#[sqlx::test(migrations = "../migrations")]
async fn a_body_cut_off_by_the_deadline_is_a_json_408(pool: PgPool) {
    let app = test_app(pool);
    let stream = futures_util::stream::iter(vec![
        Ok(axum::body::Bytes::from_static(b"{\"name\":")),
        Err(switchyard_server::BodyTimeout),
    ]);
    let reply = raw(
        &app,
        "POST",
        "/api/v1/teams",
        Some("application/json"),
        Body::from_stream(stream),
        true,
    )
    .await;
    assert_json_error(&reply, StatusCode::REQUEST_TIMEOUT, "timed-out body");
    assert_eq!(reply.body["error"]["code"], "request_body_timeout");
    assert_eq!(app.audit_rows().await, 0);
}

/// Request paths are appended to a channel's base_url: a query string or fragment in it would
/// turn them into a query or fragment and send the request (a probe's, a trial call's) elsewhere.
#[sqlx::test(migrations = "../migrations")]
async fn a_base_url_with_a_query_or_fragment_is_a_422(pool: PgPool) {
    let app = test_app(pool);
    for url in [
        "https://api.example.test/v1?x=/other",
        "https://api.example.test/v1#/other",
    ] {
        let reply = app
            .post(
                "/api/v1/channels",
                json!({"name": "q", "provider": "openai", "base_url": url}),
            )
            .await;
        assert_json_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, url);
        assert_eq!(reply.body["error"]["param"], "base_url", "{}", reply.text);
    }
    let id = app
        .create(
            "/api/v1/channels",
            json!({"name": "q", "provider": "openai", "base_url": "https://api.example.test/v1"}),
        )
        .await;
    let reply = app
        .patch(
            &format!("/api/v1/channels/{id}"),
            json!({"base_url": "https://api.example.test/v1?redirect=1"}),
        )
        .await;
    assert_json_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, "patch");
}
