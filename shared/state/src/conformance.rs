//! The conformance suite every [`StateStore`] implementation must pass. Each check takes a fresh
//! `&dyn StateStore`, so the in-memory and the Redis stores run the very same assertions.
//!
//! A fleet store whose view lags its writes should call these against a store that applies its
//! own writes to its local view synchronously (the trait requires it).

use std::sync::Arc;

use switchyard_engine::{
    ChannelId, HealthSlots, HealthView, Recovering, StickyBinding, UnixMillis,
};

use crate::limits::{
    Admission, Limit, LimitKey, LimitMode, LimitRequest, Metric, Refusal, ScopeKind, Window,
    RETRY_SOON_MS,
};
use crate::store::{InFlightGuard, StateStore};
use crate::types::*;

const NOW: UnixMillis = 1_700_000_000_000;

fn policy() -> FailurePolicy {
    FailurePolicy {
        fault_protection: true,
        cooldown_ms: 30_000,
        breaker_threshold: 3,
    }
}

fn failure(kind: FailureKind, retry_after_ms: Option<u64>) -> AttemptFailure<'static> {
    AttemptFailure {
        member: 1,
        channel: 10,
        upstream_model: "gpt-x",
        kind,
        retry_after_ms,
    }
}

fn success(latency_ms: f64) -> AttemptSuccess<'static> {
    AttemptSuccess {
        member: 1,
        channel: 10,
        upstream_model: "gpt-x",
        latency_ms,
        canary: false,
        promote_after: 100,
    }
}

fn read<T>(store: &dyn StateStore, f: impl Fn(&dyn HealthView) -> T) -> T {
    let mut out = None;
    store.with_view(&mut |view| out = Some(f(view)));
    match out {
        Some(v) => v,
        None => unreachable!("with_view must call its closure"),
    }
}

/// One conformance check.
pub type Check = fn(&dyn StateStore);

/// Every check, each on a fresh store from `make` (limit checks with nothing to wait for).
pub fn run_all(make: &dyn Fn() -> Box<dyn StateStore>) {
    for (name, check) in checks() {
        let store = make();
        eprintln!("conformance: {name}");
        check(store.as_ref());
    }
    for (name, check) in limit_checks() {
        let store = make();
        eprintln!("conformance: {name}");
        check(store.as_ref(), &|| {});
    }
}

/// One limit check: the store, and `settle`, which returns once the store's background has
/// answered every limit claim (nothing to wait for in a store without one). A fleet store
/// admits from an allowance its background replenishes, so a refusal a check asserts is the
/// one that persists after `settle`.
pub type LimitCheck = fn(&dyn StateStore, &dyn Fn());

/// Every limit check by name.
pub fn limit_checks() -> &'static [(&'static str, LimitCheck)] {
    &[
        ("limit_window_rolls_over", limit_window_rolls_over),
        (
            "several_limits_on_one_request",
            several_limits_on_one_request,
        ),
        (
            "soft_limit_reports_and_never_refuses",
            soft_limit_reports_and_never_refuses,
        ),
        (
            "tokens_are_estimated_then_settled",
            tokens_are_estimated_then_settled,
        ),
        (
            "spend_is_charged_after_and_refuses_once_spent",
            spend_is_charged_after_and_refuses_once_spent,
        ),
        (
            "spend_month_is_the_utc_calendar_month",
            spend_month_is_the_utc_calendar_month,
        ),
        ("week_is_the_iso_week", week_is_the_iso_week),
        (
            "rolling_window_counts_the_last_days",
            rolling_window_counts_the_last_days,
        ),
        ("concurrency_slot_is_released", concurrency_slot_is_released),
        (
            "room_is_checked_without_taking",
            room_is_checked_without_taking,
        ),
        (
            "a_changed_value_binds_within_the_window",
            a_changed_value_binds_within_the_window,
        ),
    ]
}

/// Every check by name, for implementations that verify more around each one.
pub fn checks() -> &'static [(&'static str, Check)] {
    &[
        (
            "retryable_failure_cools_member",
            retryable_failure_cools_member,
        ),
        (
            "retry_after_extends_never_shortens",
            retry_after_extends_never_shortens,
        ),
        (
            "short_retry_after_keeps_the_configured_cooldown",
            short_retry_after_keeps_the_configured_cooldown,
        ),
        (
            "first_transport_failure_counts_without_cooling",
            first_transport_failure_counts_without_cooling,
        ),
        (
            "rejected_4xx_cools_but_leaves_health",
            rejected_4xx_cools_but_leaves_health,
        ),
        (
            "fault_protection_off_never_cools_or_trips",
            fault_protection_off_never_cools_or_trips,
        ),
        (
            "breaker_trips_at_threshold_once",
            breaker_trips_at_threshold_once,
        ),
        (
            "success_resets_streaks_and_cooldown",
            success_resets_streaks_and_cooldown,
        ),
        (
            "health_records_use_engine_formulas",
            health_records_use_engine_formulas,
        ),
        (
            "health_records_keyed_by_channel_and_model",
            health_records_keyed_by_channel_and_model,
        ),
        (
            "in_flight_guard_releases_on_drop",
            in_flight_guard_releases_on_drop,
        ),
        (
            "sticky_binding_renews_and_rebinds",
            sticky_binding_renews_and_rebinds,
        ),
        (
            "sticky_capacity_evicts_earliest_expiry",
            sticky_capacity_evicts_earliest_expiry,
        ),
        (
            "canary_promotes_after_clean_run",
            canary_promotes_after_clean_run,
        ),
        (
            "credential_disable_is_visible",
            credential_disable_is_visible,
        ),
        (
            "credential_enable_clears_the_disable",
            credential_enable_clears_the_disable,
        ),
        (
            "reset_channel_closes_breaker_and_clears_members",
            reset_channel_closes_breaker_and_clears_members,
        ),
        ("dump_lists_live_state_only", dump_lists_live_state_only),
        (
            "begin_recovery_closes_breaker_and_opens_the_window",
            begin_recovery_closes_breaker_and_opens_the_window,
        ),
        (
            "failed_channel_attempt_while_recovering_trips_at_once",
            failed_channel_attempt_while_recovering_trips_at_once,
        ),
        (
            "recovering_survives_successes_and_member_failures",
            recovering_survives_successes_and_member_failures,
        ),
        (
            "after_the_window_the_threshold_applies_again",
            after_the_window_the_threshold_applies_again,
        ),
        (
            "recovering_obeys_fault_protection",
            recovering_obeys_fault_protection,
        ),
        (
            "trip_and_reset_end_the_window",
            trip_and_reset_end_the_window,
        ),
        (
            "begin_recovery_without_slow_start_is_a_reset",
            begin_recovery_without_slow_start_is_a_reset,
        ),
        (
            "aligned_health_layout_follows_every_write",
            aligned_health_layout_follows_every_write,
        ),
        (
            "rejected_4xx_never_counts_toward_the_breaker",
            rejected_4xx_never_counts_toward_the_breaker,
        ),
        (
            "a_channel_counts_at_most_once_per_request",
            a_channel_counts_at_most_once_per_request,
        ),
        (
            "keyword_ban_disables_the_credential_of_a_multi_key_channel",
            keyword_ban_disables_the_credential_of_a_multi_key_channel,
        ),
        (
            "keyword_ban_trips_the_breaker_of_a_single_key_channel",
            keyword_ban_trips_the_breaker_of_a_single_key_channel,
        ),
        (
            "keyword_ban_obeys_fault_protection",
            keyword_ban_obeys_fault_protection,
        ),
    ]
}

