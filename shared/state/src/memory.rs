//! The in-memory store: single node and tests. Also the shape of every local view: a fleet store
//! keeps one of these and merges remote changes into it.

use std::collections::BTreeSet;

// The view is read on every selection: a fast non-cryptographic hash for its id-keyed maps.
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use switchyard_engine::fxhash::{FxHashMap as HashMap, FxHashSet as HashSet};

use switchyard_engine::{
    ChannelId, CredentialId, DenseHealth, HealthRecord, HealthSlots, HealthView, MemberId,
    Recovering, RouteId, StickyBinding, UnixMillis,
};

use crate::limits::{
    Admission, Authority, Limit, LimitRequest, LimitStatus, Limiter, Metric, Refusal,
};
use crate::records::{check_sizes, ready, IndexEntry, RecordFuture, MAX_INDEX_ENTRIES};
use crate::store::StateStore;
use crate::types::*;

#[derive(Debug, Default)]
pub struct InMemoryStore {
    inner: RwLock<Inner>,
    /// Limits: this table is the only one, so its counts are exact.
    limits: Limiter,
    /// Indexes and claims ([`crate::records`]): this process's are the only ones.
    records: std::sync::Mutex<Records>,
}

/// The in-memory indexes and claims.
#[derive(Debug, Default)]
struct Records {
    indexes:
        std::collections::HashMap<String, std::collections::HashMap<String, (String, UnixMillis)>>,
    claims: std::collections::HashMap<String, UnixMillis>,
}

impl Records {
    fn put(&mut self, index: &str, entry: IndexEntry, now: UnixMillis) {
        let entries = self.indexes.entry(index.to_owned()).or_default();
        entries.retain(|_, (_, expires)| *expires > now);
        if !entries.contains_key(&entry.member) && entries.len() >= MAX_INDEX_ENTRIES {
            let first = entries
                .iter()
                .min_by_key(|(member, (_, expires))| (*expires, (*member).clone()))
                .map(|(member, _)| member.clone());
            if let Some(first) = first {
                entries.remove(&first);
            }
        }
        entries.insert(entry.member, (entry.value, entry.expires_at));
    }

    fn list(&mut self, index: &str, now: UnixMillis) -> Vec<IndexEntry> {
        let Some(entries) = self.indexes.get_mut(index) else {
            return Vec::new();
        };
        entries.retain(|_, (_, expires)| *expires > now);
        let mut out: Vec<IndexEntry> = entries
            .iter()
            .map(|(member, (value, expires_at))| IndexEntry {
                member: member.clone(),
                value: value.clone(),
                expires_at: *expires_at,
            })
            .collect();
        out.sort_by(|a, b| a.member.cmp(&b.member));
        out
    }

    fn claim(&mut self, key: &str, expires_at: UnixMillis, now: UnixMillis) -> bool {
        self.claims.retain(|_, expires| *expires > now);
        if self.claims.contains_key(key) {
            return false;
        }
        self.claims.insert(key.to_owned(), expires_at);
        true
    }
}

#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Breaker {
    pub(crate) consecutive: u32,
    pub(crate) tripped_at: Option<UnixMillis>,
    pub(crate) reason: Option<String>,
}

/// The maps behind the view. `pub(crate)` so a fleet store can merge remote changes into them.
#[derive(Debug, Default)]
pub(crate) struct Inner {
    pub(crate) cooldowns: HashMap<MemberId, UnixMillis>,
    pub(crate) member_failures: HashMap<MemberId, u32>,
    pub(crate) breakers: HashMap<ChannelId, Breaker>,
    /// Channels in (or, until a write clears them, just past) their slow-start window.
    pub(crate) recovering: HashMap<ChannelId, Recovering>,
    /// This process's own in-flight requests.
    pub(crate) in_flight: HashMap<ChannelId, u32>,
    /// Other live proxies' in-flight requests (a fleet store fills it; always empty here).
    pub(crate) remote_in_flight: HashMap<ChannelId, u32>,
    /// channel -> upstream model -> record; nested so lookups by `&str` need no allocation.
    /// Written only through `set_health` / `remove_health`, which keep `dense` in step.
    pub(crate) health: HashMap<ChannelId, HashMap<String, HealthRecord>>,
    /// `health` laid out for the installed snapshot's slots (`StateStore::align_health`).
    dense: DenseHealth,
    pub(crate) credentials_disabled: HashMap<CredentialId, (String, UnixMillis)>,
    pub(crate) canary_successes: HashMap<MemberId, u32>,
    pub(crate) canaries_promoted: HashSet<MemberId>,
    sticky: HashMap<RouteId, HashMap<String, StickyBinding>>,
    /// (expires_at, route, key): eviction order.
    sticky_expiry: BTreeSet<(UnixMillis, RouteId, String)>,
}

