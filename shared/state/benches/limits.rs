//! One request's check-and-take of three limits (requests and tokens per minute, spend per day)
//! on the in-memory store and on the Redis store's local table (the request path never waits
//! on Redis, so none is needed: the store runs offline here, on each proxy's share).
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use switchyard_state::*;

const NOW: u64 = 1_700_000_000_000;

fn limit(id: i64, metric: Metric, window: Window) -> Limit {
    Limit {
        key: LimitKey {
            scope: ScopeKind::Token,
            scope_id: id,
            metric,
            window,
            rule: None,
        },
        value: u64::MAX / 4,
        mode: LimitMode::Hard,
    }
}

fn take_three(c: &mut Criterion) {
    let limits = [
        limit(1, Metric::Requests, Window::Minute),
        limit(1, Metric::Tokens, Window::Minute),
        limit(2, Metric::Spend, Window::Day),
    ];
    let memory = InMemoryStore::new();
    let mut config = RedisConfig::new("redis://127.0.0.1:1", "bench");
    config.timeout = std::time::Duration::from_millis(50);
    let redis = RedisStore::start(config).unwrap();
    let mut group = c.benchmark_group("limit_take_three");
    for (name, store) in [
        ("memory", &memory as &dyn StateStore),
        ("redis_local", &redis),
    ] {
        let mut now = NOW;
        group.bench_function(name, |b| {
            b.iter(|| {
                now += 1;
                let request = LimitRequest {
                    limits: black_box(&limits),
                    tokens: 500,
                };
                black_box(store.limit_take(&request, now).admitted())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, take_three);
criterion_main!(benches);