/// The `now` every check uses (for comparing dumps afterwards).
pub const CHECK_NOW: UnixMillis = NOW;

pub fn retryable_failure_cools_member(store: &dyn StateStore) {
    let effect = store.record_failure(&failure(FailureKind::Retryable, None), &policy(), NOW);
    assert_eq!(effect.member_failures, 1);
    assert_eq!(effect.cooled_until, Some(NOW + 30_000));
    assert_eq!(read(store, |v| v.cooldown_until(1)), Some(NOW + 30_000));
    assert_eq!(read(store, |v| v.cooldown_until(2)), None);
}

pub fn retry_after_extends_never_shortens(store: &dyn StateStore) {
    let long = failure(FailureKind::Retryable, Some(120_000));
    assert_eq!(
        store.record_failure(&long, &policy(), NOW).cooled_until,
        Some(NOW + 120_000)
    );
    // A later, shorter cooldown never shortens the longer one.
    let short = failure(FailureKind::Retryable, Some(1_000));
    store.record_failure(&short, &policy(), NOW + 1_000);
    assert_eq!(read(store, |v| v.cooldown_until(1)), Some(NOW + 120_000));
    store.extend_cooldown(1, NOW + 5_000);
    assert_eq!(read(store, |v| v.cooldown_until(1)), Some(NOW + 120_000));
    store.extend_cooldown(1, NOW + 200_000);
    assert_eq!(read(store, |v| v.cooldown_until(1)), Some(NOW + 200_000));
}

/// A `Retry-After` shorter than the cooldown only extends: the member still cools for the
/// whole configured cooldown, on a first failure as on a repeated one.
pub fn short_retry_after_keeps_the_configured_cooldown(store: &dyn StateStore) {
    let short = failure(FailureKind::Retryable, Some(1_000));
    assert_eq!(
        store.record_failure(&short, &policy(), NOW).cooled_until,
        Some(NOW + 30_000)
    );
    assert_eq!(read(store, |v| v.cooldown_until(1)), Some(NOW + 30_000));
    // Again later: the new cooldown runs from the new failure, still the full 30 s.
    store.record_failure(&short, &policy(), NOW + 40_000);
    assert_eq!(read(store, |v| v.cooldown_until(1)), Some(NOW + 70_000));
}

pub fn first_transport_failure_counts_without_cooling(store: &dyn StateStore) {
    let t = failure(FailureKind::Transport, None);
    let first = store.record_failure(&t, &policy(), NOW);
    assert_eq!(first.member_failures, 1);
    assert_eq!(first.cooled_until, None);
    assert_eq!(read(store, |v| v.cooldown_until(1)), None);
    let second = store.record_failure(&t, &policy(), NOW + 10);
    assert_eq!(second.member_failures, 2);
    assert_eq!(second.cooled_until, Some(NOW + 10 + 30_000));
}

pub fn rejected_4xx_cools_but_leaves_health(store: &dyn StateStore) {
    let effect = store.record_failure(&failure(FailureKind::Rejected, None), &policy(), NOW);
    assert!(effect.cooled_until.is_some());
    assert_eq!(read(store, |v| v.health(10, "gpt-x").error_propensity), 0.0);
}

pub fn fault_protection_off_never_cools_or_trips(store: &dyn StateStore) {
    let off = FailurePolicy {
        fault_protection: false,
        ..policy()
    };
    for i in 0..5 {
        let effect =
            store.record_failure(&failure(FailureKind::Retryable, Some(9_000)), &off, NOW + i);
        assert_eq!(effect.cooled_until, None);
        assert!(!store.record_channel_failure(10, &off, NOW + i).tripped);
    }
    assert_eq!(read(store, |v| v.cooldown_until(1)), None);
    assert!(!read(store, |v| v.breaker_open(10)));
    // Health records still learn.
    assert!(read(store, |v| v.health(10, "gpt-x").error_propensity) > 0.9);
}

pub fn breaker_trips_at_threshold_once(store: &dyn StateStore) {
    let p = policy();
    let a = store.record_channel_failure(10, &p, NOW);
    let b = store.record_channel_failure(10, &p, NOW + 1);
    assert_eq!((a.consecutive_failures, a.tripped), (1, false));
    assert_eq!((b.consecutive_failures, b.tripped), (2, false));
    assert!(!read(store, |v| v.breaker_open(10)));
    let c = store.record_channel_failure(10, &p, NOW + 2);
    assert_eq!((c.consecutive_failures, c.tripped), (3, true));
    assert!(read(store, |v| v.breaker_open(10)));
    // Already open: counted, but not tripped again.
    assert!(!store.record_channel_failure(10, &p, NOW + 3).tripped);
    assert!(!read(store, |v| v.breaker_open(11)));
    // Threshold 0 disables the breaker.
    let off = FailurePolicy {
        breaker_threshold: 0,
        ..p
    };
    for i in 0..10 {
        assert!(!store.record_channel_failure(12, &off, NOW + i).tripped);
    }
    assert!(!read(store, |v| v.breaker_open(12)));
}

pub fn success_resets_streaks_and_cooldown(store: &dyn StateStore) {
    let p = policy();
    store.record_failure(&failure(FailureKind::Retryable, None), &p, NOW);
    store.record_channel_failure(10, &p, NOW);
    store.record_channel_failure(10, &p, NOW);
    store.record_success(&success(100.0), NOW + 1);
    assert_eq!(read(store, |v| v.cooldown_until(1)), None);
    // The channel streak restarted: two more failures do not reach the threshold of 3.
    store.record_channel_failure(10, &p, NOW + 2);
    let effect = store.record_channel_failure(10, &p, NOW + 3);
    assert_eq!((effect.consecutive_failures, effect.tripped), (2, false));
    // The member streak restarted: the next transport failure is a "first" again.
    let t = store.record_failure(&failure(FailureKind::Transport, None), &p, NOW + 4);
    assert_eq!((t.member_failures, t.cooled_until), (1, None));
}

pub fn health_records_use_engine_formulas(store: &dyn StateStore) {
    let p = policy();
    store.record_success(&success(1000.0), NOW);
    store.record_success(&success(0.0), NOW);
    let r = read(store, |v| v.health(10, "gpt-x"));
    assert_eq!(r.latency_ms, Some(800.0));
    store.record_failure(&failure(FailureKind::Retryable, None), &p, NOW);
    store.record_failure(&failure(FailureKind::MemberSpecific, None), &p, NOW);
    store.record_failure(&failure(FailureKind::Transport, None), &p, NOW);
    let expected = switchyard_engine::HealthRecord::default()
        .on_success(1000.0)
        .on_success(0.0)
        .on_failure()
        .on_failure()
        .on_failure();
    assert_eq!(read(store, |v| v.health(10, "gpt-x")), expected);
    assert_eq!(expected.error_propensity, 0.875);
}

