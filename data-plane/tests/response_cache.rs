//! The exact response cache through the official SDKs (openai, anthropic, google-genai): a
//! second identical request, plain or streamed (chat, legacy completions, the Responses API,
//! Gemini's JSON-array stream), is answered from the cache without reaching the upstream and
//! with the same content; a changed parameter misses; scopes keep teams apart;
//! `Cache-Control: no-cache` / `no-store`; an upstream error or a cut stream is never served
//! from the cache; a Redis store killed mid-run is bypassed with no failed request.
//!
//! `SWITCHYARD_TEST_PYTHON` must name a python with `openai`, `anthropic` and `google-genai`
//! installed (scripts/test sets it); without it these tests fail rather than skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};
use switchyard_state::cache::RedisCache;

use common::{send, start, Proxy};

const TEXT: &str = "Cached answer from the mock";

/// Channels of the three protocols on `mock`, a route per protocol (and one each for legacy
/// completions and the Responses API) under a cache rule
/// (`cache-*`, team scope), one route without any rule, and three tokens: two of team `a`, one
/// of team `b`.
fn yaml(mock: &MockUpstream, rule_extra: &str) -> String {
    let url = mock.base_url();
    format!(
        "settings:\n  channel_retry_times: 0\n  retry_times: 0\nchannels:\n\
  - {{ name: up-openai, provider: openai, base_url: {url}, credentials: [k1] }}\n\
  - {{ name: up-anthropic, provider: anthropic, base_url: {url}, credentials: [k2] }}\n\
  - {{ name: up-gemini, provider: gemini, base_url: {url}, credentials: [k3] }}\n\
routes:\n\
  - {{ model_pattern: cache-openai, members: [{{ channel: up-openai, upstream_model: real-openai }}] }}\n\
  - {{ model_pattern: cache-anthropic, members: [{{ channel: up-anthropic, upstream_model: real-anthropic }}] }}\n\
  - {{ model_pattern: cache-gemini, members: [{{ channel: up-gemini, upstream_model: real-gemini }}] }}\n\
  - {{ model_pattern: cache-completions, members: [{{ channel: up-openai, upstream_model: real-completions }}] }}\n\
  - {{ model_pattern: cache-responses, members: [{{ channel: up-openai, upstream_model: real-responses }}] }}\n\
  - {{ model_pattern: cache-broken, members: [{{ channel: up-openai, upstream_model: real-broken }}] }}\n\
  - {{ model_pattern: cache-cut, members: [{{ channel: up-openai, upstream_model: real-cut }}] }}\n\
  - {{ model_pattern: plain-openai, members: [{{ channel: up-openai, upstream_model: real-plain }}] }}\n\
teams:\n  - {{ name: a, models: ['*'] }}\n  - {{ name: b, models: ['*'] }}\n\
tokens:\n\
  - {{ name: a1, token: sk-a1, team: a }}\n\
  - {{ name: a2, token: sk-a2, team: a }}\n\
  - {{ name: b1, token: sk-b1, team: b }}\n\
cache_rules:\n\
  - {{ name: all, model_pattern: 'cache-*', endpoints: [chat_completions, completions, messages, generate_content, responses], ttl_seconds: 300, scope: team{rule_extra} }}\n"
    )
}

async fn mock() -> MockUpstream {
    let mock = MockUpstream::start().await.unwrap();
    for model in [
        "real-openai",
        "real-anthropic",
        "real-gemini",
        "real-plain",
        "real-completions",
        "real-responses",
    ] {
        mock.on(Matcher::any().model(model), Behavior::ok().text(TEXT));
    }
    mock
}

fn upstream_calls(mock: &MockUpstream, model: &str) -> usize {
    mock.hits_matching(&Matcher::any().model(model))
}

/// Runs `steps` through `sdk`'s client script with `token`; one result per step.
async fn run(sdk: &str, url: &str, token: &str, model: &str, steps: Value) -> Vec<Value> {
    let script = format!("{}/tests/sdk/cache_client.py", env!("CARGO_MANIFEST_DIR"));
    let args = [script.as_str(), sdk, url, token, model, &steps.to_string()];
    let printed = common::run_python_with(args.iter().map(|a| (*a).to_owned()).collect()).await;
    let results: Vec<Value> = serde_json::from_value(printed).unwrap();
    for (i, r) in results.iter().enumerate() {
        assert!(r.get("exception").is_none(), "{sdk} step {i}: {r}");
    }
    results
}

fn step(prompt: &str, stream: bool) -> Value {
    json!({"prompt": prompt, "stream": stream})
}

fn caches(results: &[Value]) -> Vec<&str> {
    results
        .iter()
        .map(|r| r["cache"].as_str().unwrap_or("none"))
        .collect()
}

