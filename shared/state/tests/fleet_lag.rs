//! The propagation-lag measure every store keeps about itself, against a real Redis: the
//! histogram on `/metrics`, the time since the last sync, and the per-proxy sync reports that
//! travel with the leases.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use switchyard_state::*;

fn metrics(store: &RedisStore) -> String {
    switchyard_metrics::render(store)
}

/// The value of one sample line (`name{labels} value`) on a metrics page.
fn sample(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{series} missing from:\n{page}"))
        .parse()
        .unwrap()
}

const LAG: &str = "switchyard_redis_propagation_lag_seconds";

#[test]
fn a_delayed_subscriber_shows_its_lag_in_the_histogram_and_its_report() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("lag");
    let started_ms = now_ms();
    let a = start(&url, &prefix);
    // B merges every notification 1 s late: each update it receives is at least that old
    // (a whole second, so a lag reported in the wrong unit cannot pass for it).
    let mut slow = config(&url, &prefix);
    slow.apply_delay = Duration::from_millis(1000);
    let b = RedisStore::start(slow).unwrap();
    assert!(rt.block_on(a.wait_resynced(1, Duration::from_secs(5))));
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(5))));

    let before = metrics(&b);
    assert!(
        before.contains(&format!("# TYPE {LAG} histogram")),
        "{before}"
    );
    assert_eq!(sample(&before, &format!("{LAG}_count")), 0.0);
    assert!(before.contains("# TYPE switchyard_redis_last_sync_age_seconds gauge"));

    let until = now_ms() + 60_000;
    for member in 1..=5 {
        a.extend_cooldown(member, until);
    }
    // The five updates arrive as notifications (a resync may show them first; the histogram
    // counts notifications only).
    assert!(
        wait_until(Duration::from_secs(10), || b.stats().remote_updates_total
            >= 5)
        .is_some(),
        "B never received A's updates: {:?}",
        b.stats()
    );
    assert!((1..=5).all(|m| read(&b, |v| v.cooldown_until(m)) == Some(until)));
    let page = metrics(&b);
    let count = sample(&page, &format!("{LAG}_count"));
    assert!(count >= 5.0, "{page}");
    // Nothing can be in B's view from a notification sooner than the delay B applies.
    assert_eq!(
        sample(&page, &format!("{LAG}_bucket{{le=\"0.1\"}}")),
        0.0,
        "{page}"
    );
    assert_eq!(
        sample(&page, &format!("{LAG}_bucket{{le=\"+Inf\"}}")),
        count
    );
    assert!(sample(&page, &format!("{LAG}_sum")) >= 5.0, "{page}");
    let age = sample(&page, "switchyard_redis_last_sync_age_seconds");
    assert!(age.is_finite() && age >= 0.0, "{page}");

    // B's report (with its next lease refresh) reaches A: the window's worst lag is B's delay
    // at least, and its counters are B's own.
    let mut seen = None;
    wait_until(Duration::from_secs(10), || {
        seen = a
            .fleet_sync()
            .into_iter()
            .find(|r| r.instance == b.instance_id() && r.window_max_lag_ms.is_some());
        seen.is_some()
    });
    let report = seen.expect("A never got a report of B's lag");
    let worst = report.window_max_lag_ms.unwrap();
    assert!((1000..60_000).contains(&worst), "{report:?}");
    assert!(
        (started_ms..=now_ms()).contains(&report.reported_at_ms),
        "a report stamped outside the test's run: {report:?}"
    );
    assert!(report.window_updates >= 1, "{report:?}");
    assert!(report.updates_total >= 5, "{report:?}");
    assert!(report.resyncs_total >= 1, "{report:?}");
    assert!(report.connected, "{report:?}");
    assert!(a.fleet_sync().iter().all(|r| r.instance != a.instance_id()));

    // A stopped proxy's report goes with its lease.
    rt.block_on(b.close(Duration::from_secs(5)));
    assert!(
        wait_until(Duration::from_secs(10), || a
            .fleet_sync()
            .iter()
            .all(|r| r.instance != b.instance_id()))
        .is_some(),
        "a closed proxy's report stayed: {:?}",
        a.fleet_sync()
    );
    drop((a, b));
    cleanup(&url, &prefix);
}

