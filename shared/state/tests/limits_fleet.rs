//! Limits across a fleet: several RedisStores (as several proxies) on one Redis or Redis
//! Cluster. The overshoot bound while Redis is reachable, concurrency slots of a proxy that
//! died, and each proxy's share of a limit while Redis is away.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use switchyard_state::*;

/// A fixed instant (2023-11-14T22:13:20Z): the minute window never rolls during a test.
const NOW: u64 = 1_700_000_000_000;
const PROXIES: usize = 3;

fn limit(id: i64, metric: Metric, window: Window, value: u64) -> Limit {
    Limit {
        key: LimitKey {
            scope: ScopeKind::Route,
            scope_id: id,
            metric,
            window,
            rule: None,
        },
        value,
        mode: LimitMode::Hard,
    }
}

/// `PROXIES` stores on one prefix, each having seen all of them live.
fn fleet(rt: &tokio::runtime::Runtime, url: &str, prefix: &str) -> Vec<RedisStore> {
    let stores: Vec<RedisStore> = (0..PROXIES).map(|_| start(url, prefix)).collect();
    for s in &stores {
        assert!(rt.block_on(s.wait_resynced(1, Duration::from_secs(10))));
    }
    let all_live = wait_until(Duration::from_secs(10), || {
        stores.iter().all(|s| s.live_proxies() == PROXIES as u32)
    });
    assert!(all_live.is_some(), "every proxy sees the fleet");
    stores
}

