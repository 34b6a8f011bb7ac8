//! The fleet store: a local in-memory view kept in step with Redis.
//!
//! Architecture invariant: nothing on the request path awaits Redis. Every write is applied to
//! the local view at once (the very same code as [`InMemoryStore`]) and queued; a background
//! writer runs each queued write as one atomic server-side script (pipelined in batches),
//! applies the merged result to the view and publishes it to the other proxies, which merge it
//! into theirs. A periodic full resync repairs anything a lost notification missed. When Redis
//! is unreachable the view keeps serving (fail-open); writes queue up (bounded) and are pushed,
//! then resynced, when it returns.
//!
//! Architecture invariant: the background tasks (and the Redis connections' own driver tasks)
//! run on the store's own thread and single-threaded runtime, never on the caller's: a proxy
//! whose request runtime is saturated still writes, publishes and merges without waiting in a
//! queue behind thousands of request tasks.

mod coalesce;
pub(crate) mod conn;
mod keys;
mod lag;
mod outage;
mod records;
mod scripts;
pub(crate) mod shared;
mod subscribe;
mod sync;
mod worker;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_engine::limit::DAY_MS;
use switchyard_engine::{ChannelId, CredentialId, HealthView, MemberId, RouteId, UnixMillis};
use switchyard_metrics::{Collect, Type, Writer};
use tokio::sync::{oneshot, watch, Notify};
use tokio::task::JoinHandle;

use crate::limits::{
    Admission, Authority, Limit, LimitRequest, LimitStatus, Limiter, Metric, Refusal,
};
use crate::memory::InMemoryStore;
use crate::records::{check_sizes, ready, IndexEntry, RecordFuture};
use crate::store::StateStore;
use crate::types::*;

pub use conn::{mask_url, RedisTarget};
pub use lag::SyncReport;
use shared::{FailureOp, Op, Shared, SuccessOp, SyncState};
pub use shared::{RedisConfig, RedisConfigError, RedisCounters};

/// A snapshot of [`RedisCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedisStats {
    pub redis_errors_total: u64,
    pub batches_total: u64,
    pub scripts_total: u64,
    pub notifications_applied_total: u64,
    pub resyncs_total: u64,
    pub dropped_writes_total: u64,
    pub queued_writes: u64,
    pub connected: bool,
    /// Other proxies' updates received (each observed in the propagation-lag histogram).
    pub remote_updates_total: u64,
    /// Milliseconds since the last full resync or received notification (`None`: never).
    pub last_sync_age_ms: Option<u64>,
}

/// The Redis-backed [`StateStore`]. It never fails because Redis is down (it connects,
/// reconnects and resyncs in the background, on its own thread: see [`RedisStore::start`]).
pub struct RedisStore {
    shared: Arc<Shared>,
    target: RedisTarget,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Dropped with the store: ends the state thread and its runtime, and so every task on it at
    /// once, like a killed process (the lease simply expires).
    _thread: oneshot::Sender<()>,
}

/// Starts the store's own thread with a single-threaded runtime that lives until `done` fires
/// or is dropped; returns that runtime's handle.
fn state_runtime() -> Result<(tokio::runtime::Handle, oneshot::Sender<()>), RedisConfigError> {
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let (done, done_rx) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("switchyard-state".into())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    let _ = handle_tx.send(Ok(rt.handle().clone()));
                    rt.block_on(async {
                        let _ = done_rx.await;
                    });
                }
                Err(e) => {
                    let _ = handle_tx.send(Err(e));
                }
            }
        })
        .map_err(|e| RedisConfigError(format!("cannot start the state thread: {e}")))?;
    let handle = handle_rx
        .recv()
        .map_err(|e| RedisConfigError(format!("the state thread did not start: {e}")))?
        .map_err(|e| RedisConfigError(format!("cannot build the state runtime: {e}")))?;
    Ok((handle, done))
}

