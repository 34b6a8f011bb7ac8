//! OpenAI's Files and Batch APIs through the proxy, with the official OpenAI Python SDK as the
//! client and two mock upstreams as the channels: a batch round trip (upload, create, poll
//! until completed, download the output) stays on the channel the upload was routed to and is
//! accounted once; a forged, altered or another key's id is a 404 like an unknown one; a key
//! lists only its own objects.
//! `SWITCHYARD_TEST_PYTHON` must name a python with `openai` installed (scripts/test sets it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use switchyard_data_plane::usage::UsageReporter;
use switchyard_mock_upstream::MockUpstream;
use switchyard_proto::v1::UsageRecord;
use switchyard_state::{Limit, LimitKey, LimitMode, Metric, ScopeKind, Window};

const OTHER_TOKEN: &str = "sk-other-token";

const SCRIPT: &str = r#"
import json, sys, time
from openai import OpenAI, NotFoundError

base, key, other_key = sys.argv[1], sys.argv[2], sys.argv[3]
client = OpenAI(base_url=base + "/v1", api_key=key, max_retries=0)
other = OpenAI(base_url=base + "/v1", api_key=other_key, max_retries=0)

lines = [
    {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "gpt-batch", "messages": [{"role": "user", "content": "hello there"}]}},
    {"custom_id": "r2", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "gpt-batch", "messages": [{"role": "user", "content": "and again, a longer prompt"}]}},
]
data = "\n".join(json.dumps(l) for l in lines).encode()
uploaded = client.files.create(file=("batch.jsonl", data), purpose="batch")
batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
polls = 0
while batch.status not in ("completed", "failed", "cancelled") and polls < 10:
    polls += 1
    batch = client.batches.retrieve(batch.id)
output = client.files.content(batch.output_file_id).text
again = client.batches.retrieve(batch.id)

def status(call):
    try:
        call()
        return 200
    except NotFoundError as e:
        return e.status_code
    except Exception as e:
        return getattr(e, "status_code", repr(e))

tampered = uploaded.id[:-2] + ("AA" if not uploaded.id.endswith("AA") else "BB")
result = {
    "file_id": uploaded.id,
    "file_purpose": uploaded.purpose,
    "batch_id": batch.id,
    "status": batch.status,
    "polls": polls,
    "input_file_id": batch.input_file_id,
    "output_file_id": batch.output_file_id,
    "output_lines": [json.loads(l) for l in output.splitlines() if l.strip()],
    "again_status": again.status,
    "retrieved": client.files.retrieve(uploaded.id).id,
    "files": [f.id for f in client.files.list()],
    "batches": [b.id for b in client.batches.list()],
    "other_files": [f.id for f in other.files.list()],
    "other_batches": [b.id for b in other.batches.list()],
    "forged": status(lambda: client.files.retrieve("file-abc123")),
    "forged_gateway_shape": status(lambda: client.files.retrieve("file-sy1" + "A" * 60)),
    "tampered": status(lambda: client.files.retrieve(tampered)),
    "other_file": status(lambda: other.files.retrieve(uploaded.id)),
    "other_content": status(lambda: other.files.content(batch.output_file_id)),
    "other_batch": status(lambda: other.batches.retrieve(batch.id)),
    "other_cancel": status(lambda: other.batches.cancel(batch.id)),
    "other_delete": status(lambda: other.files.delete(uploaded.id)),
    "batch_as_file": status(lambda: client.files.retrieve(batch.id)),
}
deleted = client.files.delete(uploaded.id)
result["deleted"] = deleted.deleted
result["deleted_id"] = deleted.id
result["files_after_delete"] = [f.id for f in client.files.list()]
print(json.dumps(result))
"#;

/// Two OpenAI channels `a` and `b` on their mocks, equal members of the route `gpt-batch`
/// (either may take the upload), both priced, and two keys, the first (id 1) under a token and
/// a spend limit.
fn config(a: &MockUpstream, b: &MockUpstream) -> String {
    format!(
        "channels:\n{}{}routes:\n  - model_pattern: gpt-batch\n    members:\n      - {{ channel: a }}\n      - {{ channel: b }}\ntokens:\n  - name: test\n    token: {TOKEN}\n  - name: other\n    token: {OTHER_TOKEN}\nprices:\n  - {{ channel: a, model_pattern: '*', input_per_million: 1, output_per_million: 2 }}\n  - {{ channel: b, model_pattern: '*', input_per_million: 1, output_per_million: 2 }}\nlimits:\n  - {{ token: test, metric: tokens, window: day, value: 1000000 }}\n  - {{ token: test, metric: spend, window: day, value: 100 }}\n",
        channel("a", &a.base_url(), &["ka"]),
        channel("b", &b.base_url(), &["kb"]),
    )
}

