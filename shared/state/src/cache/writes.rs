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
/// How long a batch waits for more writes after its first: an entry is readable by every
/// proxy this much later than it would be otherwise (its own request is never held up).
const LINGER: Duration = Duration::from_millis(2);

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
    /// How long a batch waits for more writes after its first ([`LINGER`] unless a test
    /// says otherwise).
    linger: Duration,
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
    let writer = Writer {
        rx,
        sink,
        linger: LINGER,
    };
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
    /// queue's sender is dropped; what is queued then is still stored.
    ///
    /// A batch begins with the first write that arrives; unless a full batch is already
    /// queued, the writer then waits [`Writer::linger`] for more before taking what is queued
    /// (without being woken by each write meanwhile): one script call then carries the writes
    /// of that moment, where sending as soon as a call was answered made a call of one or two
    /// writes per request under load, each costing its own round trip and wake-ups.
    pub async fn run(self) {
        let Writer {
            mut rx,
            sink,
            linger,
        } = self;
        let script = Script::new(PUT);
        let mut flying = FuturesUnordered::new();
        loop {
            let mut batch = Vec::new();
            // The first write, answering the calls in flight meanwhile. `recv_many` loses
            // nothing when the other branch wins.
            tokio::select! {
                got = rx.recv_many(&mut batch, 1) => if got == 0 { break },
                Some(()) = flying.next(), if !flying.is_empty() => continue,
            }
            if !linger.is_zero() && rx.len() + 1 < BATCH_WRITES {
                let until = tokio::time::sleep(linger);
                tokio::pin!(until);
                loop {
                    tokio::select! {
                        () = &mut until => break,
                        Some(()) = flying.next(), if !flying.is_empty() => {}
                    }
                }
            }
            fill(&mut rx, &mut batch, &sink.queued_bytes);
            while flying.len() >= IN_FLIGHT {
                flying.next().await;
            }
            flying.push(sink.send(&script, batch));
        }
        while flying.next().await.is_some() {}
    }
}

/// Adds to `batch` (holding at least its first write) what is queued, up to a batch's bounds;
/// the batch's bytes leave the queue's count.
fn fill(rx: &mut mpsc::Receiver<Write>, batch: &mut Vec<Write>, queued: &AtomicU64) {
    batch.reserve(rx.len().min(BATCH_WRITES));
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

    /// A writer without a connection that lingers a minute, and when the test began.
    fn lingering() -> (Writes, Writer, tokio::time::Instant) {
        let (writes, mut writer) = unconnected();
        writer.linger = Duration::from_secs(60);
        (writes, writer, tokio::time::Instant::now())
    }

    // The clock is paused: it moves only when every task waits, straight to the next timer.
    #[tokio::test(start_paused = true)]
    async fn a_batch_waits_the_linger_for_more_writes_and_takes_them_along() {
        let (writes, writer, began) = lingering();
        let (w, mut first) = write(10);
        writes.offer(w);
        let running = tokio::spawn(writer.run());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(first.try_recv().is_err(), "still lingering after a second");
        let mut later = Vec::new();
        for _ in 0..5 {
            let (w, answer) = write(10);
            writes.offer(w);
            later.push(answer);
        }
        assert!(first.await.unwrap().is_err(), "unconnected: unavailable");
        for answer in later {
            assert!(answer.await.unwrap().is_err());
            let waited = began.elapsed();
            assert!(
                waited >= Duration::from_secs(60) && waited < Duration::from_secs(61),
                "sent with the first write when its linger ended, not after one of their own: {waited:?}"
            );
        }
        drop(writes);
        running.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_already_queued_goes_without_lingering() {
        let (writes, writer, began) = lingering();
        let mut answers = Vec::new();
        for _ in 0..BATCH_WRITES {
            let (w, answer) = write(10);
            writes.offer(w);
            answers.push(answer);
        }
        let running = tokio::spawn(writer.run());
        for answer in answers {
            assert!(answer.await.unwrap().is_err());
        }
        assert!(
            began.elapsed() < Duration::from_secs(1),
            "no linger: {:?}",
            began.elapsed()
        );
        drop(writes);
        running.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn writes_queued_when_the_queue_closes_are_still_sent() {
        let (writes, writer, _) = lingering();
        let running = tokio::spawn(writer.run());
        let mut answers = Vec::new();
        for _ in 0..3 {
            let (w, answer) = write(10);
            writes.offer(w);
            answers.push(answer);
        }
        drop(writes);
        for answer in answers {
            let told = answer.await.unwrap();
            assert_eq!(told, Err(CacheUnavailable("not connected".into())));
        }
        running.await.unwrap();
    }
}
