//! The standalone proxy's own recovery lifecycle (no control plane): a passed probe brings a
//! tripped channel back *recovering* (slow start), its traffic share ramped; a failed request
//! while recovering trips the breaker again at once, with no client failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use switchyard_data_plane::probe::probe_round;
use switchyard_engine::Recovering;
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};
use switchyard_state::RECOVERING_TRIP_REASON;

const CHAT_PATH: &str = "/v1/chat/completions";

/// Channel `a` (the upstream under test, member 1) and an in-process mock `b` (member 2), one
/// tier, equal weights; a 300 s slow start from 10 %; breaker after 5 failures.
fn config(up: &MockUpstream) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\n  cooldown_seconds: 0\n  slow_start_seconds: 300\n  slow_start_initial_percent: 10\nchannels:\n{}  - name: b\n    provider: mock\nroutes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a }}\n      - {{ id: 2, channel: b }}\n",
        channel("a", &up.base_url(), &["ka"])
    )
}

fn window(proxy: &Proxy) -> Option<Recovering> {
    let mut out = None;
    proxy.store.with_view(&mut |v| out = v.recovering(1));
    out
}

#[tokio::test]
async fn standalone_probe_pass_starts_the_slow_start_window() {
    let up = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&up)).await;
    let before = switchyard_data_plane::unix_ms();
    proxy.store.trip_breaker(1, "test", before);
    assert_eq!(probe_round(&proxy.state).await.channels, vec![1]);
    let w = window(&proxy).expect("a recovering window");
    assert!(w.since >= before);
    assert_eq!(w.until - w.since, 300_000);
    let dump = proxy.dump();
    assert!(dump.channels.iter().all(|c| !c.breaker_open));
    assert_eq!(dump.recovering.len(), 1);

    // Early in the window `a` gets about 9 % (0.1 / 1.1) of the traffic, not half.
    let n = 300;
    let mut on_a = 0;
    for _ in 0..n {
        let r = post(&proxy, CHAT_PATH, CHAT).await;
        assert_eq!(r.status, 200, "{}", r.body);
        if r.header("x-switchyard-channel") == "a" {
            on_a += 1;
        }
    }
    assert!(on_a > 0 && on_a < n / 4, "recovering share {on_a}/{n}");
}

#[tokio::test]
async fn a_failed_request_while_recovering_trips_at_once_without_a_client_failure() {
    let up = MockUpstream::start().await.unwrap();
    let proxy = start(&config(&up)).await;
    proxy
        .store
        .trip_breaker(1, "test", switchyard_data_plane::unix_ms());
    assert_eq!(probe_round(&proxy.state).await.channels, vec![1]);
    assert!(window(&proxy).is_some());
    // It answers probes, but real calls fail.
    up.on(Matcher::path(CHAT_PATH), Behavior::status(503));
    let mut tries = 0;
    loop {
        tries += 1;
        assert!(tries < 1_000, "the recovering channel never got a request");
        let r = post(&proxy, CHAT_PATH, CHAT).await;
        assert_eq!(r.status, 200, "{}", r.body);
        if r.header("x-switchyard-attempts") == "2" {
            assert_eq!(r.header("x-switchyard-channel"), "b");
            break;
        }
    }
    // One failure (the threshold is 5): the breaker is open again, the window over.
    let dump = proxy.dump();
    let a = dump.channels.iter().find(|c| c.channel_id == 1).unwrap();
    assert!(a.breaker_open);
    assert_eq!(a.consecutive_failures, 1);
    assert_eq!(a.reason.as_deref(), Some(RECOVERING_TRIP_REASON));
    assert!(window(&proxy).is_none());
    let hits = up.hits();
    for _ in 0..20 {
        let r = post(&proxy, CHAT_PATH, CHAT).await;
        assert_eq!(
            (r.status, r.header("x-switchyard-attempts")),
            (200, "1"),
            "the tripped channel was tried"
        );
    }
    assert_eq!(up.hits(), hits);
}
