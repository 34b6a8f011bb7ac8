//! The conformance suite every [`ResponseCache`] must pass: each check takes a fresh store
//! made by `make(max_bytes)`, so the in-memory and the Redis stores run the very same
//! assertions. Test code (compiled with the `conformance` feature or in tests only).

use futures_util::future::BoxFuture;
use switchyard_engine::UnixMillis;

use super::entry::{CacheEntry, CacheKey, ResponseCache};

const NOW: UnixMillis = 1_700_000_000_000;
/// Body bytes of the entries the bound checks store.
const BODY: usize = 1000;
/// Room for three entries of [`BODY`] bytes in either store's accounting, not for four.
const THREE: usize = 3 * (BODY + 200);

fn entry(tag: u8) -> CacheEntry {
    CacheEntry {
        stored_at: NOW,
        input_tokens: u64::from(tag),
        output_tokens: 2,
        cached_tokens: 0,
        cost_pico: Some(1234),
        body: vec![tag; BODY],
    }
}

fn key(tag: u8) -> CacheKey {
    CacheKey([tag; 32])
}

/// One check: the store, made with the bound the check names.
pub type Check = for<'a> fn(&'a dyn ResponseCache) -> BoxFuture<'a, ()>;

/// Every check by name, with the bound (bytes) its store is made with.
pub fn checks() -> &'static [(&'static str, usize, Check)] {
    &[
        ("an_entry_reads_back_until_it_expires", 1 << 20, |s| {
            Box::pin(reads_back_until_it_expires(s))
        }),
        ("a_put_replaces_the_entry", 1 << 20, |s| {
            Box::pin(a_put_replaces_the_entry(s))
        }),
        ("keys_never_mix", 1 << 20, |s| Box::pin(keys_never_mix(s))),
        ("an_entry_over_the_bound_is_refused", THREE, |s| {
            Box::pin(an_entry_over_the_bound_is_refused(s))
        }),
        ("the_bound_evicts_to_make_room", THREE, |s| {
            Box::pin(the_bound_evicts_to_make_room(s))
        }),
    ]
}

/// Runs every check on a fresh store from `make(max_bytes)`.
pub async fn run_all(make: &dyn Fn(usize) -> Box<dyn ResponseCache>) {
    for (name, max_bytes, check) in checks() {
        let store = make(*max_bytes);
        eprintln!("cache conformance: {name}");
        check(store.as_ref()).await;
    }
}

async fn get(store: &dyn ResponseCache, tag: u8, now: UnixMillis) -> Option<CacheEntry> {
    match store.get(&key(tag), now).await {
        Ok(found) => found.map(|e| (*e).clone()),
        Err(e) => unreachable!("the store must answer: {e}"),
    }
}

async fn put(store: &dyn ResponseCache, tag: u8, entry: CacheEntry, ttl_ms: u64) -> bool {
    match store.put(&key(tag), entry, ttl_ms, NOW).await {
        Ok(stored) => stored,
        Err(e) => unreachable!("the store must answer: {e}"),
    }
}

async fn reads_back_until_it_expires(store: &dyn ResponseCache) {
    assert_eq!(get(store, 1, NOW).await, None, "empty store");
    assert!(put(store, 1, entry(1), 60_000).await);
    assert_eq!(get(store, 1, NOW + 59_999).await, Some(entry(1)));
    assert_eq!(
        get(store, 1, NOW + 60_000).await,
        None,
        "expired at its ttl"
    );
}

async fn a_put_replaces_the_entry(store: &dyn ResponseCache) {
    assert!(put(store, 1, entry(1), 60_000).await);
    let newer = CacheEntry {
        output_tokens: 99,
        ..entry(1)
    };
    assert!(put(store, 1, newer.clone(), 60_000).await);
    assert_eq!(get(store, 1, NOW).await, Some(newer));
    assert_eq!(store.usage().entries, 1);
}

async fn keys_never_mix(store: &dyn ResponseCache) {
    assert!(put(store, 1, entry(1), 60_000).await);
    assert!(put(store, 2, entry(2), 60_000).await);
    assert_eq!(get(store, 1, NOW).await, Some(entry(1)));
    assert_eq!(get(store, 2, NOW).await, Some(entry(2)));
    assert_eq!(get(store, 3, NOW).await, None);
}

async fn an_entry_over_the_bound_is_refused(store: &dyn ResponseCache) {
    let huge = CacheEntry {
        body: vec![7; THREE + 1],
        ..entry(7)
    };
    assert!(!put(store, 7, huge, 60_000).await);
    assert_eq!(get(store, 7, NOW).await, None);
    assert!(
        put(store, 1, entry(1), 60_000).await,
        "a fitting one still fits"
    );
}

async fn the_bound_evicts_to_make_room(store: &dyn ResponseCache) {
    for tag in 1..=3 {
        assert!(put(store, tag, entry(tag), 60_000 + u64::from(tag)).await);
    }
    assert!(put(store, 4, entry(4), 70_000).await);
    assert_eq!(get(store, 4, NOW).await, Some(entry(4)), "the newest stays");
    let mut left = 0;
    for tag in 1..=3 {
        left += usize::from(get(store, tag, NOW).await.is_some());
    }
    assert!(left < 3, "something was evicted");
    let usage = store.usage();
    assert!(usage.bytes <= THREE as u64, "{usage:?}");
    assert!(usage.entries <= 3, "{usage:?}");
}
