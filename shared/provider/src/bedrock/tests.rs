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

/// A converter that has converted `messageStart`, and its output.
fn started() -> (StreamConverter, Vec<u8>) {
    let mut c = StreamConverter::new("m", "i");
    let mut out = Vec::new();
    c.push(
        &event("messageStart", json!({"role": "assistant"})),
        &mut out,
    )
    .unwrap();
    (c, out)
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

    let (mut c, mut out) = started();
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

/// The Converse body of a one-message request whose user content is `content`.
fn converse_of(content: Value) -> Result<Value, TranslateError> {
    let body = json!({"max_tokens": 1, "messages": [{"role": "user", "content": content}]});
    converse_request(body.to_string().as_bytes()).map(|(out, _)| j(&out))
}

/// The Converse content of a one-message request whose user content is `content`.
fn converse_content(content: Value) -> Value {
    converse_of(content).unwrap()["messages"][0]["content"].clone()
}

#[test]
fn every_exception_name_has_its_status_in_either_spelling() {
    for (name, status) in [
        ("ThrottlingException", 429),
        ("ModelNotReadyException", 429),
        ("ValidationException", 400),
        ("AccessDeniedException", 403),
        ("UnrecognizedClientException", 403),
        ("InvalidSignatureException", 403),
        ("ResourceNotFoundException", 404),
        ("ModelTimeoutException", 408),
        ("ServiceUnavailableException", 503),
        ("ModelStreamErrorException", 424),
        ("ModelErrorException", 424),
        ("InternalServerException", 500),
        ("SomethingNewException", 500),
    ] {
        assert_eq!(exception_status(name), status, "{name}");
        // A stream names its exceptions in lower camel case.
        let camel = format!("{}{}", name[..1].to_lowercase(), &name[1..]);
        assert_eq!(exception_status(&camel), status, "{camel}");
    }
}

#[test]
fn every_status_has_its_anthropic_error_type() {
    for (status, kind) in [
        (400, "invalid_request_error"),
        (413, "invalid_request_error"),
        (422, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (408, "rate_limit_error"),
        (429, "rate_limit_error"),
        (503, "overloaded_error"),
        (529, "overloaded_error"),
        (500, "api_error"),
        (424, "api_error"),
        (502, "api_error"),
    ] {
        let e = j(&anthropic_error(status, None, br#"{"message":"m"}"#));
        assert_eq!(e["error"]["type"], kind, "{status}");
        assert_eq!(e["error"]["message"], "m", "{status}");
    }
}

#[test]
fn an_error_without_text_is_named_by_its_exception() {
    let e = j(&anthropic_error(
        429,
        Some("ThrottlingException"),
        br#"{"message":""}"#,
    ));
    assert_eq!(e["error"]["message"], "ThrottlingException");
    // The body's `__type` names it when no header does (its namespace dropped).
    let e = j(&anthropic_error(
        400,
        None,
        br#"{"__type":"com.amazon.coral#ValidationException","message":"bad"}"#,
    ));
    assert_eq!(e["error"]["message"], "ValidationException: bad");
    // Neither: the text alone; a body that is not JSON is quoted.
    let e = j(&anthropic_error(502, None, b"upstream gone"));
    assert_eq!(e["error"]["message"], "upstream gone");
}

#[test]
fn image_formats_follow_the_mime_type_and_others_are_refused() {
    for (mime, format) in [
        ("image/png", "png"),
        ("image/jpeg", "jpeg"),
        ("image/jpg", "jpeg"),
        ("IMAGE/JPEG", "jpeg"),
        ("image/gif", "gif"),
        ("image/webp", "webp"),
    ] {
        let content = converse_content(json!([{"type": "image",
            "source": {"type": "base64", "media_type": mime, "data": "AA=="}}]));
        assert_eq!(
            content,
            json!([{"image": {"format": format, "source": {"bytes": "AA=="}}}]),
            "{mime}"
        );
    }
    let tiff = converse_of(json!([{"type": "image",
        "source": {"type": "base64", "media_type": "image/tiff", "data": "AA=="}}]));
    assert!(matches!(tiff, Err(TranslateError::Unsupported(_))));
}

#[test]
fn documents_are_pdf_bytes_and_every_other_source_is_refused() {
    let content = converse_content(json!([{"type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}}]));
    assert_eq!(
        content,
        json!([{"document": {"format": "pdf", "name": "document", "source": {"bytes": "JVBE"}}}])
    );
    for source in [
        json!({"type": "base64", "media_type": "text/plain", "data": "aGk="}),
        json!({"type": "url", "url": "https://x/a.pdf"}),
        json!({"type": "text", "media_type": "text/plain", "data": "hi"}),
    ] {
        let refused = converse_of(json!([{"type": "document", "source": source}]));
        assert!(
            matches!(refused, Err(TranslateError::Unsupported(_))),
            "{source}"
        );
    }
}

#[test]
fn each_content_block_kind_has_its_converse_block() {
    let content = converse_content(json!([
        {"type": "text", "text": "a"},
        {"type": "text", "text": ""},
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "tool_use", "id": "t1", "name": "f"},
        {"type": "tool_result", "tool_use_id": "t1"},
        {"type": "tool_result", "tool_use_id": "t2", "is_error": false, "content": [
            {"type": "text", "text": "part"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0"}},
            {"type": "search_result"},
        ]},
    ]));
    assert_eq!(
        content,
        json!([
            {"text": "a"},
            {"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}},
            {"toolResult": {"toolUseId": "t1", "content": [{"text": ""}]}},
            {"toolResult": {"toolUseId": "t2", "content": [
                {"text": "part"},
                {"image": {"format": "gif", "source": {"bytes": "R0"}}},
            ]}},
        ])
    );
    // Content given as a string is one text block; left out or null, no block.
    assert_eq!(converse_content(json!("hi")), json!([{"text": "hi"}]));
    assert_eq!(converse_content(Value::Null), json!([]));
    // An image inside a tool result is held to the same rules.
    let url = converse_of(
        json!([{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}]),
    );
    assert!(matches!(url, Err(TranslateError::Unsupported(_))));
}

#[test]
fn tool_choice_and_empty_parts_of_the_conversation() {
    let with = |extra: Value| {
        let mut body = json!({"max_tokens": 1, "messages": [{"role": "user", "content": "q"}],
            "tools": [{"name": "f"}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        j(&converse_request(body.to_string().as_bytes()).unwrap().0)
    };
    for (choice, converse) in [
        (json!({"type": "auto"}), Some(json!({"auto": {}}))),
        (json!({"type": "any"}), Some(json!({"any": {}}))),
        (
            json!({"type": "tool", "name": "f"}),
            Some(json!({"tool": {"name": "f"}})),
        ),
        (json!({"type": "tool"}), None),
        (json!({"type": "none"}), None),
    ] {
        let out = with(json!({"tool_choice": choice}));
        assert_eq!(
            out["toolConfig"].get("toolChoice"),
            converse.as_ref(),
            "{choice}"
        );
        // A tool without a schema gets the empty object schema.
        assert_eq!(
            out["toolConfig"]["tools"],
            json!([{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}}])
        );
    }
    // Nothing to say: no system, no tool configuration.
    let out = with(json!({"system": "", "tools": [{"description": "nameless"}]}));
    assert_eq!(out.get("system"), None);
    assert_eq!(out.get("toolConfig"), None);
    let out = with(json!({"system": [{"type": "text"}]}));
    assert_eq!(out.get("system"), None);
    // Roles other than the assistant's are the user's; no messages is malformed.
    let body = json!({"messages": [{"role": "assistant", "content": "a"}, {"content": "b"}]});
    let out = j(&converse_request(body.to_string().as_bytes()).unwrap().0);
    assert_eq!(out["messages"][0]["role"], "assistant");
    assert_eq!(out["messages"][1]["role"], "user");
    assert!(converse_request(br#"{"max_tokens":1}"#).is_err());
}

#[test]
fn the_context_window_stop_reason_is_kept() {
    assert_eq!(
        stop_reason("model_context_window_exceeded"),
        "model_context_window_exceeded"
    );
}

#[test]
fn a_stream_start_is_sent_at_once_and_its_end_needs_a_whole_message_stop() {
    let (mut c, mut out) = started();
    let names: Vec<String> = sse_events(&out).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["message_start"]);

    // `messageStop` without `metadata`: the stream closes at its end, without usage.
    c.push(
        &event("messageStop", json!({"stopReason": "max_tokens"})),
        &mut out,
    )
    .unwrap();
    assert!(!c.done());
    c.finish(&mut out).unwrap();
    let events = sse_events(&out);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["message_start", "message_delta", "message_stop"]);
    assert_eq!(events[1].1["delta"]["stop_reason"], "max_tokens");
    assert_eq!(
        events[1].1["usage"],
        json!({"input_tokens": 0, "output_tokens": 0})
    );

    // A message begun after `messageStop` and cut: the stream stopped early.
    let mut c = StreamConverter::new("m", "i");
    let mut out = Vec::new();
    let mut wire = event("messageStop", json!({"stopReason": "end_turn"}));
    let metadata = event("metadata", json!({"usage": {"inputTokens": 1}}));
    wire.extend_from_slice(&metadata[..metadata.len() / 2]);
    c.push(&wire, &mut out).unwrap();
    assert_eq!(c.finish(&mut out), Err(eventstream::FrameError::Truncated));
}
