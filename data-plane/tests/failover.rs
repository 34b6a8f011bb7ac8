//! Failover, class by class (docs/src/concepts/routing.md), against real mock upstreams on
//! loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};

const CHAT_PATH: &str = "/v1/chat/completions";

/// Two channels: `a` (priority 10, tried first) and `b` (priority 0).
fn two_channels(a: &MockUpstream, a_keys: &[&str], b: &MockUpstream, settings: &str) -> String {
    format!(
        "settings:\n{settings}\nchannels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: up-a, priority: 10 }}\n      - {{ id: 2, channel: b, upstream_model: up-b, priority: 0 }}\n",
        channel("a", &a.base_url(), a_keys),
        channel("b", &b.base_url(), &["kb"]),
    )
}

async fn mocks() -> (MockUpstream, MockUpstream) {
    (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    )
}

#[tokio::test]
async fn retryable_5xx_resends_on_the_channel_then_fails_over() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::status(500));
    let proxy = start(&two_channels(&a, &["ka"], &b, "  channel_retry_times: 1")).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "b");
    assert_eq!(reply.header("x-switchyard-route"), "m");
    assert!(!reply.header("x-switchyard-request-id").is_empty());
    assert_eq!(reply.attempts(), 3);
    assert_eq!(a.hits(), 2, "one send plus channel_retry_times re-sends");
    assert_eq!(b.hits(), 1);
    // The model is rewritten to each member's upstream model; the rest is forwarded.
    assert_eq!(a.requests()[0].json()["model"], "up-a");
    assert_eq!(b.requests()[0].json()["model"], "up-b");
    assert_eq!(b.requests()[0].json()["messages"][0]["content"], "hello");
    assert_eq!(b.requests()[0].credential.as_deref(), Some("kb"));
    // The member is cooled; the channel counted one failure.
    let dump = proxy.dump();
    assert_eq!(
        dump.cooldowns
            .iter()
            .map(|c| c.member_id)
            .collect::<Vec<_>>(),
        vec![1]
    );
    let ch = dump.channels.iter().find(|c| c.channel_id == 1).unwrap();
    assert_eq!(ch.consecutive_failures, 1);
}

#[tokio::test]
async fn retryable_statuses_408_and_429_fail_over() {
    for status in [408u16, 429, 502, 503] {
        let (a, b) = mocks().await;
        a.on(Matcher::any(), Behavior::status(status));
        let proxy = start(&two_channels(&a, &["ka"], &b, "  channel_retry_times: 0")).await;
        let reply = post(&proxy, CHAT_PATH, CHAT).await;
        assert_eq!(
            (reply.status, reply.header("x-switchyard-channel")),
            (200, "b"),
            "{status}"
        );
        assert_eq!(a.hits(), 1, "{status}");
    }
}

#[tokio::test]
async fn channel_specific_retry_codes_and_patterns_are_retryable() {
    let (a, b) = mocks().await;
    a.on(
        Matcher::any(),
        Behavior::status(400).body(r#"{"error":{"message":"upstream busy, try later"}}"#),
    );
    let yaml = two_channels(&a, &["ka"], &b, "  channel_retry_times: 1").replace(
        "    credentials: [\"ka\"]\n",
        "    credentials: [\"ka\"]\n    retry_error_patterns: [\"try later\"]\n",
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        a.hits(),
        2,
        "a matching pattern makes the 400 retryable on the same channel"
    );
    // It counts for the breaker, unlike a plain 4xx.
    assert_eq!(proxy.dump().channels[0].consecutive_failures, 1);
}

#[tokio::test]
async fn credentials_rotate_within_a_channel() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::status(503));
    let proxy = start(&two_channels(
        &a,
        &["k1", "k2", "k3"],
        &b,
        "  channel_retry_times: 2",
    ))
    .await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(reply.status, 200);
    let per_key: Vec<usize> = ["k1", "k2", "k3"]
        .iter()
        .map(|k| a.hits_matching(&Matcher::any().credential(k)))
        .collect();
    assert_eq!(per_key, vec![1, 1, 1], "each credential tried once in turn");
    // Channel failures are counted once per request, however many credentials were tried.
    let ch = proxy
        .dump()
        .channels
        .into_iter()
        .find(|c| c.channel_id == 1)
        .unwrap();
    assert_eq!(ch.consecutive_failures, 1);
}