pub fn health_records_keyed_by_channel_and_model(store: &dyn StateStore) {
    store.record_success(&success(50.0), NOW);
    let alias = AttemptSuccess {
        upstream_model: "gpt-y",
        latency_ms: 900.0,
        ..success(0.0)
    };
    store.record_success(&alias, NOW);
    assert_eq!(
        read(store, |v| v.health(10, "gpt-x").latency_ms),
        Some(50.0)
    );
    assert_eq!(
        read(store, |v| v.health(10, "gpt-y").latency_ms),
        Some(900.0)
    );
    assert_eq!(read(store, |v| v.health(11, "gpt-x").latency_ms), None);
}

pub fn in_flight_guard_releases_on_drop(store: &dyn StateStore) {
    store.in_flight_acquire(10);
    store.in_flight_acquire(10);
    store.in_flight_acquire(11);
    assert_eq!(read(store, |v| v.in_flight(10)), 2);
    store.in_flight_release(10);
    assert_eq!(read(store, |v| v.in_flight(10)), 1);
    store.in_flight_release(10);
    // Releasing more than acquired never wraps around.
    store.in_flight_release(10);
    assert_eq!(read(store, |v| v.in_flight(10)), 0);
    assert_eq!(read(store, |v| v.in_flight(11)), 1);
}

/// The RAII guard needs an owned store; checked separately by each implementation's tests.
pub fn in_flight_guard_counts(store: std::sync::Arc<dyn StateStore>) {
    {
        let a = InFlightGuard::acquire(&store, 7);
        let _b = InFlightGuard::acquire(&store, 7);
        assert_eq!(read(store.as_ref(), |v| v.in_flight(7)), 2);
        // The guard names its channel, also in debug output.
        assert_eq!(a.channel(), 7);
        assert_eq!(format!("{a:?}"), "InFlightGuard { channel: 7 }");
    }
    assert_eq!(read(store.as_ref(), |v| v.in_flight(7)), 0);
}

pub fn sticky_binding_renews_and_rebinds(store: &dyn StateStore) {
    store.bind_sticky(1, "session-a", 5, 60_000, NOW);
    assert_eq!(
        read(store, |v| v.sticky(1, "session-a")),
        Some(StickyBinding {
            member_id: 5,
            expires_at: NOW + 60_000
        })
    );
    assert_eq!(read(store, |v| v.sticky(2, "session-a")), None);
    store.bind_sticky(1, "session-a", 5, 60_000, NOW + 30_000);
    assert_eq!(
        read(store, |v| v.sticky(1, "session-a")).map(|b| b.expires_at),
        Some(NOW + 90_000)
    );
    store.bind_sticky(1, "session-a", 6, 60_000, NOW + 31_000);
    assert_eq!(
        read(store, |v| v.sticky(1, "session-a")).map(|b| b.member_id),
        Some(6)
    );
    assert_eq!(store.dump(NOW + 31_000).sticky_bindings, 1);
}

pub fn sticky_capacity_evicts_earliest_expiry(store: &dyn StateStore) {
    // The earliest-expiring binding is created last, with the shortest TTL.
    for i in 0..MAX_STICKY_BINDINGS {
        store.bind_sticky(1, &format!("s{i}"), 1, 600_000 + i as u64, NOW);
    }
    store.bind_sticky(1, "short", 1, 1_000, NOW);
    assert_eq!(read(store, |v| v.sticky(1, "s0")), None);
    assert!(read(store, |v| v.sticky(1, "short")).is_some());
    store.bind_sticky(1, "another", 1, 600_000, NOW);
    assert_eq!(read(store, |v| v.sticky(1, "short")), None);
    assert!(read(store, |v| v.sticky(1, "s1")).is_some());
    assert_eq!(store.dump(NOW).sticky_bindings, MAX_STICKY_BINDINGS);
}

pub fn canary_promotes_after_clean_run(store: &dyn StateStore) {
    let canary = AttemptSuccess {
        canary: true,
        promote_after: 3,
        ..success(10.0)
    };
    assert!(!store.record_success(&canary, NOW).promoted);
    assert!(!store.record_success(&canary, NOW).promoted);
    // A failure in between restarts the count.
    store.record_failure(&failure(FailureKind::Retryable, None), &policy(), NOW);
    assert!(!store.record_success(&canary, NOW).promoted);
    assert!(!store.record_success(&canary, NOW).promoted);
    assert!(!read(store, |v| v.canary_promoted(1)));
    assert!(store.record_success(&canary, NOW).promoted);
    assert!(read(store, |v| v.canary_promoted(1)));
    assert!(!store.record_success(&canary, NOW).promoted);
    // `promote_after` 0: no count ever promotes.
    let never = AttemptSuccess {
        member: 2,
        canary: true,
        promote_after: 0,
        ..success(10.0)
    };
    for _ in 0..3 {
        assert!(!store.record_success(&never, NOW).promoted);
    }
    assert!(!read(store, |v| v.canary_promoted(2)));
    // The admin view lists each canary's count and whether it is promoted, in member order (a
    // promoted canary's count stops where it was promoted).
    assert_eq!(
        store.dump(NOW).canaries,
        vec![
            CanaryEntry {
                member_id: 1,
                successes: 3,
                promoted: true,
            },
            CanaryEntry {
                member_id: 2,
                successes: 3,
                promoted: false,
            },
        ]
    );
}

pub fn credential_disable_is_visible(store: &dyn StateStore) {
    store.disable_credential(42, "insufficient_quota", NOW);
    assert!(read(store, |v| v.credential_disabled(42)));
    assert!(!read(store, |v| v.credential_disabled(43)));
    let dump = store.dump(NOW);
    assert_eq!(dump.credentials_disabled.len(), 1);
    assert_eq!(dump.credentials_disabled[0].reason, "insufficient_quota");
}

pub fn credential_enable_clears_the_disable(store: &dyn StateStore) {
    store.disable_credential(42, "insufficient_quota", NOW);
    store.disable_credential(44, "invalid_api_key", NOW + 10);
    // A passed probe lifts the disable: no longer in the view, no longer in the dump.
    store.enable_credential(42, NOW + 5);
    assert!(!read(store, |v| v.credential_disabled(42)));
    let ids = |store: &dyn StateStore| -> Vec<_> {
        store
            .dump(NOW)
            .credentials_disabled
            .iter()
            .map(|c| c.credential_id)
            .collect()
    };
    assert_eq!(ids(store), vec![44]);
    // A disable newer than the probe (the key failed again since) stays.
    store.enable_credential(44, NOW + 5);
    assert!(read(store, |v| v.credential_disabled(44)));
    // Enabling a credential that is not disabled changes nothing.
    store.enable_credential(43, NOW + 5);
    assert!(!read(store, |v| v.credential_disabled(43)));
    assert_eq!(ids(store), vec![44]);
    // Once enabled, a new failure disables it again, with its own reason.
    store.disable_credential(42, "quota exceeded again", NOW + 20);
    assert!(read(store, |v| v.credential_disabled(42)));
    let dump = store.dump(NOW);
    assert_eq!(dump.credentials_disabled.len(), 2);
    assert_eq!(dump.credentials_disabled[0].credential_id, 42);
    assert_eq!(dump.credentials_disabled[0].reason, "quota exceeded again");
    assert_eq!(dump.credentials_disabled[0].at, NOW + 20);
}

