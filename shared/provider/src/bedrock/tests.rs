use serde_json::{json, Value};

use super::eventstream::{self, encode};
use super::*;
use crate::sse::SseDecoder;

fn j(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn an_anthropic_request_becomes_a_converse_body() {
    let body = json!({
        "model": "anthropic.claude-3-5-haiku-20241022-v1:0",
        "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
        "stop_sequences": ["END"], "stream": true,
        "system": [{"type": "text", "text": "be brief"}],
        "tools": [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
            ]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "cold", "is_error": true}]},
        ],
    });
    let (out, stream) = converse_request(body.to_string().as_bytes()).unwrap();
    assert!(stream);
    assert_eq!(
        j(&out),
        json!({
            "system": [{"text": "be brief"}],
            "messages": [
                {"role": "user", "content": [{"text": "look"}, {"image": {"format": "png", "source": {"bytes": "iVBO"}}}]},
                {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Oslo"}}}]},
                {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "cold"}], "status": "error"}}]},
            ],
            "toolConfig": {
                "tools": [{"toolSpec": {"name": "get_weather", "description": "weather", "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}}}}],
                "toolChoice": {"tool": {"name": "get_weather"}},
            },
            "inferenceConfig": {"maxTokens": 100, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]},
        })
    );
    let url_image = json!({"max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}]});
    assert!(matches!(
        converse_request(url_image.to_string().as_bytes()),
        Err(TranslateError::Unsupported(_))
    ));
    let count = count_tokens_request(
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"system":"s"}"#,
    )
    .unwrap();
    assert_eq!(
        j(&count),
        json!({"input": {"converse": {"messages": [{"role": "user", "content": [{"text": "hi"}]}], "system": [{"text": "s"}]}}})
    );
}

#[test]
fn a_converse_answer_becomes_an_anthropic_message() {
    let answer = json!({
        "output": {"message": {"role": "assistant", "content": [
            {"text": "Let me check."},
            {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Oslo"}}},
        ]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19, "cacheReadInputTokens": 3},
        "metrics": {"latencyMs": 100},
    });
    let out = anthropic_message(answer.to_string().as_bytes(), "claude", "msg_bdrk_r1").unwrap();
    assert_eq!(
        j(&out),
        json!({
            "id": "msg_bdrk_r1", "type": "message", "role": "assistant", "model": "claude",
            "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "tooluse_1", "name": "get_weather", "input": {"city": "Oslo"}},
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 7, "cache_read_input_tokens": 3},
        })
    );
    for (bedrock, anthropic) in [
        ("end_turn", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("guardrail_intervened", "refusal"),
        ("content_filtered", "refusal"),
    ] {
        assert_eq!(stop_reason(bedrock), anthropic);
    }
    assert!(anthropic_message(b"{}", "m", "i").is_err());
    assert_eq!(
        j(&anthropic_count(br#"{"inputTokens":42}"#).unwrap()),
        json!({"input_tokens": 42})
    );
    assert_eq!(message_id("ab-12/\"x"), "msg_bdrk_ab-12x");
}

#[test]
fn bedrock_errors_become_anthropic_errors() {
    let e = anthropic_error(
        429,
        Some("ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        br#"{"message":"Too many requests, please wait before trying again."}"#,
    );
    assert_eq!(
        j(&e),
        json!({"type": "error", "error": {"type": "rate_limit_error",
            "message": "ThrottlingException: Too many requests, please wait before trying again."}})
    );
    let e = anthropic_error(
        403,
        None,
        br#"{"Message":"The request signature we calculated does not match"}"#,
    );
    assert_eq!(j(&e)["error"]["type"], "permission_error");
    assert_eq!(exception_status("ModelTimeoutException"), 408);
    assert_eq!(exception_status("ServiceUnavailableException"), 503);
    assert_eq!(exception_status("InternalServerException"), 500);
}

fn event(ty: &str, payload: Value) -> Vec<u8> {
    encode(
        &[
            (":event-type", ty),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

fn sse_events(bytes: &[u8]) -> Vec<(String, Value)> {
    let mut d = SseDecoder::new();
    d.push(bytes)
        .into_iter()
        .map(|e| (e.event.unwrap_or_default(), j(e.data.as_bytes())))
        .collect()
}

#[test]
fn a_converse_stream_becomes_anthropic_events() {
    let mut wire = Vec::new();
    wire.extend(event("messageStart", json!({"role": "assistant"})));
    wire.extend(event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "Hel"}}),
    ));
    wire.extend(event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "lo"}}),
    ));
    wire.extend(event("contentBlockStop", json!({"contentBlockIndex": 0})));
    wire.extend(event(
        "contentBlockStart",
        json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "f"}}}),
    ));
    wire.extend(event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"a\":"}}}),
    ));
    wire.extend(event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "1}"}}}),
    ));
    wire.extend(event("contentBlockStop", json!({"contentBlockIndex": 1})));
    wire.extend(event("messageStop", json!({"stopReason": "tool_use"})));
    wire.extend(event("metadata", json!({"usage": {"inputTokens": 5, "outputTokens": 9, "totalTokens": 14}, "metrics": {"latencyMs": 1}})));
    // Byte by byte: the framing may be cut anywhere.
    let mut c = StreamConverter::new("claude", "msg_bdrk_1");
    let mut out = Vec::new();
    for b in &wire {
        c.push(std::slice::from_ref(b), &mut out).unwrap();
    }
    assert!(c.done());
    c.finish(&mut out).unwrap();
    let events = sse_events(&out);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(events[0].1["message"]["id"], "msg_bdrk_1");
    assert_eq!(events[2].1["delta"]["text"], "Hel");
    assert_eq!(events[5].1["content_block"]["id"], "t1");
    assert_eq!(events[5].1["index"], 1);
    assert_eq!(events[7].1["delta"]["partial_json"], "1}");
    assert_eq!(events[9].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(
        events[9].1["usage"],
        json!({"input_tokens": 5, "output_tokens": 9})
    );
}