#[tokio::test]
async fn other_4xx_fails_over_without_resend_and_never_counts_for_the_breaker() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::status(400));
    let proxy = start(&two_channels(&a, &["ka"], &b, "  channel_retry_times: 3")).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(
        (reply.status, reply.header("x-switchyard-channel")),
        (200, "b")
    );
    assert_eq!(a.hits(), 1, "a 4xx is not re-sent on the same channel");
    let dump = proxy.dump();
    assert_eq!(dump.cooldowns.len(), 1, "only that member is cooled");
    assert!(dump.channels.iter().all(|c| c.consecutive_failures == 0));
}

#[tokio::test]
async fn retry_after_extends_the_cooldown() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::status(429).retry_after(120));
    let proxy = start(&two_channels(
        &a,
        &["ka"],
        &b,
        "  cooldown_seconds: 1\n  channel_retry_times: 0",
    ))
    .await;
    let before = switchyard_data_plane::unix_ms();
    assert_eq!(post(&proxy, CHAT_PATH, CHAT).await.status, 200);
    let until = proxy.dump().cooldowns[0].until;
    assert!(until >= before + 119_000, "cooldown {} ms", until - before);
    // The cooled member is skipped by the next request.
    post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(a.hits(), 1);
}

#[tokio::test]
async fn model_not_found_tries_the_same_channels_other_variants_first() {
    let (a, b) = mocks().await;
    a.on(Matcher::any().model("gone"), Behavior::status(404));
    let yaml = format!(
        "channels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: gone, priority: 10 }}\n      - {{ id: 2, channel: a, upstream_model: alias, priority: 5, weight: 1 }}\n      - {{ id: 3, channel: b, upstream_model: up-b, priority: 5, weight: 100000 }}\n",
        channel("a", &a.base_url(), &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(
        (reply.status, reply.header("x-switchyard-channel")),
        (200, "a"),
        "{}",
        reply.body
    );
    assert_eq!(a.hits_matching(&Matcher::any().model("alias")), 1);
    assert_eq!(b.hits(), 0);
}

#[tokio::test]
async fn empty_and_malformed_completions_fail_over() {
    for broken in [
        Behavior::ok().empty_completion(),
        Behavior::ok().malformed(),
    ] {
        let (a, b) = mocks().await;
        a.on(Matcher::any(), broken);
        let proxy = start(&two_channels(&a, &["ka"], &b, "  channel_retry_times: 0")).await;
        let reply = post(&proxy, CHAT_PATH, CHAT).await;
        assert_eq!(
            (reply.status, reply.header("x-switchyard-channel")),
            (200, "b")
        );
        assert_eq!(
            reply.json()["choices"][0]["message"]["content"],
            "Hello from mock"
        );
    }
}

#[tokio::test]
async fn transport_failure_fails_over_and_first_of_a_streak_does_not_cool() {
    let b = MockUpstream::start().await.unwrap();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let yaml = format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, priority: 10 }}\n      - {{ id: 2, channel: b, priority: 0 }}\n",
        channel("a", &format!("http://{closed}"), &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(
        (reply.status, reply.header("x-switchyard-channel")),
        (200, "b")
    );
    let dump = proxy.dump();
    assert!(
        dump.cooldowns.is_empty(),
        "first transport failure only counts"
    );
    assert_eq!(dump.member_failures[0].consecutive_failures, 1);
    // A repeat cools the member.
    post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(proxy.dump().cooldowns.len(), 1);
}

#[tokio::test]
async fn breaker_trips_after_threshold_requests() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::status(500));
    let settings =
        "  channel_retry_times: 0\n  breaker_failure_threshold: 2\n  cooldown_seconds: 0";
    let proxy = start(&two_channels(&a, &["ka"], &b, settings)).await;
    post(&proxy, CHAT_PATH, CHAT).await;
    assert!(!proxy.dump().channels[0].breaker_open);
    post(&proxy, CHAT_PATH, CHAT).await;
    assert!(proxy
        .dump()
        .channels
        .iter()
        .any(|c| c.channel_id == 1 && c.breaker_open));
    let hits = a.hits();
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!((reply.status, reply.attempts()), (200, 1));
    assert_eq!(a.hits(), hits, "a tripped channel is not selected");
    let metrics = send(
        http::Method::GET,
        &format!("{}/metrics", proxy.url),
        None,
        vec![],
        &[],
    )
    .await;
    assert!(
        metrics.body.contains("switchyard_breaker_trips_total 1"),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("switchyard_failovers_total 2"),
        "{}",
        metrics.body
    );
}

