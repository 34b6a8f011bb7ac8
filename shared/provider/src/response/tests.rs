//! Response translation rules.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{json, Value};

use super::*;
use crate::Protocol::{Anthropic as A, Gemini as G, OpenAi as O};

fn tr(up: Protocol, client: Protocol, body: Value) -> (Value, Usage) {
    let (b, u) =
        translate_response(up, client, body.to_string().as_bytes(), "client-model").unwrap();
    (serde_json::from_slice(&b).unwrap(), u)
}

fn openai_resp(message: Value, finish: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120, "prompt_tokens_details": {"cached_tokens": 40}}})
}

fn anthropic_resp(content: Value, stop: &str) -> Value {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": content,
        "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50, "cache_creation_input_tokens": 10}})
}

fn gemini_resp(parts: Value, finish: &str) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120, "cachedContentTokenCount": 30},
        "modelVersion": "gemini-x", "responseId": "resp-1"})
}

#[test]
fn anthropic_text_and_tool_use_to_openai() {
    let (o, u) = tr(
        A,
        O,
        anthropic_resp(
            json!([
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
            ]),
            "tool_use",
        ),
    );
    assert_eq!(o["object"], "chat.completion");
    assert_eq!(o["model"], "client-model");
    assert_eq!(o["choices"][0]["message"]["content"], "Checking.");
    assert_eq!(
        o["choices"][0]["message"]["tool_calls"],
        json!([{"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}])
    );
    assert_eq!(o["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        o["usage"],
        json!({"prompt_tokens": 160, "completion_tokens": 20, "total_tokens": 180, "prompt_tokens_details": {"cached_tokens": 50}})
    );
    assert_eq!(
        u,
        Usage {
            input_tokens: 160,
            output_tokens: 20,
            cached_tokens: 50
        }
    );
}

#[test]
fn openai_text_and_tool_calls_to_anthropic() {
    let (a, u) = tr(
        O,
        A,
        openai_resp(
            json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]}),
            "tool_calls",
        ),
    );
    assert_eq!(a["type"], "message");
    assert_eq!(a["model"], "client-model");
    assert!(a["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        a["content"],
        json!([{"type": "tool_use", "id": "call_1", "name": "f", "input": {"x": 1}}])
    );
    assert_eq!(a["stop_reason"], "tool_use");
    assert_eq!(
        a["usage"],
        json!({"input_tokens": 60, "output_tokens": 20, "cache_read_input_tokens": 40, "cache_creation_input_tokens": 0})
    );
    assert_eq!(
        u,
        Usage {
            input_tokens: 100,
            output_tokens: 20,
            cached_tokens: 40
        }
    );
}

#[test]
fn gemini_function_call_without_id_to_openai_gets_a_stable_id() {
    let body = gemini_resp(
        json!([{"text": "Sure. "}, {"functionCall": {"name": "f", "args": {"a": 1}}}]),
        "STOP",
    );
    let (o1, u) = tr(G, O, body.clone());
    let (o2, _) = tr(G, O, body);
    let id = o1["choices"][0]["message"]["tool_calls"][0]["id"]
        .as_str()
        .unwrap();
    assert!(id.starts_with("call_"));
    assert_eq!(o2["choices"][0]["message"]["tool_calls"][0]["id"], id);
    assert_eq!(
        o1["choices"][0]["finish_reason"], "tool_calls",
        "STOP with a function call is tool_calls"
    );
    assert_eq!(o1["choices"][0]["message"]["content"], "Sure. ");
    assert_eq!(
        u,
        Usage {
            input_tokens: 100,
            output_tokens: 20,
            cached_tokens: 30
        }
    );
    assert_eq!(o1["usage"]["prompt_tokens_details"]["cached_tokens"], 30);
}

#[test]
fn gemini_to_anthropic_keeps_function_call_id_and_cached_tokens() {
    let (a, _) = tr(
        G,
        A,
        gemini_resp(
            json!([{"functionCall": {"id": "fc-1", "name": "f", "args": {}}}]),
            "STOP",
        ),
    );
    assert_eq!(
        a["content"],
        json!([{"type": "tool_use", "id": "fc-1", "name": "f", "input": {}}])
    );
    assert_eq!(a["stop_reason"], "tool_use");
    assert_eq!(a["usage"]["input_tokens"], 70);
    assert_eq!(a["usage"]["cache_read_input_tokens"], 30);
}

#[test]
fn gemini_thought_parts_are_not_leaked_as_text() {
    let (o, _) = tr(
        G,
        O,
        gemini_resp(
            json!([{"text": "secret plan", "thought": true}, {"text": "answer"}]),
            "STOP",
        ),
    );
    assert_eq!(o["choices"][0]["message"]["content"], "answer");
}

#[test]
fn gemini_thinking_tokens_count_as_output() {
    let mut b = gemini_resp(json!([{"text": "x"}]), "STOP");
    b["usageMetadata"]["thoughtsTokenCount"] = json!(5);
    assert_eq!(tr(G, O, b).1.output_tokens, 25);
}

#[test]
fn openai_and_anthropic_to_gemini() {
    let (g, _) = tr(
        O,
        G,
        openai_resp(json!({"role": "assistant", "content": "hi"}), "length"),
    );
    assert_eq!(
        g["candidates"],
        json!([{"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "MAX_TOKENS", "index": 0}])
    );
    assert_eq!(
        g["usageMetadata"],
        json!({"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120, "cachedContentTokenCount": 40})
    );
    assert_eq!(g["modelVersion"], "client-model");
    let (g, _) = tr(
        A,
        G,
        anthropic_resp(
            json!([{"type": "tool_use", "id": "toolu_9", "name": "f", "input": {"q": "x"}}]),
            "tool_use",
        ),
    );
    assert_eq!(
        g["candidates"][0]["content"]["parts"],
        json!([{"functionCall": {"id": "toolu_9", "name": "f", "args": {"q": "x"}}}])
    );
    assert_eq!(g["candidates"][0]["finishReason"], "STOP");
    assert_eq!(g["usageMetadata"]["promptTokenCount"], 160);
    assert_eq!(g["usageMetadata"]["cachedContentTokenCount"], 50);
}

#[test]
fn stop_reason_table() {
    // (OpenAI finish_reason, Anthropic stop_reason, Gemini finishReason) that map onto each other.
    let table = [
        ("stop", "end_turn", "STOP"),
        ("length", "max_tokens", "MAX_TOKENS"),
        ("content_filter", "refusal", "SAFETY"),
    ];
    for (o, a, g) in table {
        let text = json!({"role": "assistant", "content": "x"});
        assert_eq!(
            tr(O, A, openai_resp(text.clone(), o)).0["stop_reason"],
            a,
            "{o} -> anthropic"
        );
        assert_eq!(
            tr(O, G, openai_resp(text, o)).0["candidates"][0]["finishReason"],
            g,
            "{o} -> gemini"
        );
        let blocks = json!([{"type": "text", "text": "x"}]);
        assert_eq!(
            tr(A, O, anthropic_resp(blocks.clone(), a)).0["choices"][0]["finish_reason"],
            o,
            "{a} -> openai"
        );
        assert_eq!(
            tr(A, G, anthropic_resp(blocks, a)).0["candidates"][0]["finishReason"],
            g,
            "{a} -> gemini"
        );
        let parts = json!([{"text": "x"}]);
        assert_eq!(
            tr(G, O, gemini_resp(parts.clone(), g)).0["choices"][0]["finish_reason"],
            o,
            "{g} -> openai"
        );
        assert_eq!(
            tr(G, A, gemini_resp(parts, g)).0["stop_reason"],
            a,
            "{g} -> anthropic"
        );
    }
    // One-way rules.
    let blocks = json!([{"type": "text", "text": "x"}]);
    assert_eq!(
        tr(A, O, anthropic_resp(blocks.clone(), "stop_sequence")).0["choices"][0]["finish_reason"],
        "stop"
    );
    assert_eq!(
        tr(A, O, anthropic_resp(blocks, "pause_turn")).0["choices"][0]["finish_reason"],
        "stop"
    );
    for g in ["RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII"] {
        assert_eq!(
            tr(G, O, gemini_resp(json!([{"text": "x"}]), g)).0["choices"][0]["finish_reason"],
            "content_filter",
            "{g}"
        );
    }
    for g in [
        "OTHER",
        "MALFORMED_FUNCTION_CALL",
        "FINISH_REASON_UNSPECIFIED",
    ] {
        assert_eq!(
            tr(G, A, gemini_resp(json!([{"text": "x"}]), g)).0["stop_reason"],
            "end_turn",
            "{g}"
        );
    }
    assert_eq!(
        tr(
            O,
            A,
            openai_resp(
                json!({"role": "assistant", "content": "x"}),
                "function_call"
            )
        )
        .0["stop_reason"],
        "tool_use"
    );
}

#[test]
fn anthropic_stop_sequence_is_kept_for_anthropic_clients_of_anthropic_only() {
    let mut b = anthropic_resp(json!([{"type": "text", "text": "x"}]), "stop_sequence");
    b["stop_sequence"] = json!("END");
    assert_eq!(tr(A, G, b).0["candidates"][0]["finishReason"], "STOP");
}

#[test]
fn gemini_candidates_become_openai_choices() {
    let b = json!({"candidates": [
        {"content": {"role": "model", "parts": [{"text": "a"}]}, "finishReason": "STOP", "index": 0},
        {"content": {"role": "model", "parts": [{"text": "b"}]}, "finishReason": "STOP", "index": 1}
    ]});
    let (o, _) = tr(G, O, b);
    assert_eq!(o["choices"][1]["message"]["content"], "b");
    assert_eq!(o["choices"][1]["index"], 1);
    let b = openai_resp(json!({"role": "assistant", "content": "a"}), "stop");
    let mut two = b.clone();
    two["choices"] = json!([{"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"}, {"index": 1, "message": {"role": "assistant", "content": "b"}, "finish_reason": "length"}]);
    let (g, _) = tr(O, G, two);
    assert_eq!(g["candidates"][1]["finishReason"], "MAX_TOKENS");
}

#[test]
fn gemini_blocked_prompt_is_content_filter() {
    let b = json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5}});
    let (o, u) = tr(G, O, b.clone());
    assert_eq!(o["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(u.input_tokens, 5);
    assert_eq!(tr(G, A, b).0["stop_reason"], "refusal");
}

#[test]
fn openai_refusal_becomes_text_for_others() {
    let (a, _) = tr(
        O,
        A,
        openai_resp(
            json!({"role": "assistant", "content": null, "refusal": "I can't help"}),
            "stop",
        ),
    );
    assert_eq!(
        a["content"],
        json!([{"type": "text", "text": "I can't help"}])
    );
}

#[test]
fn invalid_tool_arguments_become_an_empty_object() {
    let (a, _) = tr(
        O,
        A,
        openai_resp(
            json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"trunc"}}]}),
            "length",
        ),
    );
    assert_eq!(a["content"][0]["input"], json!({}));
    assert_eq!(a["stop_reason"], "max_tokens");
}

#[test]
fn same_protocol_response_is_passed_through_with_its_usage() {
    let b = anthropic_resp(json!([{"type": "text", "text": "x"}]), "end_turn").to_string();
    let (out, u) = translate_response(A, A, b.as_bytes(), "whatever").unwrap();
    assert_eq!(out, b.as_bytes());
    assert_eq!(
        u,
        Usage {
            input_tokens: 160,
            output_tokens: 20,
            cached_tokens: 50
        }
    );
}

#[test]
fn response_usage_per_protocol_never_loses_cached_tokens() {
    let o = openai_resp(json!({"role": "assistant", "content": "x"}), "stop").to_string();
    assert_eq!(
        response_usage(O, o.as_bytes()),
        Usage {
            input_tokens: 100,
            output_tokens: 20,
            cached_tokens: 40
        }
    );
    let a = anthropic_resp(json!([]), "end_turn").to_string();
    assert_eq!(
        response_usage(A, a.as_bytes()),
        Usage {
            input_tokens: 160,
            output_tokens: 20,
            cached_tokens: 50
        }
    );
    let g = gemini_resp(json!([]), "STOP").to_string();
    assert_eq!(
        response_usage(G, g.as_bytes()),
        Usage {
            input_tokens: 100,
            output_tokens: 20,
            cached_tokens: 30
        }
    );
    assert_eq!(response_usage(G, b"garbage"), Usage::default());
}

#[test]
fn malformed_responses_are_malformed_never_a_panic() {
    let garbage: [&[u8]; 6] = [
        b"",
        b"{",
        b"[1]",
        b"\"str\"",
        b"{\"choices\":5}",
        b"{\"content\":{}}",
    ];
    for up in Protocol::ALL {
        for client in Protocol::ALL {
            for g in garbage {
                let r = translate_response(up, client, g, "m");
                let valid_json =
                    serde_json::from_slice::<Value>(g).is_ok() || g.starts_with(b"{\"");
                if up == client && valid_json {
                    continue; // passthrough of valid JSON
                }
                if up == Protocol::Gemini && g.starts_with(b"{\"") {
                    continue; // a Gemini object without candidates is an empty answer
                }
                assert!(
                    matches!(r, Err(TranslateError::Malformed(_))),
                    "{up}->{client} {:?}: {r:?}",
                    String::from_utf8_lossy(g)
                );
            }
        }
    }
    // Every truncation of a valid body: no panic.
    for (up, b) in [
        (
            O,
            openai_resp(
                json!({"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
                "tool_calls",
            ),
        ),
        (
            A,
            anthropic_resp(
                json!([{"type": "tool_use", "id": "t", "name": "f", "input": {}}]),
                "tool_use",
            ),
        ),
        (
            G,
            gemini_resp(json!([{"functionCall": {"name": "f", "args": {}}}]), "STOP"),
        ),
    ] {
        let bytes = b.to_string().into_bytes();
        for cut in 0..bytes.len() {
            for client in Protocol::ALL {
                let _ = translate_response(up, client, &bytes[..cut], "m");
            }
        }
    }
}

#[test]
fn a_gemini_function_call_with_an_empty_id_gets_a_stable_id() {
    let without = gemini_resp(json!([{"functionCall": {"name": "f", "args": {}}}]), "STOP");
    let empty = gemini_resp(
        json!([{"functionCall": {"id": "", "name": "f", "args": {}}}]),
        "STOP",
    );
    let id = |b: Value| tr(G, O, b).0["choices"][0]["message"]["tool_calls"][0]["id"].clone();
    let synthesized = json!(crate::util::synth_call_id(&["resp-1", "0", "0", "f"]));
    assert_eq!(id(without), synthesized);
    assert_eq!(id(empty), synthesized);
}

#[test]
fn gemini_text_parts_in_a_row_are_one_text_block() {
    let (a, _) = tr(
        G,
        A,
        gemini_resp(json!([{"text": "Hel"}, {"text": "lo"}]), "STOP"),
    );
    assert_eq!(a["content"], json!([{"type": "text", "text": "Hello"}]));
}

#[test]
fn gemini_calls_of_the_same_function_without_ids_get_distinct_ids() {
    let (o, _) = tr(
        G,
        O,
        gemini_resp(
            json!([{"functionCall": {"name": "f", "args": {"n": 1}}}, {"functionCall": {"name": "f", "args": {"n": 2}}}]),
            "STOP",
        ),
    );
    // Each from the response id, the candidate and the call's position among its calls.
    let ids: Vec<&Value> = o["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["id"])
        .collect();
    assert_eq!(
        ids,
        [
            &json!(crate::util::synth_call_id(&["resp-1", "0", "0", "f"])),
            &json!(crate::util::synth_call_id(&["resp-1", "0", "1", "f"])),
        ]
    );
}

#[test]
fn openai_content_given_as_parts_is_read_part_by_part() {
    let (a, _) = tr(
        O,
        A,
        openai_resp(
            json!({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            "stop",
        ),
    );
    assert_eq!(
        a["content"],
        json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    );
}

#[test]
fn an_empty_openai_content_gives_way_to_the_refusal() {
    let (a, _) = tr(
        O,
        A,
        openai_resp(
            json!({"role": "assistant", "content": "", "refusal": "I can't."}),
            "stop",
        ),
    );
    assert_eq!(a["content"], json!([{"type": "text", "text": "I can't."}]));
}

#[test]
fn openai_answer_content_is_null_only_beside_tool_calls() {
    let (o, _) = tr(
        A,
        O,
        anthropic_resp(
            json!([{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]),
            "tool_use",
        ),
    );
    assert_eq!(o["choices"][0]["message"]["content"], Value::Null);
    let (o, _) = tr(A, O, anthropic_resp(json!([]), "end_turn"));
    assert_eq!(o["choices"][0]["message"]["content"], "");
    assert_eq!(o["choices"][0]["message"].get("tool_calls"), None);
}

#[test]
fn openai_answer_ids_start_with_chatcmpl() {
    let (o, _) = tr(A, O, anthropic_resp(json!([]), "end_turn"));
    assert_eq!(o["id"], "chatcmpl-msg_1");
    let mut g = gemini_resp(json!([{"text": "x"}]), "STOP");
    g["responseId"] = json!("chatcmpl-7");
    assert_eq!(tr(G, O, g).0["id"], "chatcmpl-7");
}
