//! The fleet's response cache in Redis, bounded by bytes.
//!
//! Layout (every key shares the hash tag `{sy:PREFIX:cache}`, so one script sees them all in
//! one Cluster slot): one string per entry, `e:<key hex>`, holding the entry's expiry (8 bytes,
//! big-endian Unix ms) then [`CacheEntry::encode`]'s bytes, written with `PX` = its time to
//! live; a sorted set `idx` (entry key → expiry), a hash `size` (entry key → bytes) and a
//! counter `bytes` (their sum). The bound is kept by one versioned script per write
//! (`switchyard_cache_put_v1`): it drops expired entries, then the entries nearest their expiry
//! until the new one fits, then writes it; an entry alone over the bound is refused.
//!
//! A lookup is one `GET` under a short timeout. This store never waits on a connection: a
//! background thread (`switchyard-cache`) connects and reconnects, and a store without a live
//! connection answers [`CacheUnavailable`] at once, so a dead Redis costs a request nothing but
//! its cache.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::Script;
use switchyard_engine::UnixMillis;
use tokio::sync::oneshot;

use super::entry::{
    CacheEntry, CacheKey, CacheUnavailable, CacheUsage, ResponseCache, SharedRecord, SHARED_VECTORS,
};
use crate::redis::conn::{Conn, RedisTarget};
use crate::redis::shared::RedisConfigError;

/// The write script: `KEYS = [idx, size, bytes, entry]`, `ARGV = [value, ttl ms, now ms,
/// bound]`; returns `[stored (0|1), bytes used, entries]`.
const PUT: &str = r#"
-- switchyard_cache_put_v1
local idx, sizes, total, key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local value = ARGV[1]
local ttl, now, bound = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function drop(k)
  local s = tonumber(redis.call('HGET', sizes, k) or '0')
  redis.call('HDEL', sizes, k)
  redis.call('ZREM', idx, k)
  redis.call('DEL', k)
  if s > 0 then redis.call('DECRBY', total, s) end
end
local function used() return tonumber(redis.call('GET', total) or '0') end
for _, k in ipairs(redis.call('ZRANGEBYSCORE', idx, '-inf', now, 'LIMIT', 0, 64)) do drop(k) end
drop(key)
local size = string.len(value)
local rounds = 0
while used() + size > bound and rounds < 256 do
  local first = redis.call('ZRANGE', idx, 0, 0)
  if #first == 0 then break end
  drop(first[1])
  rounds = rounds + 1
end
if size > bound or used() + size > bound then
  return {0, used(), redis.call('ZCARD', idx)}
end
redis.call('SET', key, value, 'PX', ttl)
redis.call('ZADD', idx, now + ttl, key)
redis.call('HSET', sizes, key, size)
return {1, redis.call('INCRBY', total, size), redis.call('ZCARD', idx)}
"#;

/// How often the background thread checks the connection.
const RECONNECT_EVERY: Duration = Duration::from_millis(500);

/// The Redis store.
pub struct RedisCache {
    tag: String,
    max_bytes: u64,
    timeout: Duration,
    put: Script,
    conn: Arc<RwLock<Option<Conn>>>,
    used: AtomicU64,
    entries: AtomicU64,
    /// Dropped with the store: ends the connecting thread.
    _thread: oneshot::Sender<()>,
}

impl RedisCache {
    /// Connects to `url` in the background; keys under `prefix`, at most `max_bytes` stored,
    /// each command given `timeout`. Needs no ambient runtime.
    pub fn start(
        url: &str,
        prefix: &str,
        max_bytes: u64,
        timeout: Duration,
    ) -> Result<RedisCache, RedisConfigError> {
        let target = RedisTarget::parse(url)?;
        if prefix.is_empty() || prefix.contains(['{', '}']) {
            return Err(RedisConfigError(format!(
                "Redis key prefix {prefix:?} must be non-empty and free of braces"
            )));
        }
        let conn = Arc::new(RwLock::new(None));
        let (done, done_rx) = oneshot::channel::<()>();
        let slot = Arc::clone(&conn);
        std::thread::Builder::new()
            .name("switchyard-cache".into())
            .spawn(move || keep_connected(target, slot, done_rx))
            .map_err(|e| RedisConfigError(format!("cannot start the cache thread: {e}")))?;
        Ok(RedisCache {
            tag: format!("{{sy:{prefix}:cache}}"),
            max_bytes,
            timeout,
            put: Script::new(PUT),
            conn,
            used: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            _thread: done,
        })
    }

    /// Whether the store holds a live connection now.
    pub fn connected(&self) -> bool {
        self.conn.read().map(|c| c.is_some()).unwrap_or(false)
    }

    /// A rule's stream of semantic records.
    fn stream(&self, rule: i64) -> String {
        format!("{}:sem:{rule}", self.tag)
    }

    fn key(&self, key: &CacheKey) -> String {
        format!("{}:e:{}", self.tag, key.hex())
    }

    /// The live connection, or unavailable at once.
    fn connection(&self) -> Result<Conn, CacheUnavailable> {
        self.conn
            .read()
            .ok()
            .and_then(|c| c.clone())
            .ok_or_else(|| CacheUnavailable("not connected".into()))
    }