#[tokio::test]
async fn non_idempotent_endpoints_are_never_retried() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::status(500));
    // No cooldown, so that every request starts on `a` again.
    let settings = "  channel_retry_times: 2\n  cooldown_seconds: 0";
    let proxy = start(&two_channels(&a, &["ka"], &b, settings)).await;
    let images = post(
        &proxy,
        "/v1/images/generations",
        r#"{"model":"m","prompt":"cat"}"#,
    )
    .await;
    assert_eq!((images.status, images.attempts()), (500, 1));
    let keyed = post_with(
        &proxy,
        "/v1/images/generations",
        r#"{"model":"m","prompt":"cat"}"#,
        &[("idempotency-key", "k")],
    )
    .await;
    assert_eq!(
        keyed.status, 500,
        "images are never retried, even with a key"
    );
    // A background Responses run is not retried without a key; with one it fails over.
    let background = r#"{"model":"m","input":"hi","background":true}"#;
    let responses = post(&proxy, "/v1/responses", background).await;
    assert_eq!((responses.status, responses.attempts()), (500, 1));
    assert_eq!(b.hits(), 0);
    let keyed = post_with(
        &proxy,
        "/v1/responses",
        background,
        &[("idempotency-key", "k")],
    )
    .await;
    assert_eq!(
        (keyed.status, keyed.header("x-switchyard-channel")),
        (200, "b")
    );
    // A stateless one (no `background`) fails over like chat, key or not.
    let stateless = post(&proxy, "/v1/responses", r#"{"model":"m","input":"hi"}"#).await;
    assert_eq!(
        (stateless.status, stateless.header("x-switchyard-channel")),
        (200, "b")
    );
}

#[tokio::test]
async fn exhaustion_returns_the_last_upstream_answer() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::status(503));
    b.on(
        Matcher::any(),
        Behavior::status(429)
            .retry_after(9)
            .body(r#"{"error":{"message":"slow down from b"}}"#),
    );
    let proxy = start(&two_channels(&a, &["ka"], &b, "  channel_retry_times: 0")).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.header("retry-after"), "9");
    assert!(reply.body.contains("slow down from b"), "{}", reply.body);
    assert_eq!(reply.attempts(), 2);
    assert_eq!(reply.header("x-switchyard-channel"), "b");
}

