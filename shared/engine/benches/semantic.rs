//! The semantic cache's flat scan at its bound: one search over a rule's full index
//! (`MAX_SEMANTIC_VECTORS` unit vectors of 1 536 dimensions, as OpenAI's small embedding model
//! gives), every vector in the request's partition (the worst case) and in another (the
//! partition check alone).
#![allow(clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, Criterion};
use switchyard_engine::semantic::{normalise, SemanticEntry, SemanticIndex, MAX_SEMANTIC_VECTORS};

const DIMENSIONS: usize = 1536;

fn vector(seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<f32> = (0..DIMENSIONS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    assert!(normalise(&mut v));
    v
}

fn full_index() -> SemanticIndex {
    let mut index = SemanticIndex::new(MAX_SEMANTIC_VECTORS);
    for i in 0..MAX_SEMANTIC_VECTORS as u64 {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&i.to_le_bytes());
        index.insert(
            SemanticEntry {
                partition: [1; 32],
                key,
                expires_at: u64::MAX,
                vector: vector(i),
            },
            0,
        );
    }
    index
}

fn scan(c: &mut Criterion) {
    let index = full_index();
    let query = vector(u64::MAX);
    c.bench_function("semantic scan, 10 000 x 1 536, one partition", |b| {
        b.iter(|| index.best(&[1; 32], &query, 1))
    });
    c.bench_function("semantic scan, 10 000 x 1 536, another partition", |b| {
        b.iter(|| index.best(&[2; 32], &query, 1))
    });
}

criterion_group!(benches, scan);
criterion_main!(benches);
