//! The background tasks: the writer (batches, leases, resync) and the subscriber.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use switchyard_engine::fxhash::FxHashMap as HashMap;

use redis::{Cmd, RedisError, RedisResult, Script, Value};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::coalesce::{plan, Call, Planned, SuccessRun};
use super::conn::{mask_url, Conn, RedisTarget};
use super::keys::{Keys, Notice};
use super::lag::{now_us, SyncReport};
use super::outage::{Backoff, Reporter};
use super::scripts::Scripts;
use super::shared::{FailureOp, Op, Shared};
use super::sync::{decode_counts, encode_counts, parse_update, Update};
use crate::limits::Claim;
use crate::types::{FailureKind, MAX_STICKY_BINDINGS};
use switchyard_engine::limit::DAY_MS;

pub(crate) fn spawn(
    shared: Arc<Shared>,
    target: RedisTarget,
    stop: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let resync = Arc::new(Notify::new());
    let reporter = Arc::new(Reporter::new());
    vec![
        tokio::spawn(writer(
            shared.clone(),
            target.clone(),
            stop.clone(),
            resync.clone(),
            reporter.clone(),
        )),
        tokio::spawn(super::subscribe::subscriber(
            shared, target, stop, resync, reporter,
        )),
    ]
}

/// Most batches one writer turn sends before the timers (lease, resync) get their chance.
const FLUSH_BATCHES_PER_TURN: usize = 4;
/// In-flight changes are pushed at most this often (plus the periodic lease refresh).
const LEASE_MIN_GAP: Duration = Duration::from_millis(25);

struct Writer {
    shared: Arc<Shared>,
    scripts: Scripts,
    keys: Keys,
    reporter: Arc<Reporter>,
}

async fn writer(
    shared: Arc<Shared>,
    target: RedisTarget,
    mut stop: watch::Receiver<bool>,
    resync: Arc<Notify>,
    reporter: Arc<Reporter>,
) {
    let w = Writer {
        keys: Keys::new(&shared.config.prefix, &shared.instance),
        scripts: Scripts::new(),
        shared,
        reporter,
    };
    w.run(&target, &mut stop, &resync).await;
    w.shared.counters.connected.store(false, Ordering::Relaxed);
    w.shared.closed.send_replace(true);
}

impl Writer {
    async fn run(&self, target: &RedisTarget, stop: &mut watch::Receiver<bool>, resync: &Notify) {
        let w = self;
        let mut backoff = Backoff::new();
        while !*stop.borrow() {
            let conn = match target.connect(w.shared.config.timeout).await {
                Ok(mut conn) => match w.load_scripts(&mut conn).await {
                    Ok(()) => Some(conn),
                    Err(e) => {
                        w.reporter.report(&w.shared, "script load", &e);
                        None
                    }
                },
                Err(e) => {
                    w.reporter.report(&w.shared, "connect", &e);
                    None
                }
            };
            let Some(mut conn) = conn else {
                backoff.wait(stop).await;
                continue;
            };
            backoff.reset();
            w.shared.counters.connected.store(true, Ordering::Relaxed);
            tracing::info!(redis = %mask_url(&w.shared.config.url), prefix = %w.shared.config.prefix, instance = %w.shared.instance, "Redis state store connected");
            match w.session(&mut conn, stop, resync).await {
                Ok(()) => return,
                Err(e) => {
                    w.shared.counters.connected.store(false, Ordering::Relaxed);
                    w.reporter.report(&w.shared, "write", &e);
                }
            }
        }
    }

    async fn load_scripts(&self, conn: &mut Conn) -> RedisResult<()> {
        for script in self.scripts.all() {
            script.load_async(conn).await?;
        }
        Ok(())
    }

