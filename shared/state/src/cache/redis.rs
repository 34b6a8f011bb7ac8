//! The fleet's response cache in Redis, bounded by bytes.
//!
//! Layout (every key shares the hash tag `{sy:PREFIX:cache}`, so one script sees them all in
//! one Cluster slot): one string per entry, `e:<key hex>`, holding the entry's expiry (8 bytes,
//! big-endian Unix ms) then [`CacheEntry::encode`]'s bytes, written with `PX` = its time to
//! live; a sorted set `idx` (entry key → expiry), a hash `size` (entry key → bytes) and a
//! counter `bytes` (their sum). The bound is kept by one versioned script per batch of writes
//! (`switchyard_cache_put_v2`, `writes.rs`): it drops expired entries, then for each entry the
//! entries nearest their expiry until it fits, then writes it; an entry alone over the bound is
//! refused. Writes queue (bounded) for a background writer; a request never waits on one.
//!
//! A lookup is one `GET` under a short timeout, on a connection of the serving thread's own
//! (`local.rs`) once it has one. This store never waits on a connection: a
//! background thread (`switchyard-cache`) connects and reconnects and runs the writer, and a
//! store without a live connection answers [`CacheUnavailable`] at once (and lets a write go),
//! so a dead Redis costs a request nothing but its cache.

use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use switchyard_engine::UnixMillis;
use tokio::sync::oneshot;

use super::entry::{
    CacheEntry, CacheKey, CacheUnavailable, CacheUsage, ResponseCache, SharedRecord, SHARED_VECTORS,
};
use super::local::{self, Owner};
use super::writes::{give_up, queue, Tags, Usage, Write, Writer, Writes};
use crate::redis::conn::{Conn, RedisTarget};
use crate::redis::shared::RedisConfigError;

/// The least time a batch of writes may take before the connection is given up: a write holds
/// no request up, so a loaded Redis may be slower with it than with a lookup.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long making a connection may take.
const CONNECT: Duration = Duration::from_secs(1);

/// How often the background thread checks the connection.
const RECONNECT_EVERY: Duration = Duration::from_millis(500);

/// The Redis store.
pub struct RedisCache {
    tag: String,
    timeout: Duration,
    conn: Arc<RwLock<Option<Conn>>>,
    writes: Writes,
    usage: Arc<Usage>,
    /// Where Redis is (each serving thread's lookups connect there too, `local.rs`).
    target: RedisTarget,
    owner: Owner,
    /// Dropped with the store: ends the connecting thread.
    _thread: oneshot::Sender<()>,
}

impl RedisCache {
    /// Connects to `url` in the background; keys under `prefix`, at most `max_bytes` stored,
    /// each lookup given `timeout` (a batch of writes at least [`WRITE_TIMEOUT`]). Needs no
    /// ambient runtime.
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
        let tag = format!("{{sy:{prefix}:cache}}");
        let conn = Arc::new(RwLock::new(None));
        let usage = Arc::new(Usage::default());
        let tags = Tags {
            idx: format!("{tag}:idx"),
            size: format!("{tag}:size"),
            bytes: format!("{tag}:bytes"),
        };
        let (writes, writer) = queue(
            tags,
            max_bytes,
            timeout.max(WRITE_TIMEOUT),
            Arc::clone(&conn),
            Arc::clone(&usage),
        );
        let (done, done_rx) = oneshot::channel::<()>();
        let slot = Arc::clone(&conn);
        let connecting = target.clone();
        std::thread::Builder::new()
            .name("switchyard-cache".into())
            .spawn(move || keep_connected(connecting, slot, done_rx, writer))
            .map_err(|e| RedisConfigError(format!("cannot start the cache thread: {e}")))?;
        Ok(RedisCache {
            tag,
            timeout,
            conn,
            writes,
            usage,
            target,
            owner: Owner::default(),
            _thread: done,
        })
    }

    /// Whether the store holds a live connection now.
    pub fn connected(&self) -> bool {
        self.conn.read().map(|c| c.is_some()).unwrap_or(false)
    }

    /// Whether this thread looks up on a connection of its own (a serving thread, once it is
    /// made).
    pub fn own_connection(&self) -> bool {
        local::live(&self.owner)
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
        give_up(&self.conn, why)
    }

    /// An entry as a queued write (its value: the expiry, then the entry's bytes).
    fn write(&self, key: &CacheKey, entry: &CacheEntry, ttl_ms: u64, now: UnixMillis) -> Write {
        let expires_at = now.saturating_add(ttl_ms);
        let mut value = Vec::with_capacity(8 + entry.size());
        value.extend_from_slice(&expires_at.to_be_bytes());
        entry.encode_into(&mut value);
        Write {
            key: self.key(key),
            value,
            ttl_ms,
            now,
            reply: None,
        }
    }

    /// Queues a write, or lets it go at once when Redis is unreachable.
    fn enqueue(&self, write: Write) {
        if self.connected() {
            self.writes.offer(write);
        } else {
            self.writes.let_go(write, "not connected");
        }
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

/// Connects, and reconnects whenever the connection was given up, and runs the writer, until
/// `done` fires.
fn keep_connected(
    target: RedisTarget,
    slot: Arc<RwLock<Option<Conn>>>,
    mut done: oneshot::Receiver<()>,
    writer: Writer,
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
        tokio::spawn(writer.run());
        loop {
            let missing = slot.read().map(|c| c.is_none()).unwrap_or(false);
            if missing {
                // The connection's own driver runs on this runtime, which lives as long as the
                // store.
                if let Ok(conn) = target.connect(CONNECT).await {
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
            // This thread's own connection when it has one, else the shared one.
            let own = local::connection(&self.owner, &self.target, CONNECT, self.connected());
            let shared = own.is_none();
            let mut conn = match own {
                Some(conn) => conn,
                None => self.connection()?,
            };
            let mut cmd = redis::cmd("GET");
            cmd.arg(self.key(key));
            let value: Option<Vec<u8>> =
                match tokio::time::timeout(self.timeout, cmd.query_async(&mut conn)).await {
                    Ok(Ok(value)) => value,
                    failed => {
                        let why = match failed {
                            Ok(Err(e)) => format!("Redis error: {e}"),
                            _ => "Redis did not answer in time".to_owned(),
                        };
                        if shared {
                            return Err(self.failed(why));
                        }
                        local::give_up(&self.owner);
                        return Err(CacheUnavailable(why));
                    }
                };
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
        let (reply, answer) = oneshot::channel();
        let write = Write {
            reply: Some(reply),
            ..self.write(key, &entry, ttl_ms, now)
        };
        self.enqueue(write);
        Box::pin(async move {
            answer
                .await
                .unwrap_or_else(|_| Err(CacheUnavailable("the writer is gone".into())))
        })
    }

    fn offer(&self, key: &CacheKey, entry: CacheEntry, ttl_ms: u64, now: UnixMillis) {
        self.enqueue(self.write(key, &entry, ttl_ms, now));
    }

    fn usage(&self) -> CacheUsage {
        CacheUsage {
            entries: self.usage.entries.load(Ordering::Relaxed),
            bytes: self.usage.used.load(Ordering::Relaxed),
        }
    }

    fn writes_dropped(&self) -> u64 {
        self.writes.dropped()
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
