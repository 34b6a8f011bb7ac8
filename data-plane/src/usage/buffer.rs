//! The proxy's pending usage: per-(minute, token, team, route, channel, model) totals in
//! [`SHARDS`] independently locked maps, the shadow comparisons beside them, and the counters of
//! their reporting (`switchyard_usage_*` on `/metrics`).
//!
//! [`UsageBuffer::add`] is the hot-path call: one hash, one short critical section on one of
//! [`SHARDS`] mutexes, no allocation when the key is already pending and no I/O ever. Memory is
//! bounded: at most `max_keys` distinct keys wait (requests with a new key beyond that are
//! dropped and counted, and the count travels in the next batch), plus the one batch in flight
//! (at most `batch_keys` records).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use switchyard_engine::LimitKey;
use switchyard_metrics::{Collect, Type, Writer};
use switchyard_proto::usage::unix_now_s;
use switchyard_proto::{v1, ShadowCounts};
use tokio::sync::Notify;

/// (minute, shadow rule) keys of shadow comparisons waiting at most.
pub const MAX_SHADOW_KEYS: usize = 10_000;

/// (minute, guardrail) keys of guardrail reports waiting at most.
pub const MAX_GUARDRAIL_KEYS: usize = 10_000;

/// Number of independently locked parts of the buffer.
pub const SHARDS: usize = 16;

/// The dimensions of one usage aggregate. Names, not ids: they stay meaningful after a channel or
/// token is renamed or deleted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UsageKey {
    /// The name of the Switchyard token the client presented.
    pub token: String,
    /// The token's team, if it has one.
    pub team: Option<String>,
    /// The route's model pattern that matched.
    pub route: String,
    /// The channel that served the request (the final attempt's).
    pub channel: String,
    /// The upstream model the channel was asked for.
    pub model: String,
}

/// What a set of requests used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageCounts {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// Cost of the priced requests in pico-USD (10⁻¹² USD), saturating.
    pub cost_pico_usd: u64,
    /// Requests whose usage matched no price: their cost is unknown, never zero.
    pub unpriced_requests: u64,
    /// Requests answered from the response cache, and what their answers had used and cost.
    pub cache_hits: u64,
    pub saved_input_tokens: u64,
    pub saved_output_tokens: u64,
    pub saved_cost_pico_usd: u64,
}

impl UsageCounts {
    fn add(&mut self, other: UsageCounts) {
        self.cost_pico_usd = self.cost_pico_usd.saturating_add(other.cost_pico_usd);
        self.unpriced_requests = self
            .unpriced_requests
            .saturating_add(other.unpriced_requests);
        self.requests = self.requests.saturating_add(other.requests);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.cache_hits = self.cache_hits.saturating_add(other.cache_hits);
        self.saved_input_tokens = self
            .saved_input_tokens
            .saturating_add(other.saved_input_tokens);
        self.saved_output_tokens = self
            .saved_output_tokens
            .saturating_add(other.saved_output_tokens);
        self.saved_cost_pico_usd = self
            .saved_cost_pico_usd
            .saturating_add(other.saved_cost_pico_usd);
    }
}

/// How a proxy batches its usage reports.
#[derive(Debug, Clone, Copy)]
pub struct UsageConfig {
    /// A batch is sent at least this often while there is usage to report.
    pub flush_interval: Duration,
    /// Records per batch; a batch is sent early once this many keys are pending.
    pub batch_keys: usize,
    /// Distinct keys the buffer holds at most; a request with a new key beyond it is dropped
    /// (and counted).
    pub max_keys: usize,
    /// Time the last flush at shutdown may take.
    pub final_flush: Duration,
    /// Request-log rows the buffer holds at most; a finished request beyond it is left out of
    /// the log (and counted).
    pub max_log_rows: usize,
}

