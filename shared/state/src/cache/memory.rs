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
}
