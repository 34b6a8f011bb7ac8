//! The default answer of every endpoint, and the HTTP control API.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns are test code too

mod support;

use serde_json::{json, Value};
use support::{chat_stream, get, post};
use switchyard_mock_upstream::{MockOptions, MockUpstream};

fn sse_names(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            e.lines()
                .next()
                .unwrap()
                .trim_start_matches("event: ")
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn openai_endpoints_have_their_default_shapes() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();

    let v = post(
        &base,
        "/v1/embeddings",
        json!({"model": "emb", "input": ["a", "b"]}),
    )
    .ok()
    .await
    .json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], "emb");
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][1]["object"], "embedding");
    assert!(v["data"][0]["embedding"][0].is_f64());
    let b64 = post(
        &base,
        "/v1/embeddings",
        json!({"model": "emb", "input": "a", "encoding_format": "base64"}),
    )
    .ok()
    .await
    .json();
    assert!(b64["data"][0]["embedding"].is_string());

    let v = get(&base, "/v1/models").ok().await.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["object"], "model");
    assert!(v["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == "mock-model"));
    assert_eq!(
        get(&base, "/v1/models/mock-model").ok().await.json()["id"],
        "mock-model"
    );
    assert_eq!(get(&base, "/v1/models/nope").ok().await.status, 404);

    let v = post(
        &base,
        "/v1/completions",
        json!({"model": "c", "prompt": "x"}),
    )
    .ok()
    .await
    .json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], "Hello from mock");

    let v = post(&base, "/v1/responses", json!({"model": "r", "input": "x"}))
        .ok()
        .await
        .json();
    assert_eq!(v["object"], "response");
    assert_eq!(v["output"][0]["content"][0]["text"], "Hello from mock");

    let v = post(
        &base,
        "/v1/images/generations",
        json!({"prompt": "cat", "n": 2}),
    )
    .ok()
    .await
    .json();
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert!(v["data"][0]["b64_json"].is_string());

    let speech = post(
        &base,
        "/v1/audio/speech",
        json!({"model": "tts", "input": "hi"}),
    )
    .ok()
    .await;
    assert_eq!(speech.headers["content-type"], "audio/mpeg");
    assert!(speech.body.len() > 100);

    let v = post(&base, "/v1/audio/transcriptions", json!({}))
        .ok()
        .await
        .json();
    assert_eq!(v["text"], "Hello from mock");

    let v = post(&base, "/v1/moderations", json!({"input": ["fine", "kill"]}))
        .ok()
        .await
        .json();
    assert_eq!(v["model"], "omni-moderation-latest");
    assert_eq!(v["results"][0]["flagged"], false);
    assert_eq!(v["results"][1]["categories"]["violence"], true);

    for path in ["/v1/rerank", "/v2/rerank"] {
        let v = post(
            &base,
            path,
            json!({"model": "rr", "query": "red fox", "documents": ["a blue sky", {"text": "a red fox"}], "top_n": 1}),
        )
        .ok()
        .await
        .json();
        assert_eq!(v["model"], "rr", "{path}");
        assert_eq!(v["results"].as_array().unwrap().len(), 1, "{path}");
        assert_eq!(v["results"][0]["index"], 1, "{path}");
        assert_eq!(v["results"][0]["document"]["text"], "a red fox", "{path}");
        assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0, "{path}");
    }
}

#[tokio::test]
async fn unknown_paths_and_methods_get_openai_errors() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    let reply = post(&base, "/v1/nope", json!({})).ok().await;
    assert_eq!(reply.status, 404);
    assert!(reply.json()["error"]["message"].is_string());
    let reply = get(&base, "/v1/chat/completions").ok().await;
    assert_eq!(reply.status, 405);
    assert!(reply.json()["error"]["type"].is_string());
}

#[tokio::test]
async fn streams_follow_each_api_shape() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();

    let reply = post(&base, "/v1/messages", chat_stream("claude"))
        .ok()
        .await;
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    assert_eq!(
        sse_names(&reply.text()),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let v = post(
        &base,
        "/v1/messages",
        json!({"model": "claude", "max_tokens": 5, "messages": []}),
    )
    .ok()
    .await
    .json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["model"], "claude");
    assert_eq!(v["content"][0]["text"], "Hello from mock");

    let reply = post(
        &base,
        "/v1/responses",
        json!({"model": "r", "input": "x", "stream": true}),
    )
    .ok()
    .await;
    let names = sse_names(&reply.text());
    assert_eq!(names.first().unwrap(), "response.created");
    assert_eq!(names.last().unwrap(), "response.completed");

    let reply = post(
        &base,
        "/v1/completions",
        json!({"model": "c", "prompt": "x", "stream": true}),
    )
    .ok()
    .await;
    assert!(reply.text().ends_with("data: [DONE]\n\n"));

    let reply = post(
        &base,
        "/v1/chat/completions",
        json!({"model": "m", "stream": true, "stream_options": {"include_usage": true}, "messages": []}),
    )
    .ok()
    .await;
    let text = reply.text();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    let usage: Value =
        serde_json::from_str(events[events.len() - 2].trim_start_matches("data: ")).unwrap();
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn control_api_scripts_counts_and_resets() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    let reply = post(
        &base,
        "/__mock/rules",
        json!({"matcher": {"path": "/v1/chat/completions", "credential": "sk-a"},
               "behavior": {"status": 429, "retry_after": 3, "times": 1}}),
    )
    .ok()
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["index"], 0);

    let chat = json!({"model": "m", "messages": []});
    let first = post(&base, "/v1/chat/completions", chat.clone())
        .bearer("sk-a")
        .ok()
        .await;
    assert_eq!(first.status, 429);
    assert_eq!(first.headers["retry-after"], "3");
    let second = post(&base, "/v1/chat/completions", chat.clone())
        .bearer("sk-a")
        .ok()
        .await;
    assert_eq!(second.status, 200);

    let hits = get(&base, "/__mock/hits").ok().await.json();
    assert_eq!(hits["hits"]["total"], 2);
    assert_eq!(hits["hits"]["by_credential"]["sk-a"], 2);
    assert_eq!(hits["hits"]["by_model"]["m"], 2);
    assert_eq!(hits["rules"][0]["used"], 1);
    assert_eq!(hits["rules"][0]["remaining"], 0);
    let requests = get(&base, "/__mock/requests").ok().await.json();
    assert_eq!(requests["requests"].as_array().unwrap().len(), 2);
    // Control calls are not hits.
    assert_eq!(mock.hits(), 2);

    let bad = post(&base, "/__mock/rules", json!({"behavior": {"hangs": true}}))
        .ok()
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("hangs"));

    post(
        &base,
        "/__mock/rules",
        json!({"behavior": {"stream": {"chunks": 4, "gap_ms": 1}, "cut_after_chunks": 3}}),
    )
    .ok()
    .await;
    let cut = post(&base, "/v1/chat/completions", chat.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(cut.events().len(), 3);
    assert!(cut.body_error.is_some());

    assert_eq!(
        post(&base, "/__mock/reset", json!({})).ok().await.status,
        200
    );
    assert_eq!(mock.hits(), 0);
    assert_eq!(
        post(&base, "/v1/chat/completions", chat).ok().await.status,
        200
    );
}

#[tokio::test]
async fn control_api_can_be_turned_off() {
    let mock = MockUpstream::start_with(MockOptions {
        control_api: false,
        ..MockOptions::default()
    })
    .await
    .unwrap();
    let reply = get(&mock.base_url(), "/__mock/hits").ok().await;
    assert_eq!(reply.status, 404);
    assert_eq!(mock.hits(), 1);
}