impl Default for UsageConfig {
    fn default() -> UsageConfig {
        UsageConfig {
            flush_interval: Duration::from_secs(5),
            batch_keys: 1000,
            max_keys: 20_000,
            final_flush: Duration::from_secs(3),
            max_log_rows: 50_000,
        }
    }
}

type Shard = HashMap<(i64, UsageKey), UsageCounts>;

/// The proxy's pending usage, and the counters of its reporting.
#[derive(Debug)]
pub struct UsageBuffer {
    shards: Vec<Mutex<Shard>>,
    hasher: RandomState,
    keys: AtomicUsize,
    max_keys: usize,
    batch_keys: usize,
    /// Dropped requests not yet reported in a batch.
    dropped_unreported: AtomicU64,
    dropped_total: AtomicU64,
    pub(super) full: Notify,
    instance: String,
    next_batch: AtomicU64,
    pub(super) batches_sent: AtomicU64,
    pub(super) batches_duplicate: AtomicU64,
    pub(super) batches_failed: AtomicU64,
    pub(super) batches_rejected: AtomicU64,
    pub(super) records_sent: AtomicU64,
    /// Shadow comparisons per (minute, rule), sent with the next batch.
    shadows: Mutex<HashMap<(i64, i64), ShadowCounts>>,
    /// The request log's rows waiting, oldest first (at most `max_log_rows`).
    log: Mutex<Vec<v1::RequestLogRecord>>,
    max_log_rows: usize,
    pub(super) log_dropped: AtomicU64,
    pub(super) log_sent: AtomicU64,
    /// Semantic cache trials per (minute, rule), sent with the next batch.
    trials: Mutex<HashMap<(i64, i64), TrialCounts>>,
    /// Guardrail reports per (minute, guardrail), sent with the next batch.
    guardrails: Mutex<HashMap<(i64, i64), v1::GuardrailRecord>>,
    /// Hard limits seen refusing: the (limit, window start) already told (bounded: the control
    /// plane records each once for the fleet anyway), and the events for the next batch.
    refusing: Mutex<Refusing>,
}

/// A semantic cache rule's lookups by meaning (see `SemanticTrialRecord`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrialCounts {
    pub looked_up: u64,
    pub would_hit: u64,
    pub compared: u64,
    pub agreed: u64,
    pub score_milli_sum: u64,
    pub similarity_milli_sum: u64,
}

impl TrialCounts {
    fn add(&mut self, other: &TrialCounts) {
        self.looked_up = self.looked_up.saturating_add(other.looked_up);
        self.would_hit = self.would_hit.saturating_add(other.would_hit);
        self.compared = self.compared.saturating_add(other.compared);
        self.agreed = self.agreed.saturating_add(other.agreed);
        self.score_milli_sum = self.score_milli_sum.saturating_add(other.score_milli_sum);
        self.similarity_milli_sum = self
            .similarity_milli_sum
            .saturating_add(other.similarity_milli_sum);
    }

    fn to_record(self, bucket: i64, rule: i64) -> v1::SemanticTrialRecord {
        v1::SemanticTrialRecord {
            bucket_start_unix_s: bucket,
            rule_id: rule,
            looked_up: self.looked_up,
            would_hit: self.would_hit,
            compared: self.compared,
            agreed: self.agreed,
            score_milli_sum: self.score_milli_sum,
            similarity_milli_sum: self.similarity_milli_sum,
        }
    }
}
/// The (limit, window start) pairs already told, and the events waiting for the next batch.
type Refusing = (HashSet<(LimitKey, u64)>, Vec<v1::LimitEvent>);

