//! The Redis response cache against a real Redis: the conformance suite the in-memory cache
//! passes too, and a store whose Redis is gone answers "unavailable" at once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{redis_url, unique_prefix};
use switchyard_state::cache::{conformance, CacheKey, RedisCache, ResponseCache};

fn cleanup(url: &str, prefix: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{sy:{prefix}:cache}}:*"))
        .query(&mut con)
        .unwrap();
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(keys).query(&mut con).unwrap();
    }
}

async fn connected(url: &str, prefix: &str, max_bytes: usize) -> RedisCache {
    let cache = RedisCache::start(url, prefix, max_bytes as u64, Duration::from_secs(2)).unwrap();
    for _ in 0..100 {
        if cache.connected() {
            return cache;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the cache never connected to {url}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cache_passes_the_conformance_suite() {
    let url = redis_url();
    for (name, max_bytes, check) in conformance::checks() {
        let prefix = unique_prefix("cache");
        let cache = connected(&url, &prefix, *max_bytes).await;
        eprintln!("cache conformance (redis): {name}");
        check(&cache).await;
        cleanup(&url, &prefix);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_without_redis_is_unavailable_at_once() {
    // Nothing listens on port 1.
    let cache = RedisCache::start(
        "redis://127.0.0.1:1",
        "gone",
        1 << 20,
        Duration::from_millis(100),
    )
    .unwrap();
    let key = CacheKey([1; 32]);
    assert!(cache.get(&key, 0).await.is_err());
    assert!(cache.put(&key, conformance_entry(), 1000, 0).await.is_err());
    assert_eq!(cache.writes_dropped(), 1, "the put was let go");
    // An offered write is let go at once too, and counted.
    cache.offer(&key, conformance_entry(), 1000, 0);
    assert_eq!(cache.writes_dropped(), 2);
}

fn sized(tag: u16, body: usize) -> switchyard_state::cache::CacheEntry {
    switchyard_state::cache::CacheEntry {
        stored_at: 0,
        input_tokens: u64::from(tag),
        output_tokens: 1,
        cached_tokens: 0,
        cost_pico: None,
        body: vec![b'x'; body],
    }
}

fn tagged(tag: u16) -> CacheKey {
    let mut key = [0; 32];
    key[..2].copy_from_slice(&tag.to_be_bytes());
    CacheKey(key)
}

/// Waits (up to 30 s: the machine may be loaded) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..600 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offered_writes_land_without_anyone_waiting_and_read_back() {
    let url = redis_url();
    let prefix = unique_prefix("cache");
    let cache = connected(&url, &prefix, 1 << 24).await;
    let now = 1_700_000_000_000;
    for tag in 0..300u16 {
        cache.offer(&tagged(tag), sized(tag, 100), 60_000, now);
    }
    until("every offered write is stored", || {
        cache.usage().entries == 300
    })
    .await;
    for tag in 0..300u16 {
        let found = cache.get(&tagged(tag), now).await.unwrap();
        assert_eq!(found.as_deref(), Some(&sized(tag, 100)), "entry {tag}");
    }
    assert_eq!(cache.writes_dropped(), 0);
    assert_eq!(cache.usage().bytes, 300 * (8 + sized(0, 100).size()) as u64);
    cleanup(&url, &prefix);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_batched_together_keep_the_bound_and_replace_each_other() {
    let url = redis_url();
    let prefix = unique_prefix("cache");
    let one = 8 + sized(0, 1000).size();
    let cache = connected(&url, &prefix, 3 * one + 10).await;
    let now = 1_700_000_000_000;
    // Offered together, these reach the writer as one batch or a few: six writes, one key
    // twice, into room for three.
    for tag in [1, 2, 3, 3, 4, 5] {
        cache.offer(&tagged(tag), sized(tag, 1000), 60_000 + u64::from(tag), now);
    }
    let last = cache
        .put(&tagged(6), sized(6, 1000), 70_000, now)
        .await
        .unwrap();
    assert!(last, "the last one is stored");
    let usage = cache.usage();
    assert!(
        usage.entries <= 3 && usage.bytes <= 3 * one as u64,
        "{usage:?}"
    );
    let mut held = 0;
    for tag in 1..=6 {
        held += usize::from(cache.get(&tagged(tag), now).await.unwrap().is_some());
    }
    assert_eq!(held as u64, usage.entries, "what is counted is there");
    assert_eq!(usage.bytes, usage.entries * one as u64, "{usage:?}");
    cleanup(&url, &prefix);
}

#[test]
fn a_cache_key_prefix_must_be_non_empty_and_free_of_braces() {
    let url = redis_url();
    for prefix in ["", "a{b", "a}b", "{a}"] {
        let err = RedisCache::start(&url, prefix, 1 << 20, Duration::from_secs(1))
            .err()
            .unwrap_or_else(|| panic!("prefix {prefix:?} accepted"));
        assert!(err.to_string().contains("prefix"), "{err}");
    }
    assert!(RedisCache::start(&url, "fine", 1 << 20, Duration::from_secs(1)).is_ok());
}

fn conformance_entry() -> switchyard_state::cache::CacheEntry {
    switchyard_state::cache::CacheEntry {
        stored_at: 0,
        input_tokens: 1,
        output_tokens: 1,
        cached_tokens: 0,
        cost_pico: None,
        body: b"{}".to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_shared_vectors_are_read_back_in_order_after_a_cursor_and_apart_from_other_rules() {
    let url = redis_url();
    let prefix = unique_prefix("cache");
    let cache = connected(&url, &prefix, 1 << 20).await;
    for n in 1..=3u8 {
        cache.share_vector(7, vec![n; 4]).await.unwrap();
    }
    cache.share_vector(8, vec![9]).await.unwrap();
    let all = cache.shared_vectors(7, "0", 10).await.unwrap();
    let bytes: Vec<Vec<u8>> = all.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(bytes, [vec![1; 4], vec![2; 4], vec![3; 4]]);
    let page = cache.shared_vectors(7, "0", 2).await.unwrap();
    assert_eq!(page.len(), 2, "at most the count asked for");
    let rest = cache.shared_vectors(7, &page[1].0, 10).await.unwrap();
    assert_eq!(rest.len(), 1, "only what follows the cursor");
    assert_eq!(rest[0].1, vec![3; 4]);
    assert_eq!(cache.shared_vectors(8, "0", 10).await.unwrap().len(), 1);
    assert!(cache.shared_vectors(9, "0", 10).await.unwrap().is_empty());
    cleanup(&url, &prefix);
}

#[tokio::test]
async fn a_store_in_memory_shares_no_vectors() {
    let cache = switchyard_state::cache::MemoryCache::new(1 << 20);
    cache.share_vector(1, vec![1]).await.unwrap();
    assert!(cache.shared_vectors(1, "0", 10).await.unwrap().is_empty());
}

/// A serving thread runs a single-threaded runtime, as this test does.
#[tokio::test]
async fn a_serving_thread_looks_up_on_a_connection_of_its_own_and_reads_the_same_entries() {
    let url = redis_url();
    let prefix = unique_prefix("cache");
    let cache = connected(&url, &prefix, 1 << 20).await;
    let now = 1_700_000_000_000;
    assert!(cache
        .put(&tagged(1), sized(1, 10), 60_000, now)
        .await
        .unwrap());
    assert!(!cache.own_connection(), "none before the first lookup");
    let mut lookups = 0;
    while !cache.own_connection() {
        // The first lookups go on the shared connection while this thread's is made.
        let found = cache.get(&tagged(1), now).await.unwrap();
        assert_eq!(found.as_deref(), Some(&sized(1, 10)));
        lookups += 1;
        assert!(
            lookups < 600,
            "this thread never got a connection of its own"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let found = cache.get(&tagged(1), now).await.unwrap();
    assert_eq!(
        found.as_deref(),
        Some(&sized(1, 10)),
        "read on its own connection"
    );
    assert_eq!(cache.get(&tagged(2), now).await.unwrap(), None);
    cleanup(&url, &prefix);
}