pub fn reset_channel_closes_breaker_and_clears_members(store: &dyn StateStore) {
    let p = policy();
    store.trip_breaker(10, "invalid key", NOW);
    assert!(read(store, |v| v.breaker_open(10)));
    store.record_failure(&failure(FailureKind::Retryable, None), &p, NOW);
    store.reset_channel(10, &[1]);
    assert!(!read(store, |v| v.breaker_open(10)));
    assert_eq!(read(store, |v| v.cooldown_until(1)), None);
}

pub fn dump_lists_live_state_only(store: &dyn StateStore) {
    let p = policy();
    store.record_failure(&failure(FailureKind::Retryable, None), &p, NOW);
    store.in_flight_acquire(10);
    store.bind_sticky(1, "s", 1, 1_000, NOW);
    let dump = store.dump(NOW);
    assert_eq!(
        dump.cooldowns,
        vec![CooldownEntry {
            member_id: 1,
            until: NOW + 30_000
        }]
    );
    assert_eq!(
        dump.in_flight,
        vec![InFlightEntry {
            channel_id: 10,
            in_flight: 1
        }]
    );
    assert_eq!(dump.sticky_bindings, 1);
    assert_eq!(dump.health.len(), 1);
    // A cooldown is over at its end (cooling while now < until).
    assert_eq!(store.dump(NOW + 29_999).cooldowns.len(), 1);
    assert!(store.dump(NOW + 30_000).cooldowns.is_empty());
    let later = store.dump(NOW + 60_000);
    assert!(later.cooldowns.is_empty());
    assert_eq!(later.sticky_bindings, 0);
}

const WINDOW_MS: u64 = 60_000;

fn window(store: &dyn StateStore) -> Option<Recovering> {
    read(store, |v| v.recovering(10))
}

/// Channel 10 tripped at `NOW - 1000`, its member 1 cooling, then a probe passed at `NOW`.
fn tripped_then_recovering(store: &dyn StateStore) {
    let p = policy();
    store.record_failure(&failure(FailureKind::Retryable, None), &p, NOW - 1_000);
    store.trip_breaker(10, "invalid key", NOW - 1_000);
    store.begin_recovery(10, &[1], NOW, WINDOW_MS);
}

pub fn begin_recovery_closes_breaker_and_opens_the_window(store: &dyn StateStore) {
    tripped_then_recovering(store);
    assert!(!read(store, |v| v.breaker_open(10)));
    assert_eq!(read(store, |v| v.cooldown_until(1)), None);
    assert_eq!(
        window(store),
        Some(Recovering {
            since: NOW,
            until: NOW + WINDOW_MS
        })
    );
    let dump = store.dump(NOW + 1_000);
    assert_eq!(
        dump.recovering,
        vec![RecoveringEntry {
            channel_id: 10,
            since: NOW,
            until: NOW + WINDOW_MS
        }]
    );
    // The dump leaves a finished window out.
    assert!(store.dump(NOW + WINDOW_MS).recovering.is_empty());
}

pub fn failed_channel_attempt_while_recovering_trips_at_once(store: &dyn StateStore) {
    tripped_then_recovering(store);
    // The threshold is 3: one failure is enough while recovering.
    let effect = store.record_channel_failure(10, &policy(), NOW + 5_000);
    assert!(effect.tripped, "{effect:?}");
    assert_eq!(effect.consecutive_failures, 1);
    assert!(read(store, |v| v.breaker_open(10)));
    assert_eq!(window(store), None, "a trip ends the window");
    let dump = store.dump(NOW + 5_000);
    assert!(dump.recovering.is_empty());
    assert_eq!(dump.channels[0].tripped_at, Some(NOW + 5_000));
    assert_eq!(
        dump.channels[0].reason.as_deref(),
        Some(RECOVERING_TRIP_REASON)
    );
    // Already open: no second trip.
    assert!(
        !store
            .record_channel_failure(10, &policy(), NOW + 6_000)
            .tripped
    );
}

pub fn recovering_survives_successes_and_member_failures(store: &dyn StateStore) {
    tripped_then_recovering(store);
    store.record_success(&success(100.0), NOW + 1_000);
    store.record_failure(
        &failure(FailureKind::Rejected, None),
        &policy(),
        NOW + 2_000,
    );
    assert_eq!(window(store).map(|w| w.until), Some(NOW + WINDOW_MS));
    assert!(!read(store, |v| v.breaker_open(10)));
}

pub fn after_the_window_the_threshold_applies_again(store: &dyn StateStore) {
    tripped_then_recovering(store);
    let p = policy();
    let after = NOW + WINDOW_MS;
    let first = store.record_channel_failure(10, &p, after);
    assert!(!first.tripped, "the window is over: {first:?}");
    assert_eq!(window(store), None, "a failure after the window clears it");
    assert!(!store.record_channel_failure(10, &p, after + 1).tripped);
    assert!(store.record_channel_failure(10, &p, after + 2).tripped);
}

pub fn recovering_obeys_fault_protection(store: &dyn StateStore) {
    tripped_then_recovering(store);
    let off = FailurePolicy {
        fault_protection: false,
        ..policy()
    };
    assert!(!store.record_channel_failure(10, &off, NOW + 1_000).tripped);
    assert!(!read(store, |v| v.breaker_open(10)));
    assert!(window(store).is_some(), "the window stays");
    // A breaker threshold of 0 (off) does not stop the half-open rule.
    let no_threshold = FailurePolicy {
        breaker_threshold: 0,
        ..policy()
    };
    assert!(
        store
            .record_channel_failure(10, &no_threshold, NOW + 2_000)
            .tripped
    );
}

pub fn trip_and_reset_end_the_window(store: &dyn StateStore) {
    tripped_then_recovering(store);
    store.trip_breaker(10, "quota exceeded", NOW + 1_000);
    assert!(read(store, |v| v.breaker_open(10)));
    assert_eq!(window(store), None);
    store.begin_recovery(10, &[1], NOW + 2_000, WINDOW_MS);
    assert_eq!(window(store).map(|w| w.since), Some(NOW + 2_000));
    store.reset_channel(10, &[1]);
    assert_eq!(
        window(store),
        None,
        "an operator's reset is full weight at once"
    );
    assert!(store.dump(NOW + 3_000).recovering.is_empty());
}

pub fn begin_recovery_without_slow_start_is_a_reset(store: &dyn StateStore) {
    let p = policy();
    store.trip_breaker(10, "invalid key", NOW);
    store.begin_recovery(10, &[1], NOW + 1_000, 0);
    assert!(!read(store, |v| v.breaker_open(10)));
    assert_eq!(window(store), None);
    // An ordinary channel again: the threshold applies.
    assert!(!store.record_channel_failure(10, &p, NOW + 2_000).tripped);
}