fn records(usage: &UsageReporter) -> Vec<UsageRecord> {
    usage.take_batch().map(|b| b.records).unwrap_or_default()
}

/// The OpenAI SDK script against the proxy at `url`, with both keys.
async fn run_script(url: String) -> serde_json::Value {
    let args = ["-c", SCRIPT, &url, TOKEN, OTHER_TOKEN];
    run_python_with(args.iter().map(|a| (*a).to_owned()).collect()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_round_trip_through_the_sdk_stays_on_one_channel_and_is_accounted_once() {
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    clear_of_a_window_end(std::time::Duration::from_secs(20)).await;
    let (proxy, usage) = start_accounted(&config(&a, &b)).await;
    let result = run_script(proxy.url.clone()).await;

    // The round trip.
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["file_purpose"], "batch");
    assert_eq!(result["again_status"], "completed");
    let (file, batch) = (
        result["file_id"].as_str().unwrap(),
        result["batch_id"].as_str().unwrap(),
    );
    assert!(file.starts_with("file-sy1"), "a gateway file id: {file}");
    assert!(
        batch.starts_with("batch_sy1"),
        "a gateway batch id: {batch}"
    );
    assert_eq!(
        result["input_file_id"], file,
        "the batch names the gateway's file id"
    );
    assert!(result["output_file_id"]
        .as_str()
        .unwrap()
        .starts_with("file-sy1"));
    let lines = result["output_lines"].as_array().unwrap();
    assert_eq!(lines.len(), 2, "{result}");
    assert_eq!(lines[0]["custom_id"], "r1");
    assert_eq!(lines[1]["response"]["status_code"], 200);
    assert_eq!(result["retrieved"], file);

    // Every call after the upload went to the upload's channel; the other saw none.
    let (served, idle, name) = if a.hits() > 0 {
        (&a, &b, "a")
    } else {
        (&b, &a, "b")
    };
    assert_eq!(idle.hits(), 0, "the other channel was never called");
    let paths: Vec<String> = served
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(paths.contains(&"POST /v1/files".to_owned()), "{paths:?}");
    assert!(paths.contains(&"POST /v1/batches".to_owned()), "{paths:?}");
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("GET /v1/files/file-mock") && p.ends_with("/content")),
        "{paths:?}"
    );
    // The channel was sent its own ids, never the gateway's.
    let create = served
        .requests()
        .into_iter()
        .find(|r| r.path == "/v1/batches")
        .unwrap();
    assert!(create.json()["input_file_id"]
        .as_str()
        .unwrap()
        .starts_with("file-mock"));
    assert!(!paths.iter().any(|p| p.contains("sy1")), "{paths:?}");

    // Accounted once: one request per answered line, under the key and the serving channel,
    // although the completed batch was read twice.
    let accounted = records(&usage);
    let requests: u64 = accounted.iter().map(|r| r.requests).sum();
    assert_eq!(requests, 2, "{accounted:?}");
    assert!(
        accounted
            .iter()
            .all(|r| r.token == "test" && r.channel == name && r.route == "gpt-batch"),
        "{accounted:?}"
    );
    assert!(accounted.iter().map(|r| r.input_tokens).sum::<u64>() > 0);
    assert!(accounted.iter().map(|r| r.output_tokens).sum::<u64>() > 0);
    // Priced with the channel's price, and charged to the key's token and spend limits.
    let tokens: u64 = accounted
        .iter()
        .map(|r| r.input_tokens + r.output_tokens)
        .sum();
    let pico: u64 = accounted.iter().map(|r| r.cost_pico_usd).sum();
    assert_eq!(
        accounted.iter().map(|r| r.unpriced_requests).sum::<u64>(),
        0
    );
    assert!(pico > 0);
    let limit = |metric, value| Limit {
        key: LimitKey {
            scope: ScopeKind::Token,
            scope_id: 1,
            metric,
            window: Window::Day,
            rule: None,
        },
        value,
        mode: LimitMode::Hard,
    };
    let now = switchyard_data_plane::unix_ms();
    let used = |l: &Limit| proxy.store.limit_status(l, now).used;
    assert_eq!(used(&limit(Metric::Tokens, 1_000_000)), tokens);
    assert!(
        used(&limit(Metric::Spend, 100_000_000)) > 0,
        "the batch's cost was charged"
    );

    // Lists: the key's own only.
    assert_eq!(result["batches"], serde_json::json!([batch]));
    let files = result["files"].as_array().unwrap();
    assert!(files.iter().any(|f| f == file), "{files:?}");
    assert_eq!(result["other_files"], serde_json::json!([]));
    assert_eq!(result["other_batches"], serde_json::json!([]));

    // Forged, altered, another key's or another kind's id: the same 404.
    for case in [
        "forged",
        "forged_gateway_shape",
        "tampered",
        "other_file",
        "other_content",
        "other_batch",
        "other_cancel",
        "other_delete",
        "batch_as_file",
    ] {
        assert_eq!(result[case], 404, "{case}: {result}");
    }

    // Deleted on its channel, and gone from the list.
    assert_eq!(result["deleted"], true);
    assert_eq!(result["deleted_id"], file);
    assert!(!result["files_after_delete"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == file));
    assert!(records(&usage).is_empty(), "nothing accounted twice");
}