/// The most refusing windows [`UsageBuffer::add_refusing`] remembers before it starts over.
const MAX_REFUSING_REMEMBERED: usize = 10_000;

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A panic while holding the lock cannot leave a map half-updated in a way that matters here.
    shard
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl UsageBuffer {
    pub fn new(config: &UsageConfig) -> UsageBuffer {
        let hasher = RandomState::new();
        // A random instance id (RandomState is randomly seeded per process), so batch ids of two
        // proxies, or of one proxy before and after a restart, never collide.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let instance = format!(
            "{:016x}{:016x}",
            hasher.hash_one((nanos, std::process::id())),
            RandomState::new().hash_one(nanos)
        );
        UsageBuffer {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher,
            keys: AtomicUsize::new(0),
            max_keys: config.max_keys.max(1),
            batch_keys: config.batch_keys.max(1),
            dropped_unreported: AtomicU64::new(0),
            dropped_total: AtomicU64::new(0),
            full: Notify::new(),
            instance,
            next_batch: AtomicU64::new(1),
            batches_sent: AtomicU64::new(0),
            batches_duplicate: AtomicU64::new(0),
            batches_failed: AtomicU64::new(0),
            batches_rejected: AtomicU64::new(0),
            records_sent: AtomicU64::new(0),
            shadows: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            max_log_rows: config.max_log_rows,
            log_dropped: AtomicU64::new(0),
            log_sent: AtomicU64::new(0),
            trials: Mutex::new(HashMap::new()),
            guardrails: Mutex::new(HashMap::new()),
            refusing: Mutex::new((HashSet::new(), Vec::new())),
        }
    }

    /// Adds one finished request's request-log row; a full log drops it (counted) and returns
    /// `false`.
    pub fn add_log(&self, row: v1::RequestLogRecord) -> bool {
        let mut log = self
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if log.len() >= self.max_log_rows {
            drop(log);
            self.log_dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        log.push(row);
        let pending = log.len();
        drop(log);
        if pending == self.batch_keys {
            self.full.notify_one();
        }
        true
    }

    /// A hard limit (`key`, its window starting at `window_start`) refused a request at `at`:
    /// the first time for this window, an event for the next batch, with the limit's id from
    /// `id_of` (none: nothing to tell). Returns whether it was the first.
    pub fn add_refusing(
        &self,
        key: LimitKey,
        window_start: u64,
        at: u64,
        id_of: impl FnOnce() -> Option<i64>,
    ) -> bool {
        let mut refusing = self
            .refusing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (told, events) = &mut *refusing;
        if told.contains(&(key, window_start)) {
            return false;
        }
        if told.len() >= MAX_REFUSING_REMEMBERED {
            told.clear();
        }
        told.insert((key, window_start));
        if let Some(limit_id) = id_of() {
            events.push(v1::LimitEvent {
                limit_id,
                window_start_unix_ms: window_start,
                at_unix_ms: at,
            });
        }
        true
    }

    /// Request-log rows waiting to be sent.
    pub fn pending_log_rows(&self) -> usize {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Up to `batch_keys` of the oldest request-log rows, taken out.
    fn take_log(&self) -> Vec<v1::RequestLogRecord> {
        let mut log = self
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if log.len() <= self.batch_keys {
            return std::mem::take(&mut *log);
        }
        let rest = log.split_off(self.batch_keys);
        std::mem::replace(&mut *log, rest)
    }

    /// Adds usage that finished now.
    pub fn add(&self, key: UsageKey, counts: UsageCounts) {
        self.add_at(unix_now_s(), key, counts);
    }

    /// Adds usage that finished at `unix_s` (counted in the minute that contains it).
    pub fn add_at(&self, unix_s: i64, key: UsageKey, counts: UsageCounts) {
        let bucket = unix_s - unix_s.rem_euclid(60);
        let entry = (bucket, key);
        let index = (self.hasher.hash_one(&entry) % SHARDS as u64) as usize;
        let Some(shard) = self.shards.get(index) else {
            return;
        };
        let mut map = lock(shard);
        if let Some(total) = map.get_mut(&entry) {
            total.add(counts);
            return;
        }
        let reserved = self
            .keys
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_keys).then_some(n + 1)
            });
        match reserved {
            Ok(before) => {
                map.insert(entry, counts);
                drop(map);
                if before + 1 >= self.batch_keys {
                    self.full.notify_one();
                }
            }
            Err(_) => {
                drop(map);
                self.dropped(counts.requests);
            }
        }
    }

    /// Adds one shadowed pair's comparison for `rule`, finished now. At most
    /// [`MAX_SHADOW_KEYS`] (minute, rule) keys wait; beyond that the pair is dropped (and
    /// `false` returned).
    pub fn add_shadow(&self, rule: i64, counts: &ShadowCounts) -> bool {
        add_this_minute(
            &self.shadows,
            rule,
            MAX_SHADOW_KEYS,
            |_| *counts,
            |total| total.add(counts),
        )
    }

    /// Adds a semantic rule's counts, now; at most [`MAX_SHADOW_KEYS`] (minute, rule) keys
    /// wait, beyond that the counts are dropped (and `false` returned).
    pub fn add_trial(&self, rule: i64, counts: &TrialCounts) -> bool {
        add_this_minute(
            &self.trials,
            rule,
            MAX_SHADOW_KEYS,
            |_| *counts,
            |total| total.add(counts),
        )
    }

    /// Adds what one guardrail did for one request (or answer), now. At most
    /// [`MAX_GUARDRAIL_KEYS`] (minute, guardrail) keys wait; beyond that it is dropped (and
    /// `false` returned).
    pub fn add_guardrail(&self, guardrail: i64, report: &v1::GuardrailRecord) -> bool {
        add_this_minute(
            &self.guardrails,
            guardrail,
            MAX_GUARDRAIL_KEYS,
            |bucket| {
                let mut first = v1::GuardrailRecord {
                    bucket_start_unix_s: bucket,
                    guardrail_id: guardrail,
                    ..v1::GuardrailRecord::default()
                };
                switchyard_proto::add_guardrail(&mut first, report);
                first
            },
            |total| switchyard_proto::add_guardrail(total, report),
        )
    }

    pub(super) fn dropped(&self, requests: u64) {
        self.dropped_unreported
            .fetch_add(requests, Ordering::Relaxed);
        self.dropped_total.fetch_add(requests, Ordering::Relaxed);
    }

    /// Distinct keys waiting to be sent.
    pub fn pending_keys(&self) -> usize {
        self.keys.load(Ordering::Acquire)
    }

    /// Requests dropped since start because the buffer was full or a batch was refused.
    pub fn dropped_requests(&self) -> u64 {
        self.dropped_total.load(Ordering::Relaxed)
    }

    /// Takes up to `batch_keys` records out of the buffer as one batch with a fresh id; `None`
    /// when there is nothing to report.
    pub fn take_batch(&self) -> Option<v1::UsageBatch> {
        let seq = self.next_batch.fetch_add(1, Ordering::Relaxed);
        let mut records = Vec::new();
        // Start at a different shard each time, so no shard waits behind the others.
        let start = (seq % SHARDS as u64) as usize;
        for i in 0..SHARDS {
            let room = self.batch_keys.saturating_sub(records.len());
            if room == 0 {
                break;
            }
            let Some(shard) = self.shards.get((start + i) % SHARDS) else {
                continue;
            };
            let mut map = lock(shard);
            let taken = if map.len() <= room {
                let taken = map.len();
                records.extend(map.drain().map(|(key, counts)| record(key, counts)));
                taken
            } else {
                let keys: Vec<_> = map.keys().take(room).cloned().collect();
                for key in keys {
                    if let Some(counts) = map.remove(&key) {
                        records.push(record(key, counts));
                    }
                }
                room
            };
            self.keys.fetch_sub(taken, Ordering::AcqRel);
        }
        let dropped_requests = self.dropped_unreported.swap(0, Ordering::Relaxed);
        let reports = self.take_reports();
        if records.is_empty() && dropped_requests == 0 && reports == v1::UsageBatch::default() {
            return None;
        }
        Some(v1::UsageBatch {
            batch_id: format!("{}-{seq}", self.instance),
            client_id: switchyard_proto::client::client_id(),
            records,
            dropped_requests,
            ..reports
        })
    }

    /// What travels beside the records, taken out of the buffer: shadow comparisons, guardrail
    /// reports, semantic cache trials, request-log rows and limit events.
    fn take_reports(&self) -> v1::UsageBatch {
        v1::UsageBatch {
            shadows: drained(&self.shadows, |((bucket, rule), counts)| {
                counts.to_record(bucket, rule)
            }),
            guardrails: drained(&self.guardrails, |(_, record)| record),
            semantic_trials: drained(&self.trials, |((bucket, rule), counts)| {
                counts.to_record(bucket, rule)
            }),
            requests: self.take_log(),
            events: std::mem::take(
                &mut self
                    .refusing
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .1,
            ),
            ..v1::UsageBatch::default()
        }
    }
}