/// An upstream refusing the gateway's own credential (401/403) is the operator's problem: the
/// client never gets that answer, which its SDK would take for its own key's refusal, but a 502
/// naming the channel, in its protocol, with what the upstream said (a key it quotes masked).
#[tokio::test]
async fn an_upstream_refusing_the_gateways_credential_is_a_502_naming_the_channel() {
    let (a, b) = mocks().await;
    a.on(
        Matcher::any(),
        Behavior::status(403).body(r#"{"error":{"message":"this key may not use up-a"}}"#),
    );
    b.on(
        Matcher::any(),
        Behavior::status(401).body(r#"{"error":{"message":"Incorrect API key provided: sk-abc123def456ghi789jkl012","type":"invalid_request_error","code":"invalid_api_key"}}"#),
    );
    let proxy = start(&two_channels(&a, &["ka"], &b, "  channel_retry_times: 0")).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    let error = &reply.json()["error"];
    assert_eq!(error["code"], "upstream_auth_failed");
    assert_eq!(error["type"], "server_error");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("channel `b` (HTTP 401: Incorrect API key provided: sk-a****)"),
        "{message}"
    );
    assert!(!reply.body.contains("sk-abc"), "{}", reply.body);
    assert_eq!(reply.header("x-should-retry"), "false");
    assert_eq!(reply.attempts(), 2);

    // An Anthropic client gets the same in its own shape, not an `authentication_error`.
    let messages =
        r#"{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}"#;
    let reply = post(&proxy, "/v1/messages", messages).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "api_error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("refused this gateway's own credentials for its channel `b`"));
}

/// A credential the upstream refuses is skipped for the rest of the request: the channel's next
/// credential is tried on the same channel (key rotation) before any other channel.
#[tokio::test]
async fn a_refused_credential_rotates_to_the_channels_next_one() {
    let (a, b) = mocks().await;
    a.on(Matcher::any().credential("revoked"), Behavior::status(401));
    let proxy = start(&two_channels(
        &a,
        &["revoked", "good"],
        &b,
        "  channel_retry_times: 1",
    ))
    .await;
    let revoked = Matcher::any().credential("revoked");
    // Each request starts its rotation at a random credential: send until one has met the
    // revoked key (the chance that 100 never do is 2^-100).
    let mut sent = 0;
    while a.hits_matching(&revoked) == 0 {
        assert!(
            sent < 100,
            "no request started its rotation at the revoked key"
        );
        let reply = post(&proxy, CHAT_PATH, CHAT).await;
        assert_eq!(
            (reply.status, reply.header("x-switchyard-channel")),
            (200, "a"),
            "{}",
            reply.body
        );
        sent += 1;
    }
    assert_eq!(
        b.hits(),
        0,
        "the channel's good key served; no failover was needed"
    );
}

#[tokio::test]
async fn retry_times_bounds_cross_channel_rounds() {
    let (a, b) = mocks().await;
    let c = MockUpstream::start().await.unwrap();
    for m in [&a, &b, &c] {
        m.on(Matcher::any(), Behavior::status(500));
    }
    let yaml = format!(
        "settings:\n  retry_times: 1\n  channel_retry_times: 0\nchannels:\n{}{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ channel: a, priority: 3 }}\n      - {{ channel: b, priority: 2 }}\n      - {{ channel: c, priority: 1 }}\n",
        channel("a", &a.base_url(), &["k"]),
        channel("b", &b.base_url(), &["k"]),
        channel("c", &c.base_url(), &["k"]),
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!((reply.status, reply.attempts()), (500, 2));
    assert_eq!((a.hits(), b.hits(), c.hits()), (1, 1, 0));
}

#[tokio::test]
async fn deadline_bounds_a_hung_upstream_across_retries() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::ok().hang());
    b.on(Matcher::any(), Behavior::ok().hang());
    let settings =
        "  request_timeout_ms: 1500\n  first_byte_timeout_ms: 60000\n  channel_retry_times: 2";
    let proxy = start(&two_channels(&a, &["ka"], &b, settings)).await;
    let started = Instant::now();
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    let took = started.elapsed();
    assert_eq!(reply.status, 504, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "upstream_timeout");
    // One deadline for the whole request: the first hung attempt used it all, so no retry and
    // no other channel was tried (per-attempt deadlines would have made three or more attempts).
    assert_eq!(reply.attempts(), 1, "{:?}", reply.headers);
    assert_eq!((a.hits(), b.hits()), (1, 0));
    assert!(
        took >= Duration::from_millis(1400),
        "gave up early: {took:?}"
    );
    // Far below the 60 s first-byte timeout it would otherwise have waited for.
    assert!(took < Duration::from_secs(30), "held for {took:?}");
}

