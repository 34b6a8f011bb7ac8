//! The channel lifecycle on two real data-plane processes sharing one Redis, against real mock
//! upstreams: a channel that lists models but fails every generation stays out of traffic
//! over several probe intervals with no client failure; once it heals, a passed probe brings it
//! back *recovering* — fleet-wide, its share of traffic starts well below its full share and
//! converges as the window runs out — and a failed request while recovering trips it again at
//! once. Each proxy runs its own probes (standalone mode).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use switchyard_e2e::fleet::{cleanup, unique, write_config, Proxy};
use switchyard_e2e::redis_url;
use switchyard_engine::HealthView;
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};
use switchyard_state::{RedisConfig, RedisStore, StateStore, RECOVERING_TRIP_REASON};

const BIN: &str = env!("CARGO_BIN_EXE_e2e-data-plane");

/// Channel ids in the config below.
const FLAKY: i64 = 1;
/// The gauges that show `flaky`'s state in a proxy's view.
const BREAKER_OPEN: &str = r#"switchyard_channel_breaker_open{channel="flaky"}"#;
const RECOVERING: &str = r#"switchyard_channel_recovering_seconds{channel="flaky"}"#;
const STEADY: i64 = 2;

/// `flaky` and `steady` in one tier with equal weights: without slow start each takes half.
/// Probes every second; a 600 s slow-start window, so during the test a fresh window stays
/// near its initial 10 %.
fn config(flaky: &MockUpstream, steady: &MockUpstream) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\n  cooldown_seconds: 0\n  breaker_failure_threshold: 2\n  \
         recovery_probe_interval_seconds: 1\n  slow_start_seconds: 600\n  slow_start_initial_percent: 10\n\
         channels:\n  - id: {FLAKY}\n    name: flaky\n    provider: openai\n    base_url: {}\n    credentials: [\"k-flaky\"]\n\
         \x20 - id: {STEADY}\n    name: steady\n    provider: openai\n    base_url: {}\n    credentials: [\"k-steady\"]\n\
         routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: flaky, upstream_model: up }}\n      - {{ id: 2, channel: steady, upstream_model: up }}\n",
        flaky.base_url(),
        steady.base_url(),
    )
}