    /// Connected: push what queued up, lease, full resync; then serve until an error or stop.
    async fn session(
        &self,
        conn: &mut Conn,
        stop: &mut watch::Receiver<bool>,
        resync: &Notify,
    ) -> RedisResult<()> {
        self.flush(conn).await?;
        self.write_lease(conn).await?;
        self.resync(conn, true).await?;
        self.shared.limits.refresh();
        self.limit_claims(conn).await?;
        let mut resync_tick = tokio::time::interval(self.shared.config.resync_every);
        let mut lease_tick = tokio::time::interval(self.shared.config.lease_refresh);
        resync_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        lease_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut lease_due: Option<Instant> = None;
        let mut last_lease = Instant::now();
        loop {
            let due = lease_due;
            tokio::select! {
                biased;
                _ = stop.changed() => {
                    // Everything, including what requests still finishing queue meanwhile.
                    while !self.shared.lock().queue.is_empty() {
                        self.flush(conn).await?;
                    }
                    let give_backs = self.shared.limits.give_back_all();
                    self.send_claims(conn, &give_backs).await?;
                    self.drop_lease(conn).await?;
                    return Ok(());
                }
                () = async { if let Some(at) = due { tokio::time::sleep_until(at).await } else { std::future::pending().await } } => {
                    lease_due = None;
                    last_lease = Instant::now();
                    self.write_lease(conn).await?;
                }
                () = self.shared.lease_dirty.notified() => {
                    if lease_due.is_none() {
                        lease_due = Some((last_lease + LEASE_MIN_GAP).max(Instant::now()));
                    }
                }
                _ = lease_tick.tick() => {
                    last_lease = Instant::now();
                    self.write_lease(conn).await?;
                    self.shared.limits.refresh();
                    self.limit_claims(conn).await?;
                }
                () = resync.notified() => self.resync(conn, true).await?,
                _ = resync_tick.tick() => self.resync(conn, false).await?,
                // Last: under steady load a write is queued during every flush, so `wake` is ready
                // on every turn; ahead of the timers it would starve the lease refresh and the
                // resync (each ready at most once per period, so they cannot starve it).
                () = self.shared.wake.notified() => {
                    let linger = self.shared.config.flush_linger;
                    if !linger.is_zero() && self.shared.lock().queue.len() < self.shared.config.batch_size {
                        // A write that must not linger, queued before or during it, ends it: its
                        // signal waits for this linger when it came first (one that came with a
                        // full batch, sent without lingering, ends the next linger early).
                        tokio::select! {
                            () = tokio::time::sleep(linger) => {}
                            () = self.shared.urgent.notified() => {}
                        }
                    }
                    self.flush(conn).await?;
                    self.limit_claims(conn).await?;
                }
            }
        }
    }

    /// Sends every limit claim that is due (one pipelined batch) and applies the answers.
    async fn limit_claims(&self, conn: &mut Conn) -> RedisResult<()> {
        let live = self.shared.live.load(Ordering::Relaxed);
        let claims = self.shared.limits.due_claims(live);
        self.send_claims(conn, &claims).await
    }

    fn claim_command(&self, claim: &Claim) -> Cmd {
        if claim.key.concurrent() {
            let key = self.keys.concurrent(&claim.key);
            let mut c = self.evalsha(&self.scripts.limit_concurrent, &[&key, &self.keys.leases]);
            c.arg(&self.shared.instance)
                .arg(claim.held)
                .arg(self.shared.config.state_ttl.as_millis() as u64);
            c
        } else {
            // A rolling window's earlier day counters are read with its current one.
            let days = claim.key.window.rolling_days().unwrap_or(1);
            let keys: Vec<String> = (0..days)
                .map(|back| {
                    let day = claim.window_start.saturating_sub(back * DAY_MS);
                    self.keys.counter(&claim.key, day)
                })
                .collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            // The counter outlives its window by a minute (late claims and give-backs), a
            // rolling window's day the whole window; a counter with no window lives as long as
            // any state.
            let ttl = if claim.window_end == u64::MAX {
                self.shared.config.state_ttl.as_millis() as u64
            } else {
                (claim.window_end - claim.window_start)
                    .saturating_mul(days)
                    .saturating_add(60_000)
            };
            let mut c = self.evalsha(&self.scripts.limit_claim, &keys);
            c.arg(claim.debt).arg(claim.want).arg(claim.value).arg(ttl);
            c
        }
    }