#[test]
fn a_store_that_never_synced_reports_no_sync_age() {
    let rt = runtime();
    let _guard = rt.enter();
    let store = start(&format!("redis://127.0.0.1:{}", free_port()), "lag-down");
    let page = metrics(&store);
    // Never synced: no age to report.
    assert!(
        sample(&page, "switchyard_redis_last_sync_age_seconds").is_nan(),
        "{page}"
    );
    assert_eq!(store.stats().last_sync_age_ms, None);
}

/// A store whose writer always has writes waiting still refreshes its lease and resyncs on
/// time: the timers are not starved by the write queue.
#[test]
fn a_continuously_writing_store_keeps_its_lease_and_its_resyncs() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("busy");
    let a = std::sync::Arc::new(start(&url, &prefix));
    let b = start(&url, &prefix);
    assert!(rt.block_on(a.wait_resynced(1, Duration::from_secs(5))));
    a.in_flight_acquire(9);
    assert!(
        wait_until(Duration::from_secs(5), || read(&b, |v| v.in_flight(9)) == 1).is_some(),
        "B never saw A's in-flight count"
    );
    // A writes without pause for 3 s (several lease lifetimes of 1 s).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (a, stop) = (a.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let s = AttemptSuccess {
                    member: 1 + i % 50,
                    channel: 1,
                    upstream_model: "m",
                    latency_ms: 1.0,
                    canary: false,
                    promote_after: 0,
                };
                a.record_success(&s, now_ms());
                i += 1;
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        })
    };
    let resyncs_before = a.stats().resyncs_total;
    let started = std::time::Instant::now();
    let mut lost = 0;
    while started.elapsed() < Duration::from_secs(3) {
        // A lease not refreshed for its 1 s lifetime expires: B would count A's request gone.
        lost += usize::from(read(&b, |v| v.in_flight(9)) != 1);
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let resyncs = a.stats().resyncs_total - resyncs_before;
    assert_eq!(lost, 0, "A's lease lapsed while it was busy writing");
    // Resync period 300 ms: 3 s hold about ten; starved timers give one or two.
    assert!(resyncs >= 3, "only {resyncs} resyncs in 3 s of writes");
    assert!(a.stats().scripts_total > 0);
    drop(b);
    drop(a);
    cleanup(&url, &prefix);
}

#[test]
fn a_live_proxys_report_outlasts_the_resyncs_between_its_lease_refreshes() {
    let url = redis_url();
    let rt = runtime();
    let _guard = rt.enter();
    let prefix = unique_prefix("report");
    // A resyncs every 300 ms; B refreshes its lease (and sends its report) only once a minute.
    let a = start(&url, &prefix);
    let mut rare = config(&url, &prefix);
    rare.lease_refresh = Duration::from_secs(60);
    rare.lease_ttl = Duration::from_secs(120);
    let b = RedisStore::start(rare).unwrap();
    assert!(rt.block_on(b.wait_resynced(1, Duration::from_secs(5))));
    let has_b = || a.fleet_sync().iter().any(|r| r.instance == b.instance_id());
    assert!(
        wait_until(Duration::from_secs(10), has_b).is_some(),
        "B's first report never reached A"
    );
    // Resyncs that find B's lease live keep its report.
    let resyncs = a.stats().resyncs_total;
    assert!(
        wait_until(Duration::from_secs(10), || a.stats().resyncs_total
            >= resyncs + 3)
        .is_some()
    );
    assert!(
        has_b(),
        "a resync dropped the report of a proxy whose lease is live"
    );
    drop((a, b));
    cleanup(&url, &prefix);
}
