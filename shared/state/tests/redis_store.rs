//! RedisStore against a real Redis: the conformance suite, Lua/Rust formula agreement, fleet
//! propagation between several stores, in-flight leases, fail-open and reconnect.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use switchyard_engine::HealthRecord;
use switchyard_state::conformance::{self, CHECK_NOW};
use switchyard_state::*;

fn policy(threshold: u32) -> FailurePolicy {
    FailurePolicy {
        fault_protection: true,
        cooldown_ms: 30_000,
        breaker_threshold: threshold,
    }
}

/// Runs every conformance check on a fresh RedisStore, then checks that what reached Redis is
/// what the view holds: a second store on the same prefix, resynced from Redis alone, must show
/// the very same dump (so the Lua scripts and the Rust code agree, floats included).
fn conformance_against(url: &str, tag: &str) {
    let rt = runtime();
    let _guard = rt.enter();
    for (name, check) in conformance::checks() {
        let prefix = unique_prefix(tag);
        let store = start(url, &prefix);
        eprintln!("conformance ({tag}): {name}");
        check(&store);
        assert!(
            rt.block_on(store.wait_flushed(Duration::from_secs(20))),
            "{name}: writes never reached Redis"
        );
        let replica = start(url, &prefix);
        assert!(rt.block_on(replica.wait_resynced(1, Duration::from_secs(10))));
        // In-flight leases are refreshed on their own clock: allow a few resyncs to catch up.
        wait_until(Duration::from_secs(3), || {
            replica.dump(CHECK_NOW) == store.dump(CHECK_NOW)
        });
        assert_eq!(
            replica.dump(CHECK_NOW),
            store.dump(CHECK_NOW),
            "{name}: Redis disagrees with the local view"
        );
        assert_eq!(store.stats().redis_errors_total, 0, "{name}");
        drop(replica);
        drop(store);
        cleanup(url, &prefix);
    }
    let store: Arc<dyn StateStore> = Arc::new(start(url, &unique_prefix(tag)));
    conformance::in_flight_guard_counts(store);
    // The limit checks, on a store that is connected (it then admits from allowances claimed
    // in Redis, not from its own counts).
    for (name, check) in conformance::limit_checks() {
        let prefix = unique_prefix(tag);
        let store = start(url, &prefix);
        assert!(rt.block_on(store.wait_resynced(1, Duration::from_secs(10))));
        assert!(store.stats().connected);
        eprintln!("conformance ({tag}): {name}");
        let settle = || {
            assert!(
                rt.block_on(store.wait_limits_settled(Duration::from_secs(10))),
                "{name}: limit claims never settled"
            );
        };
        check(&store, &settle);
        assert_eq!(store.stats().redis_errors_total, 0, "{name}");
        drop(store);
        cleanup(url, &prefix);
    }
}

#[test]
fn redis_store_passes_the_conformance_suite() {
    let url = redis_url();
    conformance_against(&url, "conf");
}

#[test]
fn redis_cluster_passes_the_conformance_suite() {
    let cluster = RedisCluster::start();
    conformance_against(&cluster.url(), "cluster");
}

#[test]
fn lua_health_formulas_match_the_engine() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("formula");
    let store = start(&url, &prefix);
    let mut expected = HealthRecord::default();
    // A deterministic mix of odd latencies, successes and failures.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(3) {
            let f = AttemptFailure {
                member: 1,
                channel: 2,
                upstream_model: "m",
                kind: FailureKind::Retryable,
                retry_after_ms: None,
            };
            store.record_failure(&f, &policy(0), 1_000 + i);
            expected = expected.on_failure();
        } else {
            let latency = (x % 100_000) as f64 / 7.0;
            let s = AttemptSuccess {
                member: 1,
                channel: 2,
                upstream_model: "m",
                latency_ms: latency,
                canary: false,
                promote_after: 0,
            };
            store.record_success(&s, 1_000 + i);
            expected = expected.on_success(latency);
        }
    }
    assert!(rt.block_on(store.wait_flushed(Duration::from_secs(10))));
    let mut con = connection(&url);
    let raw: String = redis::cmd("HGET")
        .arg(format!("{{sy:{prefix}}}:health"))
        .arg("2:m")
        .query(&mut con)
        .unwrap();
    let parts: Vec<&str> = raw.split('|').collect();
    let latency: f64 = parts[1].parse().unwrap();
    let propensity: f64 = parts[2].parse().unwrap();
    assert_eq!(latency.to_bits(), expected.latency_ms.unwrap().to_bits());
    assert_eq!(propensity.to_bits(), expected.error_propensity.to_bits());
    assert_eq!(read(&store, |v| v.health(2, "m")), expected);
    drop(store);
    cleanup(&url, &prefix);
}

