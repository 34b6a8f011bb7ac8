//! Limits on a tag or an end user at one proxy: a tag's budget refuses the requests carrying the
//! tag through the official OpenAI and Anthropic SDKs, a limit counting each end user separately
//! refuses one end user while another is still admitted, and requests without tags or an end
//! user are not counted by either.
//!
//! `SWITCHYARD_TEST_PYTHON` must name a python with `openai` and `anthropic` installed (scripts/test
//! sets it); without it the SDK test fails rather than skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;

const CHAT_PATH: &str = "/v1/chat/completions";

/// Route `m` on the simulation, priced at 1000 USD per million tokens each way (a request costs
/// more than a cent); token `TOKEN` (id 1). `limits` is the file's limit list.
fn config(limits: &str) -> String {
    format!(
        "channels:\n  - {{ id: 1, name: sim, provider: mock }}\nroutes:\n  - id: 1\n    model_pattern: m\n    members:\n      - {{ id: 1, channel: sim }}\ntokens:\n  - {{ id: 1, name: app, token: {TOKEN} }}\nprices:\n  - {{ channel: sim, model_pattern: '*', input_per_million: 1000, output_per_million: 1000 }}\nlimits:\n{limits}"
    )
}

const OPENAI: &str = r#"
import json, sys
import openai
from openai import OpenAI

base, key = sys.argv[1], sys.argv[2]
# Default retries: a spent budget says `x-should-retry: false`, so the SDK does not retry it.
client = OpenAI(base_url=base + "/v1", api_key=key, max_retries=2, timeout=20)
msgs = [{"role": "user", "content": "hi"}]
tagged = {"x-switchyard-tags": "acme"}
out = {}
client.chat.completions.create(model="m", messages=msgs, extra_headers=tagged)
try:
    client.chat.completions.create(model="m", messages=msgs, extra_headers=tagged)
    out["tagged"] = None
except openai.RateLimitError as e:
    out["tagged"] = {"status": e.status_code, "code": e.code, "type": e.type,
                     "message": e.message, "should_retry": e.response.headers.get("x-should-retry")}
# The same tag in the body's metadata counts the same.
try:
    client.chat.completions.create(model="m", messages=msgs, metadata={"tags": "acme"}, store=False)
    out["metadata"] = None
except openai.RateLimitError as e:
    out["metadata"] = {"status": e.status_code, "code": e.code}
# Another tag, and no tag at all, are not counted by it.
out["other"] = client.chat.completions.create(
    model="m", messages=msgs, extra_headers={"x-switchyard-tags": "beta"}).id is not None
out["untagged"] = [client.chat.completions.create(model="m", messages=msgs).id is not None
                   for _ in range(3)]
print(json.dumps(out))
"#;

const ANTHROPIC: &str = r#"
import json, sys
import anthropic

base, key = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=20)
msgs = [{"role": "user", "content": "hi"}]
tagged = {"x-switchyard-tags": "team:search"}
out = {}
client.messages.create(model="m", max_tokens=16, messages=msgs, extra_headers=tagged)
try:
    client.messages.create(model="m", max_tokens=16, messages=msgs, extra_headers=tagged)
    out["tagged"] = None
except anthropic.RateLimitError as e:
    out["tagged"] = {"status": e.status_code, "type": e.body["error"]["type"],
                     "message": e.body["error"]["message"],
                     "retry_after": e.response.headers.get("retry-after")}