impl RedisStore {
    /// Validates the configuration and starts the background writer and subscriber on the
    /// store's own thread (`switchyard-state`, a single-threaded tokio runtime), so they never
    /// compete with request tasks for the caller's runtime. Needs no ambient runtime; the
    /// `wait_*` and `close` futures run on any.
    pub fn start(config: RedisConfig) -> Result<RedisStore, RedisConfigError> {
        let target = RedisTarget::parse(&config.url)?;
        if config.prefix.is_empty() || config.prefix.contains(['{', '}']) {
            return Err(RedisConfigError(format!(
                "Redis key prefix {:?} must be non-empty and free of braces",
                config.prefix
            )));
        }
        let instance = format!(
            "{:016x}",
            getrandom::u64().map_err(|e| RedisConfigError(format!("no randomness: {e}")))?
        );
        let shared = Arc::new(Shared {
            view: InMemoryStore::new(),
            limits: Limiter::default(),
            live: AtomicU32::new(1),
            sync: Mutex::new(SyncState::default()),
            wake: Notify::new(),
            urgent: Notify::new(),
            lease_dirty: Notify::new(),
            counters: RedisCounters::default(),
            config,
            instance,
            synced: watch::channel(0).0,
            closed: watch::channel(false).0,
        });
        let (stop, stop_rx) = watch::channel(false);
        let (runtime, thread) = state_runtime()?;
        let tasks = {
            let _on_state_thread = runtime.enter();
            worker::spawn(shared.clone(), target.clone(), stop_rx)
        };
        Ok(RedisStore {
            shared,
            target,
            stop,
            tasks,
            _thread: thread,
        })
    }

