//! The engine's Fx hasher: the maps keyed with it work with any hash, so these tests hold it to
//! what makes it a hash worth having — every write method feeds every bit of its input into the
//! state, distinct keys of the shapes the engine hashes (ids, id pairs, model names) get
//! distinct hashes, and a word is mixed, not OR-ed or AND-ed, into the state.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, Hasher};

use switchyard_engine::fxhash::{FxBuildHasher, FxHashMap, FxHasher};

fn hash_of(f: impl FnOnce(&mut FxHasher)) -> u64 {
    let mut h = FxHasher::default();
    f(&mut h);
    h.finish()
}

/// Asserts that no two of `hashes` are equal (and says which inputs collide).
fn all_distinct(what: &str, hashes: impl IntoIterator<Item = (String, u64)>) {
    let mut seen: FxHashMap<u64, String> = FxHashMap::default();
    for (input, hash) in hashes {
        if let Some(other) = seen.insert(hash, input.clone()) {
            panic!("{what}: {other} and {input} hash to the same {hash:#x}");
        }
    }
}

#[test]
fn a_word_written_once_is_multiplied_by_the_fx_constant() {
    // From the zero state one word w hashes to w × 0x517cc1b727220a95 (mod 2^64): the published
    // Fx step. 1 gives the constant itself.
    assert_eq!(hash_of(|h| h.write_u64(1)), 0x517c_c1b7_2722_0a95);
    assert_eq!(
        hash_of(|h| h.write_u64(2)),
        0x517c_c1b7_2722_0a95_u64.wrapping_mul(2)
    );
}

#[test]
fn every_integer_write_tells_its_values_apart() {
    all_distinct(
        "write_u8",
        (0..=u8::MAX).map(|i| (i.to_string(), hash_of(|h| h.write_u8(i)))),
    );
    all_distinct(
        "write_u32",
        (0..1000u32)
            .chain([u32::MAX])
            .map(|i| (i.to_string(), hash_of(|h| h.write_u32(i)))),
    );
    all_distinct(
        "write_u64",
        (0..1000u64)
            .chain([u64::MAX, 1 << 63])
            .map(|i| (i.to_string(), hash_of(|h| h.write_u64(i)))),
    );
    all_distinct(
        "write_i64",
        (-500..500i64)
            .chain([i64::MIN, i64::MAX])
            .map(|i| (i.to_string(), hash_of(|h| h.write_i64(i)))),
    );
    all_distinct(
        "write_usize",
        (0..1000usize)
            .chain([usize::MAX])
            .map(|i| (i.to_string(), hash_of(|h| h.write_usize(i)))),
    );
}

#[test]
fn every_byte_of_a_string_counts_including_the_tail_past_the_last_full_word() {
    // Lengths 0..=24 cover no word, a partial word, whole words and whole words plus a tail;
    // each string differs from the others only in its last byte or its length.
    let mut inputs = Vec::new();
    for len in 0..=24usize {
        for last in [b'a', b'b', b'z'] {
            let mut s = vec![b'x'; len];
            if let Some(l) = s.last_mut() {
                *l = last;
            }
            inputs.push(s);
        }
    }
    let unique: HashSet<Vec<u8>> = inputs.iter().cloned().collect();
    all_distinct(
        "write",
        unique
            .iter()
            .map(|s| (format!("{s:?}"), hash_of(|h| h.write(s)))),
    );
    // Every byte position matters, not just the first and the last.
    let base = b"gpt-4o-mini-2024-07-18".to_vec();
    all_distinct(
        "write, one byte changed",
        (0..base.len()).map(|i| {
            let mut s = base.clone();
            s[i] ^= 1;
            (format!("byte {i}"), hash_of(|h| h.write(&s)))
        }),
    );
}

#[test]
fn keys_of_the_shapes_the_engine_uses_get_distinct_hashes() {
    let build = FxBuildHasher::default();
    // (channel id, upstream model) pairs, as the health map keys them.
    let models = [
        "gpt-4o",
        "gpt-4o-mini",
        "claude-sonnet-4",
        "gemini-2.5-pro",
        "m",
    ];
    all_distinct(
        "(channel, model)",
        (0..200i64).flat_map(|channel| {
            let build = &build;
            models
                .iter()
                .map(move |m| (format!("({channel}, {m})"), build.hash_one((channel, *m))))
        }),
    );
    // Two words in a row: the second is mixed into the state, so pairs that an OR or an AND of
    // the rotated state and the word would merge stay apart.
    all_distinct(
        "(u64, u64)",
        (0..64u64).flat_map(|a| {
            (0..64u64).map(move |b| {
                (
                    format!("({a}, {b})"),
                    hash_of(|h| {
                        h.write_u64(a);
                        h.write_u64(b);
                    }),
                )
            })
        }),
    );
    // And the hash is a function of the key alone.
    let key = (7i64, "gpt-4o");
    assert_eq!(build.hash_one(key), build.hash_one(key));
    let mut h = FxHasher::default();
    key.hash(&mut h);
    assert_eq!(h.finish(), build.hash_one(key));
}