out["untagged"] = client.messages.create(model="m", max_tokens=16, messages=msgs).id is not None
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tags_budget_refuses_its_requests_in_the_openai_and_anthropic_sdks() {
    clear_of_a_window_end(Duration::from_secs(20)).await;
    let proxy = start(&config(
        "  - { tag: acme, metric: spend, window: month, value: \"0.001\" }\n  - { tag: \"team:search\", metric: spend, window: 7d, value: \"0.001\" }\n",
    ))
    .await;
    let out = run_python(&proxy, OPENAI).await;
    let tagged = &out["tagged"];
    assert_eq!(tagged["status"], 429, "{out}");
    assert_eq!(tagged["code"], "budget_exceeded");
    assert_eq!(tagged["type"], "insufficient_quota");
    assert_eq!(tagged["should_retry"], "false");
    let message = tagged["message"].as_str().unwrap();
    assert!(
        message.contains("its tag's spend budget of 0.001 USD per calendar month (UTC)"),
        "{message}"
    );
    assert!(!message.contains("acme"), "the tag is not named: {message}");
    assert_eq!(out["metadata"]["code"], "budget_exceeded", "{out}");
    assert_eq!(out["other"], true, "another tag: {out}");
    assert_eq!(out["untagged"], serde_json::json!([true, true, true]));

    let out = run_python(&proxy, ANTHROPIC).await;
    let tagged = &out["tagged"];
    assert_eq!(tagged["status"], 429, "{out}");
    assert_eq!(tagged["type"], "rate_limit_error");
    assert!(tagged["message"]
        .as_str()
        .unwrap()
        .contains("its tag's spend budget of 0.001 USD over the last 7 days (UTC)"));
    assert!(!tagged["retry_after"].as_str().unwrap_or("").is_empty());
    assert_eq!(out["untagged"], true);
    let metrics = proxy.state.metrics.render();
    assert!(
        metrics.contains(
            "switchyard_limit_refusals_total{scope=\"tag\",metric=\"spend\",window=\"month\"} 2"
        ),
        "{metrics}"
    );
}

fn chat_as(user: &str) -> String {
    format!(r#"{{"model":"m","user":"{user}","messages":[{{"role":"user","content":"hi"}}]}}"#)
}

#[tokio::test]
async fn an_each_end_user_limit_refuses_one_end_user_while_another_is_admitted() {
    clear_of_a_window_end(Duration::from_secs(5)).await;
    let proxy = start(&config(
        "  - { each_end_user: true, metric: requests, window: minute, value: 2 }\n",
    ))
    .await;
    for remaining in ["1", "0"] {
        let reply = post(&proxy, CHAT_PATH, &chat_as("alice")).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("x-ratelimit-remaining-requests"), remaining);
    }
    let refused = post(&proxy, CHAT_PATH, &chat_as("alice")).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let error = &refused.json()["error"];
    assert_eq!(error["code"], "rate_limit_exceeded");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("its end user's limit of 2 requests per minute"),
        "{message}"
    );
    assert!(!message.contains("alice"), "no end user named: {message}");
    // Anthropic's `metadata.user_id` is the same end user.
    let anthropic = post(
        &proxy,
        "/v1/messages",
        r#"{"model":"m","max_tokens":8,"metadata":{"user_id":"alice"},"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(anthropic.status, 429, "{}", anthropic.body);
    assert_eq!(anthropic.json()["error"]["type"], "rate_limit_error");
    // Bob has his own two; alice is still refused.
    for _ in 0..2 {
        let reply = post(&proxy, CHAT_PATH, &chat_as("bob")).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("x-ratelimit-limit-requests"), "2");
    }
    assert_eq!(post(&proxy, CHAT_PATH, &chat_as("bob")).await.status, 429);
    assert_eq!(post(&proxy, CHAT_PATH, &chat_as("alice")).await.status, 429);
    // A request without an end user is not counted: no limit, no rate-limit headers.
    for _ in 0..5 {
        let reply = post(&proxy, CHAT_PATH, CHAT).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("x-ratelimit-limit-requests"), "");
    }
}

#[tokio::test]
async fn a_limit_naming_an_end_user_counts_that_one_only() {
    clear_of_a_window_end(Duration::from_secs(5)).await;
    let proxy = start(&config(
        "  - { end_user: alice, metric: requests, window: minute, value: 1 }\n  - { tag: acme, metric: requests, window: minute, value: 1, model_pattern: 'other-*' }\n",
    ))
    .await;
    assert_eq!(post(&proxy, CHAT_PATH, &chat_as("alice")).await.status, 200);
    assert_eq!(post(&proxy, CHAT_PATH, &chat_as("alice")).await.status, 429);
    for _ in 0..3 {
        assert_eq!(post(&proxy, CHAT_PATH, &chat_as("bob")).await.status, 200);
        // The tag's limit is narrowed to other models: a request for `m` is not counted.
        let tagged = post_with(&proxy, CHAT_PATH, CHAT, &[("x-switchyard-tags", "acme")]).await;
        assert_eq!(tagged.status, 200, "{}", tagged.body);
    }
}
