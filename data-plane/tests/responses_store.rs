//! The gateway keeps no responses: a Responses API request translated for an Anthropic (or
//! Gemini) member is answered with `store: false`, or — with `responses_refuse_store` on — a
//! request that asks to be stored is served only by members that speak the Responses API. An
//! answer passed through from such a member is accounted with the tokens it reports.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use switchyard_data_plane::usage::UsageReporter;
use switchyard_mock_upstream::MockUpstream;

const STORED: &str = r#"{"model":"m","input":"hello"}"#;
const STORED_EXPLICITLY: &str = r#"{"model":"m","input":"hello","store":true}"#;
const NOT_STORED: &str = r#"{"model":"m","input":"hello","store":false}"#;

fn config(settings: &str, members: &str, channels: &str) -> String {
    format!("settings:\n  channel_retry_times: 0\n{settings}channels:\n{channels}routes:\n  - model_pattern: m\n    members:\n{members}")
}

fn anthropic(up: &MockUpstream) -> String {
    channel("claude", &up.base_url(), &["ka"]).replace("provider: openai", "provider: anthropic")
}

#[tokio::test]
async fn a_translated_answer_says_it_was_not_stored() {
    let up = MockUpstream::start().await.unwrap();
    let yaml = config("", "      - { channel: claude }\n", &anthropic(&up));
    let proxy = start(&yaml).await;
    for body in [STORED, STORED_EXPLICITLY, NOT_STORED] {
        let reply = post(&proxy, "/v1/responses", body).await;
        assert_eq!(reply.status, 200, "{body}: {}", reply.body);
        assert_eq!(reply.json()["store"], false, "{body}: {}", reply.body);
        assert_eq!(reply.json()["object"], "response");
    }
}

#[tokio::test]
async fn refusing_storage_turns_away_translation_but_not_a_request_that_stores_nothing() {
    let up = MockUpstream::start().await.unwrap();
    let yaml = config(
        "  responses_refuse_store: true\n",
        "      - { channel: claude }\n",
        &anthropic(&up),
    );
    let proxy = start(&yaml).await;
    for body in [STORED, STORED_EXPLICITLY] {
        let reply = post(&proxy, "/v1/responses", body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        let error = &reply.json()["error"];
        assert_eq!(error["code"], "protocol_unsupported", "{}", reply.body);
        assert!(
            error["message"].as_str().unwrap().contains("`store`"),
            "{}",
            reply.body
        );
        assert_eq!(reply.header("x-should-retry"), "false");
    }
    assert_eq!(up.hits(), 0, "nothing refused reached the upstream");
    let reply = post(&proxy, "/v1/responses", NOT_STORED).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["store"], false);
    assert_eq!(up.hits(), 1);
}

#[tokio::test]
async fn refusing_storage_leaves_the_request_to_a_member_that_speaks_the_responses_api() {
    let (claude, openai) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let channels = format!(
        "{}{}",
        anthropic(&claude),
        channel("gpt", &openai.base_url(), &["ko"])
    );
    let yaml = config(
        "  responses_refuse_store: true\n",
        "      - { channel: claude, priority: 10 }\n      - { channel: gpt, priority: 0 }\n",
        &channels,
    );
    let proxy = start(&yaml).await;
    let reply = post(&proxy, "/v1/responses", STORED).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "gpt");
    assert_eq!(
        reply.attempts(),
        1,
        "the translating member was never tried"
    );
    assert_eq!(claude.hits(), 0);
    // Storing nothing, the top member translates it.
    let reply = post(&proxy, "/v1/responses", NOT_STORED).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("x-switchyard-channel"), "claude");
    assert_eq!(reply.json()["store"], false);
}

/// The input, output and cached tokens of the one request accounted since the last call.
fn accounted(usage: &UsageReporter) -> (u64, u64, u64) {
    let records = usage.take_batch().map(|b| b.records).unwrap_or_default();
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!((r.route.as_str(), r.requests), ("m", 1));
    (r.input_tokens, r.output_tokens, r.cached_tokens)
}

/// The figures of a Responses usage object.
fn reported(usage: &serde_json::Value) -> (u64, u64, u64) {
    let figure = |v: &serde_json::Value| v.as_u64().unwrap();
    (
        figure(&usage["input_tokens"]),
        figure(&usage["output_tokens"]),
        figure(&usage["input_tokens_details"]["cached_tokens"]),
    )
}

#[tokio::test]
async fn a_passed_through_answer_is_accounted_with_the_tokens_it_reports() {
    let yaml = "channels:\n  - name: sim\n    provider: mock\nroutes:\n  - model_pattern: m\n    members:\n      - { channel: sim }\n";
    let (proxy, usage) = start_accounted(yaml).await;
    let input = r#"{"model":"m","input":"tell me a story about a lighthouse keeper"}"#;
    let reply = post(&proxy, "/v1/responses", input).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = reply.json();
    assert_eq!(answer["object"], "response", "passed through: {answer}");
    let figures = reported(&answer["usage"]);
    assert!(figures.0 > 0 && figures.1 > 0, "{answer}");
    assert_eq!(accounted(&usage), figures, "a plain answer");

    let streamed = input.replace('}', r#","stream":true}"#);
    let reply = post(&proxy, "/v1/responses", &streamed).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let completed = reply
        .body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str::<serde_json::Value>(data).unwrap())
        .find(|event| event["type"] == "response.completed")
        .unwrap_or_else(|| panic!("no response.completed: {}", reply.body));
    let figures = reported(&completed["response"]["usage"]);
    assert!(figures.0 > 0 && figures.1 > 0, "{completed}");
    assert_eq!(accounted(&usage), figures, "a streamed answer");
}
