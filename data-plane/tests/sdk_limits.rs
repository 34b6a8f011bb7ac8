//! Limits as the official SDKs see them (OpenAI, Anthropic, Google GenAI): a key over its limit
//! gets a 429 each SDK raises as its rate-limit error, with `Retry-After` and (OpenAI) the
//! `x-ratelimit-*` headers; a spent budget says not to retry and the SDK does not; a member
//! without upstream room is skipped for the next one, so the SDK never sees it.
//!
//! `SWITCHYARD_TEST_PYTHON` must name a python with `openai`, `anthropic` and `google-genai`
//! installed (scripts/test sets it); without it these tests fail rather than skip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{clear_of_a_window_end, run_python, start, Proxy};

const OPENAI: &str = r#"
import json, sys
import openai
from openai import OpenAI

base, key = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=20)
msgs = [{"role": "user", "content": "hi"}]
out = {"headers": []}
for _ in range(2):
    raw = client.chat.completions.with_raw_response.create(model="limited", messages=msgs)
    raw.parse()
    out["headers"].append({k: raw.headers.get(k) for k in (
        "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests")})
try:
    client.chat.completions.create(model="limited", messages=msgs)
    out["limited"] = None
except openai.RateLimitError as e:
    out["limited"] = {
        "status": e.status_code,
        "code": e.code,
        "type": e.type,
        "retry_after": e.response.headers.get("retry-after"),
        "remaining": e.response.headers.get("x-ratelimit-remaining-requests"),
    }
# Default retries: the SDK would retry a 429, but a spent budget says `x-should-retry: false`.
retrying = OpenAI(base_url=base + "/v1", api_key=key, max_retries=2, timeout=20)
retrying.chat.completions.create(model="budget", messages=msgs)
try:
    retrying.chat.completions.create(model="budget", messages=msgs)
    out["budget"] = None
except openai.RateLimitError as e:
    out["budget"] = {"status": e.status_code, "code": e.code, "should_retry": e.response.headers.get("x-should-retry")}
# A member without upstream room: the next member serves, the SDK sees a plain answer.
channels = []
for _ in range(3):
    raw = client.chat.completions.with_raw_response.create(model="upstream", messages=msgs)
    raw.parse()
    channels.append(raw.headers.get("x-switchyard-channel"))
out["channels"] = channels
print(json.dumps(out))
"#;

const ANTHROPIC: &str = r#"
import json, sys
import anthropic

base, key = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=20)
msgs = [{"role": "user", "content": "hi"}]
out = {}
client.messages.create(model="limited", max_tokens=16, messages=msgs)
client.messages.create(model="limited", max_tokens=16, messages=msgs)
try:
    client.messages.create(model="limited", max_tokens=16, messages=msgs)
    out["limited"] = None
except anthropic.RateLimitError as e:
    out["limited"] = {
        "status": e.status_code,
        "type": e.body["error"]["type"],
        "retry_after": e.response.headers.get("retry-after"),
    }
print(json.dumps(out))
"#;

const GENAI: &str = r#"
import json, sys
from google import genai
from google.genai import errors, types

base, key = sys.argv[1], sys.argv[2]
client = genai.Client(api_key=key, http_options=types.HttpOptions(
    base_url=base, timeout=20_000, retry_options=types.HttpRetryOptions(attempts=1)))
out = {}
client.models.generate_content(model="limited", contents="hi")
client.models.generate_content(model="limited", contents="hi")
try:
    client.models.generate_content(model="limited", contents="hi")
    out["limited"] = None
except errors.ClientError as e:
    out["limited"] = {
        "status": e.code,
        "type": e.status,
        "retry_after": e.response.headers.get("retry-after") if e.response is not None else None,
    }
print(json.dumps(out))
"#;

/// Route `limited` (2 requests per minute for the key), route `budget` (a spend budget the first
/// request uses up), route `upstream` (member `a` takes one request per minute, then `b`).
const CONFIG: &str = "channels:\n  - { name: sim, provider: mock }\n  - { name: a, provider: mock }\n  - { name: b, provider: mock }\nroutes:\n  - id: 1\n    model_pattern: limited\n    members:\n      - { channel: sim }\n  - id: 2\n    model_pattern: budget\n    members:\n      - { channel: sim }\n  - id: 3\n    model_pattern: upstream\n    members:\n      - { id: 31, channel: a, priority: 10 }\n      - { id: 32, channel: b, priority: 0 }\nprices:\n  - { channel: sim, model_pattern: '*', input_per_million: 1000, output_per_million: 1000 }\nlimits:\n  - { route: limited, metric: requests, window: minute, value: 2 }\n  - { route: budget, metric: spend, window: month, value: \"0.001\" }\n  - { member: 31, metric: requests, window: minute, value: 1 }\n";

fn refusals(proxy: &Proxy, metric: &str, window: &str) -> String {
    let page = proxy.state.metrics.render();
    let series =
        format!("switchyard_limit_refusals_total{{scope=\"route\",metric=\"{metric}\",window=\"{window}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&series))
        .unwrap_or("0")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_raises_its_rate_limit_error_and_honours_a_spent_budget() {
    clear_of_a_window_end(Duration::from_secs(20)).await;
    let proxy = start(CONFIG).await;
    let out = run_python(&proxy, OPENAI).await;
    let headers = out["headers"].as_array().unwrap();
    assert_eq!(headers[0]["x-ratelimit-limit-requests"], "2");
    assert_eq!(headers[0]["x-ratelimit-remaining-requests"], "1");
    assert_eq!(headers[1]["x-ratelimit-remaining-requests"], "0");
    assert!(headers[1]["x-ratelimit-reset-requests"]
        .as_str()
        .unwrap()
        .ends_with('s'));
    let limited = &out["limited"];
    assert_eq!(limited["status"], 429, "{out}");
    assert_eq!(limited["code"], "rate_limit_exceeded");
    assert_eq!(limited["type"], "requests");
    let retry: u64 = limited["retry_after"].as_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry));
    assert_eq!(limited["remaining"], "0");
    let budget = &out["budget"];
    assert_eq!(budget["status"], 429, "{out}");
    assert_eq!(budget["code"], "budget_exceeded");
    assert_eq!(budget["should_retry"], "false");
    assert_eq!(
        refusals(&proxy, "spend", "month"),
        "1",
        "the SDK did not retry a spent budget"
    );
    assert_eq!(
        out["channels"],
        serde_json::json!(["a", "b", "b"]),
        "member a had room for one request a minute; b served the rest"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_sdk_raises_its_rate_limit_error() {
    clear_of_a_window_end(Duration::from_secs(20)).await;
    let proxy = start(CONFIG).await;
    let out = run_python(&proxy, ANTHROPIC).await;
    let limited = &out["limited"];
    assert_eq!(limited["status"], 429, "{out}");
    assert_eq!(limited["type"], "rate_limit_error");
    assert!(
        limited["retry_after"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_google_genai_sdk_raises_resource_exhausted() {
    clear_of_a_window_end(Duration::from_secs(20)).await;
    let proxy = start(CONFIG).await;
    let out = run_python(&proxy, GENAI).await;
    let limited = &out["limited"];
    assert_eq!(limited["status"], 429, "{out}");
    assert_eq!(limited["type"], "RESOURCE_EXHAUSTED");
    assert!(
        limited["retry_after"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
}