/// After `align_health`, the dense layout the engine reads holds exactly what the hash lookup
/// returns, through successes and failures; a pair the table does not list stays out of it; a
/// new table replaces the old one.
fn aligned_health_layout_follows_every_write(store: &dyn StateStore) {
    let slots = Arc::new(HealthSlots::build([
        (10, "gpt-x"),
        (10, "gpt-y"),
        (11, "gpt-x"),
    ]));
    store.record_success(&success(400.0), NOW);
    store.align_health(&slots);
    let agrees = |store: &dyn StateStore, slots: &Arc<HealthSlots>| {
        read(store, |v| {
            let dense = v.dense_health(slots).map(<[_]>::to_vec);
            let hashed: Vec<_> = slots.keys().iter().map(|(c, m)| v.health(*c, m)).collect();
            (dense, hashed)
        })
    };
    let (dense, hashed) = agrees(store, &slots);
    assert_eq!(dense.as_deref(), Some(hashed.as_slice()));
    assert_eq!(hashed[0].latency_ms, Some(400.0));

    store.record_success(&success(100.0), NOW + 1);
    store.record_failure(&failure(FailureKind::Retryable, None), &policy(), NOW + 2);
    let other = AttemptSuccess {
        channel: 11,
        ..success(50.0)
    };
    store.record_success(&other, NOW + 3);
    // Not in the table: must not disturb any slot.
    let unlisted = AttemptSuccess {
        upstream_model: "gpt-z",
        ..success(9_000.0)
    };
    store.record_success(&unlisted, NOW + 4);
    let (dense, hashed) = agrees(store, &slots);
    assert_eq!(dense.as_deref(), Some(hashed.as_slice()));
    assert_eq!(hashed[1], switchyard_engine::HealthRecord::default());
    assert_eq!(hashed[2].latency_ms, Some(50.0));
    assert!(hashed[0].error_propensity > 0.0);

    // A newer snapshot's table replaces the layout; the old one is no longer served.
    let newer = Arc::new(HealthSlots::build([(11, "gpt-x"), (10, "gpt-z")]));
    store.align_health(&newer);
    assert!(!read(store, |v| v.dense_health(&slots).is_some()));
    let (dense, hashed) = agrees(store, &newer);
    assert_eq!(dense.as_deref(), Some(hashed.as_slice()));
    assert_eq!(hashed[1].latency_ms, Some(9_000.0));
}

fn channel_failures(store: &dyn StateStore, channel: ChannelId) -> u32 {
    store
        .dump(NOW)
        .channels
        .iter()
        .find(|c| c.channel_id == channel)
        .map_or(0, |c| c.consecutive_failures)
}

pub fn rejected_4xx_never_counts_toward_the_breaker(store: &dyn StateStore) {
    let p = policy();
    for n in 1..=5u32 {
        let now = NOW + u64::from(n);
        let reported = store.report_failure(&failure(FailureKind::Rejected, None), &p, true, now);
        // The member still fails (streak, cooldown); the channel does not.
        assert_eq!(reported.member.member_failures, n);
        assert!(reported.member.cooled_until.is_some());
        assert_eq!(reported.channel, None, "a 4xx counted toward the breaker");
    }
    assert_eq!(channel_failures(store, 10), 0);
    assert!(!read(store, |v| v.breaker_open(10)));
    // Every other kind counts.
    for kind in [
        FailureKind::Transport,
        FailureKind::Retryable,
        FailureKind::MemberSpecific,
        FailureKind::StreamBroken,
    ] {
        let reported = store.report_failure(&failure(kind, None), &p, true, NOW + 10);
        assert!(reported.channel.is_some(), "{kind:?} did not count");
    }
    assert_eq!(channel_failures(store, 10), 4);
    assert!(read(store, |v| v.breaker_open(10)));
}

pub fn a_channel_counts_at_most_once_per_request(store: &dyn StateStore) {
    let p = policy();
    let first = store.report_failure(&failure(FailureKind::Retryable, None), &p, true, NOW);
    assert_eq!(
        first.channel.map(|c| (c.consecutive_failures, c.tripped)),
        Some((1, false))
    );
    // The same request fails on the same channel again (another credential, a re-send):
    // the member's streak grows, the channel's count does not.
    for n in 2..=5u32 {
        let now = NOW + u64::from(n);
        let again = store.report_failure(&failure(FailureKind::Retryable, None), &p, false, now);
        assert_eq!(again.channel, None);
        assert_eq!(again.member.member_failures, n);
    }
    assert_eq!(channel_failures(store, 10), 1);
    assert!(!read(store, |v| v.breaker_open(10)));
}

pub fn keyword_ban_disables_the_credential_of_a_multi_key_channel(store: &dyn StateStore) {
    let ban = store.ban_keyword(10, 42, 2, "insufficient_quota", &policy(), NOW);
    assert_eq!(ban, KeywordBan::CredentialDisabled);
    assert!(read(store, |v| v.credential_disabled(42)));
    assert!(!read(store, |v| v.credential_disabled(43)));
    assert!(!read(store, |v| v.breaker_open(10)));
    let dump = store.dump(NOW);
    assert_eq!(dump.credentials_disabled.len(), 1);
    assert_eq!(dump.credentials_disabled[0].credential_id, 42);
    assert_eq!(dump.credentials_disabled[0].reason, "insufficient_quota");
    assert!(dump.channels.iter().all(|c| !c.breaker_open));
}

pub fn keyword_ban_trips_the_breaker_of_a_single_key_channel(store: &dyn StateStore) {
    let ban = store.ban_keyword(10, 42, 1, "invalid_api_key", &policy(), NOW);
    assert_eq!(ban, KeywordBan::BreakerTripped);
    assert!(read(store, |v| v.breaker_open(10)));
    assert!(!read(store, |v| v.credential_disabled(42)));
    let dump = store.dump(NOW);
    let channel = dump.channels.iter().find(|c| c.channel_id == 10);
    assert_eq!(
        channel.map(|c| (c.breaker_open, c.tripped_at, c.reason.as_deref())),
        Some((true, Some(NOW), Some("invalid_api_key")))
    );
    assert!(dump.credentials_disabled.is_empty());
}

pub fn keyword_ban_obeys_fault_protection(store: &dyn StateStore) {
    let off = FailurePolicy {
        fault_protection: false,
        ..policy()
    };
    assert_eq!(
        store.ban_keyword(10, 42, 2, "insufficient_quota", &off, NOW),
        KeywordBan::Ignored
    );
    assert_eq!(
        store.ban_keyword(11, 43, 1, "invalid_api_key", &off, NOW),
        KeywordBan::Ignored
    );
    assert!(!read(store, |v| v.credential_disabled(42)));
    assert!(!read(store, |v| v.breaker_open(11)));
    let dump = store.dump(NOW);
    assert!(dump.credentials_disabled.is_empty());
    assert!(dump.channels.iter().all(|c| !c.breaker_open));
}

fn limit(scope: ScopeKind, id: i64, metric: Metric, window: Window, value: u64) -> Limit {
    Limit {
        key: LimitKey {
            scope,
            scope_id: id,
            metric,
            window,
            rule: None,
        },
        value,
        mode: LimitMode::Hard,
    }
}

