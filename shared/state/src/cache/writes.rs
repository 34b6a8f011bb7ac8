//! The Redis store's writes, off every request's path: a bounded queue (by count and by bytes)
//! that a background writer empties in batches, one script call a batch
//! (`switchyard_cache_put_v2`), a few batches in flight on the connection at once while the next
//! gathers behind them. A write the queue has
//! no room for, or offered while Redis is unreachable, is let go at once and counted: a write
//! never waits and never holds a request up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::Script;
use switchyard_engine::UnixMillis;
use tokio::sync::{mpsc, oneshot};

use super::entry::CacheUnavailable;
use crate::redis::conn::Conn;

/// The write script: `KEYS = [idx, size, bytes, entry…]`, `ARGV = [sweep ms, bound, then for
/// each entry: value, ttl ms, now ms]`; returns `[bytes used, entries, stored (0|1) for each
/// entry]`. It drops (at most 64) entries expired by `sweep`, then stores each entry in turn:
/// the entries nearest their expiry dropped until it fits, one alone over the bound refused.
const PUT: &str = r#"
-- switchyard_cache_put_v2
local idx, sizes, total = KEYS[1], KEYS[2], KEYS[3]
local sweep, bound = tonumber(ARGV[1]), tonumber(ARGV[2])
local used = tonumber(redis.call('GET', total) or '0')
local function drop(k)
  local s = redis.call('HGET', sizes, k)
  if s then
    redis.call('HDEL', sizes, k)
    used = used - tonumber(s)
  end
  redis.call('ZREM', idx, k)
  redis.call('DEL', k)