/// The same agreement when the writer folds successes: writes queued while Redis is away reach
/// it in full batches, where each member's successes on one (channel, model) become one script
/// call with every latency sample. The stored values must still be those of the Rust rules
/// applied one write at a time, bit for bit, with failures, a channel failure, canary promotion
/// and late-replayed successes between and inside the runs.
#[test]
fn lua_health_formulas_match_the_engine_when_successes_are_folded() {
    let rt = runtime();
    let _guard = rt.enter();
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let prefix = unique_prefix("fold");
    // Nothing listens yet: every write below waits in the queue.
    let a = start(&url, &prefix);
    let models = ["m", "n", "c"];
    let mut expected = [HealthRecord::default(); 3];
    let mut writes = 0u64;
    let success =
        |member: i64, model: &'static str, latency_ms: f64, canary: bool| AttemptSuccess {
            member,
            channel: 2,
            upstream_model: model,
            latency_ms,
            canary,
            promote_after: if canary { 5 } else { 0 },
        };
    let failure = AttemptFailure {
        member: 1,
        channel: 2,
        upstream_model: "m",
        kind: FailureKind::Retryable,
        retry_after_ms: None,
    };
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut canaries = 0;
    for i in 0..700u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let latency = (x % 100_000) as f64 / 7.0;
        let now = 1_000 + i;
        if i % 97 == 50 {
            a.record_failure(&failure, &policy(0), now);
            expected[0] = expected[0].on_failure();
        } else if i == 300 {
            // A channel record: the successes after it zero its streak.
            a.record_channel_failure(2, &policy(3), now);
        } else if i % 3 == 0 {
            a.record_success(&success(2, "n", latency, false), now);
            expected[1] = expected[1].on_success(latency);
        } else if i % 50 == 7 && canaries < 7 {
            canaries += 1;
            a.record_success(&success(3, "c", latency, true), now);
            expected[2] = expected[2].on_success(latency);
        } else {
            a.record_success(&success(1, "m", latency, false), now);
            expected[0] = expected[0].on_success(latency);
        }
        writes += 1;
    }
    // A last failure, then two successes stamped before it (replayed late): its cooldown stays.
    a.record_failure(&failure, &policy(0), 5_000);
    expected[0] = expected[0].on_failure();
    for now in [4_000, 4_500] {
        a.record_success(&success(1, "m", 12.5, false), now);
        expected[0] = expected[0].on_success(12.5);
    }
    writes += 3;
    assert_eq!(a.stats().scripts_total, 0, "Redis is not up yet");

    let _server = RedisServer::start(port, &[]);
    assert!(rt.block_on(a.wait_flushed(Duration::from_secs(20))));
    let scripts = a.stats().scripts_total;
    assert!(
        scripts > 0 && scripts * 4 < writes,
        "{writes} queued writes ran as {scripts} scripts: successes were not folded"
    );
    let mut con = connection(&url);
    for (model, want) in models.iter().zip(&expected) {
        let raw: String = redis::cmd("HGET")
            .arg(format!("{{sy:{prefix}}}:health"))
            .arg(format!("2:{model}"))
            .query(&mut con)
            .unwrap();
        let parts: Vec<&str> = raw.split('|').collect();
        let latency: f64 = parts[1].parse().unwrap();
        let propensity: f64 = parts[2].parse().unwrap();
        assert_eq!(
            latency.to_bits(),
            want.latency_ms.unwrap().to_bits(),
            "{model}"
        );
        assert_eq!(
            propensity.to_bits(),
            want.error_propensity.to_bits(),
            "{model}"
        );
    }
    // Another proxy, from Redis alone, sees the same state as the writer's view.
    let b = start(&url, &prefix);
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(5))));
    for (model, want) in models.iter().zip(&expected) {
        assert_eq!(read(&b, |v| v.health(2, model)), *want, "{model}");
    }
    assert_eq!(read(&b, |v| v.cooldown_until(1)), Some(35_000));
    assert!(
        read(&b, |v| v.canary_promoted(3)),
        "5 of 7 canary successes promote"
    );
    let dump = b.dump(CHECK_NOW);
    let channel = dump.channels.iter().find(|c| c.channel_id == 2);
    assert!(
        channel.is_none_or(|c| c.consecutive_failures == 0),
        "successes after the channel failure zero its streak: {channel:?}"
    );
    assert_eq!(dump, a.dump(CHECK_NOW));
    assert!(a.stats().redis_errors_total > 0, "Redis was down at first");
    drop((a, b));
}

#[test]
fn cooldown_propagates_to_other_proxies_fast() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("propagate");
    let a = start(&url, &prefix);
    // B resyncs once at start and then only every 60 s: within the bound below, only the push
    // path (A's notification) can bring it a cooldown.
    let mut slow = common::config(&url, &prefix);
    slow.resync_every = Duration::from_secs(60);
    let b = RedisStore::start(slow).unwrap();
    assert!(rt.block_on(a.wait_resynced(1, Duration::from_secs(5))));
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(5))));
    let mut delays = Vec::new();
    for member in 1..=20 {
        let until = now_ms() + 60_000;
        a.extend_cooldown(member, until);
        let took = wait_until(Duration::from_secs(2), || {
            read(&b, |v| v.cooldown_until(member)) == Some(until)
        })
        .expect("cooldown never reached the other proxy");
        delays.push(took);
        std::thread::sleep(Duration::from_millis(5));
    }
    delays.sort();
    let p50 = delays[delays.len() / 2];
    let max = delays[delays.len() - 1];
    eprintln!("cooldown propagation A->B: p50 {p50:?}, max {max:?} (bound 100 ms)");
    // The bound is 100 ms; asserted with a wide margin for loaded CI machines (still far below B's
    // 60 s resync, so a broken push path fails it); the figure is reported.
    assert!(max < Duration::from_secs(1), "propagation took {max:?}");
    drop((a, b));
    cleanup(&url, &prefix);
}

