//! Moderations (`/v1/moderations`) and rerank (`/v1/rerank`) through the proxy: routed, failed
//! over and accounted like embeddings, against real mock upstreams on loopback and the
//! in-process simulator; members that cannot serve them are never picked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use switchyard_data_plane::usage::UsageReporter;
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};
use switchyard_proto::v1::UsageRecord;

const MODERATIONS: &str = "/v1/moderations";
const RERANK: &str = "/v1/rerank";
const RERANK_BODY: &str = r#"{"model":"rr","query":"capital of France","documents":["Berlin is in Germany",{"text":"Paris is the capital of France"},"France has wine"],"top_n":2}"#;

/// Two OpenAI-compatible channels on `a` (priority 10, tried first) and `b`, both members of
/// the route `pattern`.
fn two_channels(a: &MockUpstream, b: &MockUpstream, pattern: &str) -> String {
    format!(
        "settings:\n  channel_retry_times: 0\nchannels:\n{}{}routes:\n  - model_pattern: {pattern}\n    members:\n      - {{ id: 1, channel: a, upstream_model: up-a, priority: 10 }}\n      - {{ id: 2, channel: b, upstream_model: up-b, priority: 0 }}\n",
        channel("a", &a.base_url(), &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    )
}

async fn mocks() -> (MockUpstream, MockUpstream) {
    (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    )
}

/// The usage records the proxy has waiting (taken: each call sees the requests since the last).
fn records(usage: &UsageReporter) -> Vec<UsageRecord> {
    usage.take_batch().map(|b| b.records).unwrap_or_default()
}

#[tokio::test]
async fn a_moderation_without_a_model_fails_over_and_is_accounted() {
    for status in [500u16, 429] {
        let (a, b) = mocks().await;
        a.on(Matcher::any(), Behavior::status(status));
        let (proxy, usage) = start_accounted(&two_channels(&a, &b, "omni-moderation-latest")).await;
        // The OpenAI SDK's default: no `model` at all.
        let reply = post(
            &proxy,
            MODERATIONS,
            r#"{"input":["a calm day","I will kill it"]}"#,
        )
        .await;
        assert_eq!(reply.status, 200, "{status}: {}", reply.body);
        assert_eq!(reply.header("x-switchyard-channel"), "b", "{status}");
        assert_eq!(reply.header("x-switchyard-route"), "omni-moderation-latest");
        assert_eq!(reply.attempts(), 2, "{status}");
        assert_eq!(a.hits(), 1);
        // Each member is sent its own upstream model, written into the body.
        assert_eq!(a.requests()[0].path, MODERATIONS);
        assert_eq!(a.requests()[0].json()["model"], "up-a");
        assert_eq!(b.requests()[0].json()["model"], "up-b");
        assert_eq!(b.requests()[0].json()["input"][1], "I will kill it");
        let answer = reply.json();
        let results = answer["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0]["flagged"], false);
        assert_eq!(results[1]["flagged"], true);
        assert_eq!(results[1]["categories"]["violence"], true);
        // Accounted under the route, the serving channel and its model.
        let records = records(&usage);
        assert_eq!(records.len(), 1, "{records:?}");
        let r = &records[0];
        assert_eq!(
            (r.route.as_str(), r.channel.as_str(), r.model.as_str()),
            ("omni-moderation-latest", "b", "up-b")
        );
        assert_eq!((r.token.as_str(), r.requests), ("test", 1));
    }
}

#[tokio::test]
async fn a_moderation_naming_a_model_is_routed_by_it() {
    let (a, b) = mocks().await;
    let (proxy, _usage) = start_accounted(&two_channels(&a, &b, "text-moderation-*")).await;
    let reply = post(
        &proxy,
        MODERATIONS,
        r#"{"model":"text-moderation-stable","input":"hello"}"#,
    )
    .await;
    assert_eq!(
        (reply.status, reply.header("x-switchyard-channel")),
        (200, "a"),
        "{}",
        reply.body
    );
    assert_eq!(a.requests()[0].json()["model"], "up-a");
    // Without a model the default has no route here: the 404 every endpoint gives.
    let reply = post(&proxy, MODERATIONS, r#"{"input":"hello"}"#).await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    let error = &reply.json()["error"];
    assert_eq!(error["code"], "model_not_found", "{}", reply.body);
    assert!(error["message"]
        .as_str()
        .unwrap()
        .contains("omni-moderation-latest"));
    assert_eq!(a.hits() + b.hits(), 1, "nothing more sent");
}

#[tokio::test]
async fn a_rerank_fails_over_and_is_accounted_with_its_token_total() {
    for status in [500u16, 429] {
        let (a, b) = mocks().await;
        a.on(Matcher::any(), Behavior::status(status));
        let (proxy, usage) = start_accounted(&two_channels(&a, &b, "rr")).await;
        let reply = post(&proxy, RERANK, RERANK_BODY).await;
        assert_eq!(reply.status, 200, "{status}: {}", reply.body);
        assert_eq!(reply.header("x-switchyard-channel"), "b", "{status}");
        assert_eq!(reply.attempts(), 2, "{status}");
        assert_eq!(a.requests()[0].path, RERANK);
        let sent = b.requests()[0].json();
        assert_eq!(sent["model"], "up-b");
        assert_eq!(
            sent["documents"][1]["text"],
            "Paris is the capital of France"
        );
        assert_eq!(sent["top_n"], 2);
        let answer = reply.json();
        let results = answer["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0]["index"], 1);
        assert!(results[0]["relevance_score"].as_f64().unwrap() > 0.5);
        let total = answer["usage"]["total_tokens"].as_u64().unwrap();
        assert!(total > 0);
        // The answer's token total is the request's input.
        let records = records(&usage);
        assert_eq!(records.len(), 1, "{records:?}");
        let r = &records[0];
        assert_eq!((r.route.as_str(), r.channel.as_str()), ("rr", "b"));
        assert_eq!((r.requests, r.input_tokens, r.output_tokens), (1, total, 0));
    }
}

#[tokio::test]
async fn rerank_skips_members_that_cannot_serve_it_and_says_so_when_none_can() {
    let (anthropic, azure, openai) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let yaml = format!(
        "channels:\n  - {{ name: an, provider: anthropic, base_url: \"{}\", credentials: [\"k\"] }}\n  - {{ name: az, provider: azure, base_url: \"{}\", credentials: [\"k\"] }}\n{}routes:\n  - model_pattern: rr\n    members:\n      - {{ channel: an, priority: 20 }}\n      - {{ channel: az, priority: 10 }}\n      - {{ channel: oa, priority: 0 }}\n  - model_pattern: closed\n    members:\n      - {{ channel: an }}\n      - {{ channel: az }}\n",
        anthropic.base_url(),
        azure.base_url(),
        channel("oa", &openai.base_url(), &["k"]),
    );
    let proxy = start(&yaml).await;
    for (path, body) in [
        (RERANK, RERANK_BODY.to_owned()),
        (MODERATIONS, r#"{"model":"rr","input":"x"}"#.to_owned()),
    ] {
        let reply = post(&proxy, path, &body).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        assert_eq!(reply.header("x-switchyard-channel"), "oa", "{path}");
        assert_eq!(reply.attempts(), 1, "{path}: no other member was tried");
        // With only such members, the client is told what none of them can serve.
        let closed = body.replace(r#""model":"rr""#, r#""model":"closed""#);
        let reply = post(&proxy, path, &closed).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        let error = &reply.json()["error"];
        assert!(
            error["message"].as_str().unwrap().contains(path),
            "{path}: {}",
            reply.body
        );
        assert_eq!(error["type"], "invalid_request_error", "{}", reply.body);
    }
    assert_eq!(anthropic.hits() + azure.hits(), 0, "nothing sent to them");
    assert_eq!(openai.hits(), 2);
}

#[tokio::test]
async fn unknown_models_and_malformed_bodies_get_openai_errors() {
    let (a, b) = mocks().await;
    let proxy = start(&two_channels(&a, &b, "rr")).await;
    for path in [RERANK, MODERATIONS] {
        let reply = post(
            &proxy,
            path,
            r#"{"model":"no-such-model","input":"x","query":"q","documents":["a"]}"#,
        )
        .await;
        assert_eq!(reply.status, 404, "{path}: {}", reply.body);
        assert_eq!(reply.json()["error"]["code"], "model_not_found", "{path}");
        let reply = post(&proxy, path, r#"{"model":"rr","query":"#).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        let error = &reply.json()["error"];
        assert_eq!(error["type"], "invalid_request_error", "{path}");
        assert!(
            error["message"].as_str().unwrap().contains("JSON"),
            "{}",
            reply.body
        );
    }
    // A rerank names its model: without one it is refused like any other endpoint's.
    let reply = post(&proxy, RERANK, r#"{"query":"q","documents":["a"]}"#).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.json()["error"]["type"], "invalid_request_error");
    assert_eq!(a.hits() + b.hits(), 0);
}

#[tokio::test]
async fn the_simulator_answers_moderations_and_rerank_deterministically() {
    let yaml = "channels:\n  - name: broken\n    provider: mock\n    mock: { failure_rate: 1.0, failure_status: 503 }\n  - name: sim\n    provider: mock\nroutes:\n  - model_pattern: omni-moderation-*\n    members:\n      - { channel: broken, priority: 1, upstream_model: omni-sim }\n      - { channel: sim, priority: 0, upstream_model: omni-sim }\n  - model_pattern: rr\n    members:\n      - { channel: broken, priority: 1 }\n      - { channel: sim, priority: 0 }\n  - model_pattern: emb\n    members:\n      - { channel: sim }\n";
    let (proxy, usage) = start_accounted(yaml).await;
    let reply = post(&proxy, MODERATIONS, r#"{"input":"you idiot"}"#).await;
    assert_eq!(
        (reply.status, reply.header("x-switchyard-channel")),
        (200, "sim"),
        "{}",
        reply.body
    );
    let answer = reply.json();
    assert_eq!(answer["model"], "omni-sim");
    assert_eq!(answer["results"][0]["categories"]["harassment"], true);
    assert_eq!(answer["results"][0]["flagged"], true);
    let first = post(&proxy, RERANK, RERANK_BODY).await;
    let again = post(&proxy, RERANK, RERANK_BODY).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.json()["results"], again.json()["results"]);
    assert_eq!(first.json()["results"][0]["index"], 1);
    let total = first.json()["usage"]["total_tokens"].as_u64().unwrap();
    let scored = records(&usage);
    let rerank = scored.iter().find(|r| r.route == "rr").unwrap();
    assert_eq!((rerank.requests, rerank.input_tokens), (2, 2 * total));
    let moderation = scored
        .iter()
        .find(|r| r.route == "omni-moderation-*")
        .unwrap();
    assert_eq!(
        (
            moderation.requests,
            moderation.model.as_str(),
            moderation.input_tokens
        ),
        (1, "omni-sim", 0)
    );
    // Embeddings are accounted with the prompt tokens their answer reports, as rerank is.
    let reply = post(
        &proxy,
        "/v1/embeddings",
        r#"{"model":"emb","input":["a","b"]}"#,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let prompt = reply.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 0);
    let embedded = records(&usage);
    assert_eq!(embedded.len(), 1, "{embedded:?}");
    assert_eq!(
        (embedded[0].route.as_str(), embedded[0].input_tokens),
        ("emb", prompt)
    );
}