#[tokio::test]
async fn an_upload_names_its_model_or_is_told_how() {
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let proxy = start(&config(&a, &b)).await;
    let form = |purpose: &str, file: &str| {
        format!("--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n{file}\r\n--b--\r\n").into_bytes()
    };
    let upload = |body: Vec<u8>, extra: Vec<(&'static str, &'static str)>| {
        let url = format!("{}/v1/files", proxy.url);
        async move {
            let mut headers = vec![("content-type", "multipart/form-data; boundary=b")];
            headers.extend(extra);
            send(http::Method::POST, &url, Some(TOKEN), body, &headers).await
        }
    };
    let reply = upload(form("assistants", "notes"), vec![]).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("x-switchyard-model"));
    let reply = upload(
        form("assistants", "notes"),
        vec![("x-switchyard-model", "gpt-batch")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["purpose"], "assistants");
    let reply = upload(
        form("assistants", "notes"),
        vec![("x-switchyard-model", "no-such")],
    )
    .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "model_not_found");
    let reply = upload(
        form(
            "batch",
            "{\"body\":{\"model\":\"gpt-batch\"}}\n{\"body\":{}}",
        ),
        vec![],
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("line 2"));
    assert_eq!(
        a.hits() + b.hits(),
        1,
        "only the good upload reached a channel"
    );
    let reply = send(
        http::Method::GET,
        &format!("{}/v1/files", proxy.url),
        None,
        vec![],
        &[],
    )
    .await;
    assert_eq!(reply.status, 401);
}

const ANTHROPIC_SCRIPT: &str = r#"
import json, sys
import anthropic

base, key, other_key = sys.argv[1], sys.argv[2], sys.argv[3]
client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
other = anthropic.Anthropic(base_url=base, api_key=other_key, max_retries=0)

def request(custom_id, text):
    return {"custom_id": custom_id, "params": {"model": "claude-batch", "max_tokens": 32,
            "messages": [{"role": "user", "content": text}]}}

batch = client.messages.batches.create(requests=[request("q1", "hello"), request("q2", "a longer question")])
created = batch.id
polls = 0
while batch.processing_status != "ended" and polls < 10:
    polls += 1
    batch = client.messages.batches.retrieve(batch.id)
results = [{"custom_id": r.custom_id, "type": r.result.type,
            "input_tokens": r.result.message.usage.input_tokens}
           for r in client.messages.batches.results(batch.id)]
again = client.messages.batches.retrieve(batch.id)

def status(call):
    try:
        call()
        return 200
    except anthropic.NotFoundError as e:
        return e.status_code
    except Exception as e:
        return getattr(e, "status_code", repr(e))