#[test]
fn a_cooldown_is_sent_at_once_while_successes_wait_for_the_linger() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("urgent");
    // A lets writes gather for a minute; B resyncs only every minute: within the waits below,
    // only a write A sends without lingering, and B hears by notification, reaches B.
    let mut lingering = common::config(&url, &prefix);
    lingering.flush_linger = Duration::from_secs(60);
    let a = RedisStore::start(lingering).unwrap();
    let mut slow = common::config(&url, &prefix);
    slow.resync_every = Duration::from_secs(60);
    let b = RedisStore::start(slow).unwrap();
    assert!(rt.block_on(a.wait_resynced(1, Duration::from_secs(5))));
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(5))));

    // A success only changes the odds: it waits for the linger.
    a.record_success(&one_success(1), now_ms());
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        a.stats().queued_writes,
        1,
        "the success was sent before its linger"
    );

    // A cooldown changes who may be chosen: it ends the linger begun for the success and goes
    // at once, the success with it.
    let until = now_ms() + 60_000;
    a.extend_cooldown(2, until);
    wait_until(Duration::from_secs(10), || {
        read(&b, |v| v.cooldown_until(2)) == Some(until)
    })
    .expect("the cooldown waited for the linger");
    assert!(wait_until(Duration::from_secs(5), || a.stats().queued_writes == 0).is_some());

    // A failure queued alone is sent at once too (its signal ends the linger it begins).
    a.record_failure(
        &one_failure(4, FailureKind::Retryable),
        &policy(1),
        now_ms(),
    );
    wait_until(Duration::from_secs(10), || {
        read(&b, |v| v.cooldown_until(4)).is_some()
    })
    .expect("the failure waited for the linger");
    drop((a, b));
    cleanup(&url, &prefix);
}

#[test]
fn credential_enable_propagates_to_other_proxies_fast() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("cred-enable");
    // B resyncs rarely: what it learns within the bound comes from the notification.
    let a = start(&url, &prefix);
    let mut slow = common::config(&url, &prefix);
    slow.resync_every = Duration::from_secs(60);
    let b = RedisStore::start(slow).unwrap();
    assert!(rt.block_on(a.wait_resynced(1, Duration::from_secs(5))));
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(5))));
    let now = now_ms();
    a.disable_credential(7, "insufficient_quota", now);
    wait_until(Duration::from_secs(2), || {
        read(&b, |v| v.credential_disabled(7))
    })
    .expect("the disable never reached the other proxy");
    // The control plane (a third store) lifts it after a passed probe.
    let control = start(&url, &prefix);
    assert!(rt.block_on(control.wait_resynced(1, Duration::from_secs(5))));
    assert!(read(&control, |v| v.credential_disabled(7)));
    control.enable_credential(7, now + 1);
    assert!(!read(&control, |v| v.credential_disabled(7)));
    for (name, store) in [("A", &a), ("B", &b)] {
        let took = wait_until(Duration::from_secs(1), || {
            !read(store, |v| v.credential_disabled(7))
        });
        assert!(
            took.is_some(),
            "proxy {name} still has the credential disabled"
        );
        assert!(store.dump(now).credentials_disabled.is_empty());
    }
    assert!(rt.block_on(control.wait_flushed(Duration::from_secs(5))));
    // And Redis itself no longer holds it: a fresh store starts without it.
    let fresh = start(&url, &prefix);
    assert!(rt.block_on(fresh.wait_resynced(1, Duration::from_secs(5))));
    assert!(fresh.dump(now).credentials_disabled.is_empty());
    drop((a, b, control, fresh));
    cleanup(&url, &prefix);
}

#[test]
fn breaker_trips_fleet_wide_from_failures_spread_over_proxies() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("breaker");
    let stores: Vec<RedisStore> = (0..3).map(|_| start(&url, &prefix)).collect();
    for s in &stores {
        assert!(rt.block_on(s.wait_resynced(1, Duration::from_secs(5))));
    }
    let p = policy(5);
    let now = now_ms();
    // 2 + 2 + 1: each proxy alone stays below the threshold of 5.
    for (store, n) in stores.iter().zip([2, 2, 1]) {
        for _ in 0..n {
            store.record_channel_failure(9, &p, now);
        }
        assert!(rt.block_on(store.wait_flushed(Duration::from_secs(5))));
    }
    for (i, s) in stores.iter().enumerate() {
        let took = wait_until(Duration::from_secs(2), || read(s, |v| v.breaker_open(9)));
        assert!(took.is_some(), "proxy {i} never saw the breaker open");
    }
    drop(stores);
    cleanup(&url, &prefix);
}

