//! The request log end to end: requests sent through an in-process proxy (a failover, a cache
//! hit, a stream, tags and end users from headers and bodies), their rows sent with the proxy's
//! usage batch and applied through the control plane's ingestion, then read back through
//! `GET /api/v1/requests` (every field, filters, cursor paging, CSV and JSON Lines export) and
//! `GET /api/v1/usage?group_by=tag|end_user`; duplicate batches, the retention's partition drops
//! with an injected clock, and bad tags refused in the client's own protocol.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{proxy, test_app, TestApp};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_control_plane::request_log::{day_of_ms, ensure_partition, maintain};
use switchyard_control_plane::usage::apply_batch;
use switchyard_data_plane::usage::UsageReporter;
use switchyard_data_plane::AppState as ProxyState;
use switchyard_proto::v1::{RequestLogRecord, UsageBatch};
use tower::ServiceExt;

const DAY_MS: i64 = 86_400_000;

/// A control plane with route `m`: a channel that always fails (tried first) and one that
/// answers, priced; a cache rule on `m`'s chat completions; a token `app` of team `research`.
async fn fleet(pool: PgPool) -> (TestApp, String) {
    let app = test_app(pool);
    let bad = app
        .create(
            "/api/v1/channels",
            json!({"name": "bad", "provider": "mock",
                   "base_url": "mock://sim?failure_rate=1&failure_status=503"}),
        )
        .await;
    let good = app
        .create(
            "/api/v1/channels",
            json!({"name": "good", "provider": "mock",
                   "base_url": "mock://sim?content=hello%20from%20good"}),
        )
        .await;
    let route = app.route("m").await;
    app.member(
        route,
        json!({"channel_id": bad, "upstream_model": "bad-model", "priority": 10}),
    )
    .await;
    app.member(
        route,
        json!({"channel_id": good, "upstream_model": "good-model"}),
    )
    .await;
    app.create(
        "/api/v1/prices",
        json!({"channel_id": good, "model_pattern": "*",
               "input_per_million": "1", "output_per_million": "2"}),
    )
    .await;
    app.create(
        "/api/v1/cache_rules",
        json!({"name": "c", "model_pattern": "m", "endpoints": ["chat_completions"],
               "ttl_seconds": 600}),
    )
    .await;
    let team = app
        .create(
            "/api/v1/teams",
            json!({"name": "research", "models": ["m"]}),
        )
        .await;
    let reply = app
        .post("/api/v1/tokens", json!({"name": "app", "team_id": team}))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    (app, reply.body["token"].as_str().unwrap().to_owned())
}

/// Sends one request to the proxy and reads the whole answer (a stream to its end).
async fn send(
    state: &Arc<ProxyState>,
    path: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (StatusCode, Value, String, axum::http::HeaderMap) {
    let mut request = Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Body::from(body.to_string())).unwrap();
    let response = switchyard_data_plane::app(Arc::clone(state))
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, body, text, headers)
}

/// Sends every pending batch of the reporter through the control plane's ingestion.
async fn flush(pool: &PgPool, usage: &UsageReporter) {
    while let Some(batch) = usage.take_batch() {
        apply_batch(pool, &batch).await.unwrap();
    }
}

/// The row of `request_id` in the log as the API answers it.
async fn row(app: &TestApp, request_id: &str) -> Value {
    let reply = app.get("/api/v1/requests?limit=500").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["request_id"] == request_id)
        .unwrap_or_else(|| panic!("no row {request_id} in {}", reply.text))
        .clone()
}

fn chat(user: &str, stream: bool) -> Value {
    json!({"model": "m", "user": user, "stream": stream,
           "messages": [{"role": "user", "content": "hello there"}]})
}