tampered = batch.id[:-2] + ("AA" if not batch.id.endswith("AA") else "BB")
result = {
    "id": created,
    "status": batch.processing_status,
    "results_url": batch.results_url,
    "results": results,
    "again": again.processing_status,
    "listed": [b.id for b in client.messages.batches.list()],
    "other_listed": [b.id for b in other.messages.batches.list()],
    "forged": status(lambda: client.messages.batches.retrieve("msgbatch_01abc")),
    "tampered": status(lambda: client.messages.batches.retrieve(tampered)),
    "other_get": status(lambda: other.messages.batches.retrieve(batch.id)),
    "other_cancel": status(lambda: other.messages.batches.cancel(batch.id)),
    "other_delete": status(lambda: other.messages.batches.delete(batch.id)),
}
result["deleted"] = client.messages.batches.delete(batch.id).id
result["listed_after_delete"] = [b.id for b in client.messages.batches.list()]
print(json.dumps(result))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_batch_through_the_anthropic_sdk_stays_on_one_channel_and_is_accounted_once() {
    let (a, b) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let anthropic = |name: &str, up: &MockUpstream| {
        channel(name, &up.base_url(), &["k"]).replace("provider: openai", "provider: anthropic")
    };
    // Batch traffic charged half the channels' price.
    let yaml = format!(
        "settings:\n  batch_price_percent: 50\nchannels:\n{}{}routes:\n  - model_pattern: claude-batch\n    members:\n      - {{ channel: a }}\n      - {{ channel: b }}\ntokens:\n  - name: test\n    token: {TOKEN}\n  - name: other\n    token: {OTHER_TOKEN}\nprices:\n  - {{ channel: a, model_pattern: '*', input_per_million: 1, output_per_million: 2 }}\n  - {{ channel: b, model_pattern: '*', input_per_million: 1, output_per_million: 2 }}\n",
        anthropic("a", &a),
        anthropic("b", &b),
    );
    let (proxy, usage) = start_accounted(&yaml).await;
    let args = ["-c", ANTHROPIC_SCRIPT, &proxy.url, TOKEN, OTHER_TOKEN];
    let result = run_python_with(args.iter().map(|a| (*a).to_owned()).collect()).await;

    let id = result["id"].as_str().unwrap();
    assert!(id.starts_with("msgbatch_sy1"), "{id}");
    assert_eq!(result["status"], "ended");
    assert_eq!(result["again"], "ended");
    assert_eq!(
        result["results_url"],
        format!("/v1/messages/batches/{id}/results")
    );
    let results = result["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{result}");
    assert!(results
        .iter()
        .all(|r| r["type"] == "succeeded" && r["input_tokens"].as_u64().unwrap() > 0));
    assert_eq!(result["listed"], serde_json::json!([id]));
    assert_eq!(result["other_listed"], serde_json::json!([]));
    for case in [
        "forged",
        "tampered",
        "other_get",
        "other_cancel",
        "other_delete",
    ] {
        assert_eq!(result[case], 404, "{case}: {result}");
    }
    assert_eq!(result["deleted"], id);
    assert_eq!(result["listed_after_delete"], serde_json::json!([]));

    // One channel served every call; the other none.
    let (served, idle, name) = if a.hits() > 0 {
        (&a, &b, "a")
    } else {
        (&b, &a, "b")
    };
    assert_eq!(idle.hits(), 0);
    assert!(served
        .requests()
        .iter()
        .all(|r| r.path.starts_with("/v1/messages/batches")));
    assert!(served
        .requests()
        .iter()
        .all(|r| r.credential.as_deref() == Some("k")));

    // Accounted once, one request per succeeded result.
    let accounted = records(&usage);
    assert_eq!(
        accounted.iter().map(|r| r.requests).sum::<u64>(),
        2,
        "{accounted:?}"
    );
    assert!(accounted
        .iter()
        .all(|r| r.token == "test" && r.channel == name && r.route == "claude-batch"));
    // 1 USD per million input tokens and 2 per million output (pico-USD per token: 10^6 and
    // 2 * 10^6), at half price.
    let full: u64 = accounted
        .iter()
        .map(|r| r.input_tokens * 1_000_000 + r.output_tokens * 2_000_000)
        .sum();
    let charged: u64 = accounted.iter().map(|r| r.cost_pico_usd).sum();
    assert!(full > 0);
    assert_eq!(charged, full / 2, "{accounted:?}");
    assert!(records(&usage).is_empty());
}

