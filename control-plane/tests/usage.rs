//! Usage accounting on the control plane: `ReportUsage` batches stored per minute in Postgres
//! (idempotent by batch id, authenticated by the fleet token) and `GET /api/v1/usage`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use switchyard_control_plane::grpc::{FleetTokens, SnapshotWatchServer};
use switchyard_control_plane::metrics::Metrics;
use switchyard_control_plane::publisher::Publisher;
use switchyard_control_plane::usage::apply_batch;
use switchyard_data_plane::usage::UsageClient;
use switchyard_proto::v1::{UsageBatch, UsageRecord};
use switchyard_proto::WatchAuth;
use tokio_util::sync::CancellationToken;

use common::{test_app, ADMIN_TOKEN};

/// 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600;

#[allow(clippy::too_many_arguments)]
fn record(
    minute: i64,
    token: &str,
    team: &str,
    channel: &str,
    model: &str,
    requests: u64,
    input: u64,
    output: u64,
    cached: u64,
) -> UsageRecord {
    UsageRecord {
        bucket_start_unix_s: T0 + minute * 60,
        token: token.to_owned(),
        team: team.to_owned(),
        route: "gpt-*".to_owned(),
        channel: channel.to_owned(),
        model: model.to_owned(),
        requests,
        input_tokens: input,
        output_tokens: output,
        cached_tokens: cached,
        ..Default::default()
    }
}

fn batch(id: &str, records: Vec<UsageRecord>) -> UsageBatch {
    UsageBatch {
        batch_id: id.to_owned(),
        client_id: "test".to_owned(),
        records,
        dropped_requests: 0,
        shadows: Vec::new(),
        requests: Vec::new(),
        semantic_trials: Vec::new(),
        guardrails: Vec::new(),
        events: Vec::new(),
    }
}

fn totals(v: &Value) -> (i64, i64, i64, i64) {
    (
        v["requests"].as_i64().unwrap(),
        v["input_tokens"].as_i64().unwrap(),
        v["output_tokens"].as_i64().unwrap(),
        v["cached_tokens"].as_i64().unwrap(),
    )
}

async fn rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM usage_minutes")
        .fetch_one(pool)
        .await
        .unwrap()
}

const RANGE: &str = "from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z";