#[test]
fn sticky_binding_is_shared() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("sticky");
    let a = start(&url, &prefix);
    let b = start(&url, &prefix);
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(5))));
    let now = now_ms();
    a.bind_sticky(3, "session-1", 42, 60_000, now);
    let took = wait_until(Duration::from_secs(2), || {
        read(&b, |v| v.sticky(3, "session-1")).map(|s| s.member_id) == Some(42)
    });
    assert!(took.is_some(), "B never saw A's sticky binding");
    // A proxy started later loads the bindings at its first resync.
    let c = start(&url, &prefix);
    assert!(rt.block_on(c.wait_resynced(1, Duration::from_secs(5))));
    assert_eq!(
        read(&c, |v| v.sticky(3, "session-1")).map(|s| s.member_id),
        Some(42)
    );
    drop((a, b, c));
    cleanup(&url, &prefix);
}

/// Redis keeps no more bindings than a proxy's view: a new binding past the capacity removes
/// the earliest-expiring ones there too, so a proxy resyncing later holds the same ones.
#[test]
fn redis_holds_no_more_sticky_bindings_than_a_view() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("sticky-cap");
    let store = start(&url, &prefix);
    let now = now_ms();
    for i in 0..MAX_STICKY_BINDINGS + 3 {
        store.bind_sticky(1, &format!("s{i}"), 1, 600_000 + i as u64, now);
    }
    assert!(rt.block_on(store.wait_flushed(Duration::from_secs(20))));
    let mut con = connection(&url);
    let held: usize = redis::cmd("HLEN")
        .arg(format!("{{sy:{prefix}}}:sticky"))
        .query(&mut con)
        .unwrap();
    assert_eq!(held, MAX_STICKY_BINDINGS);
    let earliest: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{{sy:{prefix}}}:sticky_exp"))
        .arg(0)
        .arg(0)
        .query(&mut con)
        .unwrap();
    assert_eq!(earliest, ["1:s3"]);
    let later = start(&url, &prefix);
    assert!(rt.block_on(later.wait_resynced(1, Duration::from_secs(5))));
    assert_eq!(read(&later, |v| v.sticky(1, "s2")), None);
    assert!(read(&later, |v| v.sticky(1, "s3")).is_some());
    drop((store, later));
    cleanup(&url, &prefix);
}

#[test]
fn in_flight_is_fleet_wide_and_leases_expire() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("inflight");
    let a = start(&url, &prefix);
    let b = start(&url, &prefix);
    let c = start(&url, &prefix);
    a.in_flight_acquire(7);
    a.in_flight_acquire(7);
    b.in_flight_acquire(7);
    let seen = wait_until(Duration::from_secs(3), || read(&c, |v| v.in_flight(7)) == 3);
    assert!(seen.is_some(), "C sees {}", read(&c, |v| v.in_flight(7)));
    assert_eq!(c.dump(now_ms()).in_flight[0].in_flight, 3);
    // A dies without releasing (no graceful shutdown): its lease expires.
    drop(a);
    let gone = wait_until(Duration::from_secs(5), || read(&c, |v| v.in_flight(7)) == 1);
    assert!(gone.is_some(), "A's lease never expired");
    b.in_flight_release(7);
    let zero = wait_until(Duration::from_secs(3), || read(&c, |v| v.in_flight(7)) == 0);
    assert!(zero.is_some());
    drop((b, c));
    cleanup(&url, &prefix);
}

#[test]
fn unreachable_redis_fails_open_and_reconciles_on_return() {
    let rt = runtime();
    let _guard = rt.enter();
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    // Nothing listens yet: the store serves from its view and counts errors.
    let a = start(&url, "failopen");
    let now = now_ms();
    a.extend_cooldown(1, now + 60_000);
    let f = FailurePolicy {
        fault_protection: true,
        cooldown_ms: 1_000,
        breaker_threshold: 2,
    };
    assert!(!a.record_channel_failure(5, &f, now).tripped);
    assert!(a.record_channel_failure(5, &f, now).tripped);
    assert_eq!(read(&a, |v| v.cooldown_until(1)), Some(now + 60_000));
    assert!(read(&a, |v| v.breaker_open(5)));
    assert!(wait_until(Duration::from_secs(3), || a.stats().redis_errors_total > 0).is_some());
    assert!(!a.stats().connected);
    // Redis comes up: the queued writes are pushed; another proxy sees them.
    let mut server = RedisServer::start(port, &[]);
    assert!(rt.block_on(a.wait_flushed(Duration::from_secs(10))));
    let b = start(&url, "failopen");
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(5))));
    assert_eq!(read(&b, |v| v.cooldown_until(1)), Some(now + 60_000));
    assert!(read(&b, |v| v.breaker_open(5)));
    // Redis dies again mid-way: both keep serving their views; writes still work locally.
    server.kill();
    a.extend_cooldown(2, now + 90_000);
    assert_eq!(read(&a, |v| v.cooldown_until(2)), Some(now + 90_000));
    assert!(read(&b, |v| v.breaker_open(5)));
    // Restarted empty: A re-pushes what it queued, and B converges through its resync.
    let _server = RedisServer::start(port, &[]);
    let converged = wait_until(Duration::from_secs(10), || {
        read(&b, |v| v.cooldown_until(2)) == Some(now + 90_000)
    });
    assert!(
        converged.is_some(),
        "B never converged after Redis returned"
    );
    drop((a, b));
}