    async fn send_claims(&self, conn: &mut Conn, claims: &[Claim]) -> RedisResult<()> {
        if claims.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for claim in claims {
            pipe.add_command(self.claim_command(claim));
        }
        let mut result: RedisResult<Vec<Value>> = pipe.query_async(conn).await;
        if matches!(&result, Err(e) if is_noscript(e)) {
            if let Err(e) = self.load_scripts(conn).await {
                result = Err(e);
            } else {
                result = pipe.query_async(conn).await;
            }
        }
        match result {
            Ok(values) => {
                self.shared
                    .counters
                    .scripts
                    .fetch_add(claims.len() as u64, Ordering::Relaxed);
                for (claim, value) in claims.iter().zip(&values) {
                    let answer = claim_answer(value);
                    if let Some((_, _, before)) = answer.filter(|_| !claim.key.concurrent()) {
                        self.shared.limits.learn_before(claim, before);
                    }
                    self.shared
                        .limits
                        .apply(claim, answer.map(|(grant, fleet, _)| (grant, fleet)));
                }
                Ok(())
            }
            Err(e) => {
                for claim in claims {
                    self.shared.limits.apply(claim, None);
                }
                Err(e)
            }
        }
    }

    fn evalsha(&self, script: &Script, keys: &[&str]) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
        cmd
    }

    fn call_command(&self, call: &Call<'_>) -> Cmd {
        match call {
            Call::Success(run) => self.success_command(run),
            Call::Op(op) => self.command(op),
        }
    }

    /// One `switchyard_success_v2` call for a run of successes (samples in queue order).
    fn success_command(&self, run: &SuccessRun<'_>) -> Cmd {
        let k = &self.keys;
        let ttl = self.shared.config.state_ttl.as_millis() as u64;
        let mut c = self.evalsha(
            &self.scripts.success,
            &[&k.ver, &k.member, &k.channel, &k.health],
        );
        c.arg(ttl)
            .arg(run.member)
            .arg(run.channel)
            .arg(format!("{}:{}", run.channel, run.model))
            .arg(u8::from(run.canary))
            .arg(run.promote_after)
            .arg(run.now);
        for latency in &run.latencies {
            c.arg(latency.to_string());
        }
        c
    }

    /// A member's failure: its streak, cooldown and health record.
    fn failure_command(&self, f: &FailureOp) -> Cmd {
        let k = &self.keys;
        let ttl = self.shared.config.state_ttl.as_millis() as u64;
        let mut c = self.evalsha(&self.scripts.failure, &[&k.ver, &k.member, &k.health]);
        c.arg(ttl)
            .arg(f.member)
            .arg(format!("{}:{}", f.channel, f.model))
            .arg(kind_name(f.kind))
            .arg(f.retry_after_ms)
            .arg(u8::from(f.fault_protection))
            .arg(f.cooldown_ms)
            .arg(f.now);
        c
    }

    /// The script call of one queued write.
    fn command(&self, op: &Op) -> Cmd {
        let k = &self.keys;
        let s = &self.scripts;
        let ttl = self.shared.config.state_ttl.as_millis() as u64;
        match op {
            Op::Failure(f) => self.failure_command(f),
            Op::Success(s) => self.success_command(&SuccessRun::one(s)),
            Op::ChannelFailure {
                channel,
                fault_protection,
                threshold,
                now,
            } => {
                let mut c = self.evalsha(&s.channel_failure, &[&k.ver, &k.channel, &k.recovering]);
                c.arg(ttl)
                    .arg(channel)
                    .arg(u8::from(*fault_protection))
                    .arg(threshold)
                    .arg(now);
                c
            }
            Op::Trip {
                channel,
                reason,
                now,
            } => {
                let mut c = self.evalsha(&s.trip, &[&k.ver, &k.channel, &k.recovering]);
                c.arg(ttl).arg(channel).arg(reason).arg(now);
                c
            }
            Op::Reset {
                channel,
                members,
                since,
                until,
            } => {
                let mut c = self.evalsha(&s.reset, &[&k.ver, &k.channel, &k.member, &k.recovering]);
                c.arg(ttl).arg(channel).arg(since).arg(until).arg(members);
                c
            }
            Op::Cooldown { member, until } => {
                let mut c = self.evalsha(&s.cooldown, &[&k.ver, &k.member]);
                c.arg(ttl).arg(member).arg(until);
                c
            }
            Op::Credential {
                credential,
                reason,
                now,
            } => {
                let mut c = self.evalsha(&s.credential, &[&k.ver, &k.cred]);
                c.arg(ttl).arg(credential).arg(reason).arg(now);
                c
            }
            Op::EnableCredential { credential, now } => {
                let mut c = self.evalsha(&s.enable_credential, &[&k.ver, &k.cred]);
                c.arg(ttl).arg(credential).arg(now);
                c
            }
            Op::Sticky {
                route,
                key,
                member,
                expires_at,
                now,
            } => {
                let mut c = self.evalsha(&s.sticky, &[&k.ver, &k.sticky, &k.sticky_exp]);
                c.arg(ttl)
                    .arg(format!("{route}:{key}"))
                    .arg(member)
                    .arg(expires_at)
                    .arg(now)
                    .arg(MAX_STICKY_BINDINGS);
                c
            }
        }
    }

    /// Runs the writes queued so far, at most [`FLUSH_BATCHES_PER_TURN`] pipelined script
    /// batches. The rest waits for the next turn: under a write stream that never pauses (or a
    /// long queue after an outage), emptying the queue could take seconds and starve the lease
    /// refresh and the resync (the caller's loop wakes again at once for the rest).
    async fn flush(&self, conn: &mut Conn) -> RedisResult<()> {
        let batch_size = self.shared.config.batch_size.max(1);
        let mut left = self
            .shared
            .lock()
            .queue
            .len()
            .min(batch_size * FLUSH_BATCHES_PER_TURN);
        loop {
            let batch = self.take_batch(&mut left);
            if batch.is_empty() {
                return Ok(());
            }
            // Each member's successes fold into one script call (see `coalesce`).
            let calls = plan(&batch);
            let results = match self.run_calls(conn, &calls).await {
                Ok(r) => r,
                Err(e) => {
                    self.requeue(batch);
                    return Err(e);
                }
            };
            let counters = &self.shared.counters;
            counters.batches.fetch_add(1, Ordering::Relaxed);
            counters
                .scripts
                .fetch_add(calls.len() as u64, Ordering::Relaxed);
            let (published, stamps) = self.own_results(&batch, &calls, &results);
            self.publish(conn, published, stamps, None).await?;
            if left == 0 {
                if !self.shared.lock().queue.is_empty() {
                    self.shared.wake.notify_one();
                }
                return Ok(());
            }
        }
    }

    /// The next batch off the queue: at most a batch's size, and at most `left` writes (which
    /// it counts down).
    fn take_batch(&self, left: &mut usize) -> Vec<(Op, u64)> {
        let mut state = self.shared.lock();
        let n = state
            .queue
            .len()
            .min(self.shared.config.batch_size)
            .min(*left);
        *left -= n;
        state.queue.drain(..n).collect()
    }

    /// Runs a batch's script calls in one pipeline, one result per call in call order.
    async fn run_calls(&self, conn: &mut Conn, calls: &[Planned<'_>]) -> RedisResult<Vec<Value>> {
        let mut pipe = redis::pipe();
        for planned in calls {
            pipe.add_command(self.call_command(&planned.call));
        }
        let result: RedisResult<Vec<Value>> = pipe.query_async(conn).await;
        if matches!(&result, Err(e) if is_noscript(e)) {
            // Redis restarted or failed over and lost the scripts: load and retry the batch
            // (every EVALSHA of it failed, so none ran).
            self.load_scripts(conn).await?;
            return pipe.query_async(conn).await;
        }
        result
    }

    /// Takes a sent batch's results into the view: its writes are no longer pending, and each
    /// update a script answered is merged as this proxy's own result. Answers the updates to
    /// publish, each with the stamp of the oldest write its call folded in.
    fn own_results(
        &self,
        batch: &[(Op, u64)],
        calls: &[Planned<'_>],
        results: &[Value],
    ) -> (Vec<(String, String, String)>, Vec<u64>) {
        let mut published = Vec::new();
        let mut stamps = Vec::new();
        let mut state = self.shared.lock();
        for (op, _) in batch {
            for e in op.entities() {
                state.versions.done_pending(&e);
            }
        }
        let mut view = self.shared.view.write_view();
        for (value, planned) in results.iter().zip(calls) {
            for (kind, field, raw) in script_updates(value) {
                if let Some(u) = parse_update(&kind, &field, &raw) {
                    state.versions.own_result(&mut view, &u);
                }
                published.push((kind, field, raw));
                stamps.push(planned.queued_at);
            }
        }
        (published, stamps)
    }

    fn requeue(&self, batch: Vec<(Op, u64)>) {
        let mut state = self.shared.lock();
        for queued in batch.into_iter().rev() {
            state.queue.push_front(queued);
        }
    }

    async fn publish(
        &self,
        conn: &mut Conn,
        u: Vec<(String, String, String)>,
        t: Vec<u64>,
        l: Option<String>,
    ) -> RedisResult<()> {
        // The sync report rides on lease refreshes (about once per `lease_refresh`).
        let s = l.as_ref().map(|_| self.report());
        let notice = Notice {
            o: self.shared.instance.clone(),
            u,
            l,
            t,
            s,
        };
        let payload = serde_json::to_string(&notice).map_err(|e| {
            RedisError::from(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })?;
        redis::cmd("PUBLISH")
            .arg(&self.keys.events)
            .arg(payload)
            .exec_async(conn)
            .await
    }

    async fn write_lease(&self, conn: &mut Conn) -> RedisResult<()> {
        let counts = encode_counts(&self.shared.view.read_view().in_flight);
        let cfg = &self.shared.config;
        self.evalsha(&self.scripts.lease, &[&self.keys.leases, &self.keys.lease])
            .arg(&self.shared.instance)
            .arg(&counts)
            .arg(cfg.lease_ttl.as_millis() as u64)
            .arg(cfg.state_ttl.as_millis() as u64)
            .exec_async(conn)
            .await?;
        self.publish(conn, Vec::new(), Vec::new(), Some(counts))
            .await
    }

    /// This proxy's sync figures, starting a new report window.
    fn report(&self) -> SyncReport {
        let c = &self.shared.counters;
        let (window_updates, window_max_us) = c.lag.take_window();
        SyncReport {
            instance: self.shared.instance.clone(),
            reported_at_ms: now_us() / 1000,
            connected: c.connected.load(Ordering::Relaxed),
            last_sync_age_ms: c.last_sync.age_ms(),
            window_updates,
            window_max_lag_ms: (window_updates > 0).then_some(window_max_us / 1000),
            updates_total: c.lag.count(),
            resyncs_total: c.resyncs.load(Ordering::Relaxed),
            redis_errors_total: c.errors.load(Ordering::Relaxed),
            queued_writes: self.shared.lock().queue.len() as u64,
        }
    }

    async fn drop_lease(&self, conn: &mut Conn) -> RedisResult<()> {
        redis::pipe()
            .del(&self.keys.lease)
            .zrem(&self.keys.leases, &self.shared.instance)
            .exec_async(conn)
            .await?;
        self.publish(conn, Vec::new(), Vec::new(), Some(String::new()))
            .await
    }

    /// Reads everything at one version and merges it into the view.
    async fn resync(&self, conn: &mut Conn, with_sticky: bool) -> RedisResult<()> {
        let k = &self.keys;
        let mut cmd = self.evalsha(
            &self.scripts.snapshot,
            &[
                &k.ver,
                &k.member,
                &k.channel,
                &k.health,
                &k.cred,
                &k.sticky,
                &k.leases,
                &k.recovering,
            ],
        );
        cmd.arg(u8::from(with_sticky)).arg(&k.lease_prefix);
        let mut result = cmd.query_async::<Value>(conn).await;
        if matches!(&result, Err(e) if is_noscript(e)) {
            self.load_scripts(conn).await?;
            result = cmd.query_async::<Value>(conn).await;
        }
        let value = result?;
        let parts = as_array(&value).unwrap_or(&[]);
        let version: u64 = parts
            .first()
            .and_then(as_str)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut updates: Vec<Update> = Vec::new();
        // Positions in the snapshot script's answer (6 holds the leases).
        for (i, kind) in [(1, "m"), (2, "c"), (3, "h"), (4, "k"), (5, "s"), (7, "r")] {
            let pairs = parts.get(i).and_then(as_array).unwrap_or(&[]);
            for pair in pairs.chunks_exact(2) {
                if let (Some(field), Some(raw)) = (as_str(&pair[0]), as_str(&pair[1])) {
                    if let Some(u) = parse_update(kind, &field, &raw) {
                        updates.push(u);
                    }
                }
            }
        }
        let mut leases = HashMap::default();
        for pair in parts
            .get(6)
            .and_then(as_array)
            .unwrap_or(&[])
            .chunks_exact(2)
        {
            if let (Some(id), Some(raw)) = (as_str(&pair[0]), as_str(&pair[1])) {
                if id != self.shared.instance {
                    leases.insert(id, decode_counts(&raw));
                }
            }
        }
        {
            let mut state = self.shared.lock();
            let mut view = self.shared.view.write_view();
            state
                .versions
                .resync(&mut view, version, &updates, with_sticky);
            // A proxy without a live lease is gone: so is its report.
            let state = &mut *state;
            state.leases.replace(&mut view, leases);
            let others = u32::try_from(state.leases.len()).unwrap_or(u32::MAX);
            self.shared
                .live
                .store(others.saturating_add(1), Ordering::Relaxed);
            let live = &state.leases;
            state.reports.retain(|id, _| live.contains(id));
        }
        self.shared.counters.last_sync.mark();
        self.shared.counters.resyncs.fetch_add(1, Ordering::Relaxed);
        self.shared.synced.send_modify(|n| *n += 1);
        Ok(())
    }
}

/// A limit script's `{granted, counter}`.
/// A claim's answer: (granted, counter after, a rolling window's earlier days; 0 otherwise).
fn claim_answer(v: &Value) -> Option<(u64, u64, u64)> {
    let int = |v: &Value| match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match as_array(v)? {
        [g, c] => Some((int(g)?, int(c)?, 0)),
        [g, c, before] => Some((int(g)?, int(c)?, int(before)?)),
        _ => None,
    }
}

fn kind_name(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Transport => "transport",
        FailureKind::Retryable => "retryable",
        FailureKind::Rejected => "rejected",
        FailureKind::MemberSpecific => "member_specific",
        FailureKind::StreamBroken => "stream_broken",
    }
}

fn is_noscript(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
    ) || e.to_string().contains("NOSCRIPT")
}

fn as_array(v: &Value) -> Option<&[Value]> {
    match v {
        Value::Array(items) | Value::Set(items) => Some(items),
        _ => None,
    }
}

/// A bulk string's text: what hash fields and values, and every string a script returns, come
/// back as (the scripts build every field and value as a Lua string).
fn as_str(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        _ => None,
    }
}

/// `[flag, kind, field, value, …]` → the (kind, field, value) triples.
fn script_updates(v: &Value) -> Vec<(String, String, String)> {
    let items = as_array(v).unwrap_or(&[]);
    items
        .get(1..)
        .unwrap_or(&[])
        .chunks_exact(3)
        .filter_map(|t| Some((as_str(&t[0])?, as_str(&t[1])?, as_str(&t[2])?)))
        .collect()
}