#[sqlx::test(migrations = "../migrations")]
async fn batches_are_stored_per_minute_and_answered_by_every_dimension(pool: PgPool) {
    let app = test_app(pool.clone());
    let first = batch(
        "p1-1",
        vec![
            record(0, "app", "research", "openai", "gpt-4o", 2, 100, 20, 10),
            record(0, "app", "research", "azure", "gpt-4o", 1, 50, 5, 0),
            record(1, "console", "", "openai", "gpt-4o-mini", 3, 30, 3, 3),
        ],
    );
    let applied = apply_batch(&pool, &first).await.unwrap();
    assert_eq!((applied.records, applied.duplicate), (3, false));
    // Same minute and dimensions from another proxy: added to the same row, no new row.
    let second = batch(
        "p2-1",
        vec![record(0, "app", "research", "openai", "gpt-4o", 1, 7, 7, 7)],
    );
    apply_batch(&pool, &second).await.unwrap();
    assert_eq!(rows(&pool).await, 3, "one row per minute and dimensions");

    let reply = app.get(&format!("/api/v1/usage?{RANGE}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(totals(&reply.body["total"]), (7, 187, 35, 20));
    assert_eq!(reply.body["groups"], json!([]));
    assert_eq!(reply.body["from"], "2026-01-01T00:00:00.000000Z");
    assert_eq!(reply.body["to"], "2026-01-02T00:00:00.000000Z");

    let by = |dimension: &'static str| {
        let app = &app;
        async move {
            let reply = app
                .get(&format!("/api/v1/usage?{RANGE}&group_by={dimension}"))
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            assert_eq!(reply.body["group_by"], dimension);
            reply.body["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| (g["key"].as_str().unwrap().to_owned(), totals(g)))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        by("channel").await,
        vec![
            ("azure".to_owned(), (1, 50, 5, 0)),
            ("openai".to_owned(), (6, 137, 30, 20)),
        ]
    );
    assert_eq!(
        by("token").await,
        vec![
            ("app".to_owned(), (4, 157, 32, 17)),
            ("console".to_owned(), (3, 30, 3, 3)),
        ]
    );
    assert_eq!(
        by("team").await,
        vec![
            (String::new(), (3, 30, 3, 3)),
            ("research".to_owned(), (4, 157, 32, 17)),
        ]
    );
    assert_eq!(
        by("route").await,
        vec![("gpt-*".to_owned(), (7, 187, 35, 20))]
    );
    assert_eq!(
        by("model").await,
        vec![
            ("gpt-4o".to_owned(), (4, 157, 32, 17)),
            ("gpt-4o-mini".to_owned(), (3, 30, 3, 3)),
        ]
    );

    // The range selects minutes: [00:01, ...) leaves minute 0 out; `to` is exclusive.
    let reply = app
        .get("/api/v1/usage?from=2026-01-01T00:01:00Z&to=2026-01-02T00:00:00Z")
        .await;
    assert_eq!(totals(&reply.body["total"]), (3, 30, 3, 3));
    let reply = app
        .get("/api/v1/usage?from=2026-01-01T00:00:00Z&to=2026-01-01T00:01:00Z")
        .await;
    assert_eq!(totals(&reply.body["total"]), (4, 157, 32, 17));
    // Offsets are honoured.
    let reply = app
        .get("/api/v1/usage?from=2026-01-01T01:01:00%2B01:00&to=2026-01-01T02:00:00%2B01:00")
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(totals(&reply.body["total"]), (3, 30, 3, 3));
    // Default range: the last 24 hours (nothing reported then).
    let reply = app.get("/api/v1/usage?group_by=channel").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(totals(&reply.body["total"]), (0, 0, 0, 0));
}

#[sqlx::test(migrations = "../migrations")]
async fn a_retried_batch_is_applied_once(pool: PgPool) {
    let app = test_app(pool.clone());
    let b = batch(
        "proxy-a-7",
        vec![record(5, "app", "", "openai", "gpt-4o", 2, 10, 20, 5)],
    );
    assert!(!apply_batch(&pool, &b).await.unwrap().duplicate);
    for _ in 0..3 {
        let again = apply_batch(&pool, &b).await.unwrap();
        assert!(again.duplicate);
        assert_eq!(again.records, 0);
    }
    // Concurrent resends of a new batch: exactly one applies.
    let c = batch(
        "proxy-a-8",
        vec![record(5, "app", "", "openai", "gpt-4o", 1, 1, 1, 1)],
    );
    let results = futures_util::future::join_all((0..4).map(|_| apply_batch(&pool, &c))).await;
    assert_eq!(
        results
            .iter()
            .filter(|r| !r.as_ref().unwrap().duplicate)
            .count(),
        1
    );
    let reply = app.get(&format!("/api/v1/usage?{RANGE}")).await;
    assert_eq!(totals(&reply.body["total"]), (3, 11, 21, 6));
}

/// The issue's poison: an upstream's `prompt_tokens = 18446744073709551615`, relayed by a proxy.
/// It used to be stored as `i64::MAX`, so the usage report answered 422 for the minute, and a
/// second one in the same minute overflowed the row: that batch failed for good and its proxy
/// resent it forever while its later usage waited. Now the figure is not taken, every batch
/// applies, and the report stays exact.
#[sqlx::test(migrations = "../migrations")]
async fn an_impossible_figure_is_not_taken_and_later_batches_still_apply(pool: PgPool) {
    let app = test_app(pool.clone());
    let poisoned = |id: &str| {
        batch(
            id,
            vec![
                record(0, "app", "", "openai", "gpt-4o", 1, u64::MAX, 3, 0),
                record(0, "app", "", "openai", "gpt-4o", 2, 20, 4, 2),
            ],
        )
    };
    for id in ["p1-1", "p1-2"] {
        let applied = apply_batch(&pool, &poisoned(id))
            .await
            .unwrap_or_else(|e| panic!("batch {id}: {e}"));
        assert_eq!((applied.records, applied.refused_figures), (1, 1));
    }
    // The proxy's next batch applies too (nothing is stuck in front of it).
    apply_batch(
        &pool,
        &batch(
            "p1-3",
            vec![record(0, "app", "", "openai", "gpt-4o", 1, 5, 1, 0)],
        ),
    )
    .await
    .unwrap();
    for query in ["", "&group_by=token"] {
        let reply = app.get(&format!("/api/v1/usage?{RANGE}{query}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(totals(&reply.body["total"]), (7, 45, 15, 4));
    }
    // The default window (the last 24 h) with the poison in it.
    apply_batch(
        &pool,
        &UsageBatch {
            records: vec![UsageRecord {
                bucket_start_unix_s: switchyard_proto::usage::unix_now_s() / 60 * 60,
                ..record(0, "app", "", "openai", "gpt-4o", 1, u64::MAX, 1, 0)
            }],
            ..batch("p1-4", Vec::new())
        },
    )
    .await
    .unwrap();
    let reply = app.get("/api/v1/usage").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(totals(&reply.body["total"]), (1, 0, 1, 0));
}

/// Figures already stored (by an older version, or by hand) whose sum is beyond a `bigint`:
/// the report saturates at `i64::MAX` instead of answering 422 `validation_failed` with an
/// empty `param` (the database's "bigint out of range" mistaken for the client's input).
#[sqlx::test(migrations = "../migrations")]
async fn the_report_saturates_on_stored_sums_beyond_a_bigint(pool: PgPool) {
    let app = test_app(pool.clone());
    for token in ["a", "b"] {
        sqlx::query(
            "INSERT INTO usage_minutes (bucket, token, team, route, channel, model, requests, \
                                        input_tokens, output_tokens, cached_tokens) \
             VALUES (to_timestamp($1), $2, '', 'gpt-*', 'openai', 'gpt-4o', 1, $3, 1, 0)",
        )
        .bind(T0)
        .bind(token)
        .bind(i64::MAX)
        .execute(&pool)
        .await
        .unwrap();
    }
    for group in ["", "&group_by=channel"] {
        let reply = app.get(&format!("/api/v1/usage?{RANGE}{group}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{group}: {}", reply.text);
        assert_eq!(totals(&reply.body["total"]), (2, i64::MAX, 2, 0));
    }
    let reply = app
        .get(&format!("/api/v1/usage?{RANGE}&group_by=channel"))
        .await;
    assert_eq!(totals(&reply.body["groups"][0]), (2, i64::MAX, 2, 0));
    // Adding to a row already at the bound saturates too, rather than failing the batch.
    apply_batch(
        &pool,
        &batch(
            "p1-1",
            vec![record(0, "a", "", "openai", "gpt-4o", 1, 7, 1, 0)],
        ),
    )
    .await
    .unwrap();
    let stored: i64 =
        sqlx::query_scalar("SELECT input_tokens FROM usage_minutes WHERE token = 'a'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(stored, i64::MAX);
}

fn priced(mut r: UsageRecord, cost_pico_usd: u64, unpriced_requests: u64) -> UsageRecord {
    r.cost_pico_usd = cost_pico_usd;
    r.unpriced_requests = unpriced_requests;
    r
}

#[sqlx::test(migrations = "../migrations")]
async fn cost_and_unpriced_requests_are_stored_and_reported(pool: PgPool) {
    let app = test_app(pool.clone());
    apply_batch(
        &pool,
        &batch(
            "c-1",
            vec![
                // 0.00725 USD for 2 requests, 1 more unpriced.
                priced(
                    record(0, "app", "research", "openai", "gpt-4o", 3, 100, 20, 10),
                    7_250_000_000,
                    1,
                ),
                // Every request unpriced.
                priced(
                    record(0, "app", "research", "azure", "llama", 2, 50, 5, 0),
                    0,
                    2,
                ),
                // 90 minutes later, another hour.
                priced(
                    record(90, "console", "", "openai", "gpt-4o", 1, 10, 1, 0),
                    1,
                    0,
                ),
            ],
        ),
    )
    .await
    .unwrap();
    // Same row again from another proxy: the cost and unpriced count add up.
    apply_batch(
        &pool,
        &batch(
            "c-2",
            vec![priced(
                record(0, "app", "research", "openai", "gpt-4o", 1, 1, 1, 0),
                750_000_000,
                0,
            )],
        ),
    )
    .await
    .unwrap();
    let (cost, unpriced): (i64, i64) = sqlx::query_as(
        "SELECT cost_pico_usd, unpriced_requests FROM usage_minutes WHERE channel = 'openai' \
         AND token = 'app'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((cost, unpriced), (8_000_000_000, 1));

    let reply = app.get(&format!("/api/v1/usage?{RANGE}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["total"]["cost_usd"], "0.008000000001");
    assert_eq!(reply.body["total"]["unpriced_requests"], 3);

    // Several dimensions at once: each group names its values; an all-unpriced group has no cost.
    let reply = app
        .get(&format!("/api/v1/usage?{RANGE}&group_by=team,channel"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["group_by"], Value::Null);
    assert_eq!(reply.body["dimensions"], json!(["team", "channel"]));
    let groups = reply.body["groups"].as_array().unwrap();
    let summary: Vec<(Value, Value, Value, Value, i64)> = groups
        .iter()
        .map(|g| {
            (
                g["key"].clone(),
                g["team"].clone(),
                g["channel"].clone(),
                g["cost_usd"].clone(),
                g["unpriced_requests"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                json!(""),
                json!(""),
                json!("openai"),
                json!("0.000000000001"),
                0
            ),
            (
                json!("research"),
                json!("research"),
                json!("azure"),
                Value::Null,
                2
            ),
            (
                json!("research"),
                json!("research"),
                json!("openai"),
                json!("0.008"),
                1
            ),
        ]
    );
    assert!(
        groups[0].get("token").is_none(),
        "only the grouped dimensions"
    );
    assert!(groups[0].get("bucket_start").is_none());

    // By hour (UTC): one group per hour with usage, ordered by dimension then bucket.
    let reply = app
        .get(&format!(
            "/api/v1/usage?{RANGE}&group_by=channel&bucket=hour"
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["bucket"], "hour");
    assert_eq!(reply.body["group_by"], "channel");
    let keys: Vec<(String, String, i64)> = reply.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["key"].as_str().unwrap().to_owned(),
                g["bucket_start"].as_str().unwrap().to_owned(),
                g["requests"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            ("azure".into(), "2026-01-01T00:00:00.000000Z".into(), 2),
            ("openai".into(), "2026-01-01T00:00:00.000000Z".into(), 4),
            ("openai".into(), "2026-01-01T01:00:00.000000Z".into(), 1),
        ]
    );
    // A day bucket alone, with an offset range: still UTC days.
    let reply = app.get(&format!("/api/v1/usage?{RANGE}&bucket=day")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let groups = reply.body["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0]["bucket_start"], "2026-01-01T00:00:00.000000Z");
    assert_eq!(groups[0]["key"], "");
    assert_eq!(groups[0]["requests"], 7);
    assert_eq!(reply.body["dimensions"], json!([]));

    // Every dimension at once.
    let reply = app
        .get(&format!(
            "/api/v1/usage?{RANGE}&group_by=model,%20token,route,team,channel"
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["groups"].as_array().unwrap().len(), 3);
    assert_eq!(reply.body["groups"][0]["key"], "gpt-4o");
    assert_eq!(reply.body["groups"][0]["token"], "app");

    // Repeated or unknown dimensions, unknown buckets: 400 naming the parameter.
    for (query, param) in [
        ("group_by=team,team", "group_by"),
        ("group_by=team,,model", "group_by"),
        ("group_by=team,colour", "group_by"),
        ("bucket=week", "bucket"),
    ] {
        let reply = app.get(&format!("/api/v1/usage?{RANGE}&{query}")).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{query}: {}",
            reply.text
        );
        assert_eq!(reply.param(), Some(param), "{query}: {}", reply.text);
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_record_with_more_unpriced_requests_than_requests_is_left_out_alone(pool: PgPool) {
    let bad = batch(
        "u-1",
        vec![
            record(0, "app", "", "openai", "gpt-4o", 1, 1, 1, 0),
            priced(record(0, "app", "", "openai", "gpt-4o", 1, 1, 1, 0), 0, 2),
        ],
    );
    let applied = apply_batch(&pool, &bad).await.unwrap();
    assert_eq!((applied.records, applied.refused_figures), (1, 1));
    let requests: i64 = sqlx::query_scalar("SELECT requests FROM usage_minutes")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(requests, 1, "the batch's other record is applied");
    sqlx::query("DELETE FROM usage_minutes")
        .execute(&pool)
        .await
        .unwrap();
    // A cost on a record with no priced request is not taken; the rest of it is.
    let applied = apply_batch(
        &pool,
        &batch(
            "u-2",
            vec![priced(
                record(0, "app", "", "openai", "gpt-4o", 1, 1, 1, 0),
                u64::MAX,
                1,
            )],
        ),
    )
    .await
    .unwrap();
    assert_eq!(applied.refused_figures, 1);
    // A huge cost saturates the row rather than failing the batch.
    apply_batch(
        &pool,
        &batch(
            "u-3",
            vec![priced(
                record(0, "app", "", "openai", "gpt-4o", 2, 1, 1, 0),
                u64::MAX,
                0,
            )],
        ),
    )
    .await
    .unwrap();
    apply_batch(
        &pool,
        &batch(
            "u-4",
            vec![priced(
                record(0, "app", "", "openai", "gpt-4o", 1, 1, 1, 0),
                5,
                0,
            )],
        ),
    )
    .await
    .unwrap();
    let (cost, unpriced): (i64, i64) =
        sqlx::query_as("SELECT cost_pico_usd, unpriced_requests FROM usage_minutes")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((cost, unpriced), (i64::MAX, 1));
}

#[sqlx::test(migrations = "../migrations")]
async fn invalid_queries_and_missing_auth_are_refused(pool: PgPool) {
    let app = test_app(pool);
    for (query, param) in [
        ("from=yesterday", Some("from")),
        ("to=2026-01-01", Some("to")),
        ("from=2026-02-30T00:00:00Z", None),
        (
            "from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z",
            Some("from"),
        ),
        (
            "from=2026-01-01T00:00:00Z&to=2026-01-01T00:00:00Z",
            Some("from"),
        ),
    ] {
        let reply = app.get(&format!("/api/v1/usage?{query}")).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{query}: {}",
            reply.text
        );
        assert_eq!(reply.param(), param, "{query}: {}", reply.text);
    }
    let reply = app.get("/api/v1/usage?group_by=colour").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    let reply = app.send(Method::GET, "/api/v1/usage", None, None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let reply = app
        .send(
            Method::GET,
            "/api/v1/usage",
            None,
            Some("wrong-token-0123456789"),
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let reply = app
        .send(Method::GET, "/api/v1/usage", None, Some(ADMIN_TOKEN))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
}

/// A database error while the range is read is the server's (500), never a bad range (400):
/// only an invalid date-time (class 22, such as February 30th) is the client's.
#[sqlx::test(migrations = "../migrations")]
async fn a_database_refusing_connections_is_not_a_bad_range(pool: PgPool) {
    use sqlx::Connection;
    let app = test_app(pool);
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let url = std::env::var("DATABASE_URL").unwrap();
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    // New connections are refused with SQLSTATE 55000; the open ones are ended.
    sqlx::query(&format!(r#"ALTER DATABASE "{db}" ALLOW_CONNECTIONS false"#))
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&db)
        .execute(&mut admin)
        .await
        .unwrap();
    let reply = app.get("/api/v1/usage?from=2026-01-01T00:00:00Z").await;
    sqlx::query(&format!(r#"ALTER DATABASE "{db}" ALLOW_CONNECTIONS true"#))
        .execute(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        reply.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        reply.text
    );
}

/// The gRPC edge in-process, with `ReportUsage` served into `pool`.
async fn grpc_edge(pool: &PgPool, fleet: Option<&str>) -> (String, CancellationToken) {
    let metrics = Arc::new(Metrics::default());
    let publisher = Publisher::new(pool.clone(), Arc::clone(&metrics));
    let shutdown = CancellationToken::new();
    let service = SnapshotWatchServer::new(
        publisher.subscribe(),
        shutdown.clone(),
        metrics,
        FleetTokens::parse(fleet),
    )
    .with_usage(pool.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = shutdown.clone();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                async move { stop.cancelled().await },
            ),
    );
    (format!("http://{addr}"), shutdown)
}

fn auth(token: Option<&str>) -> WatchAuth {
    WatchAuth {
        fleet_token: token.map(str::to_owned),
        ..WatchAuth::default()
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn report_usage_over_grpc_needs_the_fleet_token_and_is_idempotent(pool: PgPool) {
    let app = test_app(pool.clone());
    let (endpoint, shutdown) = grpc_edge(&pool, Some("old-fleet-token,new-fleet-token")).await;
    let b = batch(
        "grpc-1",
        vec![record(0, "app", "t", "openai", "gpt-4o", 1, 40, 2, 0)],
    );

    for token in [None, Some("not-the-fleet-token")] {
        let mut client = UsageClient::new(&endpoint, &auth(token)).unwrap();
        let status = client.report(&b).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{token:?}");
    }
    assert_eq!(rows(&pool).await, 0);

    let mut client = UsageClient::new(&endpoint, &auth(Some("new-fleet-token"))).unwrap();
    let ack = client.report(&b).await.unwrap();
    assert_eq!((ack.applied, ack.duplicate), (1, false));
    let mut client = UsageClient::new(&endpoint, &auth(Some("old-fleet-token"))).unwrap();
    let ack = client.report(&b).await.unwrap();
    assert_eq!(
        (ack.applied, ack.duplicate),
        (0, true),
        "a resend is acknowledged, not added"
    );

    // A record that can never be stored is left out; the rest of its batch is applied.
    let mut bad = batch(
        "grpc-2",
        vec![
            record(0, "app", "t", "openai", "gpt-4o", 1, 1, 1, 1),
            record(0, "app", "t", "openai", "gpt-4o", 1, 10, 1, 0),
        ],
    );
    bad.records[0].bucket_start_unix_s += 1;
    let ack = client.report(&bad).await.unwrap();
    assert_eq!(ack.applied, 1);
    // A batch that can never be stored is refused as invalid (the proxy drops it).
    bad.batch_id = String::new();
    let status = client.report(&bad).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);

    let reply = app.get(&format!("/api/v1/usage?{RANGE}")).await;
    assert_eq!(totals(&reply.body["total"]), (2, 50, 3, 0));
    shutdown.cancel();
}

/// Without a fleet token nobody can prove to be a proxy, so nobody may write usage (it becomes
/// spend and budgets): an anonymous report is refused and nothing is stored.
#[sqlx::test(migrations = "../migrations")]
async fn without_a_fleet_token_usage_reports_are_refused(pool: PgPool) {
    let (endpoint, shutdown) = grpc_edge(&pool, None).await;
    let mut client = UsageClient::new(&endpoint, &auth(None)).unwrap();
    let status = client
        .report(&batch(
            "anon-1",
            vec![record(0, "a", "", "c", "m", 999_999, 1, 1, 1)],
        ))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    assert!(
        status.message().contains("SWITCHYARD_FLEET_TOKEN"),
        "{}",
        status.message()
    );
    assert_eq!(rows(&pool).await, 0);
    shutdown.cancel();
}

#[sqlx::test(migrations = "../migrations")]
async fn the_reporter_delivers_usage_exactly_once_through_the_grpc_edge(pool: PgPool) {
    let app = test_app(pool.clone());
    let (endpoint, shutdown) = grpc_edge(&pool, Some("fleet-token-0123")).await;
    let config = switchyard_data_plane::usage::UsageConfig {
        flush_interval: Duration::from_millis(50),
        ..Default::default()
    };
    let buffer = Arc::new(switchyard_data_plane::usage::UsageBuffer::new(&config));
    let stop = CancellationToken::new();
    let task = tokio::spawn(switchyard_data_plane::usage::report_usage(
        Arc::clone(&buffer),
        endpoint,
        auth(Some("fleet-token-0123")),
        config,
        stop.clone(),
    ));
    let key = |channel: &str| switchyard_data_plane::usage::UsageKey {
        token: "app".into(),
        team: Some("research".into()),
        route: "gpt-*".into(),
        channel: channel.into(),
        model: "gpt-4o".into(),
    };
    for i in 0..200u64 {
        buffer.add(
            key(if i % 4 == 0 { "anthropic" } else { "openai" }),
            switchyard_data_plane::usage::UsageCounts {
                requests: 1,
                input_tokens: i,
                output_tokens: 2,
                cached_tokens: i % 2,
                ..Default::default()
            },
        );
    }
    stop.cancel();
    task.await.unwrap().unwrap();
    let now = "from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z";
    let reply = app
        .get(&format!("/api/v1/usage?{now}&group_by=channel"))
        .await;
    assert_eq!(totals(&reply.body["total"]), (200, 19_900, 400, 100));
    assert_eq!(reply.body["groups"][0]["key"], "anthropic");
    assert_eq!(reply.body["groups"][0]["requests"], 50);
    shutdown.cancel();
}

/// A batch the control plane refuses for one record (here a trigger stands for any reason the
/// database may have) is resent by the proxy in parts: the one record is dropped alone, every
/// other record of the batch is counted.
#[sqlx::test(migrations = "../migrations")]
async fn a_refused_batch_is_resent_in_parts_so_only_its_bad_record_is_lost(pool: PgPool) {
    use switchyard_data_plane::usage::{
        report_usage, UsageBuffer, UsageConfig, UsageCounts, UsageKey,
    };
    sqlx::query(
        "CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           RAISE EXCEPTION 'refused' USING ERRCODE = '22003'; END $$",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_bad BEFORE INSERT ON usage_minutes FOR EACH ROW \
         WHEN (NEW.token = 'bad') EXECUTE FUNCTION refuse_bad()",
    )
    .execute(&pool)
    .await
    .unwrap();
    let app = test_app(pool.clone());
    let (endpoint, shutdown) = grpc_edge(&pool, Some("fleet-token")).await;
    let config = UsageConfig {
        flush_interval: Duration::from_millis(50),
        ..UsageConfig::default()
    };
    let buffer = Arc::new(UsageBuffer::new(&config));
    for token in ["a", "b", "bad", "c", "d", "e", "f"] {
        let key = UsageKey {
            token: token.to_owned(),
            team: None,
            route: "gpt-*".to_owned(),
            channel: "openai".to_owned(),
            model: "gpt-4o".to_owned(),
        };
        let counts = UsageCounts {
            requests: 2,
            input_tokens: 10,
            unpriced_requests: 2,
            ..UsageCounts::default()
        };
        buffer.add_at(T0, key, counts);
    }
    let stop = CancellationToken::new();
    let task = tokio::spawn(report_usage(
        Arc::clone(&buffer),
        endpoint,
        auth(Some("fleet-token")),
        config,
        stop.clone(),
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while buffer.dropped_requests() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the bad record was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        buffer.dropped_requests(),
        2,
        "only the bad record's requests"
    );
    let reply = app.get(&format!("/api/v1/usage?{RANGE}")).await;
    assert_eq!(
        totals(&reply.body["total"]),
        (12, 60, 0, 0),
        "{}",
        reply.text
    );
    shutdown.cancel();
}

#[sqlx::test(migrations = "../migrations")]
async fn cache_hits_and_what_they_saved_are_stored_and_reported(pool: PgPool) {
    let app = test_app(pool.clone());
    let hits = |id: &str, hits: u64, saved_cost: u64| {
        let mut r = record(0, "app", "research", "", "", hits, 0, 0, 0);
        r.cache_hits = hits;
        r.saved_input_tokens = 100 * hits;
        r.saved_output_tokens = 20 * hits;
        r.saved_cost_pico_usd = saved_cost;
        batch(
            id,
            vec![
                r,
                record(0, "app", "research", "openai", "gpt-4o", 1, 100, 20, 0),
            ],
        )
    };
    apply_batch(&pool, &hits("h-1", 2, 1_000_000_000))
        .await
        .unwrap();
    apply_batch(&pool, &hits("h-2", 1, 500_000_000))
        .await
        .unwrap();
    let reply = app.get(&format!("/api/v1/usage?{RANGE}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let total = &reply.body["total"];
    // Hits are requests, with no tokens of their own.
    assert_eq!(totals(total), (5, 200, 40, 0));
    assert_eq!(total["cache_hits"], 3);
    assert_eq!(total["saved_input_tokens"], 300);
    assert_eq!(total["saved_output_tokens"], 60);
    assert_eq!(total["saved_cost_usd"], "0.0015");
    let by_route = app
        .get(&format!("/api/v1/usage?{RANGE}&group_by=route"))
        .await;
    assert_eq!(by_route.body["groups"][0]["cache_hits"], 3);
    // A hit count beyond its requests (the record), or a saving without a hit (the figure), is
    // left out.
    let mut bad = record(0, "app", "", "", "", 1, 0, 0, 0);
    bad.cache_hits = 2;
    let applied = apply_batch(&pool, &batch("h-3", vec![bad])).await.unwrap();
    assert_eq!((applied.records, applied.refused_figures), (0, 1));
    let mut no_hit = record(0, "app", "", "", "", 1, 0, 0, 0);
    no_hit.saved_cost_pico_usd = 5;
    let applied = apply_batch(&pool, &batch("h-4", vec![no_hit]))
        .await
        .unwrap();
    assert_eq!(applied.refused_figures, 1);
}
