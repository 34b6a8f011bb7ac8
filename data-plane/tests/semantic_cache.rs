//! The semantic response cache through the openai SDK against the mock upstream, whose
//! embedding of a text is made of its words (texts with the same words point the same way; a
//! paraphrase that adds one word scores about 0.95, unrelated texts far lower): a `trial` rule
//! never serves from the cache and reports its would-be hits and their agreement; a `serve` rule
//! serves a near-identical prompt with the similarity header; an unrelated prompt and a changed
//! temperature miss; team scope keeps teams apart; an embeddings channel that is down bypasses
//! with no failed request; two proxies sharing Redis find each other's vectors.
//!
//! `SWITCHYARD_TEST_PYTHON` must name a python with `openai` installed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_data_plane::usage::UsageReporter;
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};
use switchyard_proto::v1;
use switchyard_state::cache::RedisCache;

use common::{start, start_accounted, Proxy};

const TEXT: &str = "Paris is the capital of France.";
const ASKED: &str = "What is the capital of France?";
/// One word more than [`ASKED`]: cosine similarity 0.953 under the mock's embedding.
const PARAPHRASE: &str = "what is the capital of France, please?";
/// Shares no word with [`ASKED`].
const UNRELATED: &str = "Write a haiku about autumn leaves";

/// A chat channel and an embeddings channel on `mock` (the latter at `embed_url` when given),
/// routes `sem-trial` and `sem-serve` under a trial and a serve rule (team scope, threshold
/// 0.9), tokens of teams `a` and `b`.
fn yaml(mock: &MockUpstream, embed_url: Option<&str>) -> String {
    let url = mock.base_url();
    let embed = embed_url.unwrap_or(&url);
    let semantic = |mode: &str| {
        format!(
            "semantic: {{ channel: embedder, model: embed-model, threshold: 0.9, mode: {mode} }}"
        )
    };
    format!(
        "settings:\n  channel_retry_times: 0\n  retry_times: 0\nchannels:\n\
  - {{ name: up-openai, provider: openai, base_url: {url}, credentials: [k1] }}\n\
  - {{ name: embedder, provider: openai, base_url: {embed}, credentials: [k2] }}\n\
routes:\n\
  - {{ model_pattern: sem-trial, members: [{{ channel: up-openai, upstream_model: real-trial }}] }}\n\
  - {{ model_pattern: sem-serve, members: [{{ channel: up-openai, upstream_model: real-serve }}] }}\n\
teams:\n  - {{ name: a, models: ['*'] }}\n  - {{ name: b, models: ['*'] }}\n\
tokens:\n\
  - {{ name: a1, token: sk-a1, team: a }}\n\
  - {{ name: a2, token: sk-a2, team: a }}\n\
  - {{ name: b1, token: sk-b1, team: b }}\n\
cache_rules:\n\
  - {{ name: trial, model_pattern: sem-trial, endpoints: [chat_completions], ttl_seconds: 300, {} }}\n\
  - {{ name: serve, model_pattern: sem-serve, endpoints: [chat_completions], ttl_seconds: 300, {} }}\n",
        semantic("trial"),
        semantic("serve"),
    )
}

async fn mock() -> MockUpstream {
    let mock = MockUpstream::start().await.unwrap();
    for model in ["real-trial", "real-serve"] {
        mock.on(Matcher::any().model(model), Behavior::ok().text(TEXT));
    }
    mock
}

fn calls(mock: &MockUpstream, model: &str) -> usize {
    mock.hits_matching(&Matcher::any().model(model))
}

fn step(prompt: &str) -> Value {
    json!({"prompt": prompt})
}

/// Runs `steps` through the openai SDK with `token` against `model`; one result per step.
async fn run(proxy: &Proxy, token: &str, model: &str, steps: Value) -> Vec<Value> {
    let script = format!(
        "{}/tests/sdk/semantic_client.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let args = [
        script.as_str(),
        &proxy.url,
        token,
        model,
        &steps.to_string(),
    ];
    let printed = common::run_python_with(args.iter().map(|a| (*a).to_owned()).collect()).await;
    let results: Vec<Value> = serde_json::from_value(printed).unwrap();
    for (i, r) in results.iter().enumerate() {
        assert!(r.get("exception").is_none(), "step {i}: {r}");
        assert_eq!(r["status"], 200, "step {i}: {r}");
        assert_eq!(r["text"], TEXT, "step {i}: {r}");
    }
    results
}

fn caches(results: &[Value]) -> Vec<&str> {
    results
        .iter()
        .map(|r| r["cache"].as_str().unwrap_or("none"))
        .collect()
}