end
for _, k in ipairs(redis.call('ZRANGEBYSCORE', idx, '-inf', sweep, 'LIMIT', 0, 64)) do drop(k) end
local stored = {}
for i = 4, #KEYS do
  local key = KEYS[i]
  local at = 3 + (i - 4) * 3
  local value, ttl, now = ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  if redis.call('HEXISTS', sizes, key) == 1 then drop(key) end
  local size = string.len(value)
  local rounds = 0
  while used + size > bound and rounds < 256 do
    local first = redis.call('ZRANGE', idx, 0, 0)
    if #first == 0 then break end
    drop(first[1])
    rounds = rounds + 1
  end
  if size > bound or used + size > bound then
    stored[#stored + 1] = 0
  else
    redis.call('SET', key, value, 'PX', ttl)
    redis.call('ZADD', idx, now + ttl, key)
    redis.call('HSET', sizes, key, size)
    used = used + size
    stored[#stored + 1] = 1
  end
end
redis.call('SET', total, used)
return {used, redis.call('ZCARD', idx), unpack(stored)}
"#;

/// Most writes the queue holds.
const QUEUE_WRITES: usize = 4096;
/// Most bytes the queued writes hold.
const QUEUE_BYTES: u64 = 16 << 20;
/// Most writes one script call stores.
const BATCH_WRITES: usize = 128;
/// Most script calls awaiting their answers at once.
const IN_FLIGHT: usize = 4;
/// Most bytes one script call carries (a larger write goes alone).
const BATCH_BYTES: usize = 4 << 20;

/// One entry to store: its Redis key, its stored value, its time to live and the writer's
/// clock; `reply` hears whether it was stored.
pub(super) struct Write {
    pub key: String,
    pub value: Vec<u8>,
    pub ttl_ms: u64,
    pub now: UnixMillis,
    pub reply: Option<oneshot::Sender<Result<bool, CacheUnavailable>>>,
}

/// The request side of the queue.
pub(super) struct Writes {
    tx: mpsc::Sender<Write>,
    queued_bytes: Arc<AtomicU64>,
    dropped: AtomicU64,
}

/// The writer's side: what it reads, and where it writes.
pub(super) struct Writer {
    rx: mpsc::Receiver<Write>,
    sink: Sink,
}

/// Where the writer writes, and where it reports what Redis holds.
pub(super) struct Sink {
    queued_bytes: Arc<AtomicU64>,
    pub tags: Tags,
    pub bound: u64,
    pub timeout: Duration,
    pub conn: Arc<RwLock<Option<Conn>>>,
    pub usage: Arc<Usage>,
}

/// The shared keys of the store's layout.
pub(super) struct Tags {
    pub idx: String,
    pub size: String,
    pub bytes: String,
}

/// What the store holds, as the last batch learnt it.
#[derive(Default)]
pub(super) struct Usage {
    pub used: AtomicU64,
    pub entries: AtomicU64,
}

/// A queue and its writer (to be run by [`Writer::run`]).
pub(super) fn queue(
    tags: Tags,
    bound: u64,
    timeout: Duration,
    conn: Arc<RwLock<Option<Conn>>>,
    usage: Arc<Usage>,
) -> (Writes, Writer) {
    let (tx, rx) = mpsc::channel(QUEUE_WRITES);
    let queued_bytes = Arc::new(AtomicU64::new(0));
    let writes = Writes {
        tx,
        queued_bytes: Arc::clone(&queued_bytes),
        dropped: AtomicU64::new(0),
    };
    let sink = Sink {
        queued_bytes,
        tags,
        bound,
        timeout,
        conn,
        usage,
    };
    let writer = Writer { rx, sink };
    (writes, writer)
}

impl Writes {
    /// Queues a write, or lets it go (counted, its `reply` told why) when the queue is full.
    pub fn offer(&self, write: Write) {
        let size = write.value.len() as u64;
        let before = self.queued_bytes.fetch_add(size, Ordering::Relaxed);
        let refused = if before.saturating_add(size) > QUEUE_BYTES && before > 0 {
            Some(write)
        } else {
            self.tx.try_send(write).err().map(|e| match e {
                mpsc::error::TrySendError::Full(w) | mpsc::error::TrySendError::Closed(w) => w,
            })
        };
        if let Some(write) = refused {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            self.let_go(write, "the write queue is full");
        }
    }

    /// A write not made (no room, no connection): counted, its `reply` told why.
    pub fn let_go(&self, write: Write, why: &str) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        if let Some(reply) = write.reply {
            let _ = reply.send(Err(CacheUnavailable(why.into())));
        }
    }

    /// Writes let go so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Writer {
    /// Stores what is queued, a batch at a time (up to [`IN_FLIGHT`] at once), until the
    /// queue's sender is dropped.
    pub async fn run(self) {
        let Writer { mut rx, sink } = self;
        let script = Script::new(PUT);
        let mut flying = FuturesUnordered::new();
        loop {
            tokio::select! {
                batch = next_batch(&mut rx, &sink.queued_bytes), if flying.len() < IN_FLIGHT => {
                    let Some(batch) = batch else { break };
                    flying.push(sink.send(&script, batch));
                }
                Some(()) = flying.next(), if !flying.is_empty() => {}
            }
        }
        while flying.next().await.is_some() {}
    }
}

/// The next batch: at least one write (waited for), then what is queued, up to a batch's
/// bounds; `None` once the queue's sender is gone.
async fn next_batch(rx: &mut mpsc::Receiver<Write>, queued: &AtomicU64) -> Option<Vec<Write>> {
    let mut batch = Vec::with_capacity(BATCH_WRITES);
    if rx.recv_many(&mut batch, 1).await == 0 {
        return None;
    }
    let mut bytes = batch.iter().map(|w| w.value.len()).sum::<usize>();
    while batch.len() < BATCH_WRITES && bytes < BATCH_BYTES {
        match rx.try_recv() {
            Ok(write) => {
                bytes += write.value.len();
                batch.push(write);
            }
            Err(_) => break,
        }
    }
    queued.fetch_sub(bytes as u64, Ordering::Relaxed);
    Some(batch)
}

impl Sink {
    /// Stores a batch and tells each write's `reply` what became of it.
    async fn send(&self, script: &Script, batch: Vec<Write>) {
        let result = self.store(script, &batch).await;
        for (i, write) in batch.into_iter().enumerate() {
            if let Some(reply) = write.reply {
                let answer = match &result {
                    Ok(stored) => Ok(stored.get(i).copied().unwrap_or(false)),
                    Err(e) => Err(e.clone()),
                };
                let _ = reply.send(answer);
            }
        }
    }

    /// One script call for the batch: whether each entry was stored.
    async fn store(&self, script: &Script, batch: &[Write]) -> Result<Vec<bool>, CacheUnavailable> {
        let mut conn = self
            .conn
            .read()
            .ok()
            .and_then(|c| c.clone())
            .ok_or_else(|| CacheUnavailable("not connected".into()))?;
        let sweep = batch.iter().map(|w| w.now).max().unwrap_or(0);
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&self.tags.idx)
            .key(&self.tags.size)
            .key(&self.tags.bytes)
            .arg(sweep)
            .arg(self.bound);
        for write in batch {
            invocation
                .key(&write.key)
                .arg(&write.value[..])
                .arg(write.ttl_ms.max(1))
                .arg(write.now);
        }
        let answered = tokio::time::timeout(self.timeout, invocation.invoke_async(&mut conn));
        let reply: Vec<u64> = match answered.await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => return Err(give_up(&self.conn, format!("Redis error: {e}"))),
            Err(_) => return Err(give_up(&self.conn, "Redis did not answer in time".into())),
        };
        let (used, entries) = (reply.first(), reply.get(1));
        self.usage
            .used
            .store(used.copied().unwrap_or(0), Ordering::Relaxed);
        self.usage
            .entries
            .store(entries.copied().unwrap_or(0), Ordering::Relaxed);
        Ok(reply.iter().skip(2).map(|s| *s == 1).collect())
    }
}

