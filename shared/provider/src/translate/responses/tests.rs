//! Responses API translation rules: request items into Anthropic and Gemini bodies, answers
//! back into `response` objects, and what only OpenAI can do refused by name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{json, Value};

use crate::translate::ChatRequest;
use crate::Protocol::{self, Anthropic as A, Gemini as G, OpenAi as O};
use crate::{translate_responses_answer, Usage};

fn parse(body: Value) -> ChatRequest {
    ChatRequest::parse_responses(body.to_string().as_bytes(), "client-model", false).unwrap()
}

fn render(body: Value, target: Protocol) -> Value {
    let r = parse(body);
    serde_json::from_slice(&r.to_body(target, "up-model", 1024).unwrap()).unwrap()
}

fn answer(up: Protocol, body: Value) -> (Value, Usage) {
    let (b, u) =
        translate_responses_answer(up, body.to_string().as_bytes(), "client-model").unwrap();
    (serde_json::from_slice(&b).unwrap(), u)
}

#[test]
fn string_input_and_instructions_become_a_user_turn_and_the_system_prompt() {
    let b = json!({"model": "m", "instructions": "be brief", "input": "hi",
        "max_output_tokens": 50, "temperature": 0.5, "top_p": 0.9});
    let a = render(b.clone(), A);
    assert_eq!(a["system"], "be brief");
    assert_eq!(
        a["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );
    assert_eq!(a["max_tokens"], 50);
    assert_eq!(a["temperature"], 0.5);
    assert_eq!(a["top_p"], 0.9);
    let g = render(b, G);
    assert_eq!(
        g["systemInstruction"],
        json!({"parts": [{"text": "be brief"}]})
    );
    assert_eq!(
        g["contents"],
        json!([{"role": "user", "parts": [{"text": "hi"}]}])
    );
    assert_eq!(g["generationConfig"]["maxOutputTokens"], 50);
}

#[test]
fn anthropic_gets_the_default_max_tokens_when_the_client_gave_none() {
    let a = render(json!({"model": "m", "input": "hi"}), A);
    assert_eq!(a["max_tokens"], 1024);
}

#[test]
fn message_items_with_content_parts_and_developer_messages() {
    let b = json!({"model": "m", "input": [
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBOR"},
            {"type": "input_image", "image_url": "https://example.com/a.png"}
        ]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a cat"}]},
        {"role": "user", "content": "and?"}
    ]});
    let a = render(b.clone(), A);
    assert_eq!(a["system"], "rules");
    assert_eq!(
        a["messages"][0]["content"],
        json!([
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
        ])
    );
    assert_eq!(a["messages"][1]["role"], "assistant");
    assert_eq!(a["messages"][1]["content"][0]["text"], "a cat");
    assert_eq!(a["messages"][2]["content"][0]["text"], "and?");
    let g = render(b, G);
    assert_eq!(
        g["contents"][0]["parts"][1]["inlineData"]["mimeType"],
        "image/png"
    );
    assert_eq!(g["contents"][1]["role"], "model");
}

#[test]
fn function_tools_calls_and_outputs_keep_their_call_ids() {
    let b = json!({"model": "m",
    "tools": [{"type": "function", "name": "get_weather", "description": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "input": [
        {"role": "user", "content": "weather in Paris?"},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
            "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "{\"c\":21}"}
    ]});
    let a = render(b.clone(), A);
    assert_eq!(a["tools"][0]["name"], "get_weather");
    assert_eq!(
        a["tools"][0]["input_schema"]["properties"]["city"]["type"],
        "string"
    );
    assert_eq!(
        a["tool_choice"],
        json!({"type": "tool", "name": "get_weather"})
    );
    assert_eq!(
        a["messages"][1]["content"],
        json!([{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}])
    );
    assert_eq!(a["messages"][2]["content"][0]["type"], "tool_result");
    assert_eq!(a["messages"][2]["content"][0]["tool_use_id"], "call_1");
    let g = render(b, G);
    assert_eq!(
        g["tools"][0]["functionDeclarations"][0]["name"],
        "get_weather"
    );
    assert_eq!(g["contents"][1]["parts"][0]["functionCall"]["id"], "call_1");
    assert_eq!(
        g["contents"][2]["parts"][0]["functionResponse"]["name"],
        "get_weather"
    );
    assert_eq!(
        g["contents"][2]["parts"][0]["functionResponse"]["response"],
        json!({"c": 21})
    );
}

#[test]
fn json_schema_text_format_goes_to_gemini_and_is_unsupported_by_anthropic() {
    let b = json!({"model": "m", "input": "hi", "text": {"format": {"type": "json_schema",
        "name": "city", "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}}});
    let r = parse(b.clone());
    assert_eq!(
        r.unsupported_for(A).as_deref(),
        Some("text.format json_schema")
    );
    assert_eq!(r.unsupported_for(G), None);
    let g = render(b, G);
    assert_eq!(
        g["generationConfig"]["responseMimeType"],
        "application/json"
    );
    assert_eq!(
        g["generationConfig"]["responseJsonSchema"]["properties"]["name"]["type"],
        "string"
    );
}

#[test]
fn openai_only_features_are_named_for_anthropic_and_gemini() {
    for (extra, feature) in [
        (
            json!({"previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (json!({"background": true}), "background"),
        (
            json!({"tools": [{"type": "web_search"}]}),
            "built-in tool web_search",
        ),
        (
            json!({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}),
            "built-in tool file_search",
        ),
        (json!({"conversation": "conv_1"}), "conversation"),
        (json!({"reasoning": {"effort": "low"}}), "reasoning"),
        (
            json!({"include": ["reasoning.encrypted_content"]}),
            "include",
        ),
    ] {
        let mut b = json!({"model": "m", "input": "hi"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let r = parse(b);
        assert_eq!(r.unsupported_for(A).as_deref(), Some(feature), "{extra}");
        assert_eq!(r.unsupported_for(G).as_deref(), Some(feature), "{extra}");
        assert_eq!(r.unsupported_for(O), None, "{extra}");
    }
    let r = parse(json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}));
    assert_eq!(
        r.unsupported_for(A).as_deref(),
        Some("input item type item_reference")
    );
}

#[test]
fn a_malformed_request_is_refused() {
    for b in [
        json!({"model": "m"}),
        json!({"model": "m", "input": 3}),
        json!({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}),
        json!({"model": "m", "input": [{"role": "robot", "content": "x"}]}),
    ] {
        assert!(
            ChatRequest::parse_responses(b.to_string().as_bytes(), "m", false).is_err(),
            "{b}"
        );
    }
}

#[test]
fn anthropic_answer_becomes_a_response_with_message_and_function_call_items() {
    let (r, u) = answer(
        A,
        json!({"id": "msg_01", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50}}),
    );
    assert_eq!(r["object"], "response");
    assert_eq!(r["id"], "resp_msg_01");
    assert_eq!(r["status"], "completed");
    assert_eq!(r["store"], false);
    assert_eq!(r["model"], "client-model");
    assert_eq!(r["output"][0]["type"], "message");
    assert_eq!(r["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(r["output"][0]["content"][0]["text"], "Checking.");
    assert_eq!(
        r["output"][1],
        json!({"type": "function_call", "id": "fc_toolu_1", "call_id": "toolu_1",
            "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"})
    );
    assert_eq!(
        r["usage"],
        json!({"input_tokens": 150, "input_tokens_details": {"cached_tokens": 50},
            "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 170})
    );
    assert_eq!(
        u,
        Usage {
            input_tokens: 150,
            output_tokens: 20,
            cached_tokens: 50
        }
    );
}

#[test]
fn gemini_answer_reports_cached_and_reasoning_tokens() {
    let (r, _) = answer(
        G,
        json!({"candidates": [{"content": {"role": "model", "parts": [
                {"text": "thinking…", "thought": true}, {"text": "Bonjour"}]},
            "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20,
                "thoughtsTokenCount": 12, "cachedContentTokenCount": 30},
            "responseId": "abc"}),
    );
    assert_eq!(r["id"], "resp_abc");
    assert_eq!(r["output"].as_array().unwrap().len(), 1);
    assert_eq!(r["output"][0]["content"][0]["text"], "Bonjour");
    assert_eq!(r["usage"]["input_tokens"], 100);
    assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 30);
    assert_eq!(r["usage"]["output_tokens"], 32);
    assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 12);
}

#[test]
fn a_truncated_answer_is_incomplete_with_its_reason() {
    let (r, _) = answer(
        A,
        json!({"id": "msg_2", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "Once"}],
            "stop_reason": "max_tokens", "usage": {"input_tokens": 1, "output_tokens": 1}}),
    );
    assert_eq!(r["status"], "incomplete");
    assert_eq!(
        r["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
}

#[test]
fn a_streamed_request_is_translatable() {
    let r = ChatRequest::parse_responses(
        json!({"model": "m", "input": "hi", "stream": true})
            .to_string()
            .as_bytes(),
        "m",
        false,
    )
    .unwrap();
    assert!(r.stream());
    assert_eq!(r.unsupported_for(A), None);
    assert_eq!(r.unsupported_for(G), None);
    assert_eq!(
        render(json!({"model": "m", "input": "hi", "stream": true}), A)["stream"],
        true
    );
}

// A member that speaks only Chat Completions (an OpenAI-compatible server without the Responses
// API): the Responses request goes out as a Chat Completions body, the answer comes back as a
// `response` object.

fn chat_body(body: Value) -> Value {
    let r = parse(body);
    serde_json::from_slice(&r.to_chat_completions_body("up-model").unwrap()).unwrap()
}

#[test]
fn a_responses_request_renders_as_chat_completions_with_tools_results_and_schema() {
    let b = chat_body(json!({"model": "m", "instructions": "be brief",
        "input": [
            {"role": "user", "content": "weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
        ],
        "tools": [{"type": "function", "name": "get_weather", "description": "d",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "text": {"format": {"type": "json_schema", "name": "w", "strict": true,
                 "schema": {"type": "object", "properties": {"t": {"type": "string"}}}}},
        "max_output_tokens": 40, "store": false}));
    assert_eq!(b["model"], "up-model");
    assert_eq!(
        b["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(b["messages"][1]["role"], "user");
    assert_eq!(b["messages"][2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        b["messages"][2]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(
        b["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"})
    );
    assert_eq!(b["tools"][0]["type"], "function");
    assert_eq!(b["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(b["response_format"]["type"], "json_schema");
    assert_eq!(b["response_format"]["json_schema"]["name"], "w");
    assert_eq!(b["max_completion_tokens"], 40);
    assert!(b.get("input").is_none() && b.get("store").is_none(), "{b}");
}

#[test]
fn a_streamed_responses_request_asks_chat_completions_for_usage() {
    let r = ChatRequest::parse_responses(
        json!({"model": "m", "input": "hi", "stream": true})
            .to_string()
            .as_bytes(),
        "client-model",
        false,
    )
    .unwrap();
    let b: Value = serde_json::from_slice(&r.to_chat_completions_body("up").unwrap()).unwrap();
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"]["include_usage"], true);
}

#[test]
fn what_only_the_responses_api_does_is_refused_for_chat_completions_by_name() {
    for (extra, feature) in [
        (
            json!({"previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (json!({"background": true}), "background"),
        (
            json!({"tools": [{"type": "web_search"}]}),
            "built-in tool web_search",
        ),
    ] {
        let mut body = json!({"model": "m", "input": "hi"});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = parse(body);
        assert_eq!(
            r.unsupported_for_chat_completions().as_deref(),
            Some(feature)
        );
        assert!(r.to_chat_completions_body("up").is_err());
        // A member with the Responses API still takes it as it is.
        assert_eq!(r.unsupported_for(O), None);
    }
    assert_eq!(
        parse(json!({"model": "m", "input": "hi"})).unsupported_for_chat_completions(),
        None
    );
}

#[test]
fn only_a_responses_request_renders_as_chat_completions() {
    let chat = ChatRequest::parse(
        O,
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
               "logit_bias": {"1": 1}})
        .to_string()
        .as_bytes(),
        "m",
        false,
    )
    .unwrap();
    assert_eq!(chat.unsupported_for_chat_completions(), None);
    assert!(chat.to_chat_completions_body("up").is_err());
}

#[test]
fn a_chat_completions_answer_reads_back_as_a_response_object() {
    let (r, u) = answer(
        O,
        json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "up",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "checking",
                "tool_calls": [{"id": "call_9", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}}),
    );
    assert_eq!(r["object"], "response");
    assert_eq!(r["store"], false);
    assert_eq!(r["model"], "client-model");
    assert_eq!(r["output"][0]["content"][0]["text"], "checking");
    assert_eq!(r["output"][1]["type"], "function_call");
    assert_eq!(r["output"][1]["call_id"], "call_9");
    assert_eq!(r["output"][1]["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(r["usage"]["input_tokens"], 11);
    assert_eq!(r["usage"]["output_tokens"], 4);
    assert_eq!(u.input_tokens, 11);
}

#[test]
fn a_request_kept_to_its_own_protocol_is_not_sent_as_chat_completions() {
    let mut r = parse(json!({"model": "m", "input": "hi"}));
    r.keep_to_own_protocol("stored responses (`store`)");
    assert_eq!(
        r.unsupported_for_chat_completions().as_deref(),
        Some("stored responses (`store`)")
    );
    assert!(r.unsupported_for(A).is_some());
    // A member with the Responses API still takes it.
    assert_eq!(r.unsupported_for(O), None);
}

#[test]
fn every_responses_only_field_is_named_and_harmless_values_are_not() {
    for (extra, feature) in [
        (
            json!({"prompt": {"id": "pmpt_1"}}),
            "prompt templates (`prompt`)",
        ),
        (json!({"max_tool_calls": 3}), "max_tool_calls"),
        (json!({"top_logprobs": 2}), "top_logprobs"),
        (json!({"truncation": "auto"}), "truncation auto"),
        (json!({"text": {"verbosity": "low"}}), "text.verbosity"),
        (
            json!({"tools": [{"name": "f"}]}),
            "built-in tool without a type",
        ),
        (
            json!({"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "web_search"}}),
            "tool_choice type web_search",
        ),
        (
            json!({"text": {"format": {"type": "grammar"}}}),
            "text.format grammar",
        ),
    ] {
        let mut b = json!({"model": "m", "input": "hi"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let r = parse(b);
        assert_eq!(r.unsupported_for(A).as_deref(), Some(feature), "{extra}");
        assert_eq!(r.unsupported_for(G).as_deref(), Some(feature), "{extra}");
    }
    for extra in [
        json!({"truncation": "disabled"}),
        json!({"background": false}),
        json!({"include": []}),
        json!({"prompt": null, "reasoning": null, "text": {"verbosity": null, "format": {"type": "text"}}}),
    ] {
        let mut b = json!({"model": "m", "input": "hi"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        assert_eq!(parse(b).unsupported_for(G), None, "{extra}");
    }
}

#[test]
fn responses_request_field_rules() {
    let base =
        || json!({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}]});
    let with = |k: &str, v: Value| {
        let mut b = base();
        b[k] = v;
        b
    };
    // The safety identifier wins over the deprecated `user`.
    let mut b = with("safety_identifier", json!("s1"));
    b["user"] = json!("u1");
    assert_eq!(render(b, A)["metadata"]["user_id"], "s1");
    assert_eq!(
        render(with("user", json!("u1")), A)["metadata"]["user_id"],
        "u1"
    );
    // Empty instructions are no system prompt; non-string instructions are refused.
    assert_eq!(
        render(with("instructions", json!("")), A).get("system"),
        None
    );
    assert!(ChatRequest::parse_responses(
        with("instructions", json!(["x"])).to_string().as_bytes(),
        "m",
        false
    )
    .is_err());
    for (choice, expected) in [
        (json!("none"), json!("none")),
        (json!("required"), json!("required")),
        (json!("auto"), json!("auto")),
        (
            json!({"type": "function", "name": "f"}),
            json!({"type": "function", "function": {"name": "f"}}),
        ),
    ] {
        let o = chat_body(with("tool_choice", choice.clone()));
        assert_eq!(o["tool_choice"], expected, "{choice}");
    }
    for bad in [json!("sometimes"), json!({"type": "function"})] {
        assert!(ChatRequest::parse_responses(
            with("tool_choice", bad.clone()).to_string().as_bytes(),
            "m",
            false
        )
        .is_err());
    }
    assert_eq!(
        chat_body(with("parallel_tool_calls", json!(false)))["parallel_tool_calls"],
        false
    );
    let o = chat_body(with("text", json!({"format": {"type": "json_object"}})));
    assert_eq!(o["response_format"], json!({"type": "json_object"}));
    assert_eq!(
        parse(with("text", json!({"format": {"type": "json_object"}})))
            .unsupported_for(A)
            .as_deref(),
        Some("text.format json_object")
    );
}

#[test]
fn an_assistant_message_and_the_calls_after_it_are_one_turn() {
    let b = chat_body(json!({"model": "m", "store": false, "input": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "call_2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a"},
        {"type": "function_call_output", "call_id": "call_2", "output": "b"}
    ]}));
    assert_eq!(
        b["messages"],
        json!([
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a"},
            {"role": "tool", "tool_call_id": "call_2", "content": "b"}
        ])
    );
}

#[test]
fn a_function_call_output_may_be_content_parts() {
    let a = render(
        json!({"model": "m", "input": [
            {"role": "user", "content": "q"},
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1",
             "output": [{"type": "input_text", "text": "sun"}, {"type": "input_text", "text": "ny"}]}
        ]}),
        A,
    );
    assert_eq!(
        a["messages"][2]["content"],
        json!([{"type": "tool_result", "tool_use_id": "call_1", "content": "sun\nny"}])
    );
}

#[test]
fn a_message_item_without_content_is_an_empty_turn() {
    let b = chat_body(json!({"model": "m", "store": false, "input": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": null},
        {"role": "user", "content": "r"}
    ]}));
    assert_eq!(
        b["messages"][1],
        json!({"role": "assistant", "content": ""})
    );
}

#[test]
fn a_filtered_answer_is_incomplete_for_content_filter() {
    let (r, _) = answer(
        G,
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Sorry"}]},
            "finishReason": "SAFETY"}], "responseId": "f1"}),
    );
    assert_eq!(r["status"], "incomplete");
    assert_eq!(r["incomplete_details"], json!({"reason": "content_filter"}));
}

#[test]
fn a_response_id_keeps_letters_digits_underscores_and_dashes() {
    let (r, _) = answer(
        G,
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "x"}]},
            "finishReason": "STOP"}], "responseId": "a.b_c-d/e"}),
    );
    assert_eq!(r["id"], "resp_ab_c-de");
}
