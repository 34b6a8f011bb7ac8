//! The three protocols spoken natively (OpenAI, Anthropic Messages, Gemini): answer shapes, event
//! order, tool calls, cached tokens, errors, credentials and models, and stream breakage, observed
//! by a real HTTP client over loopback.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns are test code too

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{chat, chat_stream, gemini, messages, post, sse_data, sse_names};
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};

const CHAT: &str = "/v1/chat/completions";
const MESSAGES: &str = "/v1/messages";
const GENERATE: &str = "/v1beta/models/gemini-2.0-flash:generateContent";
const STREAM_SSE: &str = "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse";
const WEATHER_ARGS: &str = r#"{"city":"Paris"}"#;

fn weather() -> Behavior {
    Behavior::ok().tool_call("get_weather", WEATHER_ARGS)
}

#[tokio::test]
async fn anthropic_json_sse_and_count_tokens_have_anthropic_shapes() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();

    let reply = post(&base, MESSAGES, messages("claude-x", false))
        .api_key("sk-ant-1")
        .header("anthropic-version", "2023-06-01")
        .ok()
        .await;
    assert_eq!(reply.status, 200);
    let v = reply.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "claude-x");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "Hello from mock"}])
    );
    assert_eq!(v["stop_reason"], "end_turn");
    for field in [
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ] {
        assert!(v["usage"][field].is_u64(), "usage.{field}: {v}");
    }

    let reply = post(&base, MESSAGES, messages("claude-x", true))
        .api_key("sk-ant-1")
        .ok()
        .await;
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    assert_eq!(
        sse_names(&reply),
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
    let data = sse_data(&reply);
    // Each event's data repeats its name as `type`.
    for (name, d) in sse_names(&reply).iter().zip(&data) {
        assert_eq!(&d["type"], name);
    }
    let usage = &data[0]["message"]["usage"];
    assert_eq!(usage["cache_read_input_tokens"], 0);
    assert_eq!(usage["cache_creation_input_tokens"], 0);
    let text: String = data[3..6]
        .iter()
        .map(|d| {
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, "Hello from mock");
    assert_eq!(data[7]["delta"]["stop_reason"], "end_turn");
    assert!(data[7]["usage"]["output_tokens"].as_u64().unwrap() > 0);

    let count = post(
        &base,
        "/v1/messages/count_tokens",
        messages("claude-x", false),
    )
    .ok()
    .await
    .json();
    assert!(count["input_tokens"].as_u64().unwrap() > 0);

    // x-api-key is the credential; anthropic-version is kept with the headers.
    let requests = mock.requests();
    assert_eq!(requests[0].credential.as_deref(), Some("sk-ant-1"));
    assert_eq!(requests[0].model.as_deref(), Some("claude-x"));
    assert_eq!(requests[0].headers["anthropic-version"], "2023-06-01");
    assert_eq!(
        mock.hits_matching(&Matcher::path(MESSAGES).credential("sk-ant-1")),
        2
    );
}

#[tokio::test]
async fn gemini_json_sse_array_and_count_tokens_have_gemini_shapes() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();

    let reply = post(&base, GENERATE, gemini()).ok().await;
    assert_eq!(reply.status, 200);
    let v = reply.json();
    let candidate = &v["candidates"][0];
    assert_eq!(candidate["content"]["role"], "model");
    assert_eq!(
        candidate["content"]["parts"],
        json!([{"text": "Hello from mock"}])
    );
    assert_eq!(candidate["finishReason"], "STOP");
    assert_eq!(candidate["index"], 0);
    let usage = &v["usageMetadata"];
    assert_eq!(
        usage["totalTokenCount"].as_u64().unwrap(),
        usage["promptTokenCount"].as_u64().unwrap()
            + usage["candidatesTokenCount"].as_u64().unwrap()
    );
    assert_eq!(v["modelVersion"], "gemini-2.0-flash");
    assert!(v["responseId"].is_string());

    let reply = post(&base, STREAM_SSE, gemini()).ok().await;
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    // Gemini ends SSE lines with CRLF.
    assert!(reply.text().ends_with("}\r\n\r\n"), "{:?}", reply.text());
    let data = sse_data(&reply);
    assert_eq!(data.len(), 3);
    let mut text = String::new();
    for (i, d) in data.iter().enumerate() {
        let last = i == data.len() - 1;
        text.push_str(
            d["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap(),
        );
        assert_eq!(d["candidates"][0].get("finishReason").is_some(), last);
        assert_eq!(d.get("usageMetadata").is_some(), last);
    }
    assert_eq!(text, "Hello from mock");
    assert_eq!(data[2]["candidates"][0]["finishReason"], "STOP");

    // Without alt=sse the stream is one JSON array of responses.
    let reply = post(
        &base,
        "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
        gemini(),
    )
    .ok()
    .await;
    assert_eq!(reply.headers["content-type"], "application/json");
    let array = reply.json();
    assert_eq!(array.as_array().unwrap().len(), 3);
    assert_eq!(array[2]["candidates"][0]["finishReason"], "STOP");

    let count = post(
        &base,
        "/v1beta/models/gemini-2.0-flash:countTokens",
        gemini(),
    )
    .ok()
    .await
    .json();
    assert!(count["totalTokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn gemini_model_and_credential_are_recorded_and_matched() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(
        Matcher::any().model("gemini-bad").credential("AIza-a"),
        Behavior::status(503),
    );
    let bad = "/v1beta/models/gemini-bad:generateContent";
    let header_key = post(&base, bad, gemini())
        .header("x-goog-api-key", "AIza-a")
        .ok()
        .await;
    assert_eq!(header_key.status, 503);
    let query_key = post(&base, &format!("{bad}?key=AIza-a"), gemini())
        .ok()
        .await;
    assert_eq!(query_key.status, 503);
    let other_key = post(&base, bad, gemini())
        .header("x-goog-api-key", "AIza-b")
        .ok()
        .await;
    assert_eq!(other_key.status, 200);
    let other_model = post(&base, &format!("{GENERATE}?key=AIza-a"), gemini())
        .ok()
        .await;
    assert_eq!(other_model.status, 200);

    let requests = mock.requests();
    assert_eq!(requests[0].model.as_deref(), Some("gemini-bad"));
    assert_eq!(requests[0].credential.as_deref(), Some("AIza-a"));
    assert_eq!(requests[1].credential.as_deref(), Some("AIza-a"));
    assert_eq!(requests[1].path, bad);
    assert_eq!(requests[1].query_param("key"), Some("AIza-a"));
    assert_eq!(requests[3].model.as_deref(), Some("gemini-2.0-flash"));
    assert_eq!(mock.counts().by_model["gemini-bad"], 3);
    assert_eq!(mock.counts().by_credential["AIza-a"], 3);
}

#[tokio::test]
async fn scripted_errors_take_the_shape_of_the_path_and_keep_retry_after() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(Matcher::any(), Behavior::status(429).retry_after(3));

    let openai = post(&base, CHAT, chat("m")).ok().await;
    let anthropic = post(&base, MESSAGES, messages("c", false)).ok().await;
    let count = post(&base, "/v1/messages/count_tokens", messages("c", false))
        .ok()
        .await;
    let google = post(&base, GENERATE, gemini()).ok().await;
    let google_stream = post(&base, STREAM_SSE, gemini()).ok().await;
    for reply in [&openai, &anthropic, &count, &google, &google_stream] {
        assert_eq!(reply.status, 429);
        assert_eq!(reply.headers["retry-after"], "3");
        assert_eq!(reply.headers["content-type"], "application/json");
    }
    let v = openai.json();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    for reply in [&anthropic, &count] {
        let v = reply.json();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "rate_limit_error");
        assert!(v["error"]["message"].is_string());
    }
    for reply in [&google, &google_stream] {
        let v = reply.json();
        assert_eq!(v["error"]["code"], 429);
        assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
        assert!(v["error"]["message"].is_string());
    }

    mock.reset();
    mock.on(Matcher::any(), Behavior::status(529));
    let overloaded = post(&base, MESSAGES, messages("c", true)).ok().await;
    assert_eq!(overloaded.status, 529);
    assert_eq!(overloaded.json()["error"]["type"], "overloaded_error");
    mock.reset();
    mock.on(Matcher::any(), Behavior::status(503));
    let unavailable = post(&base, GENERATE, gemini()).ok().await.json();
    assert_eq!(unavailable["error"]["status"], "UNAVAILABLE");

    // Unknown routes answer in the protocol of their path too.
    mock.reset();
    let unknown = post(&base, "/v1beta/models/g:nope", gemini()).ok().await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.json()["error"]["status"], "NOT_FOUND");
}