/// Adds to the entry of (this minute, `id`): `merge` into the one waiting, else `fresh(minute)`
/// while fewer than `max` keys wait; `false` when the map is full and the addition is dropped.
fn add_this_minute<V>(
    map: &Mutex<HashMap<(i64, i64), V>>,
    id: i64,
    max: usize,
    fresh: impl FnOnce(i64) -> V,
    merge: impl FnOnce(&mut V),
) -> bool {
    let now = unix_now_s();
    let bucket = now - now.rem_euclid(60);
    let mut map = map
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let len = map.len();
    match map.get_mut(&(bucket, id)) {
        Some(total) => merge(total),
        None if len < max => {
            map.insert((bucket, id), fresh(bucket));
        }
        None => return false,
    }
    true
}

/// Everything in a map of reports, each made into what a batch carries.
fn drained<K, V, T>(map: &Mutex<HashMap<K, V>>, each: impl FnMut((K, V)) -> T) -> Vec<T> {
    map.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .drain()
        .map(each)
        .collect()
}

fn record((bucket, key): (i64, UsageKey), counts: UsageCounts) -> v1::UsageRecord {
    v1::UsageRecord {
        bucket_start_unix_s: bucket,
        token: key.token,
        team: key.team.unwrap_or_default(),
        route: key.route,
        channel: key.channel,
        model: key.model,
        requests: counts.requests,
        input_tokens: counts.input_tokens,
        output_tokens: counts.output_tokens,
        cached_tokens: counts.cached_tokens,
        cost_pico_usd: counts.cost_pico_usd,
        unpriced_requests: counts.unpriced_requests,
        cache_hits: counts.cache_hits,
        saved_input_tokens: counts.saved_input_tokens,
        saved_output_tokens: counts.saved_output_tokens,
        saved_cost_pico_usd: counts.saved_cost_pico_usd,
    }
}