#[tokio::test]
async fn first_byte_timeout_moves_on_to_the_next_member() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::ok().hang());
    let settings = "  first_byte_timeout_ms: 300\n  channel_retry_times: 0";
    let proxy = start(&two_channels(&a, &["ka"], &b, settings)).await;
    let started = Instant::now();
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(
        (reply.status, reply.header("x-switchyard-channel")),
        (200, "b")
    );
    // `a` was given up on at its first byte's deadline: one attempt each, well before the
    // request's own deadline would have ended it.
    assert_eq!(reply.attempts(), 2, "{:?}", reply.headers);
    assert_eq!((a.hits(), b.hits()), (1, 1));
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn cross_channel_failover_disabled_stops_after_the_first_channel() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::status(500));
    let settings = "  cross_channel_failover_enabled: false\n  channel_retry_times: 1";
    let proxy = start(&two_channels(&a, &["k1", "k2"], &b, settings)).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(reply.status, 500);
    assert_eq!(
        (a.hits(), b.hits()),
        (2, 0),
        "credential rotation still on, no other channel"
    );
}

#[tokio::test]
async fn auto_ban_keyword_disables_only_that_credential_on_a_multi_key_channel() {
    let (a, b) = mocks().await;
    a.on(
        Matcher::any().credential("k1"),
        Behavior::status(429).body(r#"{"error":{"message":"You exceeded your current quota","code":"insufficient_quota"}}"#),
    );
    let yaml = two_channels(
        &a,
        &["k1", "k2"],
        &b,
        "  channel_retry_times: 1\n  cooldown_seconds: 0",
    )
    .replace(
        "    credentials: [\"k1\", \"k2\"]\n",
        "    credentials: [\"k1\", \"k2\"]\n    auto_ban: true\n",
    );
    let proxy = start(&yaml).await;
    // Each request starts its rotation at a random credential: send until one has met k1 (the
    // chance that 200 never do is 2^-200), then five more that must all avoid it.
    let k1 = Matcher::any().credential("k1");
    let (mut sent, mut since_k1) = (0, 0);
    while since_k1 < 6 {
        assert!(sent < 200, "no request started its rotation at k1");
        let reply = post(&proxy, CHAT_PATH, CHAT).await;
        assert_eq!(
            (reply.status, reply.header("x-switchyard-channel")),
            (200, "a"),
            "{}",
            reply.body
        );
        sent += 1;
        if a.hits_matching(&k1) > 0 {
            since_k1 += 1;
        }
    }
    assert_eq!(
        a.hits_matching(&k1),
        1,
        "k1 is disabled after its first quota error"
    );
    let dump = proxy.dump();
    assert_eq!(dump.credentials_disabled.len(), 1);
    assert!(
        dump.channels.iter().all(|c| !c.breaker_open),
        "only the credential, not the channel"
    );
}

#[tokio::test]
async fn client_cancel_stops_the_request_without_retry_or_leak() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::ok().hang());
    let proxy = start(&two_channels(&a, &["ka"], &b, "  channel_retry_times: 2")).await;
    let cancelled =
        tokio::time::timeout(Duration::from_millis(300), post(&proxy, CHAT_PATH, CHAT)).await;
    assert!(cancelled.is_err(), "the client gave up");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        (a.hits(), b.hits()),
        (1, 0),
        "no retry after the client left"
    );
    assert!(
        proxy.dump().in_flight.is_empty(),
        "the in-flight count is released"
    );
}