#[tokio::test]
async fn openai_tool_calls_json_and_stream() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(
        Matcher::any(),
        weather().tool_call("get_time", r#"{"tz":"CET"}"#),
    );

    let v = post(&base, CHAT, chat("m")).ok().await.json();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(calls[0]["function"]["arguments"], WEATHER_ARGS);
    assert_eq!(calls[1]["function"]["name"], "get_time");

    let reply = post(
        &base,
        CHAT,
        json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
               "messages": []}),
    )
    .ok()
    .await;
    assert!(reply.text().ends_with("data: [DONE]\n\n"));
    let chunks = sse_data(&reply);
    let delta = |c: &Value| c["choices"][0]["delta"].clone();
    // Role chunk first.
    assert_eq!(delta(&chunks[0])["role"], "assistant");
    // Then per call a head (id, type, name, empty arguments) and argument pieces.
    let mut args = vec![String::new(), String::new()];
    let mut heads = 0;
    for c in &chunks[1..chunks.len() - 2] {
        let call = &delta(c)["tool_calls"][0];
        let index = call["index"].as_u64().unwrap() as usize;
        if let Some(id) = call.get("id") {
            heads += 1;
            assert!(id.as_str().unwrap().starts_with("call_"));
            assert_eq!(call["type"], "function");
            assert_eq!(call["function"]["arguments"], "");
            assert!(call["function"]["name"].is_string());
        } else {
            args[index].push_str(call["function"]["arguments"].as_str().unwrap());
        }
    }
    assert_eq!(heads, 2);
    assert_eq!(args, [WEATHER_ARGS, r#"{"tz":"CET"}"#]);
    // Several argument pieces per call.
    assert!(chunks.len() - 2 - 1 - 2 >= 4, "{chunks:?}");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn text_before_a_tool_call_in_each_protocol() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(Matcher::any(), weather().text("Let me check."));

    let v = post(&base, CHAT, chat("m")).ok().await.json();
    assert_eq!(v["choices"][0]["message"]["content"], "Let me check.");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");

    let v = post(&base, MESSAGES, messages("c", false))
        .ok()
        .await
        .json();
    assert_eq!(
        v["content"][0],
        json!({"type": "text", "text": "Let me check."})
    );
    assert_eq!(v["content"][1]["type"], "tool_use");

    let v = post(&base, GENERATE, gemini()).ok().await.json();
    let parts = &v["candidates"][0]["content"]["parts"];
    assert_eq!(parts[0]["text"], "Let me check.");
    assert_eq!(parts[1]["functionCall"]["name"], "get_weather");

    // Without tool calls, `text` replaces the default content.
    mock.reset();
    mock.on(Matcher::any(), Behavior::ok().text("custom words"));
    let v = post(&base, CHAT, chat("m")).ok().await.json();
    assert_eq!(v["choices"][0]["message"]["content"], "custom words");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn anthropic_tool_use_json_and_stream() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(Matcher::any(), weather());

    let v = post(&base, MESSAGES, messages("c", false))
        .ok()
        .await
        .json();
    assert_eq!(v["stop_reason"], "tool_use");
    let block = &v["content"][0];
    assert_eq!(block["type"], "tool_use");
    assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(block["name"], "get_weather");
    assert_eq!(block["input"], json!({"city": "Paris"}));

    let reply = post(&base, MESSAGES, messages("c", true)).ok().await;
    assert_eq!(
        sse_names(&reply),
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
    let data = sse_data(&reply);
    let start = &data[1]["content_block"];
    assert_eq!(start["type"], "tool_use");
    assert!(start["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(start["name"], "get_weather");
    assert_eq!(start["input"], json!({}));
    let json_text: String = data[3..6]
        .iter()
        .map(|d| {
            assert_eq!(d["index"], 0);
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(json_text, WEATHER_ARGS);
    assert_eq!(data[7]["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn gemini_function_calls_json_and_stream() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(Matcher::any(), weather().tool_call("get_time", "{}"));

    let v = post(&base, GENERATE, gemini()).ok().await.json();
    let candidate = &v["candidates"][0];
    assert_eq!(candidate["finishReason"], "STOP");
    let parts = candidate["content"]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    let call = &parts[0]["functionCall"];
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["args"], json!({"city": "Paris"}));
    assert!(call["id"].is_string());
    assert_eq!(parts[1]["functionCall"]["name"], "get_time");

    let reply = post(&base, STREAM_SSE, gemini()).ok().await;
    let data = sse_data(&reply);
    // The calls come whole, in the last event, with the finish reason and usage.
    assert_eq!(data.len(), 1);
    let last = &data[0];
    assert_eq!(
        last["candidates"][0]["content"]["parts"][0]["functionCall"]["args"],
        json!({"city": "Paris"})
    );
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert!(last["usageMetadata"]["totalTokenCount"].is_u64());
}

#[tokio::test]
async fn cached_tokens_are_reported_in_each_protocol_field() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(Matcher::any(), Behavior::ok().cached_tokens(1024));

    let v = post(&base, CHAT, chat("m")).ok().await.json();
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 1024);
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() >= 1024);

    let reply = post(
        &base,
        CHAT,
        json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
               "messages": []}),
    )
    .ok()
    .await;
    let usage = sse_data(&reply).last().unwrap()["usage"].clone();
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 1024);

    let v = post(&base, MESSAGES, messages("c", false))
        .ok()
        .await
        .json();
    assert_eq!(v["usage"]["cache_read_input_tokens"], 1024);
    let reply = post(&base, MESSAGES, messages("c", true)).ok().await;
    assert_eq!(
        sse_data(&reply)[0]["message"]["usage"]["cache_read_input_tokens"],
        1024
    );

    let v = post(&base, GENERATE, gemini()).ok().await.json();
    assert_eq!(v["usageMetadata"]["cachedContentTokenCount"], 1024);
    let reply = post(&base, STREAM_SSE, gemini()).ok().await;
    assert_eq!(
        sse_data(&reply).last().unwrap()["usageMetadata"]["cachedContentTokenCount"],
        1024
    );
}

#[tokio::test]
async fn cuts_break_anthropic_and_gemini_streams() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(Matcher::any(), Behavior::ok().cut_after_chunks(2));

    let anthropic = post(&base, MESSAGES, messages("c", true))
        .send()
        .await
        .unwrap();
    assert_eq!(anthropic.status, 200);
    assert_eq!(
        sse_names(&anthropic),
        ["message_start", "content_block_start"]
    );
    assert!(anthropic.body_error.is_some());

    let google = post(&base, STREAM_SSE, gemini()).send().await.unwrap();
    assert_eq!(google.status, 200);
    let data = sse_data(&google);
    assert_eq!(data.len(), 2);
    assert!(data
        .iter()
        .all(|d| d["candidates"][0].get("finishReason").is_none()));
    assert!(google.body_error.is_some());

    // A forced cut turns a non-streaming Gemini call into a broken stream as well.
    let forced = post(&base, GENERATE, gemini()).send().await.unwrap();
    assert_eq!(sse_data(&forced).len(), 2);
    assert!(forced.body_error.is_some());

    mock.reset();
    mock.on(
        Matcher::any(),
        Behavior::ok().cut_before_first_byte().times(2),
    );
    assert!(post(&base, MESSAGES, messages("c", true))
        .send()
        .await
        .is_err());
    assert!(post(&base, STREAM_SSE, gemini()).send().await.is_err());
    // times(2) is used up.
    assert_eq!(post(&base, STREAM_SSE, gemini()).ok().await.status, 200);
}

