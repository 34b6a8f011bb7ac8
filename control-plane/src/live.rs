//! The fleet's shared runtime state as the control plane sees it: the same
//! `RedisStore` the proxies use, on the same key prefix, so explain selects with the very view a
//! proxy would and `/api/v1/state` shows what the fleet holds.
//!
//! The control plane only reads it, with one exception: a passed recovery probe closes the
//! channel's breaker (`reset_channel`) or lifts a credential's runtime disable
//! (`enable_credential`). Explain and `/api/v1/state` never write. The store does
//! keep an in-flight lease for this process like any member of the fleet; it always counts zero.

use std::sync::Arc;
use std::time::Duration;

use switchyard_engine::semantic::SemanticEntry;
use switchyard_engine::{Limit, UnixMillis};
use switchyard_metrics::Collect;
use switchyard_state::cache::{RedisCache, ResponseCache, SHARED_VECTORS};
use switchyard_state::{mask_url, LimitStatus, RedisConfig, RedisStore, StateStore, SyncReport};

/// How long one read of a semantic stream may take.
const STREAM_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Longest explain waits for the fleet's limit counters.
const LIMIT_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// A handle on the shared state. Cheap to clone.
#[derive(Clone)]
pub struct LiveState {
    store: Arc<dyn StateStore>,
    redis: Option<Arc<RedisStore>>,
    /// The response cache's Redis store, read only: the semantic rules' shared streams.
    cache: Option<Arc<RedisCache>>,
}

impl LiveState {
    /// Starts a Redis-backed view (`REDIS_URL`, `SWITCHYARD_REDIS_PREFIX`). Redis being down is
    /// not an error: the store connects and resyncs in the background; only a bad URL or prefix
    /// is.
    pub fn start_redis(url: &str, prefix: &str) -> anyhow::Result<LiveState> {
        let store = RedisStore::start(RedisConfig::new(url, prefix))
            .map_err(|e| anyhow::anyhow!("REDIS_URL / SWITCHYARD_REDIS_PREFIX: {e}"))?;
        tracing::info!(redis = %mask_url(url), prefix, "reading the fleet's shared state from Redis");
        let store = Arc::new(store);
        // Never written through here: its byte bound is moot.
        let cache = RedisCache::start(url, prefix, 1, STREAM_READ_TIMEOUT)
            .map_err(|e| anyhow::anyhow!("REDIS_URL / SWITCHYARD_REDIS_PREFIX: {e}"))?;
        Ok(LiveState {
            store: Arc::clone(&store) as Arc<dyn StateStore>,
            redis: Some(store),
            cache: Some(Arc::new(cache)),
        })
    }

    /// Any other store (tests: an in-memory one).
    pub fn from_store(store: Arc<dyn StateStore>) -> LiveState {
        LiveState {
            store,
            redis: None,
            cache: None,
        }
    }

    /// Every vector of `rule`'s shared semantic stream, read whole (a capped stream); `None`
    /// without Redis or when it cannot be read now.
    pub async fn shared_vectors(&self, rule: i64) -> Option<Vec<SemanticEntry>> {
        let cache = self.cache.as_ref()?;
        let mut out = Vec::new();
        let mut after = "0".to_owned();
        loop {
            let page = cache.shared_vectors(rule, &after, 1000).await.ok()?;
            let full = page.len() == 1000;
            for (id, bytes) in page {
                out.extend(SemanticEntry::decode(&bytes));
                after = id;
            }
            if !full || out.len() > SHARED_VECTORS * 2 {
                return Some(out);
            }
        }
    }

    pub fn store(&self) -> &dyn StateStore {
        self.store.as_ref()
    }

    /// The Redis store's own metrics (`switchyard_redis_*`), for `/metrics`; `None` without
    /// Redis (a store in memory has none).
    pub fn collector(&self) -> Option<Arc<dyn Collect>> {
        self.redis
            .as_ref()
            .map(|r| Arc::clone(r) as Arc<dyn Collect>)
    }

    /// What explain reports as `health_view`.
    pub fn source(&self) -> &'static str {
        if self.redis.is_some() {
            "redis"
        } else {
            "memory"
        }
    }

    /// Whether the Redis connection is up (`None` without Redis).
    pub fn connected(&self) -> Option<bool> {
        self.redis.as_ref().map(|r| r.stats().connected)
    }

    /// Every other live member of the fleet's own account of its sync (propagation lag, last
    /// sync, resyncs, Redis errors), as last published with its lease (`None` without Redis).
    pub fn fleet_sync(&self) -> Option<Vec<SyncReport>> {
        self.redis.as_ref().map(|r| r.fleet_sync())
    }

    /// The state of `limits` fleet-wide: with Redis, the shared counters read straight from it
    /// (the control plane takes no part in the counting, so its own limiter knows nothing and
    /// must not claim); otherwise the store's own counts. `None` when Redis cannot be read
    /// (logged).
    pub async fn limit_statuses(
        &self,
        limits: &[Limit],
        now: UnixMillis,
    ) -> Option<Vec<LimitStatus>> {
        match &self.redis {
            Some(redis) => match redis.read_limits(limits, now, LIMIT_READ_TIMEOUT).await {
                Ok(statuses) => Some(statuses),
                Err(error) => {
                    tracing::warn!(%error, "explain: the fleet's limit counters are unavailable");
                    None
                }
            },
            None => Some(
                limits
                    .iter()
                    .map(|limit| self.store.limit_status(limit, now))
                    .collect(),
            ),
        }
    }

    /// Waits for the first full read of Redis (tests, start-up).
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        match &self.redis {
            Some(redis) => redis.wait_resynced(1, timeout).await,
            None => true,
        }
    }

    /// Pushes pending writes (a probe's breaker reset) and drops this process's lease.
    pub async fn close(&self, timeout: Duration) {
        if let Some(redis) = &self.redis {
            redis.close(timeout).await;
        }
    }
}
