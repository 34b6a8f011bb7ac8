//! One decision for 8, 64 and 512 members (weighted and adaptive) with a realistic health view,
//! and route resolution with 10 vs 10 000 routes (lookup must not grow with the route count).
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use switchyard_engine::*;

mod world;
use world::*;

fn decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("select");
    let mut one = |id: BenchmarkId, (snapshot, health): (Snapshot, HealthSnapshot)| {
        let constraint = SelectionConstraint::default();
        let mut rng = SplitMix64::new(7);
        group.bench_function(id, |b| {
            b.iter(|| {
                let d = select(
                    &snapshot,
                    &health,
                    &constraint,
                    black_box("gpt-4o"),
                    NOW,
                    &mut rng,
                );
                black_box(d.selected().map(|c| c.member.id))
            })
        });
    };
    for mode in [RoutingMode::Weighted, RoutingMode::Adaptive] {
        for n in [8, 64, 512] {
            one(BenchmarkId::new(mode.as_str(), n), world(n, mode));
        }
    }
    // The hash-lookup fallback (a view not laid out for this snapshot), for comparison.
    one(
        BenchmarkId::new("adaptive_unaligned", 512),
        world_unaligned(512, RoutingMode::Adaptive),
    );
    group.finish();
}

fn route_lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("resolve_route");
    for n in [10, 10_000] {
        let snapshot = route_snapshot(n);
        group.bench_with_input(BenchmarkId::new("wildcard", n), &n, |b, _| {
            b.iter(|| {
                black_box(
                    snapshot
                        .resolve_route(black_box("family-5-turbo"))
                        .map(|r| r.id),
                )
            })
        });
        group.bench_with_input(BenchmarkId::new("exact", n), &n, |b, _| {
            b.iter(|| black_box(snapshot.resolve_route(black_box("model-4")).map(|r| r.id)))
        });
    }
    group.finish();
}

criterion_group!(benches, decisions, route_lookup);
criterion_main!(benches);