/// Takes `limits`; a refusal counts only if it persists once the background has settled.
fn take(
    store: &dyn StateStore,
    settle: &dyn Fn(),
    limits: &[Limit],
    tokens: u64,
    now: UnixMillis,
) -> Admission {
    let request = LimitRequest { limits, tokens };
    let first = store.limit_take(&request, now);
    if first.admitted() {
        return first;
    }
    settle();
    store.limit_take(&request, now)
}

/// The end of the minute holding [`NOW`] (2023-11-14T22:13:20Z).
const MINUTE_END: UnixMillis = NOW + 40_000;

pub fn limit_window_rolls_over(store: &dyn StateStore, settle: &dyn Fn()) {
    let limits = [limit(
        ScopeKind::Token,
        1,
        Metric::Requests,
        Window::Minute,
        3,
    )];
    for remaining in [2, 1, 0] {
        let a = take(store, settle, &limits, 0, NOW);
        assert!(a.admitted(), "within the limit: {a:?}");
        assert_eq!(
            a.requests.map(|h| (h.limit, h.remaining, h.reset_at)),
            Some((3, remaining, MINUTE_END))
        );
        assert_eq!(a.tokens, None, "no tokens limit, no tokens headers");
    }
    let refused = take(store, settle, &limits, 0, NOW + 1_000);
    assert_eq!(
        refused.refused,
        Some(Refusal {
            index: 0,
            retry_after_ms: 39_000
        }),
        "room again when the minute ends"
    );
    assert_eq!(refused.requests.map(|h| h.remaining), Some(0));
    let status = store.limit_status(&limits[0], NOW + 1_000);
    assert_eq!(
        (status.used, status.remaining, status.reset_at),
        (3, 0, Some(MINUTE_END)),
        "a refused request takes nothing"
    );
    // The next minute starts over.
    let next = take(store, settle, &limits, 0, MINUTE_END);
    assert!(next.admitted(), "{next:?}");
    assert_eq!(
        next.requests.map(|h| (h.remaining, h.reset_at)),
        Some((2, MINUTE_END + 60_000))
    );
}

pub fn several_limits_on_one_request(store: &dyn StateStore, settle: &dyn Fn()) {
    let limits = [
        limit(ScopeKind::Token, 1, Metric::Requests, Window::Minute, 5),
        limit(ScopeKind::Team, 2, Metric::Requests, Window::Minute, 2),
        limit(ScopeKind::Route, 3, Metric::Tokens, Window::Minute, 1_000),
    ];
    for _ in 0..2 {
        assert!(take(store, settle, &limits, 100, NOW).admitted());
    }
    // Headers of the tightest requests limit (the team's), and of the tokens limit.
    let refused = take(store, settle, &limits, 100, NOW);
    assert_eq!(
        refused.refused.map(|r| r.index),
        Some(1),
        "the team's limit"
    );
    assert_eq!(
        refused.requests.map(|h| (h.limit, h.remaining)),
        Some((2, 0))
    );
    assert_eq!(
        refused.tokens.map(|h| (h.limit, h.remaining)),
        Some((1_000, 800))
    );
    assert_eq!(
        store.limit_status(&limits[0], NOW).used,
        2,
        "the token's limit had room, but a refused request takes nothing from any limit"
    );
    assert_eq!(store.limit_status(&limits[2], NOW).used, 200);
    // Refused by two limits: Retry-After waits for both (the hour's end).
    let two = [
        limit(ScopeKind::Token, 7, Metric::Requests, Window::Minute, 1),
        limit(ScopeKind::Team, 8, Metric::Requests, Window::Hour, 1),
    ];
    assert!(take(store, settle, &two, 0, NOW).admitted());
    assert_eq!(
        take(store, settle, &two, 0, NOW).refused,
        Some(Refusal {
            index: 1,
            retry_after_ms: 2_800_000
        })
    );
}

pub fn soft_limit_reports_and_never_refuses(store: &dyn StateStore, settle: &dyn Fn()) {
    let mut soft = limit(ScopeKind::Team, 2, Metric::Requests, Window::Minute, 2);
    soft.mode = LimitMode::Soft;
    let limits = [
        limit(ScopeKind::Token, 1, Metric::Requests, Window::Minute, 100),
        soft,
    ];
    let mut seen = Vec::new();
    for _ in 0..4 {
        let a = take(store, settle, &limits, 0, NOW);
        assert!(a.admitted(), "a soft limit never refuses: {a:?}");
        seen.push((a.soft_over, a.soft_crossed));
    }
    assert_eq!(
        seen,
        [(0, 0), (0, 0), (0b10, 0b10), (0b10, 0)],
        "the third request crosses the soft limit; the fourth is beyond it"
    );
    assert_eq!(store.limit_status(&soft, NOW).used, 4);
}

pub fn tokens_are_estimated_then_settled(store: &dyn StateStore, settle: &dyn Fn()) {
    let limits = [limit(
        ScopeKind::Token,
        1,
        Metric::Tokens,
        Window::Minute,
        100,
    )];
    assert!(take(store, settle, &limits, 60, NOW).admitted());
    let refused = take(store, settle, &limits, 60, NOW);
    assert_eq!(
        refused.refused,
        Some(Refusal {
            index: 0,
            retry_after_ms: 40_000
        })
    );
    // The answer used 20 tokens, not 60: room for the next estimate.
    store.limit_settle(&limits, Metric::Tokens, -40, NOW, NOW);
    assert_eq!(store.limit_status(&limits[0], NOW).used, 20);
    let a = take(store, settle, &limits, 60, NOW);
    assert!(a.admitted());
    assert_eq!(a.tokens.map(|h| h.remaining), Some(20));
    // Another answer used more than its estimate: charged, beyond the limit.
    store.limit_settle(&limits, Metric::Tokens, 50, NOW, NOW);
    assert_eq!(store.limit_status(&limits[0], NOW).used, 130);
    assert!(!take(store, settle, &limits, 1, NOW).admitted());
    // Other metrics are left alone.
    store.limit_settle(&limits, Metric::Requests, -100, NOW, NOW);
    assert_eq!(store.limit_status(&limits[0], NOW).used, 130);
    // Corrections of a window that is over: more is charged to the current one, less is lost.
    store.limit_settle(&limits, Metric::Tokens, -30, NOW, MINUTE_END);
    store.limit_settle(&limits, Metric::Tokens, 7, NOW, MINUTE_END);
    assert_eq!(store.limit_status(&limits[0], MINUTE_END).used, 7);
}