    /// A failed command: the connection is given up (the background thread makes a new one).
    fn failed(&self, why: String) -> CacheUnavailable {
        if let Ok(mut conn) = self.conn.write() {
            *conn = None;
        }
        tracing::debug!(error = %why, "response cache: Redis command failed");
        CacheUnavailable(why)
    }

    async fn timed<T>(
        &self,
        run: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, CacheUnavailable> {
        match tokio::time::timeout(self.timeout, run).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(self.failed(format!("Redis error: {e}"))),
            Err(_) => Err(self.failed("Redis did not answer in time".into())),
        }
    }
}

/// Connects, and reconnects whenever the connection was given up, until `done` fires.
fn keep_connected(
    target: RedisTarget,
    slot: Arc<RwLock<Option<Conn>>>,
    mut done: oneshot::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(error = %e, "response cache: no runtime for Redis; the cache is bypassed");
            return;
        }
    };
    runtime.block_on(async move {
        loop {
            let missing = slot.read().map(|c| c.is_none()).unwrap_or(false);
            if missing {
                // The connection's own driver runs on this runtime, which lives as long as the
                // store.
                if let Ok(conn) = target.connect(Duration::from_secs(1)).await {
                    if let Ok(mut slot) = slot.write() {
                        *slot = Some(conn);
                    }
                }
            }
            tokio::select! {
                _ = &mut done => return,
                () = tokio::time::sleep(RECONNECT_EVERY) => {}
            }
        }
    });
}

impl ResponseCache for RedisCache {
    fn get<'a>(
        &'a self,
        key: &'a CacheKey,
        now: UnixMillis,
    ) -> BoxFuture<'a, Result<Option<Arc<CacheEntry>>, CacheUnavailable>> {
        Box::pin(async move {
            let mut conn = self.connection()?;
            let mut cmd = redis::cmd("GET");
            cmd.arg(self.key(key));
            let value: Option<Vec<u8>> = self.timed(cmd.query_async(&mut conn)).await?;
            let Some(value) = value else {
                return Ok(None);
            };
            let expires_at = value
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
                .ok_or_else(|| CacheUnavailable("a stored value is not an entry".into()))?;
            if now >= expires_at {
                return Ok(None);
            }
            let entry = value
                .get(8..)
                .and_then(CacheEntry::decode)
                .ok_or_else(|| CacheUnavailable("a stored value is not an entry".into()))?;
            Ok(Some(Arc::new(entry)))
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a CacheKey,
        entry: CacheEntry,
        ttl_ms: u64,
        now: UnixMillis,
    ) -> BoxFuture<'a, Result<bool, CacheUnavailable>> {
        Box::pin(async move {
            let mut conn = self.connection()?;
            let expires_at = now.saturating_add(ttl_ms);
            let mut value = Vec::with_capacity(8 + entry.size());
            value.extend_from_slice(&expires_at.to_be_bytes());
            value.extend_from_slice(&entry.encode());
            let mut invocation = self.put.prepare_invoke();
            invocation
                .key(format!("{}:idx", self.tag))
                .key(format!("{}:size", self.tag))
                .key(format!("{}:bytes", self.tag))
                .key(self.key(key))
                .arg(value)
                .arg(ttl_ms.max(1))
                .arg(now)
                .arg(self.max_bytes);
            let (stored, used, entries): (u8, u64, u64) =
                self.timed(invocation.invoke_async(&mut conn)).await?;
            self.used.store(used, Ordering::Relaxed);
            self.entries.store(entries, Ordering::Relaxed);
            Ok(stored == 1)
        })
    }

    fn usage(&self) -> CacheUsage {
        CacheUsage {
            entries: self.entries.load(Ordering::Relaxed),
            bytes: self.used.load(Ordering::Relaxed),
        }
    }

    fn share_vector(
        &self,
        rule: i64,
        record: Vec<u8>,
    ) -> BoxFuture<'_, Result<(), CacheUnavailable>> {
        Box::pin(async move {
            let mut conn = self.connection()?;
            let mut cmd = redis::cmd("XADD");
            cmd.arg(self.stream(rule))
                .arg("MAXLEN")
                .arg("~")
                .arg(SHARED_VECTORS)
                .arg("*")
                .arg("v")
                .arg(record);
            let _: String = self.timed(cmd.query_async(&mut conn)).await?;
            Ok(())
        })
    }

    fn shared_vectors<'a>(
        &'a self,
        rule: i64,
        after: &'a str,
        count: usize,
    ) -> BoxFuture<'a, Result<Vec<SharedRecord>, CacheUnavailable>> {
        Box::pin(async move {
            let mut conn = self.connection()?;
            let mut cmd = redis::cmd("XRANGE");
            cmd.arg(self.stream(rule))
                .arg(format!("({after}"))
                .arg("+")
                .arg("COUNT")
                .arg(count.max(1));
            // Each entry: its id, and its fields as (name, value) pairs.
            let read: Vec<(String, Vec<SharedRecord>)> =
                self.timed(cmd.query_async(&mut conn)).await?;
            Ok(read
                .into_iter()
                .filter_map(|(id, fields)| {
                    let value = fields.into_iter().find(|(name, _)| name == "v")?.1;
                    Some((id, value))
                })
                .collect())
        })
    }
}