#[test]
fn metrics_name_the_redis_counters() {
    let rt = runtime();
    let _guard = rt.enter();
    let store = start(&format!("redis://127.0.0.1:{}", free_port()), "metrics");
    let out = switchyard_metrics::render(&store);
    assert!(out.contains("# TYPE switchyard_redis_errors_total counter"));
    assert!(out.contains("switchyard_redis_connected 0"));
    // The in-memory store has no metrics of its own: it is no collector (`Collect`), so
    // nothing of it can reach a `/metrics` page.
}

#[test]
fn a_success_replayed_late_never_clears_a_newer_cooldown() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("replay");
    let a = start(&url, &prefix);
    let f = AttemptFailure {
        member: 4,
        channel: 2,
        upstream_model: "m",
        kind: FailureKind::Retryable,
        retry_after_ms: None,
    };
    a.record_failure(&f, &policy(0), 2_000);
    // A success stamped before that failure (queued during a Redis outage elsewhere).
    let s = AttemptSuccess {
        member: 4,
        channel: 2,
        upstream_model: "m",
        latency_ms: 10.0,
        canary: false,
        promote_after: 0,
    };
    a.record_success(&s, 1_000);
    assert!(rt.block_on(a.wait_flushed(Duration::from_secs(10))));
    let b = start(&url, &prefix);
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(5))));
    assert_eq!(read(&b, |v| v.cooldown_until(4)), Some(32_000));
    // The writer's own script result brings A's view to the same answer.
    assert_eq!(read(&a, |v| v.cooldown_until(4)), Some(32_000));
    drop((a, b));
    cleanup(&url, &prefix);
}

#[test]
fn recovering_window_is_fleet_wide_and_any_proxy_retrips_it() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("recovering");
    let a = start(&url, &prefix);
    let b = start(&url, &prefix);
    for s in [&a, &b] {
        assert!(rt.block_on(s.wait_resynced(1, Duration::from_secs(5))));
    }
    let now = now_ms();
    a.trip_breaker(9, "invalid key", now);
    a.begin_recovery(9, &[1], now + 1, 60_000);
    assert!(rt.block_on(a.wait_flushed(Duration::from_secs(5))));
    let seen = wait_until(Duration::from_secs(2), || {
        read(&b, |v| v.recovering(9)).is_some_and(|w| w.since == now + 1)
            && !read(&b, |v| v.breaker_open(9))
    });
    assert!(seen.is_some(), "proxy b never saw the recovering window");
    // Proxy b's one failed attempt trips the breaker at once (threshold 5), for a too.
    assert!(b.record_channel_failure(9, &policy(5), now + 2).tripped);
    assert!(rt.block_on(b.wait_flushed(Duration::from_secs(5))));
    let tripped = wait_until(Duration::from_secs(2), || {
        read(&a, |v| v.breaker_open(9)) && read(&a, |v| v.recovering(9)).is_none()
    });
    assert!(tripped.is_some(), "proxy a never saw the re-trip");
    // A third store, resynced from Redis alone, agrees.
    let c = start(&url, &prefix);
    assert!(rt.block_on(c.wait_resynced(1, Duration::from_secs(5))));
    assert!(read(&c, |v| v.breaker_open(9)));
    assert!(read(&c, |v| v.recovering(9)).is_none());
    assert_eq!(
        c.dump(now + 3).channels[0].reason.as_deref(),
        Some(RECOVERING_TRIP_REASON)
    );
    drop((a, b, c));
    cleanup(&url, &prefix);
}

#[test]
fn health_merged_from_another_proxy_reaches_the_aligned_layout() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("dense");
    let a = start(&url, &prefix);
    let b = start(&url, &prefix);
    assert!(rt.block_on(a.wait_resynced(1, Duration::from_secs(5))));
    let slots = Arc::new(switchyard_engine::HealthSlots::build([
        (7, "m-1"),
        (7, "m-2"),
    ]));
    a.align_health(&slots);
    let now = now_ms();
    b.record_success(
        &AttemptSuccess {
            member: 70,
            channel: 7,
            upstream_model: "m-2",
            latency_ms: 250.0,
            canary: false,
            promote_after: 100,
        },
        now,
    );
    let took = wait_until(Duration::from_secs(2), || {
        read(&a, |v| v.health(7, "m-2").latency_ms) == Some(250.0)
    });
    assert!(took.is_some(), "A never saw B's health record");
    let (dense, hashed) = read(&a, |v| {
        let dense = v.dense_health(&slots).map(<[_]>::to_vec);
        let hashed: Vec<HealthRecord> = slots.keys().iter().map(|(c, m)| v.health(*c, m)).collect();
        (dense, hashed)
    });
    assert_eq!(dense.as_deref(), Some(hashed.as_slice()));
    assert_eq!(hashed[1].latency_ms, Some(250.0));
    drop((a, b));
    cleanup(&url, &prefix);
}

#[test]
fn a_bad_key_prefix_is_refused_with_a_message_that_names_it() {
    // Validated before anything connects: no Redis needed for the refusal.
    for prefix in ["", "team{a}", "{x", "x}"] {
        let err = match RedisStore::start(RedisConfig::new("redis://127.0.0.1:6379", prefix)) {
            Ok(_) => panic!("prefix {prefix:?} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("key prefix") && err.contains("non-empty and free of braces"),
            "{prefix:?}: {err}"
        );
    }
}

fn one_failure(member: i64, kind: FailureKind) -> AttemptFailure<'static> {
    AttemptFailure {
        member,
        channel: 10,
        upstream_model: "gpt-x",
        kind,
        retry_after_ms: None,
    }
}