/// A failed command: the connection is given up (the background thread makes a new one).
pub(super) fn give_up(conn: &RwLock<Option<Conn>>, why: String) -> CacheUnavailable {
    if let Ok(mut conn) = conn.write() {
        *conn = None;
    }
    tracing::debug!(error = %why, "response cache: Redis command failed");
    CacheUnavailable(why)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn unconnected() -> (Writes, Writer) {
        let tags = Tags {
            idx: "i".into(),
            size: "s".into(),
            bytes: "b".into(),
        };
        let conn = Arc::new(RwLock::new(None));
        queue(tags, 1 << 20, Duration::from_secs(1), conn, Arc::default())
    }

    fn write(bytes: usize) -> (Write, oneshot::Receiver<Result<bool, CacheUnavailable>>) {
        let (reply, answer) = oneshot::channel();
        let write = Write {
            key: "k".into(),
            value: vec![0; bytes],
            ttl_ms: 1000,
            now: 0,
            reply: Some(reply),
        };
        (write, answer)
    }

    #[test]
    fn a_full_queue_lets_a_write_go_at_once_and_counts_it() {
        // The writer is not running: nothing leaves the queue.
        let (writes, _writer) = unconnected();
        let mut answers = Vec::new();
        for _ in 0..QUEUE_WRITES {
            let (w, answer) = write(10);
            writes.offer(w);
            answers.push(answer);
        }
        assert_eq!(writes.dropped(), 0, "room for every one so far");
        let (w, mut answer) = write(10);
        writes.offer(w);
        assert_eq!(writes.dropped(), 1);
        let told = answer.try_recv().unwrap();
        assert!(told.unwrap_err().0.contains("full"));
        assert!(
            answers[0].try_recv().is_err(),
            "the queued ones are still waiting for the writer"
        );
    }

    #[test]
    fn the_queue_is_bounded_by_bytes_too_but_takes_one_large_write_when_empty() {
        let (writes, _writer) = unconnected();
        let (big, _kept) = write(QUEUE_BYTES as usize + 1);
        writes.offer(big);
        assert_eq!(writes.dropped(), 0, "alone, it is queued");
        let (more, mut answer) = write(1);
        writes.offer(more);
        assert_eq!(writes.dropped(), 1, "no bytes left for another");
        assert!(answer.try_recv().unwrap().is_err());
    }

    #[tokio::test]
    async fn without_a_connection_the_writer_answers_unavailable_for_the_batch() {
        let (writes, writer) = unconnected();
        let mut answers = Vec::new();
        for _ in 0..3 {
            let (w, answer) = write(10);
            writes.offer(w);
            answers.push(answer);
        }
        let running = tokio::spawn(writer.run());
        for answer in answers {
            let told = answer.await.unwrap();
            assert_eq!(told, Err(CacheUnavailable("not connected".into())));
        }
        drop(writes);
        running.await.unwrap();
    }
}