    /// The fleet's counters of `limits` read straight from Redis, for an observer that takes no
    /// part in the counting (the control plane's explain): a windowed limit's counter for the
    /// window holding `now` (every proxy's claims: what it admitted plus allowance it has not
    /// used yet), a concurrency limit's slots held by live proxies. Takes nothing and claims
    /// nothing; one short-lived connection, one or two commands per limit. `Err` when Redis
    /// does not answer within `timeout`.
    pub async fn read_limits(
        &self,
        limits: &[Limit],
        now: UnixMillis,
        timeout: Duration,
    ) -> Result<Vec<LimitStatus>, String> {
        let read = async {
            let mut conn = self.target.connect(timeout).await?;
            let keys = keys::Keys::new(&self.shared.config.prefix, &self.shared.instance);
            let mut out = Vec::with_capacity(limits.len());
            for limit in limits {
                let (start, end) = limit.key.bounds(now);
                let used: u64 = if limit.key.concurrent() {
                    let held: Vec<(String, u64)> = redis::cmd("HGETALL")
                        .arg(keys.concurrent(&limit.key))
                        .query_async(&mut conn)
                        .await?;
                    let live: Vec<String> = redis::cmd("ZRANGEBYSCORE")
                        .arg(keys.leases())
                        .arg(format!("({now}"))
                        .arg("+inf")
                        .query_async(&mut conn)
                        .await?;
                    held.iter()
                        .filter(|(proxy, _)| live.contains(proxy))
                        .map(|(_, n)| *n)
                        .sum()
                } else {
                    // A rolling window: every day bucket from its first to the current one.
                    let mut used = 0u64;
                    let mut day = limit.key.window.first_day(now);
                    while day <= start {
                        let counter: Option<u64> = redis::cmd("GET")
                            .arg(keys.counter(&limit.key, day))
                            .query_async(&mut conn)
                            .await?;
                        used = used.saturating_add(counter.unwrap_or(0));
                        day += DAY_MS;
                    }
                    used
                };
                out.push(LimitStatus {
                    used,
                    remaining: limit.value.saturating_sub(used),
                    reset_at: (!limit.key.concurrent()).then_some(end),
                });
            }
            Ok::<_, redis::RedisError>(out)
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(statuses)) => Ok(statuses),
            Ok(Err(e)) => Err(format!("cannot read the limit counters: {e}")),
            Err(_) => Err(format!(
                "Redis did not answer within {} ms",
                timeout.as_millis()
            )),
        }
    }

    /// The Redis key of the index `name` (under the fleet's hash tag).
    fn record_key(&self, name: &str) -> String {
        keys::Keys::new(&self.shared.config.prefix, &self.shared.instance).record(name)
    }

    /// The Redis key of the claim `name`.
    fn claim_key(&self, name: &str) -> String {
        keys::Keys::new(&self.shared.config.prefix, &self.shared.instance).claim(name)
    }

    /// This proxy's id in the fleet (its lease name).
    pub fn instance_id(&self) -> &str {
        &self.shared.instance
    }

    pub fn stats(&self) -> RedisStats {
        let c = &self.shared.counters;
        RedisStats {
            redis_errors_total: c.errors.load(Ordering::Relaxed),
            batches_total: c.batches.load(Ordering::Relaxed),
            scripts_total: c.scripts.load(Ordering::Relaxed),
            notifications_applied_total: c.notifications_applied.load(Ordering::Relaxed),
            resyncs_total: c.resyncs.load(Ordering::Relaxed),
            dropped_writes_total: c.dropped_writes.load(Ordering::Relaxed),
            queued_writes: self.shared.lock().queue.len() as u64,
            connected: c.connected.load(Ordering::Relaxed),
            remote_updates_total: c.lag.count(),
            last_sync_age_ms: c.last_sync.age_ms(),
        }
    }

    /// The latest sync report of every other live proxy in the fleet (received with their
    /// leases, at most one lease refresh old), sorted by instance id.
    pub fn fleet_sync(&self) -> Vec<SyncReport> {
        let mut reports: Vec<SyncReport> = self.shared.lock().reports.values().cloned().collect();
        reports.sort_by(|a, b| a.instance.cmp(&b.instance));
        reports
    }

    /// Waits until `n` full resyncs have completed since start (tests, readiness).
    pub async fn wait_resynced(&self, n: u64, timeout: Duration) -> bool {
        let mut rx = self.shared.synced.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|v| *v >= n))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Waits until every queued write has reached Redis (tests, shutdown).
    pub async fn wait_flushed(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.shared.lock().queue.is_empty() && self.shared.lock().versions.idle() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Live proxies this one counts for limits (itself included), as of the last full resync.
    pub fn live_proxies(&self) -> u32 {
        self.shared.live.load(Ordering::Relaxed)
    }

    /// Waits until no limit claim waits to be sent or answered (tests): every local allowance
    /// is then as the shared counters left it.
    pub async fn wait_limits_settled(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.shared.limits.settled() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn authority(&self) -> Authority {
        Authority::Fleet {
            connected: self.shared.counters.connected.load(Ordering::Relaxed),
            live: self.shared.live.load(Ordering::Relaxed),
        }
    }

    /// Wakes the writer when a limit claim became due.
    fn claim_due(&self, due: bool) {
        if due {
            self.shared.wake.notify_one();
        }
    }

    /// Graceful stop: pushes queued writes, gives back unused limit allowances and
    /// concurrency reservations, and removes this proxy's lease (best effort within
    /// `timeout`), then stops the background tasks. The view keeps answering afterwards.
    pub async fn close(&self, timeout: Duration) {
        let _ = self.stop.send(true);
        let mut closed = self.shared.closed.subscribe();
        let _ = tokio::time::timeout(timeout, closed.wait_for(|c| *c)).await;
        for task in &self.tasks {
            task.abort();
        }
    }

    /// Queues one write; the caller has already applied it to the view under the same lock.
    fn enqueue(&self, state: &mut SyncState, op: Op) {
        for e in op.entities() {
            state.versions.add_pending(e);
        }
        let urgent = op.urgent();
        state.queue.push_back((op, lag::now_us()));
        while state.queue.len() > self.shared.config.max_queue {
            if let Some((old, _)) = state.queue.pop_front() {
                for e in old.entities() {
                    state.versions.done_pending(&e);
                }
                self.shared
                    .counters
                    .dropped_writes
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        if urgent {
            self.shared.urgent.notify_one();
        }
        self.shared.wake.notify_one();
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &mask_url(&self.shared.config.url))
            .field("prefix", &self.shared.config.prefix)
            .field("instance", &self.shared.instance)
            .finish()
    }
}

fn latency_arg(ms: f64) -> f64 {
    // The engine's sanitising, so the Lua side sees exactly what `HealthRecord` used.
    if ms.is_finite() && ms >= 0.0 {
        ms
    } else {
        0.0
    }
}

impl StateStore for RedisStore {
    fn with_view(&self, f: &mut dyn FnMut(&dyn HealthView)) {
        self.shared.view.with_view(f);
    }

    fn record_success(&self, s: &AttemptSuccess<'_>, now: UnixMillis) -> SuccessEffect {
        let mut state = self.shared.lock();
        let effect = self.shared.view.record_success(s, now);
        let op = Op::Success(SuccessOp {
            member: s.member,
            channel: s.channel,
            model: s.upstream_model.to_owned(),
            latency_ms: latency_arg(s.latency_ms),
            canary: s.canary,
            promote_after: s.promote_after,
            now,
        });
        self.enqueue(&mut state, op);
        effect
    }

    fn record_failure(
        &self,
        f: &AttemptFailure<'_>,
        policy: &FailurePolicy,
        now: UnixMillis,
    ) -> FailureEffect {
        let mut state = self.shared.lock();
        let effect = self.shared.view.record_failure(f, policy, now);
        let op = Op::Failure(FailureOp {
            member: f.member,
            channel: f.channel,
            model: f.upstream_model.to_owned(),
            kind: f.kind,
            retry_after_ms: f.retry_after_ms.unwrap_or(0),
            fault_protection: policy.fault_protection,
            cooldown_ms: policy.cooldown_ms,
            now,
        });
        self.enqueue(&mut state, op);
        effect
    }

    fn record_channel_failure(
        &self,
        channel: ChannelId,
        policy: &FailurePolicy,
        now: UnixMillis,
    ) -> ChannelFailureEffect {
        let mut state = self.shared.lock();
        let effect = self
            .shared
            .view
            .record_channel_failure(channel, policy, now);
        let op = Op::ChannelFailure {
            channel,
            fault_protection: policy.fault_protection,
            threshold: policy.breaker_threshold,
            now,
        };
        self.enqueue(&mut state, op);
        effect
    }

    fn trip_breaker(&self, channel: ChannelId, reason: &str, now: UnixMillis) {
        let mut state = self.shared.lock();
        self.shared.view.trip_breaker(channel, reason, now);
        let op = Op::Trip {
            channel,
            reason: reason.to_owned(),
            now,
        };
        self.enqueue(&mut state, op);
    }

    fn reset_channel(&self, channel: ChannelId, members: &[MemberId]) {
        let mut state = self.shared.lock();
        self.shared.view.reset_channel(channel, members);
        let op = Op::Reset {
            channel,
            members: members.to_vec(),
            since: 0,
            until: 0,
        };
        self.enqueue(&mut state, op);
    }

    fn begin_recovery(
        &self,
        channel: ChannelId,
        members: &[MemberId],
        now: UnixMillis,
        slow_start_ms: u64,
    ) {
        let mut state = self.shared.lock();
        self.shared
            .view
            .begin_recovery(channel, members, now, slow_start_ms);
        let op = Op::Reset {
            channel,
            members: members.to_vec(),
            since: now,
            until: if slow_start_ms > 0 {
                now.saturating_add(slow_start_ms)
            } else {
                now
            },
        };
        self.enqueue(&mut state, op);
    }

    fn extend_cooldown(&self, member: MemberId, until: UnixMillis) {
        let mut state = self.shared.lock();
        self.shared.view.extend_cooldown(member, until);
        self.enqueue(&mut state, Op::Cooldown { member, until });
    }

    fn disable_credential(&self, credential: CredentialId, reason: &str, now: UnixMillis) {
        let mut state = self.shared.lock();
        self.shared.view.disable_credential(credential, reason, now);
        let op = Op::Credential {
            credential,
            reason: reason.to_owned(),
            now,
        };
        self.enqueue(&mut state, op);
    }

    fn enable_credential(&self, credential: CredentialId, now: UnixMillis) {
        let mut state = self.shared.lock();
        self.shared.view.enable_credential(credential, now);
        self.enqueue(&mut state, Op::EnableCredential { credential, now });
    }

    fn in_flight_acquire(&self, channel: ChannelId) {
        self.shared.view.in_flight_acquire(channel);
        self.shared.lease_dirty.notify_one();
    }

    fn in_flight_release(&self, channel: ChannelId) {
        self.shared.view.in_flight_release(channel);
        self.shared.lease_dirty.notify_one();
    }

    fn bind_sticky(
        &self,
        route: RouteId,
        session_key: &str,
        member: MemberId,
        ttl_ms: u64,
        now: UnixMillis,
    ) {
        let mut state = self.shared.lock();
        self.shared
            .view
            .bind_sticky(route, session_key, member, ttl_ms, now);
        let op = Op::Sticky {
            route,
            key: session_key.to_owned(),
            member,
            expires_at: now.saturating_add(ttl_ms),
            now,
        };
        self.enqueue(&mut state, op);
    }

    fn dump(&self, now: UnixMillis) -> StateDump {
        self.shared.view.dump(now)
    }

    fn align_health(&self, slots: &std::sync::Arc<switchyard_engine::HealthSlots>) {
        // Only the local view is laid out; Redis keeps records by (channel, model).
        self.shared.view.align_health(slots);
    }

    fn limit_take(&self, request: &LimitRequest<'_>, now: UnixMillis) -> Admission {
        let (admission, due) = self.shared.limits.take(request, now, self.authority());
        self.claim_due(due);
        admission
    }

    fn limit_room(&self, request: &LimitRequest<'_>, now: UnixMillis) -> Result<(), Refusal> {
        let (room, due) = self.shared.limits.room(request, now, self.authority());
        self.claim_due(due);
        room
    }

    fn limit_settle(
        &self,
        limits: &[Limit],
        metric: Metric,
        delta: i64,
        taken_at: UnixMillis,
        now: UnixMillis,
    ) {
        let due = self
            .shared
            .limits
            .settle(limits, metric, delta, taken_at, now, self.authority());
        self.claim_due(due);
    }

    fn limit_release(&self, limits: &[Limit]) {
        let due = self.shared.limits.release(limits, self.authority());
        self.claim_due(due);
    }

    fn limit_status(&self, limit: &Limit, now: UnixMillis) -> LimitStatus {
        self.shared.limits.status(limit, now, self.authority())
    }

    fn index_put(&self, index: &str, entry: IndexEntry, now: UnixMillis) -> RecordFuture<()> {
        if let Err(e) = check_sizes(&[index, &entry.member, &entry.value]) {
            return ready(Err(e));
        }
        records::put(&self.target, self.record_key(index), entry, now)
    }

    fn index_list(&self, index: &str, now: UnixMillis) -> RecordFuture<Vec<IndexEntry>> {
        if let Err(e) = check_sizes(&[index]) {
            return ready(Err(e));
        }
        records::list(&self.target, self.record_key(index), now)
    }

    fn index_remove(&self, index: &str, member: &str) -> RecordFuture<()> {
        if let Err(e) = check_sizes(&[index, member]) {
            return ready(Err(e));
        }
        records::remove(&self.target, self.record_key(index), member.to_owned())
    }

    fn claim_once(&self, key: &str, expires_at: UnixMillis, now: UnixMillis) -> RecordFuture<bool> {
        if let Err(e) = check_sizes(&[key]) {
            return ready(Err(e));
        }
        records::claim(&self.target, self.claim_key(key), expires_at, now)
    }
}

/// The store's own metrics (Redis errors, batches, sync lag) for `/metrics`: registered by
/// whoever builds the store.
impl Collect for RedisStore {
    fn collect(&self, w: &mut Writer<'_>) {
        let s = self.stats();
        for (name, kind, help, value) in [
            (
                "switchyard_redis_errors_total",
                Type::Counter,
                "Failed Redis calls (the proxy kept serving from its local view).",
                s.redis_errors_total,
            ),
            (
                "switchyard_redis_connected",
                Type::Gauge,
                "1 while the state store's writer is connected to Redis.",
                u64::from(s.connected),
            ),
            (
                "switchyard_redis_batches_total",
                Type::Counter,
                "Pipelined write batches sent to Redis.",
                s.batches_total,
            ),
            (
                "switchyard_redis_scripts_total",
                Type::Counter,
                "State scripts run in Redis.",
                s.scripts_total,
            ),
            (
                "switchyard_redis_notifications_applied_total",
                Type::Counter,
                "Other proxies' changes merged into the local view.",
                s.notifications_applied_total,
            ),
            (
                "switchyard_redis_resyncs_total",
                Type::Counter,
                "Full resyncs of the local view from Redis.",
                s.resyncs_total,
            ),
            (
                "switchyard_redis_dropped_writes_total",
                Type::Counter,
                "Writes dropped because Redis stayed unreachable too long.",
                s.dropped_writes_total,
            ),
            (
                "switchyard_redis_queued_writes",
                Type::Gauge,
                "Writes waiting for Redis.",
                s.queued_writes,
            ),
        ] {
            w.single(name, kind, help, value);
        }
        self.shared.counters.lag.render(
            w,
            "switchyard_redis_propagation_lag_seconds",
            "Delay from another proxy queueing a state write (its clock) to the update being in this proxy's view.",
        );
        // NaN before the first sync: an alert on the age then fires only via `absent`/connected.
        let age = s.last_sync_age_ms.map_or(f64::NAN, |ms| ms as f64 / 1000.0);
        w.gauge(
            "switchyard_redis_last_sync_age_seconds",
            "Seconds since the last successful sync with the fleet (full resync or received notification).",
            age,
        );
    }
}