fn one_success(member: i64) -> AttemptSuccess<'static> {
    AttemptSuccess {
        member,
        channel: 10,
        upstream_model: "gpt-x",
        latency_ms: 5.0,
        canary: false,
        promote_after: 100,
    }
}

#[test]
fn the_write_queue_keeps_exactly_max_queue_writes_and_counts_the_dropped_ones() {
    // Nothing listens on this port, so the writer never drains the queue.
    let port = free_port();
    let rt = runtime();
    let _guard = rt.enter();
    let mut c = config(&format!("redis://127.0.0.1:{port}"), &unique_prefix("maxq"));
    c.max_queue = 5;
    let store = RedisStore::start(c).unwrap();
    for member in 1..=5 {
        store.record_success(&one_success(member), CHECK_NOW);
    }
    let s = store.stats();
    assert_eq!((s.queued_writes, s.dropped_writes_total), (5, 0), "{s:?}");
    for member in 6..=8 {
        store.record_success(&one_success(member), CHECK_NOW);
    }
    let s = store.stats();
    // The oldest three made room; the newest five wait.
    assert_eq!((s.queued_writes, s.dropped_writes_total), (5, 3), "{s:?}");
}

#[test]
fn a_write_sent_but_not_yet_acknowledged_is_not_flushed() {
    // An own server, paused while the write is in flight (pausing the shared one would stall
    // every other test).
    let mut server = RedisServer::start(free_port(), &[]);
    let rt = runtime();
    let _guard = rt.enter();
    let mut c = config(&server.url(), &unique_prefix("unacked"));
    // Far longer than the pause, so the paused call waits instead of failing; and no lease
    // refresh or resync due during the test, so the write's flush is the only call in flight.
    c.timeout = Duration::from_secs(30);
    c.lease_refresh = Duration::from_secs(60);
    c.lease_ttl = Duration::from_secs(120);
    c.resync_every = Duration::from_secs(60);
    let store = RedisStore::start(c).unwrap();
    assert!(rt.block_on(store.wait_resynced(1, Duration::from_secs(10))));
    // The session's first lease and resync ticks fire at once: let them pass.
    std::thread::sleep(Duration::from_millis(500));

    let mut con = connection(&server.url());
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(4000)
        .arg("ALL")
        .query::<()>(&mut con)
        .unwrap();
    store.record_success(&one_success(1), CHECK_NOW);
    // The writer takes the write off the queue and sends it; Redis holds the reply.
    wait_until(Duration::from_secs(3), || store.stats().queued_writes == 0);
    assert_eq!(store.stats().queued_writes, 0);
    assert!(
        !rt.block_on(store.wait_flushed(Duration::from_millis(1500))),
        "an empty queue with the write's reply still outstanding counted as flushed"
    );
    redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query::<()>(&mut con)
        .unwrap();
    assert!(rt.block_on(store.wait_flushed(Duration::from_secs(20))));
    drop(store);
    server.kill();
}