/// Per SDK: plain twice, streamed twice, then each prompt the other way (the one stored form
/// serves both), then a changed temperature.
async fn second_identical_requests_are_served_from_the_cache(sdk: &str, model: &str, real: &str) {
    let mock = mock().await;
    let proxy = start(&yaml(&mock, "")).await;
    let steps = json!([
        step("plain prompt", false),
        step("plain prompt", false),
        step("streamed prompt", true),
        step("streamed prompt", true),
        step("plain prompt", true),
        step("streamed prompt", false),
        {"prompt": "plain prompt", "stream": false, "temperature": 0.5},
    ]);
    let results = run(sdk, &proxy.url, "sk-a1", model, steps).await;
    assert_eq!(
        caches(&results),
        ["miss", "hit", "miss", "hit", "hit", "hit", "miss"],
        "{sdk}: {results:?}"
    );
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["text"], TEXT, "{sdk} step {i}: same content: {r}");
    }
    // The finish reason survives the canonical form, plain and streamed.
    assert_eq!(results[1]["finish"], results[0]["finish"], "{sdk}");
    assert_eq!(results[3]["finish"], results[2]["finish"], "{sdk}");
    assert!(results[1]["age"].is_string(), "{sdk}: a hit has an Age");
    assert_eq!(
        upstream_calls(&mock, real),
        3,
        "{sdk}: only the misses went upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_second_identical_requests_are_hits() {
    second_identical_requests_are_served_from_the_cache("openai", "cache-openai", "real-openai")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_sdk_second_identical_requests_are_hits() {
    second_identical_requests_are_served_from_the_cache(
        "anthropic",
        "cache-anthropic",
        "real-anthropic",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genai_sdk_second_identical_requests_are_hits() {
    second_identical_requests_are_served_from_the_cache("genai", "cache-gemini", "real-gemini")
        .await;
}

/// Streamed first: the stream is stored whole and answers a second stream and a plain request
/// alike; a plain answer answers a stream.
async fn streams_are_stored_whole_and_replayed(sdk: &str, model: &str, real: &str) {
    let mock = mock().await;
    let proxy = start(&yaml(&mock, "")).await;
    let steps = json!([
        step("streamed prompt", true),
        step("streamed prompt", true),
        step("streamed prompt", false),
        step("plain prompt", false),
        step("plain prompt", true),
    ]);
    let results = run(sdk, &proxy.url, "sk-a1", model, steps).await;
    assert_eq!(
        caches(&results),
        ["miss", "hit", "hit", "miss", "hit"],
        "{sdk}: {results:?}"
    );
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["text"], TEXT, "{sdk} step {i}: same content: {r}");
        assert_eq!(r["finish"], results[0]["finish"], "{sdk} step {i}: {r}");
    }
    assert_eq!(
        upstream_calls(&mock, real),
        2,
        "{sdk}: the second identical requests never reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_streamed_completions_are_stored_and_replayed() {
    streams_are_stored_whole_and_replayed(
        "openai-completions",
        "cache-completions",
        "real-completions",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_streamed_stateless_responses_are_stored_and_replayed() {
    streams_are_stored_whole_and_replayed("openai-responses", "cache-responses", "real-responses")
        .await;
}

/// The text of a Gemini answer, a JSON array of them, or their SSE events.
fn gemini_text(body: &str) -> String {
    let answers: Vec<Value> = match serde_json::from_str::<Value>(body) {
        Ok(Value::Array(items)) => items,
        Ok(one) => vec![one],
        Err(_) => body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect(),
    };
    answers
        .iter()
        .flat_map(|a| a["candidates"][0]["content"]["parts"].as_array().cloned())
        .flatten()
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

/// No SDK asks for it (google-genai streams with `alt=sse`), but the REST API's own stream is a
/// JSON array: stored whole, replayed as one, and it answers the other shapes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_json_array_stream_is_stored_and_replayed_as_one() {
    let mock = mock().await;
    let proxy = start(&yaml(&mock, "")).await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "array"}]}],
        "generationConfig": {"temperature": 0}})
    .to_string()
    .into_bytes();
    let gemini = |action: &str| {
        let url = format!("{}/v1beta/models/cache-gemini:{action}", proxy.url);
        let body = body.clone();
        async move {
            send(
                Method::POST,
                &url,
                None,
                body,
                &[("x-goog-api-key", "sk-a1")],
            )
            .await
        }
    };
    let first = gemini("streamGenerateContent").await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-switchyard-cache"), "miss");
    let second = gemini("streamGenerateContent").await;
    assert_eq!(
        second.header("x-switchyard-cache"),
        "hit",
        "{}",
        second.body
    );
    assert!(second
        .header("content-type")
        .starts_with("application/json"));
    let array: Vec<Value> = serde_json::from_str(&second.body).expect("a JSON array");
    assert_eq!(
        array.last().unwrap()["candidates"][0]["finishReason"],
        "STOP"
    );
    assert_eq!(gemini_text(&first.body), TEXT);
    assert_eq!(gemini_text(&second.body), TEXT, "same content");
    let plain = gemini("generateContent").await;
    assert_eq!(plain.header("x-switchyard-cache"), "hit");
    assert_eq!(gemini_text(&plain.body), TEXT);
    let events = gemini("streamGenerateContent?alt=sse").await;
    assert_eq!(events.header("x-switchyard-cache"), "hit");
    assert!(events
        .header("content-type")
        .starts_with("text/event-stream"));
    assert_eq!(gemini_text(&events.body), TEXT);
    assert_eq!(upstream_calls(&mock, "real-gemini"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_scope_keeps_teams_apart_and_cache_control_is_obeyed() {
    let mock = mock().await;
    let proxy = start(&yaml(&mock, "")).await;
    let url = proxy.url.clone();
    let first = run(
        "openai",
        &url,
        "sk-a1",
        "cache-openai",
        json!([step("team", false)]),
    )
    .await;
    let same_team = run(
        "openai",
        &url,
        "sk-a2",
        "cache-openai",
        json!([step("team", false)]),
    )
    .await;
    let other_team = run(
        "openai",
        &url,
        "sk-b1",
        "cache-openai",
        json!([step("team", false)]),
    )
    .await;
    assert_eq!(caches(&first), ["miss"]);
    assert_eq!(caches(&same_team), ["hit"], "a team shares its answers");
    assert_eq!(
        caches(&other_team),
        ["miss"],
        "another team never reads them"
    );
    assert_eq!(upstream_calls(&mock, "real-openai"), 2);

    let steps = json!([
        // no-cache: not read, but stored.
        step("control", false),
        {"prompt": "control", "stream": false, "cache_control": "no-cache"},
        // no-store: read, nothing stored.
        {"prompt": "fresh", "stream": false, "cache_control": "no-store"},
        step("fresh", false),
        {"prompt": "fresh", "stream": false, "cache_control": "no-cache, no-store"},
    ]);
    let results = run("openai", &url, "sk-a1", "cache-openai", steps).await;
    assert_eq!(caches(&results), ["miss", "miss", "miss", "miss", "bypass"]);

    // A route without a rule: no cache header at all, every request upstream.
    let plain = json!([step("x", false), step("x", false)]);
    let results = run("openai", &url, "sk-a1", "plain-openai", plain).await;
    assert_eq!(caches(&results), ["none", "none"]);
    assert_eq!(upstream_calls(&mock, "real-plain"), 2);
}

fn chat(model: &str, stream: bool) -> Vec<u8> {
    json!({"model": model, "stream": stream, "temperature": 0,
        "messages": [{"role": "user", "content": "again"}]})
    .to_string()
    .into_bytes()
}

async fn post(proxy: &Proxy, body: Vec<u8>) -> common::Reply {
    let url = format!("{}/v1/chat/completions", proxy.url);
    send(Method::POST, &url, Some("sk-a1"), body, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_error_or_a_cut_stream_is_never_served_from_the_cache() {
    let mock = mock().await;
    mock.on(Matcher::any().model("real-broken"), Behavior::status(503));
    mock.on(
        Matcher::any().model("real-cut"),
        Behavior::ok()
            .text(TEXT)
            .stream(4, Duration::ZERO)
            .cut_after_chunks(2),
    );
    let proxy = start(&yaml(&mock, "")).await;
    for _ in 0..2 {
        let reply = post(&proxy, chat("cache-broken", false)).await;
        assert_eq!(reply.status, 503, "{}", reply.body);
        assert_eq!(reply.header("x-switchyard-cache"), "miss");
    }
    assert_eq!(upstream_calls(&mock, "real-broken"), 2);
    for _ in 0..2 {
        let reply = post(&proxy, chat("cache-cut", true)).await;
        assert_eq!(reply.header("x-switchyard-cache"), "miss", "{}", reply.body);
    }
    assert_eq!(
        upstream_calls(&mock, "real-cut"),
        2,
        "a cut stream was not stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deterministic_only_rules_bypass_sampled_requests() {
    let mock = mock().await;
    let proxy = start(&yaml(&mock, ", deterministic_only: true")).await;
    let sampled = json!({"model": "cache-openai", "temperature": 0.9,
        "messages": [{"role": "user", "content": "again"}]})
    .to_string()
    .into_bytes();
    for _ in 0..2 {
        let reply = post(&proxy, sampled.clone()).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("x-switchyard-cache"), "bypass");
    }
    assert_eq!(
        post(&proxy, chat("cache-openai", false))
            .await
            .header("x-switchyard-cache"),
        "miss"
    );
    assert_eq!(
        post(&proxy, chat("cache-openai", false))
            .await
            .header("x-switchyard-cache"),
        "hit"
    );
    assert_eq!(upstream_calls(&mock, "real-openai"), 3);
}

/// A redis-server of this test's own on a free port.
struct OwnRedis {
    child: Child,
    url: String,
}

impl OwnRedis {
    fn start() -> OwnRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be on PATH");
        OwnRedis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_run_is_bypassed_without_a_failed_request() {
    let mock = mock().await;
    let proxy = start(&yaml(&mock, "")).await;
    let mut redis = OwnRedis::start();
    let cache = Arc::new(
        RedisCache::start(
            &redis.url,
            "cache-test",
            1 << 20,
            Duration::from_millis(200),
        )
        .unwrap(),
    );
    let mut connected = false;
    for _ in 0..200 {
        if cache.connected() {
            connected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(connected, "the cache never connected to its redis-server");
    proxy.state.set_cache(cache.clone());

    assert_eq!(
        post(&proxy, chat("cache-openai", false))
            .await
            .header("x-switchyard-cache"),
        "miss"
    );
    // The write goes to Redis in the background: the entry is there once a request hits it.
    let mut hit = false;
    for _ in 0..200 {
        let reply = post(&proxy, chat("cache-openai", false)).await;
        assert_eq!(reply.status, 200);
        if reply.header("x-switchyard-cache") == "hit" {
            hit = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(hit, "the answer never reached Redis");

    redis.child.kill().unwrap();
    redis.child.wait().unwrap();
    let before = upstream_calls(&mock, "real-openai");
    let mut results = Vec::new();
    for _ in 0..20 {
        let reply = post(&proxy, chat("cache-openai", false)).await;
        assert_eq!(
            reply.status, 200,
            "no request fails with Redis gone: {}",
            reply.body
        );
        assert_eq!(reply.json()["choices"][0]["message"]["content"], TEXT);
        results.push(reply.header("x-switchyard-cache").to_owned());
    }
    assert!(results.iter().all(|r| r == "bypass"), "{results:?}");
    assert_eq!(upstream_calls(&mock, "real-openai") - before, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hit_counts_as_a_request_with_no_tokens_and_reports_what_it_saved() {
    let mock = mock().await;
    let extra = "prices:\n  - { channel: up-openai, model_pattern: real-openai, input_per_million: 1000, output_per_million: 2000 }\n\
limits:\n  - { token: a1, metric: requests, window: hour, value: 2 }\n";
    let (proxy, reporter) = common::start_accounted(&format!("{}{extra}", yaml(&mock, ""))).await;
    let miss = post(&proxy, chat("cache-openai", false)).await;
    assert_eq!(miss.header("x-switchyard-cache"), "miss");
    let hit = post(&proxy, chat("cache-openai", false)).await;
    assert_eq!(hit.header("x-switchyard-cache"), "hit");
    assert_eq!(hit.body, miss.body, "the hit is the answer the miss got");
    // The hit took the second request of the token's limit: the third is refused.
    let refused = post(&proxy, chat("cache-openai", false)).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(upstream_calls(&mock, "real-openai"), 1);

    let batch = reporter.take_batch().expect("usage to report");
    let route = |channel: &str| {
        batch
            .records
            .iter()
            .find(|r| r.route == "cache-openai" && r.channel == channel)
            .unwrap_or_else(|| panic!("no record for channel {channel:?}: {:?}", batch.records))
            .clone()
    };
    let served = route("up-openai");
    let cached = route("");
    assert_eq!((served.requests, served.cache_hits), (1, 0));
    assert!(
        served.input_tokens > 0 && served.cost_pico_usd > 0,
        "{served:?}"
    );
    assert_eq!((cached.requests, cached.cache_hits), (1, 1));
    assert_eq!(
        (
            cached.input_tokens,
            cached.output_tokens,
            cached.cost_pico_usd
        ),
        (0, 0, 0)
    );
    assert_eq!(cached.unpriced_requests, 0, "a hit costs nothing, known");
    assert_eq!(cached.saved_input_tokens, served.input_tokens);
    assert_eq!(cached.saved_output_tokens, served.output_tokens);
    assert_eq!(cached.saved_cost_pico_usd, served.cost_pico_usd);
    assert_eq!(cached.team, "a");
}