/// Waits (with a deadline) until `condition` holds.
async fn until(what: &str, deadline: Duration, mut condition: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !condition() {
        assert!(Instant::now() < end, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn view<T>(store: &RedisStore, f: impl Fn(&dyn HealthView) -> T) -> T {
    let mut out = None;
    store.with_view(&mut |v| out = Some(f(v)));
    out.unwrap()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `n` requests spread over the proxies; every one must succeed. Returns how many `flaky`
/// served.
async fn flaky_share(proxies: &[Proxy], n: usize) -> usize {
    let mut flaky = 0;
    for i in 0..n {
        let r = proxies[i % proxies.len()].chat(&[]).await;
        assert_eq!(r.status, 200, "a client request failed: {}", r.body);
        if r.channel() == "flaky" {
            flaky += 1;
        }
    }
    flaky
}

fn generations() -> Matcher {
    Matcher::path("/v1/chat/completions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flapping_channel_stays_out_then_ramps_back_fleet_wide_and_retrips_at_once() {
    let redis = redis_url();
    let prefix = unique("recovery");
    let (flaky, steady) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let path = write_config("recovery", &config(&flaky, &steady));
    // The test's own window on the fleet state: the same store the proxies run.
    let store = RedisStore::start(RedisConfig::new(&redis, &prefix)).unwrap();
    assert!(store.wait_resynced(1, Duration::from_secs(10)).await);
    let proxies = [
        Proxy::start(BIN, &path, &redis, &prefix).await,
        Proxy::start(BIN, &path, &redis, &prefix).await,
    ];

    // 1. Flapping: the upstream lists models but every generation fails.
    flaky.on(Matcher::path("/v1/models"), Behavior::ok());
    flaky.on(generations(), Behavior::status(503));
    // Its share of traffic fails over to `steady` (no client failure) until the breaker trips.
    let end = Instant::now() + Duration::from_secs(20);
    'trip: while !view(&store, |v| v.breaker_open(FLAKY)) {
        assert!(Instant::now() < end, "the breaker never tripped");
        for proxy in &proxies {
            let r = proxy.chat(&[]).await;
            assert_eq!(
                (r.status, r.channel().as_str()),
                (200, "steady"),
                "{}",
                r.body
            );
            if view(&store, |v| v.breaker_open(FLAKY)) {
                break 'trip;
            }
        }
    }
    for proxy in &proxies {
        proxy.wait_for(BREAKER_OPEN, |open| open == 1.0).await;
    }
    let tripped_with = flaky.hits_matching(&generations());
    // Over several probe intervals the probes keep failing (backed off) and the channel gets
    // no client request at all: every answer comes from `steady` on the first attempt.
    let mut served = 0;
    let end = Instant::now() + Duration::from_secs(40);
    while flaky.hits_matching(&generations()) < tripped_with + 4 {
        assert!(Instant::now() < end, "the proxies stopped probing");
        for proxy in &proxies {
            let r = proxy.chat(&[]).await;
            assert_eq!(r.status, 200, "{}", r.body);
            assert_eq!(r.channel(), "steady");
            assert_eq!(
                r.header("x-switchyard-attempts"),
                "1",
                "the open channel was tried"
            );
            served += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served > 0);
    assert!(view(&store, |v| v.breaker_open(FLAKY)));
    assert!(view(&store, |v| v.recovering(FLAKY)).is_none());
    assert_eq!(
        flaky.hits_matching(&Matcher::path("/v1/models")),
        0,
        "a model listing is no proof of health"
    );

    // 2. Healed: the next probe passes and the channel comes back recovering, fleet-wide.
    flaky.reset();
    until("a probe passes", Duration::from_secs(30), || {
        view(&store, |v| v.recovering(FLAKY)).is_some() && !view(&store, |v| v.breaker_open(FLAKY))
    })
    .await;
    for proxy in &proxies {
        proxy.wait_for(BREAKER_OPEN, |open| open == 0.0).await;
        proxy.wait_for(RECOVERING, |left| left > 0.0).await;
    }
    // Just after the probe the ramp is near 10 %: ~9 % of traffic (0.1 / 1.1) where its full
    // share is 50 %. Generous bounds: well below the full share, but not nothing.
    let n = 400;
    let early = flaky_share(&proxies, n).await;
    assert!(
        early > 0 && early < n / 4,
        "recovering share {early}/{n}: expected about 9 %"
    );

    // 3. Converging: the same window near its end (ramp ~0.98) gives it about half.
    let now = now_ms();
    store.begin_recovery(FLAKY, &[1], now - 590_000, 600_000);
    assert!(store.wait_flushed(Duration::from_secs(10)).await);
    for proxy in &proxies {
        proxy
            .wait_for(RECOVERING, |left| left > 0.0 && left <= 10.0)
            .await;
    }
    let late = flaky_share(&proxies, n).await;
    assert!(
        late > n * 35 / 100 && late < n * 65 / 100,
        "late share {late}/{n}: expected about half"
    );

    // 4. A failed request while recovering trips the breaker at once (threshold is 2), with
    // no client failure; afterwards neither proxy tries the channel.
    store.begin_recovery(FLAKY, &[1], now_ms(), 600_000);
    assert!(store.wait_flushed(Duration::from_secs(10)).await);
    for proxy in &proxies {
        proxy.wait_for(RECOVERING, |left| left > 500.0).await;
    }
    flaky.on(generations(), Behavior::status(503));
    let end = Instant::now() + Duration::from_secs(30);
    let mut retried = None;
    'find: while Instant::now() < end {
        for proxy in &proxies {
            let r = proxy.chat(&[]).await;
            assert_eq!(r.status, 200, "{}", r.body);
            if r.header("x-switchyard-attempts") == "2" {
                retried = Some(r);
                break 'find;
            }
        }
    }
    let retried = retried.expect("no request ever reached the recovering channel");
    assert_eq!(retried.channel(), "steady");
    until(
        "the re-trip reaches the fleet",
        Duration::from_secs(5),
        || view(&store, |v| v.breaker_open(FLAKY)),
    )
    .await;
    assert!(view(&store, |v| v.recovering(FLAKY)).is_none());
    let dump = store.dump(now_ms());
    let channel = dump
        .channels
        .iter()
        .find(|c| c.channel_id == FLAKY)
        .unwrap();
    assert_eq!(channel.reason.as_deref(), Some(RECOVERING_TRIP_REASON));
    assert_eq!(channel.consecutive_failures, 1, "one failure was enough");
    for proxy in &proxies {
        proxy.wait_for(BREAKER_OPEN, |open| open == 1.0).await;
        proxy.wait_for(RECOVERING, |left| left == 0.0).await;
    }
    let generations_now = flaky.hits_matching(&generations());
    for proxy in proxies.iter().cycle().take(10) {
        let r = proxy.chat(&[]).await;
        assert_eq!((r.status, r.channel().as_str()), (200, "steady"));
        assert_eq!(r.header("x-switchyard-attempts"), "1");
    }
    // Only probes (at most one per proxy in this short while) may have reached it.
    assert!(flaky.hits_matching(&generations()) <= generations_now + 2);
    assert_eq!(steady.hits_matching(&Matcher::path("/v1/models")), 0);

    drop(proxies);
    store.close(Duration::from_secs(2)).await;
    cleanup(&redis, &prefix);
    let _ = std::fs::remove_file(path);
}