impl InMemoryStore {
    pub fn new() -> InMemoryStore {
        InMemoryStore::default()
    }

    fn records(&self) -> std::sync::MutexGuard<'_, Records> {
        // Plain maps, whole after any panic: keep going.
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        // A panic while holding the lock cannot leave these maps logically broken: keep going.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access for a fleet store merging remote changes into this view.
    pub(crate) fn write_view(&self) -> RwLockWriteGuard<'_, Inner> {
        self.write()
    }

    /// Read access for a fleet store (e.g. its own in-flight counts for its lease).
    pub(crate) fn read_view(&self) -> RwLockReadGuard<'_, Inner> {
        self.read()
    }
}

impl HealthView for Inner {
    fn cooldown_until(&self, member: MemberId) -> Option<UnixMillis> {
        self.cooldowns.get(&member).copied()
    }
    fn health(&self, channel: ChannelId, upstream_model: &str) -> HealthRecord {
        self.health
            .get(&channel)
            .and_then(|m| m.get(upstream_model))
            .copied()
            .unwrap_or_default()
    }
    fn in_flight(&self, channel: ChannelId) -> u32 {
        let own = self.in_flight.get(&channel).copied().unwrap_or(0);
        let remote = self.remote_in_flight.get(&channel).copied().unwrap_or(0);
        own.saturating_add(remote)
    }
    fn breaker_open(&self, channel: ChannelId) -> bool {
        self.breakers
            .get(&channel)
            .is_some_and(|b| b.tripped_at.is_some())
    }
    fn recovering(&self, channel: ChannelId) -> Option<Recovering> {
        self.recovering.get(&channel).copied()
    }
    fn credential_disabled(&self, credential: CredentialId) -> bool {
        self.credentials_disabled.contains_key(&credential)
    }
    fn canary_promoted(&self, member: MemberId) -> bool {
        self.canaries_promoted.contains(&member)
    }
    fn sticky(&self, route: RouteId, session_key: &str) -> Option<StickyBinding> {
        self.sticky.get(&route)?.get(session_key).copied()
    }
    fn dense_health(&self, slots: &Arc<HealthSlots>) -> Option<&[HealthRecord]> {
        self.dense.records_for(slots)
    }
}

impl Inner {
    fn reset_channel(&mut self, channel: ChannelId, members: &[MemberId]) {
        self.breakers.remove(&channel);
        self.recovering.remove(&channel);
        for member in members {
            self.member_failures.remove(member);
            self.cooldowns.remove(member);
        }
    }

    fn extend_cooldown(&mut self, member: MemberId, until: UnixMillis) -> UnixMillis {
        let entry = self.cooldowns.entry(member).or_insert(until);
        *entry = (*entry).max(until);
        *entry
    }

    fn update_health(
        &mut self,
        channel: ChannelId,
        upstream_model: &str,
        f: impl FnOnce(HealthRecord) -> HealthRecord,
    ) {
        let models = self.health.entry(channel).or_default();
        let updated = match models.get_mut(upstream_model) {
            Some(record) => {
                *record = f(*record);
                *record
            }
            None => {
                let record = f(HealthRecord::default());
                models.insert(upstream_model.to_owned(), record);
                record
            }
        };
        self.dense.set(channel, upstream_model, updated);
    }

    /// A record merged from the fleet.
    pub(crate) fn set_health(
        &mut self,
        channel: ChannelId,
        upstream_model: &str,
        record: HealthRecord,
    ) {
        self.update_health(channel, upstream_model, |_| record);
    }

    /// A record the fleet no longer holds.
    pub(crate) fn remove_health(&mut self, channel: ChannelId, upstream_model: &str) {
        if let Some(models) = self.health.get_mut(&channel) {
            models.remove(upstream_model);
        }
        self.dense.remove(channel, upstream_model);
    }

    fn align_health(&mut self, slots: &Arc<HealthSlots>) {
        let health = &self.health;
        self.dense.align(slots, |channel, model| {
            health
                .get(&channel)
                .and_then(|m| m.get(model))
                .copied()
                .unwrap_or_default()
        });
    }