#[tokio::test]
async fn forced_streams_keep_their_protocol_and_gap() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(
        Matcher::any(),
        Behavior::ok().stream(4, Duration::from_millis(5)),
    );
    let anthropic = post(&base, MESSAGES, messages("c", false)).ok().await;
    let names = sse_names(&anthropic);
    assert_eq!(
        names.iter().filter(|n| *n == "content_block_delta").count(),
        4
    );
    assert_eq!(names.last().unwrap(), "message_stop");
    let google = post(&base, GENERATE, gemini()).ok().await;
    assert_eq!(google.headers["content-type"], "text/event-stream");
    assert_eq!(sse_data(&google).len(), 4);
}

#[tokio::test]
async fn empty_and_malformed_answers_in_each_protocol() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(Matcher::any(), weather().empty_completion());

    let v = post(&base, CHAT, chat("m")).ok().await.json();
    assert_eq!(v["choices"][0]["message"]["content"], "");
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());
    let v = post(&base, MESSAGES, messages("c", false))
        .ok()
        .await
        .json();
    assert_eq!(v["content"], json!([]));
    assert_eq!(v["stop_reason"], "end_turn");
    let reply = post(&base, MESSAGES, messages("c", true)).ok().await;
    assert_eq!(
        sse_names(&reply),
        ["message_start", "ping", "message_delta", "message_stop"]
    );
    let v = post(&base, GENERATE, gemini()).ok().await.json();
    assert_eq!(v["candidates"][0]["content"]["parts"], json!([]));
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    let data = sse_data(&post(&base, STREAM_SSE, gemini()).ok().await);
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["candidates"][0]["content"]["parts"], json!([]));

    mock.reset();
    mock.on(Matcher::any(), Behavior::ok().malformed());
    for (path, body) in [
        (CHAT, chat("m")),
        (MESSAGES, messages("c", false)),
        (GENERATE, gemini()),
    ] {
        let reply = post(&base, path, body).ok().await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.headers["content-type"], "application/json");
        assert!(serde_json::from_slice::<Value>(&reply.body).is_err());
    }
}