/// A "model not found" answer keeps that (channel, upstream model) out of later requests too:
/// the next requests go straight to the channel's other variant, never back to the missing model.
#[tokio::test]
async fn model_not_found_keeps_that_model_out_of_later_requests() {
    let (a, b) = mocks().await;
    a.on(
        Matcher::any().model("gone"),
        Behavior::status(404).body(
            r#"{"error":{"message":"The model `gone` does not exist","type":"invalid_request_error","code":"model_not_found"}}"#,
        ),
    );
    let yaml = format!(
        "channels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: gone, priority: 10 }}\n      - {{ id: 2, channel: a, upstream_model: alias, priority: 5, weight: 1 }}\n      - {{ id: 3, channel: b, upstream_model: up-b, priority: 5, weight: 100000 }}\n",
        channel("a", &a.base_url(), &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    );
    let proxy = start(&yaml).await;
    for n in 1..=5 {
        let reply = post(&proxy, CHAT_PATH, CHAT).await;
        assert_eq!(reply.status, 200, "request {n}: {}", reply.body);
    }
    assert_eq!(
        a.hits_matching(&Matcher::any().model("gone")),
        1,
        "the missing model was asked again"
    );
    let cooled: Vec<_> = proxy.dump().cooldowns.iter().map(|c| c.member_id).collect();
    assert_eq!(cooled, vec![1]);
}

/// ... and out of every other route's members naming the same (channel, upstream model): an alias
/// route never rediscovers the missing model with a failed request of its own.
#[tokio::test]
async fn model_not_found_marks_that_model_unusable_for_every_route() {
    let (a, b) = mocks().await;
    a.on(
        Matcher::any().model("gone"),
        Behavior::status(404).body(
            r#"{"error":{"message":"The model `gone` does not exist","type":"invalid_request_error","code":"model_not_found"}}"#,
        ),
    );
    let yaml = format!(
        "channels:\n{}{}routes:\n  - model_pattern: m\n    members:\n      - {{ id: 1, channel: a, upstream_model: gone, priority: 10 }}\n      - {{ id: 2, channel: b, upstream_model: up-b, priority: 0 }}\n  - model_pattern: alias\n    members:\n      - {{ id: 3, channel: a, upstream_model: gone, priority: 10 }}\n      - {{ id: 4, channel: a, upstream_model: other, priority: 10 }}\n      - {{ id: 5, channel: b, upstream_model: up-b, priority: 0 }}\n",
        channel("a", &a.base_url(), &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.attempts(), 2);
    let mut cooled: Vec<_> = proxy.dump().cooldowns.iter().map(|c| c.member_id).collect();
    cooled.sort_unstable();
    assert_eq!(
        cooled,
        vec![1, 3],
        "the alias route's member of the same model cooled too"
    );
    // The alias route goes straight to the same channel's other model.
    let alias = CHAT.replace(r#""model":"m""#, r#""model":"alias""#);
    for n in 1..=4 {
        let reply = post(&proxy, CHAT_PATH, &alias).await;
        assert_eq!(reply.status, 200, "request {n}: {}", reply.body);
        assert_eq!(reply.attempts(), 1, "request {n}");
    }
    assert_eq!(a.hits_matching(&Matcher::any().model("gone")), 1);
}

/// With room in the budget, every re-send the settings allow happens (their pauses add up to
/// 190-375 ms; `failover::tests` pins the pause lengths and the deadline rule).
#[tokio::test]
async fn re_sends_happen_with_their_backoff_when_the_budget_allows() {
    let (a, b) = mocks().await;
    a.on(Matcher::any(), Behavior::status(503));
    let settings = "  request_timeout_ms: 20000\n  channel_retry_times: 5\n  cross_channel_failover_enabled: false";
    let proxy = start(&two_channels(&a, &["ka"], &b, settings)).await;
    let reply = post(&proxy, CHAT_PATH, CHAT).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(a.hits(), 6, "one send and five re-sends");
    assert_eq!(b.hits(), 0);
}
