//! The request log's ingestion measured (`scripts/request-log-bench`): synthetic rows through the
//! real ingestion path into a fresh database, then rows per second and bytes per million rows.
//! Ignored by default: it measures, it does not check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use sqlx::PgPool;
use switchyard_control_plane::usage::apply_batch;
use switchyard_proto::v1::{RequestLogRecord, UsageBatch};

/// Rows per batch: what a proxy sends at most (its `batch_keys`).
const BATCH_ROWS: usize = 1000;

/// A realistic row: a client request id, a trace id, names of everyday length, two tags.
fn row(i: usize, now_ms: i64) -> RequestLogRecord {
    RequestLogRecord {
        // Spread over the last hour, a millisecond apart at most.
        started_unix_ms: now_ms - (i % 3_600_000) as i64,
        request_id: format!("{:016x}{:016x}", i as u64 * 0x9e37_79b9, i),
        trace_id: format!("{:032x}", i as u128 * 0x1234_5678_9abc),
        token_id: (i % 50) as i64 + 1,
        token: format!("service-{}", i % 50),
        team: format!("team-{}", i % 8),
        route: "gpt-4o*".to_owned(),
        endpoint: "chat_completions".to_owned(),
        model: "gpt-4o".to_owned(),
        served_model: "gpt-4o-2024-08-06".to_owned(),
        channel: format!("openai-{}", i % 3),
        attempts: 1 + u32::from(i.is_multiple_of(7)),
        status: if i.is_multiple_of(50) { 429 } else { 200 },
        error_code: if i.is_multiple_of(50) {
            "rate_limit_exceeded".to_owned()
        } else {
            String::new()
        },
        latency_ms: 300 + (i % 2000) as u64,
        first_token_ms: i.is_multiple_of(3).then_some(120 + (i % 500) as u64),
        input_tokens: 500 + (i % 4000) as u64,
        output_tokens: 50 + (i % 800) as u64,
        cached_tokens: u64::from(i.is_multiple_of(5)) * 256,
        cost_pico_usd: Some(1_250_000_000 + i as u64),
        cache: if i.is_multiple_of(4) {
            "miss".to_owned()
        } else {
            String::new()
        },
        tags: vec![format!("feature:{}", i % 20), "env=prod".to_owned()],
        end_user: format!("user-{}", i % 10_000),
    }
}

#[sqlx::test(migrations = "../migrations")]
#[ignore = "a measurement: run it with scripts/request-log-bench"]
async fn request_log_bench(pool: PgPool) {
    let rows: usize = std::env::var("REQUEST_LOG_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let now_ms = switchyard_proto::usage::unix_now_s() * 1000;
    let started = Instant::now();
    let mut sent = 0;
    let mut batch_no = 0;
    while sent < rows {
        let n = BATCH_ROWS.min(rows - sent);
        let batch = UsageBatch {
            batch_id: format!("bench-{batch_no}"),
            client_id: "bench".to_owned(),
            requests: (sent..sent + n).map(|i| row(i, now_ms)).collect(),
            ..UsageBatch::default()
        };
        let applied = apply_batch(&pool, &batch).await.unwrap();
        assert_eq!(applied.log_rows, n as u64);
        sent += n;
        batch_no += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    sqlx::query("VACUUM ANALYZE request_log")
        .execute(&pool)
        .await
        .unwrap();
    let bytes: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits \
         WHERE inhparent = 'request_log'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let per_million = bytes as f64 * 1_000_000.0 / rows as f64;
    println!(
        "request log: {rows} rows in {elapsed:.1} s = {:.0} rows/s; {bytes} bytes on disk = \
         {:.0} MB per million rows ({:.0} bytes per row)",
        rows as f64 / elapsed,
        per_million / 1e6,
        bytes as f64 / rows as f64
    );
}