#[tokio::test]
async fn latency_and_times_apply_to_every_protocol() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(
        Matcher::any(),
        Behavior::status(500)
            .latency(Duration::from_millis(50))
            .times(3),
    );
    let started = std::time::Instant::now();
    assert_eq!(post(&base, CHAT, chat_stream("m")).ok().await.status, 500);
    assert_eq!(
        post(&base, MESSAGES, messages("c", true)).ok().await.status,
        500
    );
    assert_eq!(post(&base, STREAM_SSE, gemini()).ok().await.status, 500);
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(post(&base, GENERATE, gemini()).ok().await.status, 200);
}

#[tokio::test]
async fn control_api_scripts_tool_calls_and_cached_tokens() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    let reply = post(
        &base,
        "/__mock/rules",
        json!({"matcher": {"model": "gemini-2.0-flash"},
               "behavior": {"text": "One moment.", "cached_tokens": 32,
                            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}}),
    )
    .ok()
    .await;
    assert_eq!(reply.status, 200);
    let v = post(&base, GENERATE, gemini()).ok().await.json();
    let parts = &v["candidates"][0]["content"]["parts"];
    assert_eq!(parts[0]["text"], "One moment.");
    assert_eq!(parts[1]["functionCall"]["args"], json!({"city": "Paris"}));
    assert_eq!(v["usageMetadata"]["cachedContentTokenCount"], 32);

    let requests = support::get(&base, "/__mock/requests").ok().await.json();
    assert_eq!(requests["requests"][0]["model"], "gemini-2.0-flash");
}