pub fn spend_is_charged_after_and_refuses_once_spent(store: &dyn StateStore, settle: &dyn Fn()) {
    let limits = [limit(ScopeKind::Team, 4, Metric::Spend, Window::Day, 1_000)];
    let a = take(store, settle, &limits, 500, NOW);
    assert!(a.admitted());
    assert_eq!(
        (a.requests, a.tokens),
        (None, None),
        "no rate headers for spend"
    );
    assert_eq!(
        store.limit_status(&limits[0], NOW).used,
        0,
        "spend is charged after the request"
    );
    store.limit_settle(&limits, Metric::Spend, 999, NOW, NOW);
    assert!(
        take(store, settle, &limits, 0, NOW).admitted(),
        "1 µUSD left"
    );
    store.limit_settle(&limits, Metric::Spend, 1, NOW, NOW);
    let status = store.limit_status(&limits[0], NOW);
    assert_eq!(
        (status.used, status.remaining, status.reset_at),
        (1_000, 0, Some(NOW + 6_400_000))
    );
    assert_eq!(
        take(store, settle, &limits, 0, NOW).refused,
        Some(Refusal {
            index: 0,
            retry_after_ms: 6_400_000
        }),
        "spent: room again at the next UTC midnight"
    );
    assert!(take(store, settle, &limits, 0, NOW + 6_400_000).admitted());
}

pub fn spend_month_is_the_utc_calendar_month(store: &dyn StateStore, settle: &dyn Fn()) {
    // 2024-02-29T23:59:59Z, a leap year's February.
    let feb_end: UnixMillis = 1_709_251_199_000;
    let limits = [limit(ScopeKind::Route, 5, Metric::Spend, Window::Month, 10)];
    assert!(take(store, settle, &limits, 0, feb_end).admitted());
    store.limit_settle(&limits, Metric::Spend, 10, feb_end, feb_end);
    let refused = take(store, settle, &limits, 0, feb_end);
    assert_eq!(
        refused.refused.map(|r| r.retry_after_ms),
        Some(1_000),
        "March starts in a second"
    );
    let march: UnixMillis = 1_709_251_200_000;
    assert!(take(store, settle, &limits, 0, march).admitted());
    assert_eq!(
        store.limit_status(&limits[0], march).reset_at,
        Some(1_711_929_600_000),
        "2024-04-01T00:00:00Z"
    );
}

pub fn week_is_the_iso_week(store: &dyn StateStore, settle: &dyn Fn()) {
    // Sunday 2023-11-19T23:59:59Z, the last second of an ISO week.
    let sunday_end: UnixMillis = 1_700_438_399_000;
    let limits = [limit(
        ScopeKind::Token,
        8,
        Metric::Requests,
        Window::Week,
        2,
    )];
    // Tuesday of the same week: counted with Sunday.
    assert!(take(store, settle, &limits, 0, sunday_end - 5 * DAY).admitted());
    assert!(take(store, settle, &limits, 0, sunday_end).admitted());
    let refused = take(store, settle, &limits, 0, sunday_end);
    assert_eq!(
        refused.refused.map(|r| r.retry_after_ms),
        Some(1_000),
        "Monday starts in a second"
    );
    assert_eq!(
        refused.requests.map(|h| (h.limit, h.remaining, h.reset_at)),
        Some((2, 0, sunday_end + 1_000))
    );
    assert!(take(store, settle, &limits, 0, sunday_end + 1_000).admitted());
}

const DAY: UnixMillis = 86_400_000;

/// A 7-day rolling budget: day buckets summed over the current UTC day and the six before it.
pub fn rolling_window_counts_the_last_days(store: &dyn StateStore, settle: &dyn Fn()) {
    // Noon of day 0, 2023-11-14.
    let day0: UnixMillis = 1_699_963_200_000;
    let limits = [limit(
        ScopeKind::Team,
        9,
        Metric::Spend,
        Window::Rolling(7),
        100,
    )];
    let spend = |day: u64, amount: i64| {
        let at = day0 + day * DAY;
        assert!(
            take(store, settle, &limits, 0, at).admitted(),
            "day {day} has room"
        );
        store.limit_settle(&limits, Metric::Spend, amount, at, at);
        settle();
    };
    spend(0, 40);
    for day in 1..=5 {
        spend(day, 5);
    }
    spend(6, 35);
    let day6 = day0 + 6 * DAY;
    let status = store.limit_status(&limits[0], day6);
    assert_eq!((status.used, status.remaining), (100, 0), "seven days: 100");
    assert_eq!(
        status.reset_at,
        Some(day6 + DAY / 2),
        "the next UTC midnight"
    );
    assert_eq!(
        take(store, settle, &limits, 0, day6).refused,
        Some(Refusal {
            index: 0,
            retry_after_ms: DAY / 2
        }),
        "the seventh day is full: room when the oldest day leaves"
    );
    // Day 7: day 0 (40) left the window; days 1 to 6 hold 60.
    let day7 = day6 + DAY;
    assert!(take(store, settle, &limits, 0, day7).admitted());
    settle();
    let status = store.limit_status(&limits[0], day7);
    assert_eq!((status.used, status.remaining), (60, 40));
    store.limit_settle(&limits, Metric::Spend, 40, day7, day7);
    settle();
    assert!(
        !take(store, settle, &limits, 0, day7).admitted(),
        "full again"
    );
    // Day 8: day 1 (5) left.
    let day8 = day7 + DAY;
    assert!(take(store, settle, &limits, 0, day8).admitted());
    settle();
    assert_eq!(store.limit_status(&limits[0], day8).used, 95);
    // Days later, every earlier day has left: the whole budget again.
    let later = day8 + 7 * DAY;
    assert!(take(store, settle, &limits, 0, later).admitted());
    settle();
    assert_eq!(store.limit_status(&limits[0], later).used, 0);
}

pub fn concurrency_slot_is_released(store: &dyn StateStore, settle: &dyn Fn()) {
    let limits = [limit(
        ScopeKind::Token,
        1,
        Metric::Concurrent,
        Window::None,
        2,
    )];
    for _ in 0..2 {
        let a = take(store, settle, &limits, 0, NOW);
        assert!(a.admitted());
        assert_eq!((a.requests, a.tokens), (None, None));
    }
    assert_eq!(
        take(store, settle, &limits, 0, NOW).refused,
        Some(Refusal {
            index: 0,
            retry_after_ms: RETRY_SOON_MS
        }),
        "a slot may free up any time"
    );
    let status = store.limit_status(&limits[0], NOW);
    assert_eq!(
        (status.used, status.remaining, status.reset_at),
        (2, 0, None)
    );
    store.limit_release(&limits);
    assert_eq!(store.limit_status(&limits[0], NOW).used, 1);
    assert!(take(store, settle, &limits, 0, NOW + 1).admitted());
    // A release of a limit never taken changes nothing.
    let other = [limit(
        ScopeKind::Token,
        9,
        Metric::Concurrent,
        Window::None,
        1,
    )];
    store.limit_release(&other);
    assert!(take(store, settle, &other, 0, NOW).admitted());
    assert!(!take(store, settle, &other, 0, NOW).admitted());
}