/// The trial counts the reporter holds for rule `rule`, summed, once `done` holds of them (the
/// comparison is counted when the answer has finished, just after the client got it).
fn trial_counts(
    reporter: &UsageReporter,
    rule: i64,
    batches: &mut Vec<v1::UsageBatch>,
) -> v1::SemanticTrialRecord {
    if let Some(batch) = reporter.take_batch() {
        batches.push(batch);
    }
    let mut sum = v1::SemanticTrialRecord::default();
    for r in batches
        .iter()
        .flat_map(|b| &b.semantic_trials)
        .filter(|r| r.rule_id == rule)
    {
        sum.looked_up += r.looked_up;
        sum.would_hit += r.would_hit;
        sum.compared += r.compared;
        sum.agreed += r.agreed;
        sum.score_milli_sum += r.score_milli_sum;
        sum.similarity_milli_sum += r.similarity_milli_sum;
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trial_rule_never_serves_and_reports_its_would_be_hits_and_agreement() {
    let mock = mock().await;
    let (proxy, reporter) = start_accounted(&yaml(&mock, None)).await;
    let steps = json!([step(ASKED), step(PARAPHRASE), step(UNRELATED)]);
    let results = run(&proxy, "sk-a1", "sem-trial", steps).await;
    assert_eq!(caches(&results), ["miss", "miss", "miss"], "{results:?}");
    assert!(results.iter().all(|r| r["similarity"].is_null()));
    assert_eq!(calls(&mock, "real-trial"), 3, "every request went upstream");

    let rule = proxy
        .state
        .views
        .load_full()
        .unwrap()
        .snapshot
        .cache_rules()[0]
        .id;
    let mut batches = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut counts = trial_counts(&reporter, rule, &mut batches);
    while counts.compared < 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        counts = trial_counts(&reporter, rule, &mut batches);
    }
    assert_eq!(
        (
            counts.looked_up,
            counts.would_hit,
            counts.compared,
            counts.agreed
        ),
        (3, 1, 1, 1),
        "{counts:?}"
    );
    assert_eq!(counts.score_milli_sum, 953, "the paraphrase's score");
    assert_eq!(counts.similarity_milli_sum, 1000, "the same answer text");
    // Each embeddings call is the embeddings channel's usage, under the request's token.
    let embedding: u64 = batches
        .iter()
        .flat_map(|b| &b.records)
        .filter(|r| r.channel == "embedder" && r.model == "embed-model" && r.token == "a1")
        .map(|r| r.requests)
        .sum();
    assert_eq!(embedding, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serve_rule_serves_a_paraphrase_but_not_another_prompt_parameter_or_team() {
    let mock = mock().await;
    let proxy = start(&yaml(&mock, None)).await;
    let steps = json!([
        step(ASKED),
        step(PARAPHRASE),
        step(UNRELATED),
        {"prompt": PARAPHRASE, "temperature": 0.5},
    ]);
    let results = run(&proxy, "sk-a1", "sem-serve", steps).await;
    assert_eq!(
        caches(&results),
        ["miss", "hit", "miss", "miss"],
        "{results:?}"
    );
    assert_eq!(results[1]["similarity"], "0.953");
    assert!(results[2]["similarity"].is_null());
    assert_eq!(calls(&mock, "real-serve"), 3);

    // Team scope: team `a` shares its answers by meaning, team `b` never reads them.
    let same_team = run(&proxy, "sk-a2", "sem-serve", json!([step(PARAPHRASE)])).await;
    assert_eq!(caches(&same_team), ["hit"]);
    let other_team = run(&proxy, "sk-b1", "sem-serve", json!([step(PARAPHRASE)])).await;
    assert_eq!(caches(&other_team), ["miss"]);
    assert_eq!(calls(&mock, "real-serve"), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embeddings_channel_that_is_down_bypasses_the_semantic_part_without_a_failed_request() {
    let mock = mock().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let proxy = start(&yaml(&mock, Some(&dead))).await;
    let steps = json!([step(ASKED), step(PARAPHRASE), step(ASKED)]);
    let results = run(&proxy, "sk-a1", "sem-serve", steps).await;
    assert_eq!(
        caches(&results),
        ["miss", "miss", "hit"],
        "the exact cache still works: {results:?}"
    );
    assert_eq!(calls(&mock, "real-serve"), 2);
    let metrics = proxy.state.collectors.render();
    assert!(
        metrics.contains("switchyard_semantic_cache_total{rule=\"serve\",event=\"bypass\"} 2"),
        "{metrics}"
    );
}

async fn redis_cache() -> Arc<RedisCache> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!(
        "semantic-test-{}-{}",
        std::process::id(),
        switchyard_data_plane::unix_ms()
    );
    let cache =
        Arc::new(RedisCache::start(&url, &prefix, 1 << 20, Duration::from_millis(500)).unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cache.connected() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(cache.connected(), "no Redis at {url}");
    cache
}

fn vectors(proxy: &Proxy) -> u64 {
    let metrics = proxy.state.collectors.render();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("switchyard_semantic_vectors "))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_sharing_redis_find_each_others_vectors() {
    let mock = mock().await;
    let (a, b) = (
        start(&yaml(&mock, None)).await,
        start(&yaml(&mock, None)).await,
    );
    let cache = redis_cache().await;
    a.state.set_cache(cache.clone());
    b.state.set_cache(cache);
    let first = run(&a, "sk-a1", "sem-serve", json!([step(ASKED)])).await;
    assert_eq!(caches(&first), ["miss"]);
    // Proxy b tails the rule's stream in the background.
    let deadline = Instant::now() + Duration::from_secs(10);
    while vectors(&b) < 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(vectors(&b), 1, "the vector reached the other proxy");
    let second = run(&b, "sk-a1", "sem-serve", json!([step(PARAPHRASE)])).await;
    assert_eq!(caches(&second), ["hit"], "{second:?}");
    assert_eq!(second[0]["similarity"], "0.953");
    assert_eq!(calls(&mock, "real-serve"), 1);
}
