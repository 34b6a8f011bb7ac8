//! Shadow traffic through a real in-process proxy: copies reach the target only after the
//! client's answer, never change it, and stop at the rule's caps (requests per second, spend per
//! day, the error-rate stop, expiry); a translated shadow (OpenAI client, Anthropic target) is
//! compared in the client's protocol.
//!
//! No timing decides a pass or fail: the caps are asserted against counts (with the token
//! bucket's refill bounded by the run's own measured duration).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

// A proxy whose usage (and shadow comparisons) wait in a reporter nobody sends.
use common::{post, start_accounted as start, Proxy, CHAT, TOKEN};
use switchyard_data_plane::config::parse_yaml;
use switchyard_engine::Snapshot;
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};

/// `switchyard_shadow_requests_total{rule, outcome}` as the proxy's metrics page says.
fn shadowed(proxy: &Proxy, rule: &str, outcome: &str) -> u64 {
    let page = proxy.state.metrics.render();
    let prefix =
        format!("switchyard_shadow_requests_total{{rule=\"{rule}\",outcome=\"{outcome}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

fn finished(proxy: &Proxy, rule: &str) -> u64 {
    shadowed(proxy, rule, "success") + shadowed(proxy, rule, "failure")
}

/// Waits (at most a minute) until `ok` holds.
async fn until(what: &str, ok: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const LIVE: &str = "mock://sim?content=the%20live%20answer%20is%20here";

fn yaml(target: &str, rule: &str) -> String {
    format!(
        "channels:\n  - {{ id: 1, name: live, provider: mock, base_url: '{LIVE}' }}\n  - {{ id: 2, name: cand, provider: mock, base_url: '{target}' }}\nroutes:\n  - model_pattern: m\n    members:\n      - {{ id: 10, channel: live }}\n  - model_pattern: candidate\n    members:\n      - {{ id: 20, channel: cand }}\nprices:\n  - {{ channel: cand, model_pattern: '*', input_per_million: 1000, output_per_million: 1000 }}\nshadows:\n  - {{ name: trial, model_pattern: m, target_member: 20, {rule} }}\n"
    )
}

#[tokio::test]
async fn the_client_gets_the_live_answer_and_the_rps_cap_holds() {
    let (proxy, _usage) = start(&yaml(
        "mock://sim?content=another%20answer",
        "sample_percent: 100, max_rps: 2",
    ))
    .await;
    let started = Instant::now();
    for _ in 0..20 {
        let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(
            reply.json()["choices"][0]["message"]["content"],
            "the live answer is here"
        );
        assert_eq!(reply.header("x-switchyard-channel"), "live");
        assert!(
            !reply.headers.keys().any(|k| k.as_str().contains("shadow")),
            "{:?}",
            reply.headers
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    let capped = shadowed(&proxy, "trial", "rps_capped");
    until("the queued shadows to finish", || {
        finished(&proxy, "trial") + capped == 20
    })
    .await;
    // The bucket holds one second (2 tokens) and refills 2 a second.
    let bound = 2 + (elapsed * 2.0).ceil() as u64;
    assert!(
        finished(&proxy, "trial") <= bound,
        "{} shadows in {elapsed:.2}s with max_rps 2",
        finished(&proxy, "trial")
    );
    assert!(capped >= 20 - bound, "{capped}");
}

#[tokio::test]
async fn the_spend_cap_stops_shadowing_for_the_day() {
    // 1000 USD per million tokens each way: a mock answer costs well over a micro-USD, so a
    // cap of 0.000001 USD is spent by the first shadow.
    let (proxy, _usage) = start(&yaml(
        "mock://sim",
        "sample_percent: 100, max_rps: 1000, max_daily_spend_usd: 0.000001",
    ))
    .await;
    assert_eq!(post(&proxy, "/v1/chat/completions", CHAT).await.status, 200);
    until("the first shadow", || finished(&proxy, "trial") == 1).await;
    for _ in 0..5 {
        assert_eq!(post(&proxy, "/v1/chat/completions", CHAT).await.status, 200);
    }
    assert_eq!(shadowed(&proxy, "trial", "spend_capped"), 5);
    assert_eq!(finished(&proxy, "trial"), 1);
}

#[tokio::test]
async fn a_failing_target_stops_the_rule_at_its_error_rate_and_the_client_never_fails() {
    let (proxy, _usage) = start(&yaml(
        "mock://sim?failure_rate=1&failure_status=503",
        "sample_percent: 100, max_rps: 1000, error_rate_stop: 0.5, error_rate_min_sample: 4",
    ))
    .await;
    for _ in 0..4 {
        let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    until("four shadow failures", || {
        shadowed(&proxy, "trial", "failure") == 4
    })
    .await;
    for _ in 0..3 {
        assert_eq!(post(&proxy, "/v1/chat/completions", CHAT).await.status, 200);
    }
    assert_eq!(shadowed(&proxy, "trial", "stopped"), 3);
    assert_eq!(shadowed(&proxy, "trial", "failure"), 4);
    // The shadow failures touched no live state: nothing cools, fails or is in flight for
    // the target (and its channel's breaker counted nothing).
    let dump = proxy.dump();
    assert!(dump.cooldowns.is_empty(), "{dump:?}");
    assert!(dump.member_failures.is_empty(), "{dump:?}");
    assert!(dump.in_flight.iter().all(|e| e.in_flight == 0), "{dump:?}");
}

#[tokio::test]
async fn an_expired_rule_shadows_nothing() {
    let (proxy, _usage) = start(&yaml(
        "mock://sim",
        "sample_percent: 100, max_rps: 1000, expires_at: '2020-01-01T00:00:00Z'",
    ))
    .await;
    for _ in 0..3 {
        assert_eq!(post(&proxy, "/v1/chat/completions", CHAT).await.status, 200);
    }
    let page = proxy.state.metrics.render();
    assert!(
        !page.contains("switchyard_shadow_requests_total{"),
        "{page}"
    );
}

#[tokio::test]
async fn a_stream_is_shadowed_when_it_ends_and_embeddings_are_not() {
    let (proxy, usage) = start(&yaml("mock://sim", "sample_percent: 100, max_rps: 1000")).await;
    let reply = post(&proxy, "/v1/chat/completions", common::CHAT_STREAM).await;
    assert_eq!(reply.status, 200);
    assert!(reply.body.contains("\"the live\""), "{}", reply.body);
    assert!(!reply.body.contains("Hello from mock"), "{}", reply.body);
    until("the shadow of the stream", || {
        finished(&proxy, "trial") == 1
    })
    .await;
    assert_eq!(shadowed(&proxy, "trial", "success"), 1);
    let reply = post(&proxy, "/v1/embeddings", r#"{"model":"m","input":"x"}"#).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // An offer is made when the request finishes, before its answer leaves: nothing was
    // queued for the embeddings request.
    assert_eq!(proxy.state.shadows.pending(), 0);
    assert_eq!(finished(&proxy, "trial"), 1);
    // The shadow stream was read to its end: its usage and cost are counted, and both streams
    // were read back and compared: the same finish, other words.
    let batch = usage.take_batch().unwrap();
    let r = &batch.shadows[0];
    assert_eq!((r.pairs, r.live_ok, r.shadow_ok, r.compared), (1, 1, 1, 1));
    assert!(
        r.shadow_output_tokens > 0 && r.live_output_tokens > 0,
        "{r:?}"
    );
    assert!(
        r.shadow_cost_pico_usd > 0 && r.shadow_unpriced == 0,
        "{r:?}"
    );
    assert_eq!(r.same_finish_reason, 1, "{r:?}");
    assert_eq!(r.same_tool_names, 1, "{r:?}");
    assert!(r.similarity_milli_sum < 1000, "{r:?}");
    assert!(r.length_ratio_milli_sum > 0, "{r:?}");
}

#[tokio::test]
async fn a_shadow_to_an_anthropic_target_is_translated_and_compared() {
    let up = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n  - {{ id: 1, name: live, provider: mock, base_url: 'mock://sim' }}\n  - {{ id: 2, name: claude, provider: anthropic, base_url: '{}', credentials: ['sk-ant'] }}\nroutes:\n  - model_pattern: m\n    members:\n      - {{ id: 10, channel: live }}\nshadows:\n  - {{ name: to-claude, model_pattern: m, target_channel: claude, target_model: claude-x, sample_percent: 100, max_rps: 1000 }}\n",
        up.base_url()
    );
    let (proxy, usage) = start(&yaml).await;
    let reply = post(&proxy, "/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.json()["choices"][0]["message"]["content"].is_string());
    until("the shadow", || finished(&proxy, "to-claude") == 1).await;
    assert_eq!(shadowed(&proxy, "to-claude", "success"), 1);
    let requests = up.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].path, "/v1/messages",
        "sent in Anthropic's protocol"
    );
    assert_eq!(requests[0].credential.as_deref(), Some("sk-ant"));
    let batch = usage.take_batch().unwrap();
    let record = &batch.shadows[0];
    assert_eq!(
        (
            record.pairs,
            record.live_ok,
            record.shadow_ok,
            record.compared
        ),
        (1, 1, 1, 1)
    );
    // Both answers are plain text that ended normally: the Anthropic `end_turn` came back as
    // OpenAI's `stop`, and both simulated answers say the same.
    assert_eq!(record.same_finish_reason, 1);
    assert_eq!(record.same_tool_names, 1);
    assert_eq!(record.similarity_milli_sum, 1000);
    assert!(record.shadow_input_tokens > 0);
    // The client's usage is the live request's alone.
    let live_usage: u64 = batch.records.iter().map(|r| r.requests).sum();
    assert_eq!(live_usage, 1);
    assert!(batch.records.iter().all(|r| r.channel == "live"));

    // A streamed request: the shadow streams from Anthropic, translated into the client's
    // protocol, read to its end and compared with the live stream: the same words and finish.
    let reply = post(&proxy, "/v1/chat/completions", common::CHAT_STREAM).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    until("the streamed shadow", || finished(&proxy, "to-claude") == 2).await;
    assert_eq!(shadowed(&proxy, "to-claude", "success"), 2);
    let batch = usage.take_batch().unwrap();
    let record = &batch.shadows[0];
    assert_eq!((record.pairs, record.shadow_ok, record.compared), (1, 1, 1));
    assert!(record.shadow_output_tokens > 0, "{record:?}");
    assert_eq!(record.same_finish_reason, 1, "{record:?}");
    assert_eq!(record.similarity_milli_sum, 1000, "{record:?}");
}

#[test]
fn a_bad_rule_in_the_file_names_its_field() {
    for (rule, path) in [
        (
            "sample_percent: 150, max_rps: 1",
            "shadows[0].sample_percent",
        ),
        ("sample_percent: 5, max_rps: 0", "shadows[0].max_rps"),
        (
            "sample_percent: 5, max_rps: 1, error_rate_stop: 2",
            "shadows[0].error_rate_stop",
        ),
        (
            "sample_percent: 5, max_rps: 1, expires_at: soon",
            "shadows[0].expires_at",
        ),
    ] {
        let error = parse_yaml(&yaml("mock://sim", rule), 1).unwrap_err();
        assert_eq!(error.path, path, "{rule}: {error}");
    }
    let unknown = yaml("mock://sim", "sample_percent: 5, max_rps: 1")
        .replace("target_member: 20", "target_member: 99");
    let error = parse_yaml(&unknown, 1).unwrap_err();
    assert_eq!(error.path, "shadows[0].target_member", "{error}");
}

/// Route `m` served by the simulation; rule `stuck` copies every request to a target that never
/// answers, rule `fine` every request to one that answers at once. `rules` is appended to each
/// rule, `settings` (if any) is the file's settings block.
fn two_rules(stuck: &MockUpstream, settings: &str, stuck_rule: &str) -> String {
    format!(
        "{settings}channels:\n  - {{ id: 1, name: live, provider: mock, base_url: '{LIVE}' }}\n  - {{ id: 2, name: stuck, provider: openai, base_url: '{}', credentials: ['sk-stuck'] }}\n  - {{ id: 3, name: fine, provider: mock, base_url: 'mock://sim' }}\nroutes:\n  - model_pattern: m\n    members:\n      - {{ id: 10, channel: live }}\nshadows:\n  - {{ id: 1, name: stuck, model_pattern: m, target_channel: stuck, target_model: x, sample_percent: 100, max_rps: 100000{stuck_rule} }}\n  - {{ id: 2, name: fine, model_pattern: m, target_channel: fine, target_model: y, sample_percent: 100, max_rps: 100000 }}\n",
        stuck.base_url()
    )
}

/// A rule's copies hold only that rule's room: a target that hangs fills its own queue (then its
/// copies are dropped as `queue_full`) while every copy of the other rule is sent, at once.
#[tokio::test]
async fn a_hanging_target_takes_no_room_from_another_rule() {
    let stuck = MockUpstream::start().await.unwrap();
    stuck.on(Matcher::any(), Behavior::ok().hang());
    let (proxy, _usage) = start(&two_rules(&stuck, "", "")).await;
    const N: u64 = 120;
    for _ in 0..N {
        assert_eq!(post(&proxy, "/v1/chat/completions", CHAT).await.status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while finished(&proxy, "fine") < N && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        (
            finished(&proxy, "fine"),
            shadowed(&proxy, "fine", "queue_full")
        ),
        (N, 0),
        "every copy of the rule whose target answers is sent"
    );
    assert_eq!(shadowed(&proxy, "fine", "success"), N);
    // The hanging target holds at most its rule's calls in flight (8) and queued copies (64):
    // nothing of it has finished, and the rest of its copies were dropped.
    assert!(
        stuck.hits() <= 8,
        "{} calls to the stuck target",
        stuck.hits()
    );
    assert_eq!(finished(&proxy, "stuck"), 0);
    assert!(
        shadowed(&proxy, "stuck", "queue_full") >= N - 8 - 64,
        "{}",
        shadowed(&proxy, "stuck", "queue_full")
    );
}

/// Copies of a rule that are waiting when a snapshot disables it are dropped when their turn
/// comes, not sent; the calls already in flight end on the first-byte timeout.
#[tokio::test]
async fn copies_queued_before_a_rule_is_disabled_are_never_sent() {
    let stuck = MockUpstream::start().await.unwrap();
    stuck.on(Matcher::any(), Behavior::ok().hang());
    let settings = "settings:\n  first_byte_timeout_ms: 3000\n";
    let (proxy, _usage) = start(&two_rules(&stuck, settings, "")).await;
    const N: u64 = 40;
    for _ in 0..N {
        assert_eq!(post(&proxy, "/v1/chat/completions", CHAT).await.status, 200);
    }
    until("the stuck rule's calls to reach its target", || {
        stuck.hits() >= 8
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = stuck.hits() as u64;
    // Disable the rule: a new snapshot, installed by the proxy.
    let disabled = two_rules(&stuck, settings, ", enabled: false");
    let tokens = format!("{disabled}\ntokens:\n  - name: test\n    token: {TOKEN}\n");
    let parts = parse_yaml(&tokens, 2).unwrap();
    proxy
        .snapshots
        .send_replace(Some(Arc::new(Snapshot::new(parts))));
    until("the snapshot disabling the rule", || {
        proxy
            .state
            .views
            .load()
            .as_ref()
            .is_some_and(|v| v.snapshot.revision == 2)
    })
    .await;
    // The calls in flight time out; the copies waiting are then dropped, none sent.
    until("every shadow copy to be done", || {
        proxy.state.shadows.pending() == 0
    })
    .await;
    assert_eq!(
        stuck.hits() as u64,
        sent,
        "no copy went out after the disabling snapshot"
    );
    assert!(sent <= 8, "{sent} calls in flight to one target");
    assert_eq!(shadowed(&proxy, "stuck", "failure"), sent);
    assert_eq!(shadowed(&proxy, "stuck", "stopped"), N - sent);
    assert_eq!(shadowed(&proxy, "fine", "success"), N);
}
