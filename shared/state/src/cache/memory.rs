//! The in-memory response cache: least recently used first out, bounded by bytes. For a
//! standalone proxy and for tests; each process has its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use switchyard_engine::UnixMillis;

use super::entry::{CacheEntry, CacheKey, CacheUnavailable, CacheUsage, ResponseCache};

/// What an entry costs beyond its bytes (key, bookkeeping), so that many tiny entries are
/// bounded too.
const OVERHEAD: usize = 128;

/// The in-memory store.
pub struct MemoryCache {
    max_bytes: usize,
    inner: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    entries: HashMap<CacheKey, Slot>,
    /// Use tick -> key, oldest first.
    order: BTreeMap<u64, CacheKey>,
    tick: u64,
    bytes: usize,
}

struct Slot {
    entry: Arc<CacheEntry>,
    expires_at: UnixMillis,
    tick: u64,
    size: usize,
}

impl Lru {
    fn remove(&mut self, key: &CacheKey) {
        if let Some(slot) = self.entries.remove(key) {
            self.order.remove(&slot.tick);
            self.bytes = self.bytes.saturating_sub(slot.size);
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn get(&mut self, key: &CacheKey, now: UnixMillis) -> Option<Arc<CacheEntry>> {
        let expired = now >= self.entries.get(key)?.expires_at;
        if expired {
            self.remove(key);
            return None;
        }
        let tick = self.next_tick();
        let slot = self.entries.get_mut(key)?;
        self.order.remove(&slot.tick);
        slot.tick = tick;
        self.order.insert(tick, *key);
        Some(Arc::clone(&slot.entry))
    }

    fn put(
        &mut self,
        key: CacheKey,
        entry: CacheEntry,
        expires_at: UnixMillis,
        max: usize,
    ) -> bool {
        self.remove(&key);
        let size = entry.size() + OVERHEAD;
        if size > max {
            return false;
        }
        while self.bytes + size > max {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(slot) = self.entries.remove(&oldest) {
                self.bytes = self.bytes.saturating_sub(slot.size);
            }
        }
        let tick = self.next_tick();
        self.order.insert(tick, key);
        self.bytes += size;
        self.entries.insert(
            key,
            Slot {
                entry: Arc::new(entry),
                expires_at,
                tick,
                size,
            },
        );
        true
    }
}

impl MemoryCache {
    /// A store holding at most `max_bytes` (entries and their bookkeeping).
    pub fn new(max_bytes: usize) -> MemoryCache {
        MemoryCache {
            max_bytes,
            inner: Mutex::new(Lru::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ResponseCache for MemoryCache {
    fn get<'a>(
        &'a self,
        key: &'a CacheKey,
        now: UnixMillis,
    ) -> BoxFuture<'a, Result<Option<Arc<CacheEntry>>, CacheUnavailable>> {
        let found = self.lock().get(key, now);
        Box::pin(std::future::ready(Ok(found)))
    }

    fn put<'a>(
        &'a self,
        key: &'a CacheKey,
        entry: CacheEntry,
        ttl_ms: u64,
        now: UnixMillis,
    ) -> BoxFuture<'a, Result<bool, CacheUnavailable>> {
        let stored = self
            .lock()
            .put(*key, entry, now.saturating_add(ttl_ms), self.max_bytes);
        Box::pin(std::future::ready(Ok(stored)))
    }

    fn offer(&self, key: &CacheKey, entry: CacheEntry, ttl_ms: u64, now: UnixMillis) {
        self.lock()
            .put(*key, entry, now.saturating_add(ttl_ms), self.max_bytes);
    }

    fn usage(&self) -> CacheUsage {
        let lru = self.lock();
        CacheUsage {
            entries: lru.entries.len() as u64,
            bytes: lru.bytes as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::conformance;

    #[tokio::test]
    async fn the_memory_cache_passes_the_conformance_suite() {
        conformance::run_all(&|max_bytes| Box::new(MemoryCache::new(max_bytes))).await;
    }

    #[tokio::test]
    async fn the_least_recently_read_entry_goes_first() {
        let entry = |tag: u8| CacheEntry {
            stored_at: 0,
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            cost_pico: None,
            body: vec![tag; 100],
        };
        let room = 3 * (entry(0).size() + OVERHEAD);
        let cache = MemoryCache::new(room);
        for tag in 1..=3 {
            assert!(cache
                .put(&CacheKey([tag; 32]), entry(tag), 1000, 0)
                .await
                .unwrap());
        }
        // 1 is read, so 2 is the least recently used when 4 needs room.
        assert!(cache.get(&CacheKey([1; 32]), 1).await.unwrap().is_some());
        assert!(cache
            .put(&CacheKey([4; 32]), entry(4), 1000, 1)
            .await
            .unwrap());
        assert!(cache.get(&CacheKey([2; 32]), 2).await.unwrap().is_none());
        for tag in [1, 3, 4] {
            assert!(cache.get(&CacheKey([tag; 32]), 2).await.unwrap().is_some());
        }
    }

    fn sized(tag: u8, body: usize) -> CacheEntry {
        CacheEntry {
            stored_at: 0,
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            cost_pico: None,
            body: vec![tag; body],
        }
    }

    #[tokio::test]
    async fn entries_that_fill_the_bound_exactly_are_all_kept() {
        let one = sized(0, 100).size() + OVERHEAD;
        // An entry exactly the size of the bound fits.
        let cache = MemoryCache::new(one);
        assert!(cache
            .put(&CacheKey([1; 32]), sized(1, 100), 1000, 0)
            .await
            .unwrap());
        assert!(cache.get(&CacheKey([1; 32]), 0).await.unwrap().is_some());
        // One byte more does not.
        assert!(!cache
            .put(&CacheKey([2; 32]), sized(2, 101), 1000, 0)
            .await
            .unwrap());
        // Two entries that fill the bound to its last byte evict nothing.
        let cache = MemoryCache::new(2 * one);
        for tag in 1..=2 {
            assert!(cache
                .put(&CacheKey([tag; 32]), sized(tag, 100), 1000, 0)
                .await
                .unwrap());
        }
        for tag in 1..=2 {
            assert!(
                cache.get(&CacheKey([tag; 32]), 0).await.unwrap().is_some(),
                "{tag}"
            );
        }
        let usage = cache.usage();
        assert_eq!(
            usage,
            CacheUsage {
                entries: 2,
                bytes: 2 * one as u64
            }
        );
    }

    #[tokio::test]
    async fn the_bytes_count_follows_replacements_expiry_and_eviction() {
        let one = sized(0, 100).size() + OVERHEAD;
        let cache = MemoryCache::new(2 * one);
        let key = |tag: u8| CacheKey([tag; 32]);
        assert_eq!(cache.usage(), CacheUsage::default());
        assert!(cache.put(&key(1), sized(1, 100), 1000, 0).await.unwrap());
        // A replacement counts once, with its own size.
        assert!(cache.put(&key(1), sized(1, 60), 1000, 0).await.unwrap());
        let replaced = (sized(0, 60).size() + OVERHEAD) as u64;
        assert_eq!(
            cache.usage(),
            CacheUsage {
                entries: 1,
                bytes: replaced
            }
        );
        // The replaced entry's old place in the order is gone: filling up evicts the oldest
        // live entry (2), and the replaced one stays.
        assert!(cache.put(&key(2), sized(2, 100), 1000, 0).await.unwrap());
        assert!(cache.get(&key(1), 1).await.unwrap().is_some());
        assert!(cache.put(&key(3), sized(3, 100), 1000, 1).await.unwrap());
        assert!(
            cache.get(&key(2), 2).await.unwrap().is_none(),
            "2 was the least recently used"
        );
        assert!(cache.get(&key(1), 2).await.unwrap().is_some());
        assert!(cache.get(&key(3), 2).await.unwrap().is_some());
        assert_eq!(
            cache.usage(),
            CacheUsage {
                entries: 2,
                bytes: replaced + one as u64
            }
        );
        // An expired entry read is dropped, with its bytes.
        assert!(cache.get(&key(1), 1000).await.unwrap().is_none());
        assert_eq!(
            cache.usage(),
            CacheUsage {
                entries: 1,
                bytes: one as u64
            }
        );
    }

    #[tokio::test]
    async fn every_read_makes_an_entry_the_most_recently_used() {
        let one = sized(0, 100).size() + OVERHEAD;
        let cache = MemoryCache::new(3 * one);
        let key = |tag: u8| CacheKey([tag; 32]);
        for tag in 1..=3 {
            assert!(cache
                .put(&key(tag), sized(tag, 100), 1000, 0)
                .await
                .unwrap());
        }
        // Read order 2, 1, 3 (twice, so the reads' own order counts): 2 is now the oldest.
        for _ in 0..2 {
            for tag in [2, 1, 3] {
                assert!(cache.get(&key(tag), 1).await.unwrap().is_some());
            }
        }
        for (new, gone) in [(4, 2), (5, 1), (6, 3)] {
            assert!(cache
                .put(&key(new), sized(new, 100), 1000, 1)
                .await
                .unwrap());
            assert!(
                !cache.lock().entries.contains_key(&key(gone)),
                "{gone} goes for {new}"
            );
        }
    }
}