#[test]
fn debug_names_the_store_and_masks_the_password() {
    let store = RedisStore::start(config("redis://:hunter2@127.0.0.1:1", "dbg")).unwrap();
    let shown = format!("{store:?}");
    assert!(shown.starts_with("RedisStore"), "{shown}");
    assert!(shown.contains("dbg"), "{shown}");
    assert!(shown.contains("127.0.0.1:1"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn latencies_the_engine_would_not_use_reach_redis_sanitised_as_in_the_view() {
    // A negative, infinite or NaN latency is no sample for the engine's EWMA (0 ms instead);
    // the Lua side must get the same value, or its record drifts from every proxy's view.
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("sanitise");
    let store = start(&url, &prefix);
    for (i, latency_ms) in [-3.0, f64::INFINITY, f64::NAN, 40.0, f64::NEG_INFINITY]
        .into_iter()
        .enumerate()
    {
        let s = AttemptSuccess {
            latency_ms,
            ..one_success(1)
        };
        store.record_success(&s, CHECK_NOW + i as u64);
    }
    assert!(rt.block_on(store.wait_flushed(Duration::from_secs(10))));
    assert_eq!(store.stats().redis_errors_total, 0);
    let replica = start(&url, &prefix);
    assert!(rt.block_on(replica.wait_resynced(1, Duration::from_secs(10))));
    let local = read(&store, |v| v.health(10, "gpt-x"));
    assert_eq!(read(&replica, |v| v.health(10, "gpt-x")), local);
    assert!(local.latency_ms.is_some_and(f64::is_finite), "{local:?}");
    drop((store, replica));
    cleanup(&url, &prefix);
}

#[test]
fn another_proxy_sees_a_members_failure_streak_by_resync_and_by_notification() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("streak");
    let a = start(&url, &prefix);
    // One transport failure: a streak of 1 and no cooldown yet (the second one cools).
    let f = one_failure(7, FailureKind::Transport);
    a.record_failure(&f, &policy(0), CHECK_NOW);
    assert!(rt.block_on(a.wait_flushed(Duration::from_secs(10))));
    let streak = |s: &RedisStore| {
        s.dump(CHECK_NOW)
            .member_failures
            .iter()
            .map(|m| (m.member_id, m.consecutive_failures))
            .collect::<Vec<_>>()
    };
    let b = start(&url, &prefix);
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(10))));
    assert_eq!(streak(&b), vec![(7, 1)], "after a full resync");
    // The Lua side read the failure's kind as the view did: one transport failure cools nothing.
    assert_eq!(b.dump(CHECK_NOW), a.dump(CHECK_NOW));
    assert!(b.dump(CHECK_NOW).cooldowns.is_empty());
    // A third proxy resyncs once at start and then only every 60 s: the second failure can
    // reach it only through A's notification (B, resyncing every 300 ms, may learn it either
    // way, so the push path is checked on this one).
    let mut slow = common::config(&url, &prefix);
    slow.resync_every = Duration::from_secs(60);
    let pushed = RedisStore::start(slow).unwrap();
    assert!(rt.block_on(pushed.wait_resynced(1, Duration::from_secs(10))));
    assert_eq!(streak(&pushed), vec![(7, 1)], "after its one resync");
    // Its first resync may come before its subscription is listening (what is published in
    // between reaches it only through a resync): another member's write it hears of proves the
    // push path is up.
    let mut tick = 0;
    let listening = wait_until(Duration::from_secs(10), || {
        tick += 1;
        a.record_success(&one_success(99), CHECK_NOW + tick);
        std::thread::sleep(Duration::from_millis(50));
        pushed.stats().notifications_applied_total > 0
    });
    assert!(
        listening.is_some(),
        "the third proxy never heard a notification"
    );
    let applied = pushed.stats().notifications_applied_total;
    a.record_failure(&f, &policy(0), CHECK_NOW + 1);
    // The subscriber counts a notification just after writing it into the view: wait for both.
    wait_until(Duration::from_secs(5), || {
        streak(&pushed) == vec![(7, 2)] && pushed.stats().notifications_applied_total > applied
    });
    assert_eq!(streak(&pushed), vec![(7, 2)], "after a notification");
    assert!(
        pushed.stats().notifications_applied_total > applied,
        "the notification that carried it was not counted"
    );
    drop(pushed);
    wait_until(Duration::from_secs(5), || streak(&b) == vec![(7, 2)]);
    assert_eq!(streak(&b), vec![(7, 2)]);
    // A success ends the streak: the member's record stays, with no failures in it.
    a.record_success(&one_success(7), CHECK_NOW + 2);
    wait_until(Duration::from_secs(5), || streak(&b).is_empty());
    assert_eq!(streak(&b), vec![], "after the success");
    // A canary's success keeps its record (the count toward promotion) with no failures in it:
    // no streak of 0 is listed.
    let canary = AttemptSuccess {
        canary: true,
        promote_after: 10,
        ..one_success(9)
    };
    a.record_success(&canary, CHECK_NOW + 3);
    assert!(rt.block_on(a.wait_flushed(Duration::from_secs(10))));
    let resynced = b.stats().resyncs_total;
    wait_until(Duration::from_secs(5), || {
        b.stats().resyncs_total > resynced
    });
    assert_eq!(streak(&b), vec![], "after a canary's success");
    assert_eq!(b.dump(CHECK_NOW), a.dump(CHECK_NOW));
    drop((a, b));
    cleanup(&url, &prefix);
}

#[test]
fn the_last_sync_age_metric_is_in_seconds() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("age");
    let mut c = config(&url, &prefix);
    // One resync and one lease at start and none during the test (this store's own lease
    // notification counts as a sync too), so the age only grows.
    c.resync_every = Duration::from_secs(60);
    c.lease_refresh = Duration::from_secs(60);
    c.lease_ttl = Duration::from_secs(120);
    let store = RedisStore::start(c).unwrap();
    assert!(rt.block_on(store.wait_resynced(1, Duration::from_secs(10))));
    // Old enough that seconds and milliseconds (or a remainder) cannot look alike.
    std::thread::sleep(Duration::from_millis(100));
    let before = store.stats().last_sync_age_ms.unwrap();
    let out = switchyard_metrics::render(&store);
    let after = store.stats().last_sync_age_ms.unwrap();
    let shown: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("switchyard_redis_last_sync_age_seconds "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(before >= 20, "{before} ms");
    assert!(
        shown >= before as f64 / 1000.0 - 1e-9 && shown <= after as f64 / 1000.0 + 1e-9,
        "{shown} s shown, {before}..{after} ms measured"
    );
    drop(store);
    cleanup(&url, &prefix);
}