/// Every proxy takes `amount` of `limit` as fast as it can, on its own thread, until a refusal
/// persists after its claims have settled. Returns what each one admitted.
fn exhaust(
    rt: &tokio::runtime::Runtime,
    stores: &[RedisStore],
    limit: Limit,
    amount: u64,
) -> Vec<u64> {
    let limits = [limit];
    let request = LimitRequest {
        limits: &limits,
        tokens: amount,
    };
    std::thread::scope(|scope| {
        let runs: Vec<_> = stores
            .iter()
            .map(|store| {
                scope.spawn(move || {
                    let mut admitted = 0;
                    loop {
                        if store.limit_take(&request, NOW).admitted() {
                            admitted += amount;
                            continue;
                        }
                        assert!(rt.block_on(store.wait_limits_settled(Duration::from_secs(10))));
                        if !store.limit_take(&request, NOW).admitted() {
                            return admitted;
                        }
                        admitted += amount;
                    }
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

/// The documented bound: while Redis is reachable the fleet admits at most the limit plus one
/// allowance per proxy (the allowance being at least a hundredth of the limit shared among the
/// live proxies, so the excess is at most the larger of 1 % of the limit and one allowance per
/// proxy) — and, once every proxy is refused, no less than the limit (no allowance is left
/// stranded beyond what a single take needs).
fn overshoot_within_the_bound(url: &str, tag: &str) {
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix(tag);
    let stores = fleet(&rt, url, &prefix);
    for (id, metric, value, amount) in [
        (1, Metric::Requests, 1_000, 1),
        (2, Metric::Tokens, 10_000, 37),
    ] {
        let limit = limit(id, metric, Window::Minute, value);
        let per_proxy = exhaust(&rt, &stores, limit, amount);
        let total: u64 = per_proxy.iter().sum();
        let one_allowance = allowance(value, PROXIES as u32, amount);
        let bound = (value / 100).max(one_allowance * PROXIES as u64);
        eprintln!(
            "{tag} {metric:?}: limit {value}, admitted {total} {per_proxy:?}, allowance {one_allowance}, bound +{bound}"
        );
        assert!(
            total <= value + bound,
            "{metric:?}: admitted {total} > {value} + {bound}"
        );
        assert!(
            total + PROXIES as u64 * (amount - 1) >= value,
            "{metric:?}: admitted {total}, far under the limit {value}"
        );
        assert!(
            per_proxy.iter().all(|n| *n > 0),
            "every proxy admitted some: {per_proxy:?}"
        );
        // Every proxy agrees the limit is spent (but for less than one take it may still hold).
        for s in &stores {
            assert!(s.limit_status(&limit, NOW).remaining < amount);
        }
    }
    for s in &stores {
        assert_eq!(s.stats().redis_errors_total, 0);
    }
    drop(stores);
    cleanup(url, &prefix);
}

#[test]
fn fleet_overshoot_stays_within_the_bound_on_redis() {
    overshoot_within_the_bound(&redis_url(), "bound");
}

#[test]
fn fleet_overshoot_stays_within_the_bound_on_redis_cluster() {
    let cluster = RedisCluster::start();
    overshoot_within_the_bound(&cluster.url(), "bound-cluster");
}

/// A proxy holding concurrency slots is killed: once its lease expires, the slots are free for
/// the rest of the fleet.
fn concurrency_released_when_a_proxy_dies(url: &str, tag: &str) {
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix(tag);
    let mut stores = fleet(&rt, url, &prefix);
    let limits = [limit(3, Metric::Concurrent, Window::None, 2)];
    let request = LimitRequest {
        limits: &limits,
        tokens: 0,
    };
    let take_settled = |s: &RedisStore| {
        if s.limit_take(&request, NOW).admitted() {
            return true;
        }
        assert!(rt.block_on(s.wait_limits_settled(Duration::from_secs(10))));
        s.limit_take(&request, NOW).admitted()
    };
    let dying = stores.remove(0);
    assert!(take_settled(&dying));
    assert!(take_settled(&dying));
    assert!(rt.block_on(dying.wait_limits_settled(Duration::from_secs(10))));
    let other = &stores[0];
    // It has not seen the limit yet: it may admit one allowance (1) on credit before its claim
    // shows the slots the dying proxy holds; then it is refused.
    let mut held = 0;
    while take_settled(other) {
        held += 1;
        assert!(held <= 1, "at most one allowance beyond the limit");
    }
    // Killed, not closed: its reservation stays in Redis until its lease expires.
    drop(dying);
    let freed = wait_until(Duration::from_secs(15), || take_settled(other));
    assert!(freed.is_some(), "the dead proxy's slots came back");
    held += 1;
    while take_settled(other) {
        held += 1;
    }
    assert_eq!(held, 2, "the whole limit, and no more");
    drop(stores);
    cleanup(url, &prefix);
}

#[test]
fn concurrency_is_released_when_a_proxy_dies_on_redis() {
    concurrency_released_when_a_proxy_dies(&redis_url(), "conc");
}

#[test]
fn concurrency_is_released_when_a_proxy_dies_on_redis_cluster() {
    let cluster = RedisCluster::start();
    concurrency_released_when_a_proxy_dies(&cluster.url(), "conc-cluster");
}

/// Redis goes away: every proxy keeps admitting, each up to its share of each limit (the
/// limit divided by the live proxies it last saw), and no request fails for the outage.
fn redis_away_enforces_each_proxys_share(url: &str, kill: &mut dyn FnMut()) {
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("away");
    let stores = fleet(&rt, url, &prefix);
    let seen_before = limit(4, Metric::Requests, Window::Minute, 3_000);
    // A limit used (and so claimed) before the outage, and one first seen during it.
    for s in &stores {
        assert!(s
            .limit_take(
                &LimitRequest {
                    limits: &[seen_before],
                    tokens: 0
                },
                NOW
            )
            .admitted());
        assert!(rt.block_on(s.wait_limits_settled(Duration::from_secs(10))));
    }
    kill();
    let down = wait_until(Duration::from_secs(15), || {
        stores.iter().all(|s| !s.stats().connected)
    });
    assert!(down.is_some(), "every proxy noticed Redis is gone");
    let fresh = limit(5, Metric::Requests, Window::Minute, 30);
    for s in &stores {
        assert_eq!(s.live_proxies(), PROXIES as u32, "the fleet it last saw");
        let request = LimitRequest {
            limits: &[fresh],
            tokens: 0,
        };
        let admitted = (0..50)
            .filter(|_| s.limit_take(&request, NOW).admitted())
            .count();
        assert_eq!(admitted, 10, "its share: 30 / 3 proxies");
        let refused = s.limit_take(&request, NOW).refused.unwrap();
        assert_eq!(
            refused.retry_after_ms, 40_000,
            "the share is spent until the window ends"
        );
        // The limit it had claimed for keeps admitting, up to its share as well.
        let request = LimitRequest {
            limits: &[seen_before],
            tokens: 0,
        };
        let admitted = (0..2_000)
            .filter(|_| s.limit_take(&request, NOW).admitted())
            .count();
        assert_eq!(admitted, 999, "1 before the outage, then up to 3000 / 3");
    }
}

#[test]
fn redis_away_each_proxy_enforces_its_share_on_redis() {
    let mut server = RedisServer::start(free_port(), &[]);
    let url = server.url();
    redis_away_enforces_each_proxys_share(&url, &mut || server.kill());
}

#[test]
fn redis_away_each_proxy_enforces_its_share_on_redis_cluster() {
    let mut cluster = RedisCluster::start();
    let url = cluster.url();
    redis_away_enforces_each_proxys_share(&url, &mut || {
        for node in &mut cluster.nodes {
            node.kill();
        }
    });
}

/// Claims go out as soon as they are due (the writer is woken, not left to its next refresh),
/// and a window's counter outlives the window by a minute, then goes.
#[test]
fn a_claim_goes_out_at_once_and_its_counter_outlives_the_window_by_a_minute() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("claim");
    let mut cfg = config(&url, &prefix);
    cfg.lease_refresh = Duration::from_secs(3600);
    cfg.resync_every = Duration::from_secs(3600);
    let store = RedisStore::start(cfg).unwrap();
    assert!(rt.block_on(store.wait_resynced(1, Duration::from_secs(10))));
    let limits = [limit(6, Metric::Requests, Window::Minute, 1_000)];
    let request = LimitRequest {
        limits: &limits,
        tokens: 0,
    };
    // Allowance 10: each claim asks 20 (and charges any debt), and is due once fewer than 10
    // are left. Only a woken writer sends more than the first couple of rounds: its refresh
    // comes once at start, then in an hour.
    assert!(store.limit_take(&request, NOW).admitted());
    assert!(rt.block_on(store.wait_limits_settled(Duration::from_secs(5))));
    for round in 0..4 {
        for _ in 0..20 {
            assert!(store.limit_take(&request, NOW).admitted(), "round {round}");
        }
        assert!(
            rt.block_on(store.wait_limits_settled(Duration::from_secs(5))),
            "round {round}: the claim went out without waiting for a refresh"
        );
    }
    let mut con = connection(&url);
    let key = format!("{{sy:{prefix}}}:limit:route:6:requests:minute:1699999980000");
    let counter: u64 = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    assert!(counter >= 81, "every take is claimed: {counter}");
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
    assert!(
        (60_000..=120_000).contains(&ttl),
        "a minute's window plus a minute: {ttl} ms"
    );
    assert_eq!(store.limit_status(&limits[0], NOW).remaining, 919);
    // A count without a window lives as long as any state (600 s in these tests).
    let lifetime = [limit(7, Metric::Requests, Window::None, 10)];
    let request = LimitRequest {
        limits: &lifetime,
        tokens: 0,
    };
    assert!(store.limit_take(&request, NOW).admitted());
    assert!(rt.block_on(store.wait_limits_settled(Duration::from_secs(5))));
    let key = format!("{{sy:{prefix}}}:limit:route:7:requests:none:0");
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
    assert!((120_001..=600_000).contains(&ttl), "{ttl} ms");
    drop(store);
    cleanup(&url, &prefix);
}

/// An observer (the control plane's explain) reads the fleet's counters without taking part:
/// a windowed limit shows every proxy's claims (what they admitted plus allowance not yet
/// used, at most a few allowances each), a concurrency limit the slots live proxies hold; the
/// read claims nothing, so the counters do not move.
#[test]
fn an_observer_reads_the_fleets_counters_without_claiming() {
    let rt = runtime();
    let _guard = rt.enter();
    let url = redis_url();
    let prefix = unique_prefix("read");
    let stores = fleet(&rt, &url, &prefix);
    let requests = limit(20, Metric::Requests, Window::Minute, 1_000);
    let slots = limit(21, Metric::Concurrent, Window::None, 5);
    let mut admitted = 0;
    for (i, store) in stores.iter().enumerate() {
        for _ in 0..=i * 4 {
            let request = LimitRequest {
                limits: &[requests, slots],
                tokens: 0,
            };
            if store.limit_take(&request, NOW).admitted() {
                admitted += 1;
            }
        }
        assert!(rt.block_on(store.wait_limits_settled(Duration::from_secs(10))));
    }
    // The first proxy gives its slot back; the others hold theirs.
    stores[0].limit_release(&[slots]);
    assert!(rt.block_on(stores[0].wait_limits_settled(Duration::from_secs(10))));
    let held = admitted - 1;
    let observer = start(&url, &prefix);
    let read = || {
        rt.block_on(observer.read_limits(&[requests, slots], NOW, Duration::from_secs(5)))
            .unwrap()
    };
    let first = read();
    let w = allowance(1_000, PROXIES as u32, 1);
    assert!(
        (admitted..=admitted + 3 * w * PROXIES as u64).contains(&first[0].used),
        "the counter holds what was admitted and at most three allowances a proxy: {} for {admitted}",
        first[0].used
    );
    assert_eq!(first[0].remaining, 1_000 - first[0].used);
    assert_eq!(first[0].reset_at, Some(Window::Minute.bounds(NOW).1));
    assert_eq!(first[1].used, held, "the slots the live proxies hold");
    assert_eq!((first[1].remaining, first[1].reset_at), (5 - held, None));
    assert_eq!(read(), first, "reading claims nothing");
    assert_eq!(
        observer.limit_status(&requests, NOW).used,
        0,
        "the observer took no part"
    );
    // An unreachable Redis is an error, not a hang.
    let nowhere = start("redis://127.0.0.1:1", &prefix);
    let err = rt
        .block_on(nowhere.read_limits(&[requests], NOW, Duration::from_millis(300)))
        .unwrap_err();
    assert!(
        err.contains("limit counters") || err.contains("did not answer"),
        "{err}"
    );
    drop((stores, observer, nowhere));
    cleanup(&url, &prefix);
}