/// The reporting counters, `switchyard_usage_*`.
impl Collect for UsageBuffer {
    fn collect(&self, w: &mut Writer<'_>) {
        const BATCHES: &str = "switchyard_usage_batches_total";
        w.gauge(
            "switchyard_usage_pending_keys",
            "Usage aggregates waiting to be reported to the control plane.",
            self.pending_keys(),
        )
        .counter(
            "switchyard_usage_dropped_requests_total",
            "Requests left out of usage accounting (buffer full or batch refused).",
            self.dropped_requests(),
        )
        .header(
            BATCHES,
            Type::Counter,
            "Usage batches by outcome (a failed batch is retried).",
        );
        for (outcome, counter) in [
            ("sent", &self.batches_sent),
            ("duplicate", &self.batches_duplicate),
            ("failed", &self.batches_failed),
            ("rejected", &self.batches_rejected),
        ] {
            w.sample(
                BATCHES,
                &[("outcome", outcome)],
                counter.load(Ordering::Relaxed),
            );
        }
        w.counter(
            "switchyard_usage_records_sent_total",
            "Usage records acknowledged by the control plane.",
            self.records_sent.load(Ordering::Relaxed),
        )
        .gauge(
            "switchyard_request_log_pending_rows",
            "Request-log rows waiting to be sent to the control plane.",
            self.pending_log_rows(),
        )
        .counter(
            "switchyard_request_log_dropped_rows_total",
            "Finished requests left out of the request log (its buffer full or a batch refused).",
            self.log_dropped.load(Ordering::Relaxed),
        )
        .counter(
            "switchyard_request_log_sent_rows_total",
            "Request-log rows acknowledged by the control plane.",
            self.log_sent.load(Ordering::Relaxed),
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn key(token: &str, channel: &str) -> UsageKey {
        UsageKey {
            token: token.to_owned(),
            team: Some("research".to_owned()),
            route: "gpt-*".to_owned(),
            channel: channel.to_owned(),
            model: "gpt-4o".to_owned(),
        }
    }

    fn counts(input: u64, output: u64, cached: u64) -> UsageCounts {
        UsageCounts {
            cost_pico_usd: 0,
            unpriced_requests: 1,
            requests: 1,
            input_tokens: input,
            output_tokens: output,
            cached_tokens: cached,
            ..UsageCounts::default()
        }
    }

    fn config(batch_keys: usize, max_keys: usize) -> UsageConfig {
        UsageConfig {
            batch_keys,
            max_keys,
            ..UsageConfig::default()
        }
    }

    #[test]
    fn requests_with_the_same_key_and_minute_aggregate_into_one_record() {
        let buffer = UsageBuffer::new(&config(100, 100));
        buffer.add_at(120, key("app", "openai"), counts(10, 5, 2));
        buffer.add_at(179, key("app", "openai"), counts(7, 3, 0));
        buffer.add_at(180, key("app", "openai"), counts(1, 1, 1));
        buffer.add_at(130, key("app", "anthropic"), counts(4, 4, 4));
        assert_eq!(buffer.pending_keys(), 3);
        let batch = buffer.take_batch().unwrap();
        assert_eq!(buffer.pending_keys(), 0);
        let mut records = batch.records.clone();
        records.sort_by(|a, b| {
            (a.bucket_start_unix_s, &a.channel).cmp(&(b.bucket_start_unix_s, &b.channel))
        });
        assert_eq!(records.len(), 3);
        assert_eq!(
            (
                records[0].bucket_start_unix_s,
                records[0].channel.as_str(),
                records[0].requests,
                records[0].input_tokens
            ),
            (120, "anthropic", 1, 4)
        );
        let openai = &records[1];
        assert_eq!(openai.bucket_start_unix_s, 120);
        assert_eq!(
            (
                openai.requests,
                openai.input_tokens,
                openai.output_tokens,
                openai.cached_tokens
            ),
            (2, 17, 8, 2)
        );
        assert_eq!(openai.team, "research");
        assert_eq!(records[2].bucket_start_unix_s, 180);
        assert!(buffer.take_batch().is_none(), "nothing left");
    }

    #[test]
    fn batches_have_unique_ids_and_at_most_batch_keys_records() {
        let buffer = UsageBuffer::new(&config(10, 1000));
        for i in 0..25 {
            buffer.add_at(0, key(&format!("t{i}"), "c"), counts(1, 1, 1));
        }
        let mut ids = std::collections::HashSet::new();
        let mut sizes = Vec::new();
        while let Some(batch) = buffer.take_batch() {
            assert!(ids.insert(batch.batch_id.clone()));
            sizes.push(batch.records.len());
        }
        assert_eq!(sizes, vec![10, 10, 5]);
        let other = UsageBuffer::new(&config(10, 1000));
        other.add_at(0, key("t", "c"), counts(1, 1, 1));
        assert!(
            !ids.contains(&other.take_batch().unwrap().batch_id),
            "ids differ across instances"
        );
    }

    #[test]
    fn new_keys_beyond_the_cap_are_dropped_and_counted_existing_keys_still_add_up() {
        let buffer = UsageBuffer::new(&config(1000, 3));
        for i in 0..5 {
            buffer.add_at(0, key(&format!("t{i}"), "c"), counts(1, 1, 1));
        }
        buffer.add_at(0, key("t0", "c"), counts(1, 1, 1));
        assert_eq!(buffer.pending_keys(), 3);
        assert_eq!(buffer.dropped_requests(), 2);
        let batch = buffer.take_batch().unwrap();
        assert_eq!(
            batch.dropped_requests, 2,
            "the drop count travels in the next batch"
        );
        assert_eq!(batch.records.iter().map(|r| r.requests).sum::<u64>(), 4);
        // Room again once the batch is out.
        buffer.add_at(0, key("t9", "c"), counts(1, 1, 1));
        let batch = buffer.take_batch().unwrap();
        assert_eq!(batch.records.len(), 1);
        assert_eq!(batch.dropped_requests, 0);
    }

    #[test]
    fn concurrent_adds_lose_nothing() {
        let buffer = std::sync::Arc::new(UsageBuffer::new(&config(100_000, 100_000)));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let buffer = buffer.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        buffer.add_at(
                            60,
                            key(&format!("t{}", i % 7), &format!("c{t}")),
                            counts(i % 3, 1, 0),
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let batch = buffer.take_batch().unwrap();
        assert_eq!(batch.records.len(), 28);
        assert_eq!(
            batch.records.iter().map(|r| r.requests).sum::<u64>(),
            40_000
        );
        assert_eq!(
            batch.records.iter().map(|r| r.output_tokens).sum::<u64>(),
            40_000
        );
    }

    #[test]
    fn metrics_render_every_family() {
        let buffer = UsageBuffer::new(&config(10, 1));
        buffer.add_at(0, key("a", "c"), counts(1, 1, 1));
        buffer.add_at(0, key("b", "c"), counts(1, 1, 1));
        let page = switchyard_metrics::render(&buffer);
        assert!(page.contains("switchyard_usage_pending_keys 1\n"), "{page}");
        assert!(
            page.contains("switchyard_usage_dropped_requests_total 1\n"),
            "{page}"
        );
        assert!(
            page.contains("switchyard_usage_batches_total{outcome=\"failed\"} 0\n"),
            "{page}"
        );
    }

    fn log_row(id: &str) -> v1::RequestLogRecord {
        v1::RequestLogRecord {
            request_id: id.to_owned(),
            ..v1::RequestLogRecord::default()
        }
    }

    #[test]
    fn request_log_rows_are_bounded_and_sent_oldest_first_a_batch_at_a_time() {
        let buffer = UsageBuffer::new(&UsageConfig {
            batch_keys: 2,
            max_log_rows: 3,
            ..UsageConfig::default()
        });
        for id in ["a", "b", "c"] {
            assert!(buffer.add_log(log_row(id)));
        }
        assert!(
            !buffer.add_log(log_row("d")),
            "the fourth row is over the bound"
        );
        assert_eq!(buffer.pending_log_rows(), 3);
        let ids = |batch: &v1::UsageBatch| -> Vec<String> {
            batch
                .requests
                .iter()
                .map(|r| r.request_id.clone())
                .collect()
        };
        let first = buffer.take_batch().expect("rows alone make a batch");
        assert_eq!(ids(&first), ["a", "b"]);
        assert!(first.records.is_empty());
        assert_eq!(ids(&buffer.take_batch().unwrap()), ["c"]);
        assert!(buffer.take_batch().is_none());
        let page = switchyard_metrics::render(&buffer);
        assert!(
            page.contains("switchyard_request_log_dropped_rows_total 1\n"),
            "{page}"
        );
        assert!(
            page.contains("switchyard_request_log_pending_rows 0\n"),
            "{page}"
        );
    }
}
