//! The store trait every implementation answers to (its failure rules written once, as provided
//! methods), the guard of an in-flight count, and the one reading of the wall clock.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use switchyard_engine::{
    ChannelId, CredentialId, HealthSlots, HealthView, MemberId, RouteId, UnixMillis,
};

use crate::limits::{Admission, Limit, LimitRequest, LimitStatus, Metric, Refusal};
use crate::records::{IndexEntry, RecordFuture};
use crate::types::*;

/// The wall clock in Unix milliseconds (0 before 1970, saturating far ahead). Shared state
/// expiries are wall-clock so every instance agrees; this is the one reading of it that both
/// planes pass into the rules as `now`.
pub fn unix_ms() -> UnixMillis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Everything a proxy reads and reports about live runtime state. Object-safe, `Send + Sync`,
/// synchronous: implementations must never block on the network inside these calls.
pub trait StateStore: Send + Sync {
    /// Runs `f` with a consistent local view (one lock for a whole selection round).
    fn with_view(&self, f: &mut dyn FnMut(&dyn HealthView));

    /// A successful attempt: resets the member's failure streak and the channel's consecutive
    /// failures, clears the member's cooldown, feeds the health record and the canary count.
    fn record_success(&self, success: &AttemptSuccess<'_>, now: UnixMillis) -> SuccessEffect;

    /// A failed attempt of one member: health record, failure streak and cooldown per
    /// [`FailureKind`] (Retry-After extends, never shortens).
    fn record_failure(
        &self,
        failure: &AttemptFailure<'_>,
        policy: &FailurePolicy,
        now: UnixMillis,
    ) -> FailureEffect;

    /// One failed *channel attempt* (a primitive: callers use [`StateStore::report_failure`],
    /// which decides whether a failure counts). Trips the breaker at `policy.breaker_threshold`, or at once
    /// while the channel is recovering (whatever the threshold, as long as fault protection is
    /// on); a trip, or a failure after the window, ends the recovering state.
    fn record_channel_failure(
        &self,
        channel: ChannelId,
        policy: &FailurePolicy,
        now: UnixMillis,
    ) -> ChannelFailureEffect;

    /// A failed attempt of one member, and of its channel when it counts: the entry point of
    /// the failure rules for a proxy's attempt. `first_for_channel` is the caller's per-request
    /// fact "no failure of this channel has counted in this request yet" (a channel counts at
    /// most once per request); the store decides the rest: an upstream 4xx
    /// ([`FailureKind::Rejected`]) never counts toward the breaker.
    /// Provided in terms of [`StateStore::record_failure`] and
    /// [`StateStore::record_channel_failure`], so every store applies the same rule.
    fn report_failure(
        &self,
        failure: &AttemptFailure<'_>,
        policy: &FailurePolicy,
        first_for_channel: bool,
        now: UnixMillis,
    ) -> ReportedFailure {
        let member = self.record_failure(failure, policy, now);
        let channel = (first_for_channel && failure.kind.counts_toward_breaker())
            .then(|| self.record_channel_failure(failure.channel, policy, now));
        ReportedFailure { member, channel }
    }

    /// The keyword rule: an auto-ban keyword matched in the error answer `credential` got on
    /// `channel`, which has `channel_credentials` credentials configured. With fault protection
    /// on, a multi-credential channel loses that credential (disabled at runtime, until a probe
    /// with it passes) and a single-credential channel's breaker opens, the keyword as reason.
    fn ban_keyword(
        &self,
        channel: ChannelId,
        credential: CredentialId,
        channel_credentials: usize,
        keyword: &str,
        policy: &FailurePolicy,
        now: UnixMillis,
    ) -> KeywordBan {
        if !policy.fault_protection {
            KeywordBan::Ignored
        } else if channel_credentials > 1 {
            self.disable_credential(credential, keyword, now);
            KeywordBan::CredentialDisabled
        } else {
            self.trip_breaker(channel, keyword, now);
            KeywordBan::BreakerTripped
        }
    }

    /// Opens the channel's breaker at once (keyword rule on a single-key `auto_ban` channel).
    fn trip_breaker(&self, channel: ChannelId, reason: &str, now: UnixMillis);

    /// Closes the breaker and clears the failure state of the channel (recovering included) and
    /// of the given members (its members): full weight at once, as an operator's re-enable.
    fn reset_channel(&self, channel: ChannelId, members: &[MemberId]);

    /// A recovery probe passed: everything [`StateStore::reset_channel`] does, and the channel
    /// starts recovering — from `now` for `slow_start_ms` its members' selection weight ramps up
    /// (the engine reads [`HealthView::recovering`]) and any failed channel attempt trips the
    /// breaker at once. `slow_start_ms` 0: no window, the channel is simply reset.
    fn begin_recovery(
        &self,
        channel: ChannelId,
        members: &[MemberId],
        now: UnixMillis,
        slow_start_ms: u64,
    );

    /// Extends the member's cooldown to `until` unless it already lasts longer.
    fn extend_cooldown(&self, member: MemberId, until: UnixMillis);

    /// Disables one credential at runtime (keyword rule on a multi-key channel).
    fn disable_credential(&self, credential: CredentialId, reason: &str, now: UnixMillis);

    /// Clears a runtime credential disable (a recovery probe with that credential passed).
    /// Nothing when the credential is not disabled; a disable set after `now` (a newer failure
    /// than the probe) stays.
    fn enable_credential(&self, credential: CredentialId, now: UnixMillis);

    /// Raw in-flight counter operations; use [`InFlightGuard`] instead.
    fn in_flight_acquire(&self, channel: ChannelId);
    fn in_flight_release(&self, channel: ChannelId);

    /// Binds (or renews) a session to a member until `now + ttl_ms`.
    fn bind_sticky(
        &self,
        route: RouteId,
        session_key: &str,
        member: MemberId,
        ttl_ms: u64,
        now: UnixMillis,
    );

    /// Everything currently held, for the admin view. Expired entries are left out.
    fn dump(&self, now: UnixMillis) -> StateDump;

    /// Lays the view's health records out in the slot order of a newly installed snapshot
    /// (`Snapshot::health_slots`), so aware selection over it reads a record by index. One pass
    /// over the table under the write lock; until it runs, selection over that snapshot uses the
    /// hash lookup (same answers, slower). Only the latest table is kept.
    fn align_health(&self, slots: &Arc<HealthSlots>);

    /// Checks and takes every limit of one request at once, from local memory (never a round
    /// trip): admitted only if every hard limit has room, and then every limit is taken
    /// (`requests` and `concurrent` 1, `tokens` the estimate, `spend` nothing: it is charged
    /// after the request but needs room left); refused, nothing is taken. Says which soft
    /// limits the request went past and what the rate-limit headers need.
    fn limit_take(&self, request: &LimitRequest<'_>, now: UnixMillis) -> Admission;

    /// Whether every hard limit of a request has room, taking nothing (upstream limits: a member
    /// without room is skipped as `rate_limited`, and explain shows it). From local memory.
    /// `Err` names the limit that lacks room as [`StateStore::limit_take`] would: a
    /// `retry_after_ms` of at most [`RETRY_SOON_MS`](crate::RETRY_SOON_MS) on a windowed limit means only this
    /// proxy's allowance is used up while the fleet, as last seen, has room (a top-up is on its
    /// way), not that the limit is full.
    fn limit_room(&self, request: &LimitRequest<'_>, now: UnixMillis) -> Result<(), Refusal>;

    /// Adds `delta` to the `metric` limits among `limits` (those of an admitted request): the
    /// real token usage minus the estimate taken at `taken_at`, or the request's cost in
    /// micro-USD (`Metric::Spend`, `taken_at` = `now`). A correction of a window that is over
    /// charges the current one when positive and is dropped when negative.
    fn limit_settle(
        &self,
        limits: &[Limit],
        metric: Metric,
        delta: i64,
        taken_at: UnixMillis,
        now: UnixMillis,
    );

    /// Releases the slot of every `concurrent` limit among `limits` (those of an admitted
    /// request, once, when it ends).
    fn limit_release(&self, limits: &[Limit]);

    /// One limit's state as this store sees it (budgets, gauges).
    fn limit_status(&self, limit: &Limit, now: UnixMillis) -> LimitStatus;

    /// Adds `member` with `value` to the index `index` (replacing the member's old value),
    /// kept until `expires_at`; an index over [`MAX_INDEX_ENTRIES`](crate::records::MAX_INDEX_ENTRIES)
    /// drops the entry that expires first. Not on any proxied request's path (see
    /// [`crate::records`]).
    fn index_put(&self, index: &str, entry: IndexEntry, now: UnixMillis) -> RecordFuture<()>;

    /// The live entries of `index` (those expiring after `now`), by member.
    fn index_list(&self, index: &str, now: UnixMillis) -> RecordFuture<Vec<IndexEntry>>;

    /// Removes `member` from `index` (nothing when absent).
    fn index_remove(&self, index: &str, member: &str) -> RecordFuture<()>;

    /// Claims `key` for the caller until `expires_at`: `true` for exactly one caller in the
    /// fleet while the claim lives, `false` for every other.
    fn claim_once(&self, key: &str, expires_at: UnixMillis, now: UnixMillis) -> RecordFuture<bool>;
}

/// Counts one request in flight on a channel for as long as it lives.
pub struct InFlightGuard {
    store: std::sync::Arc<dyn StateStore>,
    channel: ChannelId,
}

impl InFlightGuard {
    pub fn acquire(store: &std::sync::Arc<dyn StateStore>, channel: ChannelId) -> InFlightGuard {
        store.in_flight_acquire(channel);
        InFlightGuard {
            store: store.clone(),
            channel,
        }
    }

    pub fn channel(&self) -> ChannelId {
        self.channel
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.store.in_flight_release(self.channel);
    }
}

impl std::fmt::Debug for InFlightGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlightGuard")
            .field("channel", &self.channel)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::unix_ms;

    #[test]
    fn the_clock_reads_unix_milliseconds() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let now = u128::from(unix_ms());
        // Milliseconds, not seconds or microseconds: within a minute of the reading above.
        assert!(now >= before && now < before + 60_000, "{now} vs {before}");
    }
}
