//! Snapshot compilation at fleet scale: 10 000 routes / 100 000 members (run by hand).
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!   cargo run --release -p switchyard-control-plane --example compile_bench
//! ```
//!
//! Creates a scratch database, fills it with generate_series, times the full compile (the
//! REPEATABLE READ scans + building the engine snapshot) and the wire encoding, then drops it.
// A command-line report: printing is its purpose.
#![allow(clippy::print_stdout)]

use std::str::FromStr;
use std::time::Instant;

use anyhow::Context;
use prost::Message;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

const ROUTES: i64 = 10_000;
const MEMBERS_PER_ROUTE: i64 = 10;
const CHANNELS: i64 = 200;
const RUNS: usize = 5;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").context("DATABASE_URL")?;
    let admin = PgConnectOptions::from_str(&url)?;
    let name = format!("switchyard_bench_{}", std::process::id());
    let mut conn = admin.connect().await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await?;
    let result = run(admin.clone().database(&name)).await;
    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    result
}

async fn run(options: PgConnectOptions) -> anyhow::Result<()> {
    let pool = switchyard_control_plane::db::pool(options);
    switchyard_control_plane::db::migrate(&pool).await?;

    let seeding = Instant::now();
    sqlx::query(
        "INSERT INTO channels (name, provider, base_url, max_concurrency, capabilities) \
         SELECT 'channel-' || g, 'openai', 'https://upstream-' || g || '.test/v1', 64, \
                '{\"max_context\": 128000, \"streaming\": true}'::jsonb \
         FROM generate_series(1, $1) g",
    )
    .bind(CHANNELS)
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO credentials (channel_id, secret) \
         SELECT c.id, 'sk-bench-' || c.id || '-' || k FROM channels c, generate_series(1, 2) k",
    )
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO routes (model_pattern, routing_mode) \
         SELECT CASE WHEN g % 10 = 0 THEN 'family-' || g || '-*' ELSE 'model-' || g END, \
                CASE WHEN g % 3 = 0 THEN 'weighted' ELSE 'auto' END \
         FROM generate_series(1, $1) g",
    )
    .bind(ROUTES)
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO route_members (route_id, channel_id, upstream_model, group_name, priority, weight) \
         SELECT r.id, 1 + (r.id * 7 + m) % $2, 'upstream-' || r.id || '-' || m, \
                CASE WHEN m % 4 = 0 THEN 'batch' ELSE 'default' END, m % 3, 1 + m % 5 \
         FROM routes r, generate_series(1, $1) m",
    )
    .bind(MEMBERS_PER_ROUTE)
    .bind(CHANNELS)
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO tokens (name, hash, prefix) \
         SELECT 'token-' || g, encode(sha256(('t' || g)::bytea), 'hex'), 'sk-sy-' \
         FROM generate_series(1, 1000) g",
    )
    .execute(&pool)
    .await?;
    sqlx::query("ANALYZE").execute(&pool).await?;
    println!(
        "seeded {ROUTES} routes, {} members, {CHANNELS} channels in {:.1?}",
        ROUTES * MEMBERS_PER_ROUTE,
        seeding.elapsed()
    );

    let mut compile_ms = Vec::new();
    let mut encode_ms = Vec::new();
    let mut bytes = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        let snapshot = switchyard_control_plane::compile::compile(&pool).await?;
        compile_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        let started = Instant::now();
        let wire = switchyard_proto::snapshot_to_proto(&snapshot, 0);
        bytes = wire.encoded_len();
        let _encoded = wire.encode_to_vec();
        encode_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(snapshot.routes().len(), ROUTES as usize);
    }
    compile_ms.sort_by(f64::total_cmp);
    encode_ms.sort_by(f64::total_cmp);
    println!(
        "compile (read tables + build snapshot): median {:.0} ms, min {:.0} ms, max {:.0} ms over {RUNS} runs",
        compile_ms[RUNS / 2],
        compile_ms[0],
        compile_ms[RUNS - 1]
    );
    println!(
        "to proto + encode: median {:.0} ms; encoded snapshot {:.1} MiB",
        encode_ms[RUNS / 2],
        bytes as f64 / (1024.0 * 1024.0)
    );
    pool.close().await;
    Ok(())
}