/// A file upload of `lines` (a batch file) as a multipart body, and its content type.
fn batch_upload(lines: &str) -> (Vec<u8>, &'static str) {
    let body = format!("--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n{lines}\r\n--b--\r\n");
    (body.into_bytes(), "multipart/form-data; boundary=b")
}

/// Two proxies of a fleet (one Redis, one id secret): an object made through one is reachable,
/// listed and accounted through the other, the completed batch is accounted once although both
/// read it completed, and a proxy with another secret cannot open the ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_of_a_fleet_share_the_ids_the_lists_and_one_accounting() {
    use std::sync::Arc;
    use std::time::Duration;
    use switchyard_data_plane::object_id::IdKey;
    use switchyard_state::{RedisConfig, RedisStore, StateStore};

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!(
        "test-files-{}-{}",
        std::process::id(),
        switchyard_data_plane::unix_ms()
    );
    let up = MockUpstream::start().await.unwrap();
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: gpt-batch\n    members:\n      - {{ channel: a }}\ntokens:\n  - name: test\n    token: {TOKEN}\n",
        channel("a", &up.base_url(), &["ka"]),
    );
    let mut proxies = Vec::new();
    for secret in ["fleet secret", "fleet secret", "another fleet"] {
        let store = Arc::new(RedisStore::start(RedisConfig::new(&url, prefix.clone())).unwrap());
        assert!(
            store.wait_resynced(1, Duration::from_secs(10)).await,
            "no Redis at {url}"
        );
        let store: Arc<dyn StateStore> = store;
        let (proxy, usage) = start_accounted_on(&yaml, store).await;
        assert!(proxy.state.set_id_key(IdKey::derived(secret)));
        proxies.push((proxy, usage));
    }
    let call =
        |i: usize, method: http::Method, path: &str, body: Vec<u8>, content_type: &'static str| {
            let url = format!("{}{path}", proxies[i].0.url);
            async move {
                send(
                    method,
                    &url,
                    Some(TOKEN),
                    body,
                    &[("content-type", content_type)],
                )
                .await
            }
        };
    let lines = "{\"custom_id\":\"1\",\"body\":{\"model\":\"gpt-batch\",\"messages\":[]}}\n{\"custom_id\":\"2\",\"body\":{\"model\":\"gpt-batch\",\"messages\":[]}}";
    let (form, form_type) = batch_upload(lines);
    let file = call(0, http::Method::POST, "/v1/files", form, form_type).await;
    assert_eq!(file.status, 200, "{}", file.body);
    let file_id = file.json()["id"].as_str().unwrap().to_owned();
    let create = serde_json::json!({"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"});
    let batch = call(
        1,
        http::Method::POST,
        "/v1/batches",
        create.to_string().into_bytes(),
        "application/json",
    )
    .await;
    assert_eq!(batch.status, 200, "{}", batch.body);
    let batch_id = batch.json()["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/batches/{batch_id}");
    let first = call(0, http::Method::GET, &path, vec![], "application/json").await;
    assert_eq!(first.json()["status"], "completed", "{}", first.body);
    let second = call(1, http::Method::GET, &path, vec![], "application/json").await;
    assert_eq!(second.json()["status"], "completed", "{}", second.body);

    let requests = |i: usize| -> u64 {
        proxies[i]
            .1
            .take_batch()
            .map(|b| b.records.iter().map(|r| r.requests).sum())
            .unwrap_or(0)
    };
    assert_eq!(
        (requests(0), requests(1)),
        (2, 0),
        "accounted once, by the first to see it completed"
    );

    let listed = call(
        1,
        http::Method::GET,
        "/v1/batches",
        vec![],
        "application/json",
    )
    .await;
    assert_eq!(
        listed.json()["data"][0]["id"],
        batch_id.as_str(),
        "{}",
        listed.body
    );
    let files = call(
        1,
        http::Method::GET,
        "/v1/files",
        vec![],
        "application/json",
    )
    .await;
    assert!(files.body.contains(&file_id), "{}", files.body);

    // A proxy under another secret opens none of these ids.
    let foreign = call(2, http::Method::GET, &path, vec![], "application/json").await;
    assert_eq!(foreign.status, 404, "{}", foreign.body);
    assert_eq!(foreign.json()["error"]["code"], "not_found");
    let polls = up
        .requests()
        .iter()
        .filter(|r| r.path.starts_with("/v1/batches/"))
        .count();
    assert_eq!(polls, 2, "the refused read never reached the channel");
}

