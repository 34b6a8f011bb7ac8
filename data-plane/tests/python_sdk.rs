//! The official OpenAI Python SDK as a client: chat, streaming, embeddings and moderations
//! through the proxy.
//! `SWITCHYARD_TEST_PYTHON` must name a python with `openai` installed (scripts/test sets it);
//! without it this test fails rather than skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{run_python, start};

const SCRIPT: &str = r#"
import json, sys
from openai import OpenAI

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key=sys.argv[2], max_retries=0)
chat = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
pieces = []
for chunk in client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        pieces.append(chunk.choices[0].delta.content)
emb = client.embeddings.create(model="text-embedding-3-small", input=["a", "b", "c"])
mod = client.moderations.create(input=["a calm day", "I will kill it"])
mod_raw = client.moderations.with_raw_response.create(input="hi")
models = [m.id for m in client.models.list()]
try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    not_found = None
except Exception as e:
    not_found = getattr(e, "status_code", None)
print(json.dumps({
    "chat": chat.choices[0].message.content,
    "channel": raw.headers.get("x-switchyard-channel"),
    "stream": "".join(pieces),
    "embeddings": len(emb.data),
    "dims": len(emb.data[0].embedding),
    "models": models,
    "not_found": not_found,
    "moderation_model": mod.model,
    "flagged": [r.flagged for r in mod.results],
    "violence": mod.results[1].categories.violence,
    "violence_score": mod.results[1].category_scores.violence,
    "moderation_channel": mod_raw.headers.get("x-switchyard-channel"),
}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_sdk_works_against_the_proxy() {
    let yaml = "channels:\n  - name: flaky\n    provider: mock\n    mock: { failure_rate: 1.0, failure_status: 503 }\n  - name: sim\n    provider: mock\n    mock: { stream_chunks: 4 }\nroutes:\n  - model_pattern: gpt-4o-mini\n    members:\n      - { channel: flaky, priority: 1 }\n      - { channel: sim, priority: 0 }\n  - model_pattern: text-embedding-3-small\n    members:\n      - { channel: sim }\n  - model_pattern: omni-moderation-*\n    members:\n      - { channel: flaky, priority: 1, upstream_model: omni-moderation-latest }\n      - { channel: sim, priority: 0, upstream_model: omni-moderation-latest }\n";
    let proxy = start(yaml).await;
    let result = run_python(&proxy, SCRIPT).await;
    assert_eq!(result["chat"], "Hello from mock");
    assert_eq!(
        result["channel"], "sim",
        "failed over from the flaky channel"
    );
    assert_eq!(result["stream"], "Hello from mock");
    assert_eq!(result["embeddings"], 3);
    assert!(result["dims"].as_u64().unwrap() > 0);
    assert_eq!(
        result["models"],
        serde_json::json!(["gpt-4o-mini", "text-embedding-3-small"])
    );
    assert_eq!(result["not_found"], 404);
    // The SDK sends no model: the default's route took it, failing over from the flaky channel.
    assert_eq!(result["moderation_model"], "omni-moderation-latest");
    assert_eq!(result["flagged"], serde_json::json!([false, true]));
    assert_eq!(result["violence"], true);
    assert!(result["violence_score"].as_f64().unwrap() > 0.5);
    assert_eq!(result["moderation_channel"], "sim");
}