/// `reported_usage` sums exactly what the answers said: input (cached included), output and
/// cached tokens of every generation that carried a usage block, and nothing for an OpenAI
/// stream that did not ask for usage, an error, or a stream cut short.
#[tokio::test]
async fn reported_usage_sums_the_usage_blocks_the_answers_carried() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    mock.on(Matcher::path("/broken"), Behavior::status(503));
    mock.on(Matcher::any(), Behavior::ok().cached_tokens(2));

    let plain = post(&base, CHAT, chat("m")).ok().await.json();
    let mut from_answers = (
        plain["usage"]["prompt_tokens"].as_u64().unwrap(),
        plain["usage"]["completion_tokens"].as_u64().unwrap(),
    );
    let anthropic = post(&base, MESSAGES, messages("m", false))
        .ok()
        .await
        .json();
    from_answers.0 += anthropic["usage"]["input_tokens"].as_u64().unwrap()
        + anthropic["usage"]["cache_read_input_tokens"]
            .as_u64()
            .unwrap();
    from_answers.1 += anthropic["usage"]["output_tokens"].as_u64().unwrap();
    let gemini_answer = post(&base, GENERATE, gemini()).ok().await.json();
    from_answers.0 += gemini_answer["usageMetadata"]["promptTokenCount"]
        .as_u64()
        .unwrap();
    from_answers.1 += gemini_answer["usageMetadata"]["candidatesTokenCount"]
        .as_u64()
        .unwrap();
    let after_plain = mock.reported_usage();
    assert_eq!(after_plain.answers, 3);
    assert_eq!(after_plain.cached_tokens, 6);
    assert_eq!(
        (after_plain.input_tokens, after_plain.output_tokens),
        from_answers
    );

    // A stream without `include_usage` says no usage; errors say none either.
    post(&base, CHAT, chat_stream("m")).ok().await;
    let _ = post(&base, "/broken", chat("m")).send().await;
    assert_eq!(mock.reported_usage(), after_plain);

    // Streams that say their usage count once each.
    let mut with_usage = chat_stream("m");
    with_usage["stream_options"] = json!({"include_usage": true});
    post(&base, CHAT, with_usage).ok().await;
    post(&base, MESSAGES, messages("m", true)).ok().await;
    post(&base, STREAM_SSE, gemini()).ok().await;
    assert_eq!(mock.reported_usage().answers, 6);
    assert_eq!(mock.reported_usage().cached_tokens, 12);

    mock.reset();
    assert_eq!(mock.reported_usage(), Default::default());
}