/// Files and batch calls are requests: a key's `requests` limit of 3 admits an upload, a list
/// and a read and refuses the next files call with OpenAI's 429 (and a message-batches call
/// with Anthropic's); a route's limit refuses a second message batch routed to it. Every call
/// is counted in the request metric under its endpoint, its route and its channel, never an id.
#[tokio::test]
async fn files_and_batch_calls_are_admitted_and_counted_like_requests() {
    clear_of_a_window_end(std::time::Duration::from_secs(10)).await;
    let (a, c) = (
        MockUpstream::start().await.unwrap(),
        MockUpstream::start().await.unwrap(),
    );
    let yaml = format!(
        "channels:\n{}{}routes:\n  - model_pattern: gpt-batch\n    members:\n      - {{ channel: a }}\n  - model_pattern: claude-batch\n    members:\n      - {{ channel: c }}\ntokens:\n  - name: test\n    token: {TOKEN}\n  - name: other\n    token: {OTHER_TOKEN}\nlimits:\n  - {{ token: test, metric: requests, window: minute, value: 3 }}\n  - {{ route: claude-batch, metric: requests, window: minute, value: 1 }}\n",
        channel("a", &a.base_url(), &["ka"]),
        channel("c", &c.base_url(), &["kc"]).replace("provider: openai", "provider: anthropic"),
    );
    let proxy = start(&yaml).await;
    let call = |key: &'static str,
                method: http::Method,
                path: &str,
                body: &str,
                headers: Vec<(&'static str, &'static str)>| {
        let url = format!("{}{path}", proxy.url);
        let body = body.as_bytes().to_vec();
        async move { send(method, &url, Some(key), body, &headers).await }
    };
    let form = "--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nassistants\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nnotes\r\n--b--\r\n";
    let upload_headers = vec![
        ("content-type", "multipart/form-data; boundary=b"),
        ("x-switchyard-model", "gpt-batch"),
    ];
    let uploaded = call(TOKEN, http::Method::POST, "/v1/files", form, upload_headers).await;
    assert_eq!(uploaded.status, 200, "{}", uploaded.body);
    assert_eq!(uploaded.header("x-ratelimit-remaining-requests"), "2");
    let id = uploaded.json()["id"].as_str().unwrap().to_owned();
    let listed = call(TOKEN, http::Method::GET, "/v1/files", "", vec![]).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let read = call(
        TOKEN,
        http::Method::GET,
        &format!("/v1/files/{id}"),
        "",
        vec![],
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.header("x-ratelimit-remaining-requests"), "0");

    // The fourth call: refused before it reaches the channel, in OpenAI's shape.
    let hits = a.hits();
    let refused = call(
        TOKEN,
        http::Method::GET,
        &format!("/v1/files/{id}/content"),
        "",
        vec![],
    )
    .await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(refused.json()["error"]["type"], "requests");
    assert!(!refused.header("retry-after").is_empty());
    assert_eq!(a.hits(), hits, "a refused call never reaches the channel");
    // Anthropic's batches answer in Anthropic's shape.
    let anthropic = call(TOKEN, http::Method::GET, "/v1/messages/batches", "", vec![]).await;
    assert_eq!(anthropic.status, 429, "{}", anthropic.body);
    assert_eq!(anthropic.json()["type"], "error");
    assert_eq!(anthropic.json()["error"]["type"], "rate_limit_error");

    // A message batch routed to `claude-batch` is under the route's limit of 1; a list is not.
    let batch = r#"{"requests":[{"custom_id":"q","params":{"model":"claude-batch","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}]}"#;
    let json = vec![("content-type", "application/json")];
    let created = call(
        OTHER_TOKEN,
        http::Method::POST,
        "/v1/messages/batches",
        batch,
        json.clone(),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let again = call(
        OTHER_TOKEN,
        http::Method::POST,
        "/v1/messages/batches",
        batch,
        json,
    )
    .await;
    assert_eq!(again.status, 429, "{}", again.body);
    assert_eq!(again.json()["error"]["type"], "rate_limit_error");
    assert!(
        again.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("route"),
        "{}",
        again.body
    );
    let others = call(
        OTHER_TOKEN,
        http::Method::GET,
        "/v1/messages/batches",
        "",
        vec![],
    )
    .await;
    assert_eq!(others.status, 200, "{}", others.body);

    // The request metric: fixed endpoint labels, the route and channel when there is one.
    let page = proxy.state.metrics.render();
    for series in [
        "{endpoint=\"files\",route=\"gpt-batch\",channel=\"a\",code=\"2xx\"} 1",
        "{endpoint=\"files\",route=\"\",channel=\"\",code=\"2xx\"} 1",
        "{endpoint=\"files\",route=\"\",channel=\"a\",code=\"2xx\"} 1",
        "{endpoint=\"files\",route=\"\",channel=\"\",code=\"4xx\"} 1",
        "{endpoint=\"message_batches\",route=\"claude-batch\",channel=\"c\",code=\"2xx\"} 1",
        "{endpoint=\"message_batches\",route=\"claude-batch\",channel=\"\",code=\"4xx\"} 1",
        "{endpoint=\"message_batches\",route=\"\",channel=\"\",code=\"4xx\"} 1",
        "{endpoint=\"message_batches\",route=\"\",channel=\"\",code=\"2xx\"} 1",
    ] {
        assert!(
            page.contains(&format!("switchyard_requests_total{series}")),
            "no {series} in:\n{page}"
        );
    }
    assert!(
        !page.contains("sy1") && !page.contains("file-mock"),
        "{page}"
    );
}

/// An upstream keeping files whose content answers hold their body open: the head and a first
/// line at once, the last line once `release` is notified.
async fn holding_upstream() -> (String, std::sync::Arc<tokio::sync::Notify>) {
    use axum::routing::{get, post};
    use futures_util::StreamExt;
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let held = release.clone();
    let file = serde_json::json!({"id": "file-up1", "object": "file", "bytes": 11, "created_at": 1, "filename": "f", "purpose": "assistants"});
    let app = axum::Router::new()
        .route(
            "/v1/files",
            post(move || async move {
                (
                    [(http::header::CONTENT_TYPE, "application/json")],
                    file.to_string(),
                )
            }),
        )
        .route(
            "/v1/files/{id}/content",
            get(move || {
                let held = held.clone();
                async move {
                    let first = futures_util::stream::once(async {
                        Ok::<_, std::io::Error>(bytes::Bytes::from("first\n"))
                    });
                    let last = futures_util::stream::once(async move {
                        held.notified().await;
                        Ok(bytes::Bytes::from("last\n"))
                    });
                    axum::body::Body::from_stream(first.chain(last))
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, release)
}

/// A key's concurrency slot is held by a files call until its answer's body ends: while a
/// file's content is still coming, the key's next call is refused with OpenAI's 429; once the
/// content has been read to its end, the next call is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_files_call_holds_its_concurrency_slot_until_its_body_ends() {
    use http_body_util::BodyExt;
    let (upstream, release) = holding_upstream().await;
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: gpt-batch\n    members:\n      - {{ channel: a }}\ntokens:\n  - name: test\n    token: {TOKEN}\nlimits:\n  - {{ token: test, metric: concurrent, value: 1 }}\n",
        channel("a", &upstream, &["ka"]),
    );
    let proxy = start(&yaml).await;
    let form = "--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nassistants\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nnotes\r\n--b--\r\n";
    let uploaded = send(
        http::Method::POST,
        &format!("{}/v1/files", proxy.url),
        Some(TOKEN),
        form.into(),
        &[
            ("content-type", "multipart/form-data; boundary=b"),
            ("x-switchyard-model", "gpt-batch"),
        ],
    )
    .await;
    assert_eq!(uploaded.status, 200, "{}", uploaded.body);
    let id = uploaded.json()["id"].as_str().unwrap().to_owned();

    let client: hyper_util::client::legacy::Client<_, http_body_util::Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let request = http::Request::get(format!("{}/v1/files/{id}/content", proxy.url))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "first\n");

    let list = format!("{}/v1/files", proxy.url);
    let refused = send(http::Method::GET, &list, Some(TOKEN), vec![], &[]).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "rate_limit_exceeded");
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit of 1 concurrent requests"),
        "{}",
        refused.body
    );

    release.notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, "last\n");
    let admitted = send(http::Method::GET, &list, Some(TOKEN), vec![], &[]).await;
    assert_eq!(admitted.status, 200, "{}", admitted.body);
}