#[test]
fn the_subscriber_moves_on_from_a_dead_cluster_node_to_a_live_one() {
    // The first node of the list never answers: the subscriber must try the next ones, or
    // this proxy hears of the fleet's writes only through the periodic resync.
    let cluster = RedisCluster::start();
    let dead = free_port();
    let nodes: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let url = format!("redis+cluster://127.0.0.1:{dead},{}", nodes.join(","));
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("subnode");
    let listener = start(&url, &prefix);
    let writer = start(&cluster.url(), &prefix);
    assert!(rt.block_on(listener.wait_resynced(1, Duration::from_secs(20))));
    assert!(rt.block_on(writer.wait_resynced(1, Duration::from_secs(20))));
    let f = one_failure(3, FailureKind::Retryable);
    let heard = wait_until(Duration::from_secs(20), || {
        writer.record_failure(&f, &policy(0), CHECK_NOW);
        std::thread::sleep(Duration::from_millis(50));
        listener.stats().notifications_applied_total > 0
    });
    assert!(
        heard.is_some(),
        "no notification reached the proxy whose first node is dead: {:?}",
        listener.stats()
    );
}

#[test]
fn a_backlog_is_sent_in_full_batches_and_to_the_last_write() {
    // Writes queued while Redis is away: once it is back, the writer sends them 256 to a
    // pipelined batch, at most four batches a turn, and comes back for the rest by itself
    // (no new write arrives to wake it).
    let port = free_port();
    let rt = runtime();
    let _guard = rt.enter();
    let url = format!("redis://127.0.0.1:{port}");
    let prefix = unique_prefix("backlog");
    let store = RedisStore::start(config(&url, &prefix)).unwrap();
    // Distinct members, so no two writes fold into one script call.
    for member in 1..=2000 {
        store.record_success(&one_success(member), CHECK_NOW);
    }
    assert_eq!(store.stats().queued_writes, 2000);
    let server = RedisServer::start(port, &[]);
    assert!(
        rt.block_on(store.wait_flushed(Duration::from_secs(30))),
        "{:?}",
        store.stats()
    );
    let s = store.stats();
    assert_eq!((s.queued_writes, s.dropped_writes_total), (0, 0), "{s:?}");
    // 2000 writes = 7 full batches of 256 and one of 208.
    assert_eq!(s.batches_total, 8, "{s:?}");
    assert_eq!(s.scripts_total, 2000, "{s:?}");
    drop(store);
    drop(server);
}

#[test]
fn a_redis_that_lost_the_scripts_gets_them_again_without_an_error() {
    // A restarted or failed-over Redis has an empty script cache: the writer's EVALSHA then
    // answers NOSCRIPT, and the writer must load the scripts and send the batch again (no
    // error counted, no reconnect, nothing lost).
    let server = RedisServer::start(free_port(), &[]);
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("noscript");
    let store = start(&server.url(), &prefix);
    assert!(rt.block_on(store.wait_resynced(1, Duration::from_secs(10))));
    store.record_success(&one_success(1), CHECK_NOW);
    assert!(rt.block_on(store.wait_flushed(Duration::from_secs(10))));
    let mut con = connection(&server.url());
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query::<()>(&mut con)
        .unwrap();
    let slower = AttemptSuccess {
        latency_ms: 500.0,
        ..one_success(1)
    };
    store.record_success(&slower, CHECK_NOW + 1);
    assert!(rt.block_on(store.wait_flushed(Duration::from_secs(10))));
    let s = store.stats();
    assert_eq!(s.redis_errors_total, 0, "{s:?}");
    assert_eq!(s.scripts_total, 2, "{s:?}");
    // What Redis holds is both writes: a store resynced from it alone shows the same record.
    let replica = start(&server.url(), &prefix);
    assert!(rt.block_on(replica.wait_resynced(1, Duration::from_secs(10))));
    let local = read(&store, |v| v.health(10, "gpt-x"));
    assert_eq!(read(&replica, |v| v.health(10, "gpt-x")), local);
    assert_ne!(
        local.latency_ms,
        Some(5.0),
        "the second sample is in the view"
    );
}

/// Indexes and claims answer from Redis itself: the conformance checks on one store, and a
/// second store on the same prefix sees the first one's entries and loses its claims at once.
#[test]
fn redis_store_keeps_indexes_and_claims_fleet_wide() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("records");
    let (one, two) = (start(&url, &prefix), start(&url, &prefix));
    rt.block_on(async {
        conformance::records(&one).await;
        let entry = IndexEntry {
            member: "file-1".into(),
            value: "{}".into(),
            expires_at: CHECK_NOW + 60_000,
        };
        assert_eq!(
            one.index_put("token:7", entry.clone(), CHECK_NOW).await,
            Ok(())
        );
        assert_eq!(two.index_list("token:7", CHECK_NOW).await, Ok(vec![entry]));
        assert_eq!(
            one.claim_once("batch:x", CHECK_NOW + 60_000, CHECK_NOW)
                .await,
            Ok(true)
        );
        assert_eq!(
            two.claim_once("batch:x", CHECK_NOW + 60_000, CHECK_NOW)
                .await,
            Ok(false)
        );
    });
    drop((one, two));
    cleanup(&url, &prefix);
}

/// With Redis away, a record call answers `Unavailable` within its timeout, never hangs.
#[test]
fn records_answer_unavailable_without_redis() {
    let rt = runtime();
    let _guard = rt.enter();
    let store = start("redis://127.0.0.1:1", &unique_prefix("records-away"));
    let listed = rt.block_on(store.index_list("token:1", CHECK_NOW));
    assert!(
        matches!(listed, Err(RecordError::Unavailable(_))),
        "{listed:?}"
    );
}