    pub(crate) fn remove_sticky(&mut self, route: RouteId, key: &str) {
        if let Some(routes) = self.sticky.get_mut(&route) {
            if let Some(old) = routes.remove(key) {
                self.sticky_expiry
                    .remove(&(old.expires_at, route, key.to_owned()));
            }
            if routes.is_empty() {
                self.sticky.remove(&route);
            }
        }
    }

    fn sticky_len(&self) -> usize {
        self.sticky_expiry.len()
    }

    /// Binds (or rebinds) a session; bindings expired at `now` go first, then the earliest
    /// expiry while over capacity.
    pub(crate) fn insert_sticky(
        &mut self,
        route: RouteId,
        session_key: &str,
        binding: StickyBinding,
        now: UnixMillis,
    ) {
        self.remove_sticky(route, session_key);
        while let Some(first) = self.sticky_expiry.first().cloned() {
            if first.0 > now && self.sticky_len() < MAX_STICKY_BINDINGS {
                break;
            }
            self.remove_sticky(first.1, &first.2);
        }
        self.sticky
            .entry(route)
            .or_default()
            .insert(session_key.to_owned(), binding);
        self.sticky_expiry
            .insert((binding.expires_at, route, session_key.to_owned()));
    }

    /// Whether binding `session_key` of `route` would take no other binding's place: the view
    /// holds it already, or has room for one more.
    pub(crate) fn sticky_fits(&self, route: RouteId, session_key: &str) -> bool {
        self.sticky_len() < MAX_STICKY_BINDINGS
            || self
                .sticky
                .get(&route)
                .is_some_and(|keys| keys.contains_key(session_key))
    }

    /// Every binding held, for resync bookkeeping.
    pub(crate) fn sticky_keys(&self) -> impl Iterator<Item = (RouteId, &str)> {
        self.sticky
            .iter()
            .flat_map(|(route, keys)| keys.keys().map(move |k| (*route, k.as_str())))
    }
}

impl StateStore for InMemoryStore {
    fn with_view(&self, f: &mut dyn FnMut(&dyn HealthView)) {
        let guard = self.read();
        f(&*guard);
    }

    fn record_success(&self, s: &AttemptSuccess<'_>, _now: UnixMillis) -> SuccessEffect {
        let mut inner = self.write();
        inner.member_failures.remove(&s.member);
        inner.cooldowns.remove(&s.member);
        if let Some(b) = inner.breakers.get_mut(&s.channel) {
            b.consecutive = 0;
        }
        inner.update_health(s.channel, s.upstream_model, |r| r.on_success(s.latency_ms));
        let mut promoted = false;
        if s.canary && !inner.canaries_promoted.contains(&s.member) {
            let count = inner.canary_successes.entry(s.member).or_insert(0);
            *count = count.saturating_add(1);
            if s.promote_after > 0 && *count >= s.promote_after {
                inner.canaries_promoted.insert(s.member);
                promoted = true;
            }
        }
        SuccessEffect { promoted }
    }

    fn record_failure(
        &self,
        f: &AttemptFailure<'_>,
        policy: &FailurePolicy,
        now: UnixMillis,
    ) -> FailureEffect {
        let mut inner = self.write();
        if f.kind != FailureKind::Rejected {
            inner.update_health(f.channel, f.upstream_model, HealthRecord::on_failure);
        }
        // A canary must serve its successes with no failure in between.
        inner.canary_successes.remove(&f.member);
        let streak = inner.member_failures.entry(f.member).or_insert(0);
        *streak = streak.saturating_add(1);
        let member_failures = *streak;
        let cools =
            policy.fault_protection && (f.kind != FailureKind::Transport || member_failures >= 2);
        let cooled_until = cools.then(|| {
            let base = now.saturating_add(policy.cooldown_ms);
            let asked = now.saturating_add(f.retry_after_ms.unwrap_or(0));
            inner.extend_cooldown(f.member, base.max(asked))
        });
        FailureEffect {
            member_failures,
            cooled_until,
        }
    }