#[sqlx::test(migrations = "../migrations")]
async fn a_request_through_a_proxy_appears_with_every_field(pool: PgPool) {
    let (app, token) = fleet(pool.clone()).await;
    let (proxy, usage) = proxy(&pool).await;
    let auth = format!("Bearer {token}");
    // A failover (the bad channel first), a cache miss; tags from the header.
    let (status, _, text, headers) = send(
        &proxy,
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("x-request-id", "req-plain"),
            ("x-switchyard-tags", "team:search, env=prod"),
        ],
        chat("alice", false),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    // The same request again: a cache hit.
    let (status, _, _, _) = send(
        &proxy,
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-request-id", "req-hit")],
        chat("alice", false),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // A stream, its tags from the body's metadata; an Anthropic request naming its end user.
    let mut streamed = chat("carol", true);
    streamed["metadata"] = json!({"tags": "batch,env=dev"});
    // Another conversation: the cache has no answer to it.
    streamed["messages"][0]["content"] = json!("stream me something");
    let (status, _, _, _) = send(
        &proxy,
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-request-id", "req-stream")],
        streamed,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, text, _) = send(
        &proxy,
        "/v1/messages",
        &[("x-api-key", &token), ("x-request-id", "req-anthropic")],
        json!({"model": "m", "max_tokens": 16, "metadata": {"user_id": "bob"},
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    flush(&pool, &usage).await;

    let plain = row(&app, "req-plain").await;
    assert_eq!(plain["status"], 200);
    assert_eq!(plain["token"], "app");
    assert!(plain["token_id"].as_i64().unwrap() > 0);
    assert_eq!(plain["team"], "research");
    assert_eq!(plain["route"], "m");
    assert_eq!(plain["endpoint"], "chat_completions");
    assert_eq!(plain["model"], "m");
    assert_eq!(plain["served_model"], "good-model");
    assert_eq!(plain["channel"], "good");
    let attempts: i64 = headers["x-switchyard-attempts"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(attempts >= 2, "the failing channel first: {attempts}");
    assert_eq!(plain["attempts"], attempts, "as the answer said: {plain}");
    assert_eq!(plain["error_code"], Value::Null);
    assert_eq!(plain["cache"], "miss");
    assert_eq!(plain["tags"], json!(["team:search", "env=prod"]));
    assert_eq!(plain["end_user"], "alice");
    assert!(plain["input_tokens"].as_i64().unwrap() > 0, "{plain}");
    assert!(plain["output_tokens"].as_i64().unwrap() > 0, "{plain}");
    assert!(plain["cost_usd"].as_str().is_some(), "priced: {plain}");
    assert_eq!(plain["first_token_ms"], Value::Null, "not a stream");
    assert!(plain["at"].as_str().unwrap().ends_with('Z'));

    let hit = row(&app, "req-hit").await;
    assert_eq!(
        (&hit["cache"], &hit["attempts"]),
        (&json!("hit"), &json!(0))
    );
    assert_eq!(hit["cost_usd"], Value::Null, "a hit costs nothing upstream");

    let stream = row(&app, "req-stream").await;
    assert_eq!(stream["status"], 200);
    assert_eq!(stream["tags"], json!(["batch", "env=dev"]));
    assert_eq!(stream["end_user"], "carol");
    let ttft = stream["first_token_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("a stream's time to first token: {stream}"));
    assert!(ttft <= stream["latency_ms"].as_i64().unwrap(), "{stream}");

    let anthropic = row(&app, "req-anthropic").await;
    assert_eq!(anthropic["endpoint"], "messages");
    assert_eq!(anthropic["end_user"], "bob");
    assert_eq!(anthropic["tags"], json!([]));

    // Usage by tag and by end user, from the log.
    let by_tag = app.get("/api/v1/usage?group_by=tag").await;
    assert_eq!(by_tag.status, StatusCode::OK, "{}", by_tag.text);
    let groups: Vec<(String, i64)> = by_tag.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["tag"].as_str().unwrap().to_owned(),
                g["requests"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            ("batch".into(), 1),
            ("env=dev".into(), 1),
            ("env=prod".into(), 1),
            ("team:search".into(), 1)
        ]
    );
    assert_eq!(by_tag.body["total"]["requests"], 4);
    assert_eq!(by_tag.body["total"]["cache_hits"], 1);
    let by_user = app.get("/api/v1/usage?group_by=end_user").await;
    let users: Vec<(String, i64)> = by_user.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["end_user"].as_str().unwrap().to_owned(),
                g["requests"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        users,
        [("alice".into(), 2), ("bob".into(), 1), ("carol".into(), 1)]
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn bad_tags_and_end_users_are_refused_in_the_clients_protocol(pool: PgPool) {
    let (_app, token) = fleet(pool.clone()).await;
    let (proxy, usage) = proxy(&pool).await;
    let auth = format!("Bearer {token}");
    let seventeen: Vec<String> = (0..17).map(|i| format!("t{i}")).collect();
    let (status, body, _, _) = send(
        &proxy,
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("x-switchyard-tags", &seventeen.join(",")),
        ],
        chat("alice", false),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"]["message"],
        "x-switchyard-tags: more than 16 tags"
    );
    assert_eq!(body["error"]["type"], "invalid_request_error");

    // Anthropic's error shape; a character outside the tag set, named.
    let (status, body, text, _) = send(
        &proxy,
        "/v1/messages",
        &[("x-api-key", &token)],
        json!({"model": "m", "max_tokens": 16, "metadata": {"tags": ["ok", "no spaces"]},
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert_eq!(body["type"], "error", "{text}");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("metadata.tags: tag `no spaces` has the character ' '"),
        "{message}"
    );

    let (status, body, _, _) = send(
        &proxy,
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("x-switchyard-tags", &"a".repeat(65)),
        ],
        chat("alice", false),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("longer than 64"));

    let (status, body, _, _) = send(
        &proxy,
        "/v1/chat/completions",
        &[("authorization", &auth)],
        chat(&"u".repeat(257), false),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"]["message"],
        "user is longer than 256 characters"
    );

    // Refused requests are logged too, with the gateway's error code.
    flush(&pool, &usage).await;
    let codes: Vec<(i64, String)> =
        sqlx::query_as("SELECT status::bigint, error_code FROM request_log ORDER BY at")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(codes.len(), 4);
    assert!(
        codes
            .iter()
            .all(|(s, c)| *s == 400 && c == "invalid_request"),
        "{codes:?}"
    );
}

/// A synthetic row at `at_ms`.
fn log_row(at_ms: i64, id: &str, token: &str, tags: &[&str], end_user: &str) -> RequestLogRecord {
    RequestLogRecord {
        started_unix_ms: at_ms,
        request_id: id.to_owned(),
        token: token.to_owned(),
        route: "m".to_owned(),
        model: "m".to_owned(),
        served_model: "good-model".to_owned(),
        channel: "good".to_owned(),
        attempts: 1,
        status: 200,
        latency_ms: 12,
        input_tokens: 10,
        output_tokens: 5,
        cost_pico_usd: Some(20_000_000),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        end_user: end_user.to_owned(),
        endpoint: "chat_completions".to_owned(),
        ..RequestLogRecord::default()
    }
}

fn log_batch(id: &str, rows: Vec<RequestLogRecord>) -> UsageBatch {
    UsageBatch {
        batch_id: id.to_owned(),
        client_id: "test".to_owned(),
        requests: rows,
        ..UsageBatch::default()
    }
}

fn now_ms() -> i64 {
    switchyard_proto::usage::unix_now_s() * 1000
}

/// Seven rows a second apart: tokens a/b, tags, end users; two share their millisecond.
fn seven_rows(now: i64) -> Vec<RequestLogRecord> {
    vec![
        log_row(now - 7000, "r1", "a", &["x"], "u1"),
        log_row(now - 6000, "r2", "b", &["x", "y"], "u2"),
        log_row(now - 5000, "r3", "a", &[], "u1"),
        log_row(now - 4000, "r4", "b", &["y"], ""),
        log_row(now - 4000, "r5", "a", &["x"], "u2"),
        log_row(now - 2000, "r6", "a", &["z"], "u1"),
        log_row(now - 1000, "r7", "b", &[], ""),
    ]
}

fn ids(reply: &common::Reply) -> Vec<String> {
    reply.body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", reply.text))
        .iter()
        .map(|r| r["request_id"].as_str().unwrap().to_owned())
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn filters_select_rows_and_the_cursor_pages_each_row_once(pool: PgPool) {
    let app = test_app(pool.clone());
    let now = now_ms();
    apply_batch(&pool, &log_batch("b-1", seven_rows(now)))
        .await
        .unwrap();

    let all = app.get("/api/v1/requests").await;
    assert_eq!(
        ids(&all),
        ["r7", "r6", "r5", "r4", "r3", "r2", "r1"],
        "newest first"
    );
    for (query, expected) in [
        ("token=a", vec!["r6", "r5", "r3", "r1"]),
        ("tag=x", vec!["r5", "r2", "r1"]),
        ("tag=y&token=b", vec!["r4", "r2"]),
        ("end_user=u1", vec!["r6", "r3", "r1"]),
        (
            "status=200&channel=good&model=good-model",
            vec!["r7", "r6", "r5", "r4", "r3", "r2", "r1"],
        ),
        ("status=500", vec![]),
    ] {
        let reply = app.get(&format!("/api/v1/requests?{query}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{query}: {}", reply.text);
        assert_eq!(ids(&reply), expected, "{query}");
    }
    // since is inclusive, until exclusive: r4's and r7's arrival, as the API states them.
    let at = |id: &str| {
        all.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["request_id"] == id)
            .unwrap()["at"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (since, until) = (at("r4"), at("r7"));
    let reply = app
        .get(&format!("/api/v1/requests?since={since}&until={until}"))
        .await;
    assert_eq!(ids(&reply), ["r6", "r5", "r4"]);

    // Pages of two: every row exactly once, in order, even with rows arriving between pages.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/requests?limit=2&cursor={c}"),
            None => "/api/v1/requests?limit=2".to_owned(),
        };
        let page = app.get(&path).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.text);
        seen.extend(ids(&page));
        if seen.len() == 2 {
            // A newer request arrives: it is not on the later pages.
            apply_batch(
                &pool,
                &log_batch("b-2", vec![log_row(now, "r8", "a", &[], "")]),
            )
            .await
            .unwrap();
        }
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ["r7", "r6", "r5", "r4", "r3", "r2", "r1"]);
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len());

    for bad in ["cursor=nonsense", "limit=0", "since=yesterday", "status=42"] {
        let reply = app.get(&format!("/api/v1/requests?{bad}")).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{bad}: {}",
            reply.text
        );
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_batch_sent_again_adds_no_rows(pool: PgPool) {
    let now = now_ms();
    let batch = log_batch("b-1", seven_rows(now));
    let first = apply_batch(&pool, &batch).await.unwrap();
    assert_eq!((first.log_rows, first.duplicate), (7, false));
    let again = apply_batch(&pool, &batch).await.unwrap();
    assert_eq!((again.log_rows, again.duplicate), (0, true));
    // The same rows under another id (the parts of a refused batch resent): nothing added.
    let parts = apply_batch(&pool, &log_batch("b-1.2", seven_rows(now)))
        .await
        .unwrap();
    assert_eq!((parts.log_rows, parts.duplicate), (0, false));
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM request_log")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 7);
}

async fn partitions(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'request_log'::regclass ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn the_retention_drops_whole_partitions_past_it(pool: PgPool) {
    let now = now_ms();
    let today = day_of_ms(now);
    // Partitions of 40, 31 and 30 days ago, as an earlier control plane made them, and a row in
    // each.
    for back in [40, 31, 30] {
        ensure_partition(&pool, today - back).await.unwrap();
    }
    let old = |back: i64, id: &str| log_row(now - back * DAY_MS, id, "a", &[], "");
    let applied = apply_batch(
        &pool,
        &log_batch("old", vec![old(40, "d40"), old(31, "d31"), old(30, "d30")]),
    )
    .await
    .unwrap();
    assert_eq!(applied.log_rows, 3);
    assert_eq!(partitions(&pool).await.len(), 3);

    // Thirty days kept: the two partitions before them dropped whole, the rest kept.
    let done = maintain(&pool, now, 30).await.unwrap();
    assert_eq!(done.dropped.len(), 2, "{done:?}");
    let kept = partitions(&pool).await;
    assert_eq!(
        kept.len(),
        4,
        "30 days ago, today and the next two days: {kept:?}"
    );
    let rows: Vec<String> = sqlx::query_scalar("SELECT request_id FROM request_log")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(rows, ["d30"]);
    // A late row of a dropped day is left out, not a reason to make its partition again.
    let late = apply_batch(&pool, &log_batch("late", vec![old(40, "late")]))
        .await
        .unwrap();
    assert_eq!((late.log_rows, late.log_rows_refused), (0, 1));
    assert_eq!(partitions(&pool).await, kept);
    // Run again: nothing more to drop.
    assert!(maintain(&pool, now, 30).await.unwrap().dropped.is_empty());
}

#[sqlx::test(migrations = "../migrations")]
async fn the_log_exports_as_csv_and_json_lines_with_the_filters(pool: PgPool) {
    let app = test_app(pool.clone());
    let now = now_ms();
    let mut rows = seven_rows(now);
    rows[0].end_user = "=cmd()".to_owned();
    rows[0].error_code = "a,b".to_owned();
    apply_batch(&pool, &log_batch("b-1", rows)).await.unwrap();

    let csv = app.get("/api/v1/requests?format=csv&token=a").await;
    assert_eq!(csv.status, StatusCode::OK, "{}", csv.text);
    assert!(csv.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let lines: Vec<&str> = csv.text.lines().collect();
    assert!(
        lines[0].starts_with("at,request_id,trace_id,token_id,token,"),
        "{}",
        lines[0]
    );
    assert_eq!(
        lines.len(),
        5,
        "a header and token a's four rows: {}",
        csv.text
    );
    assert!(lines[1].contains(",r6,"), "newest first: {}", lines[1]);
    let r1 = lines[4];
    assert!(r1.contains(",\"a,b\","), "quoted: {r1}");
    assert!(r1.ends_with(",x,\"'=cmd()\""), "never a formula: {r1}");

    let jsonl = app.get("/api/v1/requests?format=jsonl&tag=x").await;
    assert_eq!(jsonl.status, StatusCode::OK);
    assert_eq!(jsonl.headers["content-type"], "application/x-ndjson");
    let ids: Vec<String> = jsonl
        .text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["request_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(ids, ["r5", "r2", "r1"]);
}
