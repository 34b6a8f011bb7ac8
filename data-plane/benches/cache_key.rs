//! The exact response cache's key of a request body, before and after reading it in one pass:
//! `value` parses the body into a `serde_json::Value` and writes it back sorted (the way the key
//! was made), `canonical` reads the body's bytes once without building a value; each then hashes
//! the bytes (SHA-256), as the key does. Three chat bodies: one short message (the load
//! scenario's), eight messages of 512 bytes (4 KB) with tools, and 64 of 512 bytes (32 KB).
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use switchyard_data_plane::{normalised_cache_body, CanonicalBody};

fn chat(messages: usize, text: usize) -> Vec<u8> {
    let prose = "The quick brown fox jumps over the lazy dog; ".repeat(text / 45 + 1);
    let list: Vec<Value> = (0..messages)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": &prose[..text]})
        })
        .collect();
    let mut body = json!({"model": "gpt-4o-mini", "messages": list, "temperature": 0,
        "stream": false, "max_tokens": 256});
    if messages > 1 {
        body["tools"] = json!([{"type": "function", "function": {"name": "lookup",
            "description": "Looks a word up.", "parameters": {"type": "object",
            "properties": {"word": {"type": "string"}}, "required": ["word"]}}}]);
    }
    serde_json::to_vec(&body).unwrap()
}

fn key(c: &mut Criterion) {
    let bodies = [
        ("short", chat(1, 24)),
        ("4kb", chat(8, 512)),
        ("32kb", chat(64, 512)),
    ];
    for (name, body) in &bodies {
        let before = normalised_cache_body(&serde_json::from_slice(body).unwrap());
        let after = CanonicalBody::read(body).unwrap();
        assert_eq!(before, after.normalised(), "the same bytes either way");
        c.bench_function(&format!("cache_key/{name}/value"), |b| {
            b.iter(|| {
                let value: Value = serde_json::from_slice(black_box(body)).unwrap();
                Sha256::digest(normalised_cache_body(&value))
            })
        });
        c.bench_function(&format!("cache_key/{name}/canonical"), |b| {
            b.iter(|| {
                let read = CanonicalBody::read(black_box(body)).unwrap();
                Sha256::digest(read.normalised())
            })
        });
    }
}

criterion_group!(benches, key);
criterion_main!(benches);