    fn record_channel_failure(
        &self,
        channel: ChannelId,
        policy: &FailurePolicy,
        now: UnixMillis,
    ) -> ChannelFailureEffect {
        let mut inner = self.write();
        let window = inner.recovering.get(&channel).copied();
        let breaker = inner.breakers.entry(channel).or_default();
        // Half-open: a channel that answers probes but fails real calls goes straight back out.
        let recovering = breaker.tripped_at.is_none() && window.is_some_and(|r| r.active(now));
        breaker.consecutive = breaker.consecutive.saturating_add(1);
        let tripped = policy.fault_protection
            && breaker.tripped_at.is_none()
            && (recovering
                || (policy.breaker_threshold > 0
                    && breaker.consecutive >= policy.breaker_threshold));
        if tripped {
            breaker.tripped_at = Some(now);
            breaker.reason = Some(if recovering {
                RECOVERING_TRIP_REASON.to_owned()
            } else {
                format!("{} consecutive failed attempts", breaker.consecutive)
            });
        }
        let effect = ChannelFailureEffect {
            consecutive_failures: breaker.consecutive,
            tripped,
        };
        let ends_window = breaker.tripped_at.is_some() || !window.is_some_and(|r| r.active(now));
        if window.is_some() && ends_window {
            inner.recovering.remove(&channel);
        }
        effect
    }

    fn trip_breaker(&self, channel: ChannelId, reason: &str, now: UnixMillis) {
        let mut inner = self.write();
        let breaker = inner.breakers.entry(channel).or_default();
        if breaker.tripped_at.is_none() {
            breaker.tripped_at = Some(now);
            breaker.reason = Some(reason.to_owned());
        }
        inner.recovering.remove(&channel);
    }

    fn reset_channel(&self, channel: ChannelId, members: &[MemberId]) {
        self.write().reset_channel(channel, members);
    }

    fn begin_recovery(
        &self,
        channel: ChannelId,
        members: &[MemberId],
        now: UnixMillis,
        slow_start_ms: u64,
    ) {
        let mut inner = self.write();
        inner.reset_channel(channel, members);
        if slow_start_ms > 0 {
            inner.recovering.insert(
                channel,
                Recovering {
                    since: now,
                    until: now.saturating_add(slow_start_ms),
                },
            );
        }
    }

    fn extend_cooldown(&self, member: MemberId, until: UnixMillis) {
        self.write().extend_cooldown(member, until);
    }

    fn disable_credential(&self, credential: CredentialId, reason: &str, now: UnixMillis) {
        self.write()
            .credentials_disabled
            .entry(credential)
            .or_insert_with(|| (reason.to_owned(), now));
    }

    fn enable_credential(&self, credential: CredentialId, now: UnixMillis) {
        let mut inner = self.write();
        // A disable set after the probe that passed is a newer failure: it stays.
        if inner
            .credentials_disabled
            .get(&credential)
            .is_some_and(|(_, at)| *at <= now)
        {
            inner.credentials_disabled.remove(&credential);
        }
    }

    fn in_flight_acquire(&self, channel: ChannelId) {
        let mut inner = self.write();
        let n = inner.in_flight.entry(channel).or_insert(0);
        *n = n.saturating_add(1);
    }

    fn in_flight_release(&self, channel: ChannelId) {
        let mut inner = self.write();
        if let Some(n) = inner.in_flight.get_mut(&channel) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inner.in_flight.remove(&channel);
            }
        }
    }

    fn bind_sticky(
        &self,
        route: RouteId,
        session_key: &str,
        member: MemberId,
        ttl_ms: u64,
        now: UnixMillis,
    ) {
        let binding = StickyBinding {
            member_id: member,
            expires_at: now.saturating_add(ttl_ms),
        };
        self.write().insert_sticky(route, session_key, binding, now);
    }

    fn align_health(&self, slots: &Arc<HealthSlots>) {
        self.write().align_health(slots);
    }

    fn limit_take(&self, request: &LimitRequest<'_>, now: UnixMillis) -> Admission {
        self.limits.take(request, now, Authority::Exact).0
    }

    fn limit_room(&self, request: &LimitRequest<'_>, now: UnixMillis) -> Result<(), Refusal> {
        self.limits.room(request, now, Authority::Exact).0
    }

    fn limit_settle(
        &self,
        limits: &[Limit],
        metric: Metric,
        delta: i64,
        taken_at: UnixMillis,
        now: UnixMillis,
    ) {
        self.limits
            .settle(limits, metric, delta, taken_at, now, Authority::Exact);
    }

    fn limit_release(&self, limits: &[Limit]) {
        self.limits.release(limits, Authority::Exact);
    }

    fn limit_status(&self, limit: &Limit, now: UnixMillis) -> LimitStatus {
        self.limits.status(limit, now, Authority::Exact)
    }

    fn index_put(&self, index: &str, entry: IndexEntry, now: UnixMillis) -> RecordFuture<()> {
        let checked = check_sizes(&[index, &entry.member, &entry.value]);
        ready(checked.map(|()| self.records().put(index, entry, now)))
    }

    fn index_list(&self, index: &str, now: UnixMillis) -> RecordFuture<Vec<IndexEntry>> {
        ready(Ok(self.records().list(index, now)))
    }

    fn index_remove(&self, index: &str, member: &str) -> RecordFuture<()> {
        if let Some(entries) = self.records().indexes.get_mut(index) {
            entries.remove(member);
        }
        ready(Ok(()))
    }

    fn claim_once(&self, key: &str, expires_at: UnixMillis, now: UnixMillis) -> RecordFuture<bool> {
        let checked = check_sizes(&[key]);
        ready(checked.map(|()| self.records().claim(key, expires_at, now)))
    }

    fn dump(&self, now: UnixMillis) -> StateDump {
        let inner = self.read();
        StateDump {
            cooldowns: inner.cooldown_entries(now),
            member_failures: inner.member_failure_entries(),
            channels: inner.channel_entries(),
            in_flight: inner.in_flight_entries(),
            health: inner.health_entries(),
            credentials_disabled: inner.disabled_credential_entries(),
            canaries: inner.canary_entries(),
            recovering: inner.recovering_entries(now),
            sticky_bindings: inner
                .sticky_expiry
                .range((now.saturating_add(1), 0, String::new())..)
                .count(),
        }
    }
}