#[test]
fn an_exception_mid_stream_is_an_error_event_and_a_cut_stream_fails() {
    let mut wire = event("messageStart", json!({"role": "assistant"}));
    wire.extend(event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}}),
    ));
    wire.extend(encode(
        &[
            (":exception-type", "throttlingException"),
            (":message-type", "exception"),
        ],
        br#"{"message":"slow down"}"#,
    ));
    let mut c = StreamConverter::new("m", "i");
    let mut out = Vec::new();
    c.push(&wire, &mut out).unwrap();
    assert!(c.done());
    // Bytes after the stream's end are not read: broken framing there changes nothing, whether
    // it arrives with the end or after it (found by fuzzing).
    let mut garbled = wire.clone();
    garbled.extend_from_slice(&[0xff; 16]);
    let mut with_garbage = Vec::new();
    StreamConverter::new("m", "i")
        .push(&garbled, &mut with_garbage)
        .unwrap();
    assert_eq!(with_garbage, out);
    let events = sse_events(&out);
    let (name, error) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(error["type"], "error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("slow down"));

    let mut c = StreamConverter::new("m", "i");
    let mut out = Vec::new();
    c.push(
        &event("messageStart", json!({"role": "assistant"})),
        &mut out,
    )
    .unwrap();
    assert_eq!(
        c.finish(&mut out),
        Err(eventstream::FrameError::Truncated),
        "no messageStop: cut"
    );
    let mut c = StreamConverter::new("m", "i");
    assert!(c.push(b"\x00\x00\x00\x10garbage!!!!!", &mut out).is_err());
}

#[test]
fn tool_input_only_goes_to_a_tool_block_and_an_error_code_is_an_error() {
    let mut wire = event("messageStart", json!({"role": "assistant"}));
    wire.extend(event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}}),
    ));
    // Tool input for a text block is dropped.
    wire.extend(event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{}"}}}),
    ));
    wire.extend(encode(
        &[
            (":error-code", "modelStreamErrorException"),
            (":message-type", "error"),
        ],
        br#"{"message":"broken"}"#,
    ));
    let mut c = StreamConverter::new("m", "i");
    let mut out = Vec::new();
    c.push(&wire, &mut out).unwrap();
    assert!(c.done());
    let events = sse_events(&out);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "error"
        ]
    );
    let error = &events[3].1;
    let message = error["error"]["message"].as_str().unwrap().to_lowercase();
    // The exception is named by `:error-code` when there is no `:exception-type`.
    assert!(message.contains("modelstreamerrorexception"), "{message}");
    assert!(message.contains("broken"), "{message}");
    assert_eq!(error["error"]["type"], "api_error");
}