#[tokio::test]
async fn azure_paths_answer_as_openai_and_record_the_deployment_and_api_key() {
    let mock = MockUpstream::start().await.unwrap();
    let base = mock.base_url();
    let deployments = "/openai/deployments/gpt-4o-prod";
    let version = "api-version=2024-10-21";
    mock.on(
        Matcher::path(&format!("{deployments}/chat/completions"))
            .credential("azure-key-1")
            .model("gpt-4o-prod"),
        Behavior::ok().text("from azure"),
    );

    let chat_reply = post(
        &base,
        &format!("{deployments}/chat/completions?{version}"),
        chat("ignored"),
    )
    .header("api-key", "azure-key-1")
    .ok()
    .await;
    assert_eq!(chat_reply.status, 200);
    let v = chat_reply.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], "from azure");
    assert_eq!(v["model"], "gpt-4o-prod", "the deployment is the model");

    let stream = post(
        &base,
        &format!("{deployments}/chat/completions?{version}"),
        chat_stream("x"),
    )
    .header("api-key", "azure-key-1")
    .ok()
    .await;
    assert_eq!(stream.headers["content-type"], "text/event-stream");
    assert!(stream.text().trim_end().ends_with("data: [DONE]"));
    assert_eq!(sse_data(&stream)[0]["object"], "chat.completion.chunk");

    let embeddings = post(
        &base,
        &format!("/openai/deployments/embed-large/embeddings?{version}"),
        json!({"input": ["a", "b"]}),
    )
    .ok()
    .await
    .json();
    assert_eq!(embeddings["data"].as_array().unwrap().len(), 2);
    assert_eq!(embeddings["model"], "embed-large");
    let completion = post(
        &base,
        &format!("/openai/deployments/instruct/completions?{version}"),
        json!({"prompt": "x"}),
    )
    .ok()
    .await
    .json();
    assert_eq!(completion["object"], "text_completion");
    let response = post(
        &base,
        "/openai/responses?api-version=2025-04-01-preview",
        json!({"model": "gpt-4o-prod", "input": "x"}),
    )
    .ok()
    .await
    .json();
    assert_eq!(response["object"], "response");
    // The v1 surface needs no api-version.
    let v1 = post(&base, "/openai/v1/chat/completions", chat("gpt-4o-prod"))
        .ok()
        .await
        .json();
    assert_eq!(v1["object"], "chat.completion");

    // Without api-version: Azure's 404, whatever the rules say, still recorded.
    mock.on(Matcher::any(), Behavior::status(500));
    let missing = post(&base, &format!("{deployments}/chat/completions"), chat("x"))
        .header("api-key", "azure-key-1")
        .ok()
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.json(),
        json!({"error": {"code": "404", "message": "Resource not found"}})
    );

    let requests = mock.requests();
    assert_eq!(requests.len(), 7);
    let first = &requests[0];
    assert_eq!(first.credential.as_deref(), Some("azure-key-1"));
    assert_eq!(first.model.as_deref(), Some("gpt-4o-prod"));
    assert_eq!(first.query_param("api-version"), Some("2024-10-21"));
    assert!(!first.headers.contains_key("authorization"));
    assert_eq!(requests[6].credential.as_deref(), Some("azure-key-1"));
    assert_eq!(requests[6].query, None);
    assert_eq!(mock.counts().by_model["gpt-4o-prod"], 5);
}