/// An upstream limit is checked before a member is picked: the check takes nothing, soft limits
/// never lack room, and a full hard limit does until its window ends.
pub fn room_is_checked_without_taking(store: &dyn StateStore, settle: &dyn Fn()) {
    let limits = [
        limit(ScopeKind::Channel, 4, Metric::Requests, Window::Minute, 2),
        limit(ScopeKind::Member, 5, Metric::Tokens, Window::Minute, 500),
    ];
    let room = |tokens: u64, now: UnixMillis| {
        let request = LimitRequest {
            limits: &limits,
            tokens,
        };
        if store.limit_room(&request, now).is_ok() {
            return true;
        }
        settle();
        store.limit_room(&request, now).is_ok()
    };
    for _ in 0..5 {
        assert!(room(100, NOW), "checking takes nothing");
    }
    assert_eq!(store.limit_status(&limits[0], NOW).used, 0);
    assert!(!room(501, NOW), "more tokens than the limit holds");
    assert!(take(store, settle, &limits, 100, NOW).admitted());
    assert!(take(store, settle, &limits, 100, NOW).admitted());
    assert!(!room(1, NOW), "both requests of the minute are taken");
    assert!(room(1, MINUTE_END), "the next minute has room again");
    let soft = [Limit {
        mode: LimitMode::Soft,
        ..limit(ScopeKind::Member, 6, Metric::Requests, Window::Minute, 1)
    }];
    let request = LimitRequest {
        limits: &soft,
        tokens: 0,
    };
    for _ in 0..3 {
        assert!(store.limit_take(&request, NOW).admitted());
    }
    assert!(
        store.limit_room(&request, NOW).is_ok(),
        "a soft limit never refuses"
    );
}

/// A limit's value changed while its window is open (an operator's patch reaching the proxy in
/// a new snapshot) binds from the next request, for a day, a month and a concurrency limit alike
/// — not only once the window ends (or, for a concurrency limit, which has no window, never):
/// raised, the new room is there at once; lowered below what was taken, the next request is
/// refused; the status reports against the new value.
pub fn a_changed_value_binds_within_the_window(store: &dyn StateStore, settle: &dyn Fn()) {
    for (id, metric, window) in [
        (21, Metric::Requests, Window::Day),
        (22, Metric::Requests, Window::Month),
        (23, Metric::Concurrent, Window::None),
    ] {
        let at = |value| [limit(ScopeKind::Token, id, metric, window, value)];
        let what = format!("{metric:?} per {window:?}");
        for _ in 0..2 {
            assert!(take(store, settle, &at(2), 0, NOW).admitted(), "{what}");
        }
        assert!(
            !take(store, settle, &at(2), 0, NOW).admitted(),
            "{what}: full"
        );
        // Raised from 2 to 4 mid-window: two more at once.
        for _ in 0..2 {
            let a = take(store, settle, &at(4), 0, NOW + 1);
            assert!(a.admitted(), "{what}: raised to 4, refused: {a:?}");
        }
        assert!(
            !take(store, settle, &at(4), 0, NOW + 1).admitted(),
            "{what}: full at 4"
        );
        // Lowered from 4 to 1 with 4 taken: refused, and reported against 1.
        let a = take(store, settle, &at(1), 0, NOW + 2);
        assert!(!a.admitted(), "{what}: lowered to 1, admitted: {a:?}");
        let status = store.limit_status(&at(1)[0], NOW + 2);
        assert_eq!(status.remaining, 0, "{what}: {status:?}");
        if metric == Metric::Requests {
            assert_eq!(a.requests.map(|h| h.limit), Some(1), "{what}: {a:?}");
        }
    }
}

/// Indexes and claims: a put is listed until it expires, a second put of a member replaces
/// it, a removal removes only its member, indexes are apart, a claim is won once while it
/// lives and again after it expired, and what is over the size bound is refused.
pub async fn records(store: &dyn StateStore) {
    use crate::records::{IndexEntry, RecordError, MAX_RECORD_BYTES};
    let entry = |member: &str, value: &str, expires_at: UnixMillis| IndexEntry {
        member: member.to_owned(),
        value: value.to_owned(),
        expires_at,
    };
    let list = |index: &'static str, now: UnixMillis| store.index_list(index, now);
    assert_eq!(list("a", NOW).await, Ok(vec![]));
    assert_eq!(
        store
            .index_put("a", entry("f1", "one", NOW + 1_000), NOW)
            .await,
        Ok(())
    );
    assert_eq!(
        store
            .index_put("a", entry("f2", "two", NOW + 5_000), NOW)
            .await,
        Ok(())
    );
    assert_eq!(
        store
            .index_put("b", entry("f1", "other", NOW + 5_000), NOW)
            .await,
        Ok(())
    );
    assert_eq!(
        list("a", NOW).await,
        Ok(vec![
            entry("f1", "one", NOW + 1_000),
            entry("f2", "two", NOW + 5_000)
        ])
    );
    assert_eq!(
        store
            .index_put("a", entry("f1", "ONE", NOW + 2_000), NOW)
            .await,
        Ok(())
    );
    assert_eq!(
        list("a", NOW + 1_500).await,
        Ok(vec![
            entry("f1", "ONE", NOW + 2_000),
            entry("f2", "two", NOW + 5_000)
        ]),
        "a second put replaces the member's value and expiry"
    );
    assert_eq!(
        list("a", NOW + 2_000).await,
        Ok(vec![entry("f2", "two", NOW + 5_000)]),
        "an entry expiring at now is gone"
    );
    assert_eq!(
        store
            .index_put("a", entry("f3", "three", NOW + 5_000), NOW)
            .await,
        Ok(())
    );
    assert_eq!(store.index_remove("a", "f2").await, Ok(()));
    assert_eq!(store.index_remove("a", "missing").await, Ok(()));
    assert_eq!(
        list("a", NOW + 2_000).await,
        Ok(vec![entry("f3", "three", NOW + 5_000)]),
        "a removal removes its member only"
    );
    assert_eq!(
        list("b", NOW).await,
        Ok(vec![entry("f1", "other", NOW + 5_000)])
    );

    assert_eq!(store.claim_once("k", NOW + 1_000, NOW).await, Ok(true));
    assert_eq!(
        store.claim_once("k", NOW + 9_000, NOW + 500).await,
        Ok(false)
    );
    assert_eq!(store.claim_once("k2", NOW + 1_000, NOW).await, Ok(true));
    assert_eq!(
        store.claim_once("k", NOW + 3_000, NOW + 1_000).await,
        Ok(true),
        "an expired claim can be won again"
    );

    // The bound is 16 KiB, taken at exactly that size.
    let at_bound = "x".repeat(16 * 1024);
    assert_eq!(MAX_RECORD_BYTES, at_bound.len());
    assert_eq!(
        store
            .index_put("c", entry(&at_bound, &at_bound, NOW + 1_000), NOW)
            .await,
        Ok(()),
        "a member and a value of exactly the bound are taken"
    );
    assert_eq!(
        list("c", NOW).await,
        Ok(vec![entry(&at_bound, &at_bound, NOW + 1_000)])
    );
    assert_eq!(
        store.claim_once(&at_bound, NOW + 1_000, NOW).await,
        Ok(true)
    );
    let big = "x".repeat(MAX_RECORD_BYTES + 1);
    assert_eq!(
        store
            .index_put("a", entry("f3", &big, NOW + 1_000), NOW)
            .await,
        Err(RecordError::TooLarge)
    );
    assert_eq!(
        store.claim_once(&big, NOW + 1_000, NOW).await,
        Err(RecordError::TooLarge)
    );
}