/// The admin view's lists ([`StateStore::dump`]): live entries only, each list sorted by its key.
impl Inner {
    fn cooldown_entries(&self, now: UnixMillis) -> Vec<CooldownEntry> {
        let mut list: Vec<CooldownEntry> = self
            .cooldowns
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(m, until)| CooldownEntry {
                member_id: *m,
                until: *until,
            })
            .collect();
        list.sort_by_key(|e| e.member_id);
        list
    }

    fn member_failure_entries(&self) -> Vec<MemberFailures> {
        let mut list: Vec<MemberFailures> = self
            .member_failures
            .iter()
            .map(|(m, n)| MemberFailures {
                member_id: *m,
                consecutive_failures: *n,
            })
            .collect();
        list.sort_by_key(|e| e.member_id);
        list
    }

    fn channel_entries(&self) -> Vec<ChannelState> {
        let mut list: Vec<ChannelState> = self
            .breakers
            .iter()
            .map(|(c, b)| ChannelState {
                channel_id: *c,
                consecutive_failures: b.consecutive,
                breaker_open: b.tripped_at.is_some(),
                tripped_at: b.tripped_at,
                reason: b.reason.clone(),
            })
            .collect();
        list.sort_by_key(|e| e.channel_id);
        list
    }

    /// This process's and the other live proxies' requests, per channel that has any.
    fn in_flight_entries(&self) -> Vec<InFlightEntry> {
        let mut list: Vec<InFlightEntry> = self
            .in_flight
            .keys()
            .chain(self.remote_in_flight.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|c| InFlightEntry {
                channel_id: *c,
                in_flight: self.in_flight(*c),
            })
            .filter(|e| e.in_flight > 0)
            .collect();
        list.sort_by_key(|e| e.channel_id);
        list
    }

    fn health_entries(&self) -> Vec<HealthEntry> {
        let mut list: Vec<HealthEntry> = self
            .health
            .iter()
            .flat_map(|(c, models)| {
                models.iter().map(|(model, r)| HealthEntry {
                    channel_id: *c,
                    upstream_model: model.clone(),
                    latency_ms: r.latency_ms,
                    error_propensity: r.error_propensity,
                })
            })
            .collect();
        list.sort_by(|a, b| {
            (a.channel_id, &a.upstream_model).cmp(&(b.channel_id, &b.upstream_model))
        });
        list
    }

    fn disabled_credential_entries(&self) -> Vec<DisabledCredential> {
        let mut list: Vec<DisabledCredential> = self
            .credentials_disabled
            .iter()
            .map(|(id, (reason, at))| DisabledCredential {
                credential_id: *id,
                reason: reason.clone(),
                at: *at,
            })
            .collect();
        list.sort_by_key(|e| e.credential_id);
        list
    }

    fn canary_entries(&self) -> Vec<CanaryEntry> {
        let mut list: Vec<CanaryEntry> = self
            .canary_successes
            .iter()
            .map(|(m, n)| CanaryEntry {
                member_id: *m,
                successes: *n,
                promoted: self.canaries_promoted.contains(m),
            })
            .collect();
        list.sort_by_key(|e| e.member_id);
        list
    }

    fn recovering_entries(&self, now: UnixMillis) -> Vec<RecoveringEntry> {
        let mut list: Vec<RecoveringEntry> = self
            .recovering
            .iter()
            .filter(|(_, r)| r.active(now))
            .map(|(c, r)| RecoveringEntry {
                channel_id: *c,
                since: r.since,
                until: r.until,
            })
            .collect();
        list.sort_by_key(|e| e.channel_id);
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    #[test]
    fn in_memory_store_passes_the_conformance_suite() {
        conformance::run_all(&|| Box::new(InMemoryStore::new()));
    }

    #[tokio::test]
    async fn in_memory_store_keeps_indexes_and_claims() {
        conformance::records(&InMemoryStore::new()).await;
    }

    /// A full index drops the entry that expires first to take a new member; a member already
    /// in it is replaced without dropping any.
    #[tokio::test]
    async fn a_full_index_drops_the_entry_that_expires_first() {
        let store = InMemoryStore::new();
        let entry = |i: usize| IndexEntry {
            member: format!("m{i}"),
            value: String::new(),
            expires_at: 10_000 + i as u64,
        };
        for i in 0..MAX_INDEX_ENTRIES {
            assert_eq!(store.index_put("x", entry(i), 1).await, Ok(()));
        }
        assert_eq!(store.index_put("x", entry(5), 1).await, Ok(()));
        assert_eq!(
            store.index_list("x", 1).await.map(|l| l.len()),
            Ok(MAX_INDEX_ENTRIES)
        );
        assert_eq!(
            store.index_put("x", entry(MAX_INDEX_ENTRIES), 1).await,
            Ok(())
        );
        let listed = store.index_list("x", 1).await.unwrap_or_default();
        assert_eq!(listed.len(), MAX_INDEX_ENTRIES);
        assert!(
            !listed.iter().any(|e| e.member == "m0"),
            "the first to expire was dropped"
        );
        assert!(listed
            .iter()
            .any(|e| e.member == format!("m{MAX_INDEX_ENTRIES}")));
    }

    #[test]
    fn in_memory_in_flight_guard_counts() {
        conformance::in_flight_guard_counts(std::sync::Arc::new(InMemoryStore::new()));
    }

    #[test]
    fn a_binding_that_expires_at_now_is_evicted_by_the_next_bind() {
        let store = InMemoryStore::new();
        store.bind_sticky(1, "a", 5, 1_000, 10_000);
        // At 11 000 "a" has expired (a binding is live while now < expires_at).
        store.bind_sticky(1, "b", 6, 1_000, 11_000);
        let mut held = (None, None);
        store.with_view(&mut |v| held = (v.sticky(1, "a"), v.sticky(1, "b")));
        assert_eq!(held.0, None, "the expired binding is gone");
        assert_eq!(held.1.map(|b| b.member_id), Some(6));
        // One still live at `now` stays.
        store.bind_sticky(1, "c", 7, 1_000, 11_999);
        store.with_view(&mut |v| held = (v.sticky(1, "b"), v.sticky(1, "c")));
        assert_eq!(held.0.map(|b| b.member_id), Some(6));
    }

    #[test]
    fn fleet_writes_and_removals_of_health_reach_the_aligned_layout() {
        // What a fleet store merges from Redis (`set_health` / `remove_health`): the record by
        // (channel, model) and its slot in the aligned layout change together.
        let slots = Arc::new(HealthSlots::build([(1, "a"), (2, "b")]));
        let mut inner = Inner::default();
        inner.align_health(&slots);
        let record = HealthRecord {
            latency_ms: Some(250.0),
            error_propensity: 0.5,
        };
        inner.set_health(2, "b", record);
        assert_eq!(inner.health(2, "b"), record);
        let laid_out = inner.dense_health(&slots).map(<[_]>::to_vec);
        assert_eq!(laid_out, Some(vec![HealthRecord::default(), record]));

        inner.remove_health(2, "b");
        assert_eq!(inner.health(2, "b"), HealthRecord::default());
        assert!(inner.health.get(&2).is_none_or(|m| !m.contains_key("b")));
        let laid_out = inner.dense_health(&slots).map(<[_]>::to_vec);
        assert_eq!(laid_out, Some(vec![HealthRecord::default(); 2]));
    }
}
