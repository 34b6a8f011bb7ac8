//! Request translation rules, one test per rule, each direction.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{json, Value};

use super::ir::ResponseFormat;
use super::*;
use crate::Protocol::{Anthropic as A, Gemini as G, OpenAi as O};

fn parse(p: Protocol, body: Value) -> ChatRequest {
    ChatRequest::parse(p, body.to_string().as_bytes(), "client-model", false).unwrap()
}

fn body(r: &ChatRequest, t: Protocol) -> Value {
    serde_json::from_slice(&r.to_body(t, "up-model", 1024).unwrap()).unwrap()
}

fn conv(p: Protocol, b: Value, t: Protocol) -> Value {
    body(&parse(p, b), t)
}

fn oai(messages: Value) -> Value {
    json!({"model": "gpt-x", "messages": messages})
}

fn ant(messages: Value) -> Value {
    json!({"model": "claude-x", "max_tokens": 100, "messages": messages})
}

fn gem(contents: Value) -> Value {
    json!({"contents": contents})
}

// --- system prompts -------------------------------------------------------------------------

#[test]
fn system_openai_system_and_developer_to_anthropic_and_gemini() {
    let b = oai(json!([
        {"role": "system", "content": "be brief"},
        {"role": "developer", "content": [{"type": "text", "text": "be kind"}]},
        {"role": "user", "content": "hi"}
    ]));
    let a = conv(O, b.clone(), A);
    assert_eq!(a["system"], "be brief\n\nbe kind");
    assert_eq!(
        a["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );
    let g = conv(O, b, G);
    assert_eq!(
        g["systemInstruction"],
        json!({"parts": [{"text": "be brief"}, {"text": "be kind"}]})
    );
    assert_eq!(
        g["contents"],
        json!([{"role": "user", "parts": [{"text": "hi"}]}])
    );
}

#[test]
fn system_anthropic_string_and_blocks_to_openai_and_gemini() {
    let mut b = ant(json!([{"role": "user", "content": "hi"}]));
    b["system"] = json!([{"type": "text", "text": "one", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "two"}]);
    let o = conv(A, b.clone(), O);
    assert_eq!(
        o["messages"][0],
        json!({"role": "system", "content": "one\n\ntwo"})
    );
    let g = conv(A, b, G);
    assert_eq!(
        g["systemInstruction"]["parts"],
        json!([{"text": "one"}, {"text": "two"}])
    );
    let mut s = ant(json!([{"role": "user", "content": "hi"}]));
    s["system"] = json!("plain");
    assert_eq!(conv(A, s, O)["messages"][0]["content"], "plain");
}

#[test]
fn system_gemini_instruction_to_openai_and_anthropic() {
    let mut b = gem(json!([{"role": "user", "parts": [{"text": "hi"}]}]));
    b["systemInstruction"] = json!({"parts": [{"text": "sys"}]});
    assert_eq!(
        conv(G, b.clone(), O)["messages"][0],
        json!({"role": "system", "content": "sys"})
    );
    assert_eq!(conv(G, b, A)["system"], "sys");
}

// --- roles and alternation ------------------------------------------------------------------

#[test]
fn consecutive_same_role_turns_are_merged_for_anthropic_and_gemini() {
    let b = oai(json!([
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"},
        {"role": "user", "content": "d"}
    ]));
    let a = conv(O, b.clone(), A);
    assert_eq!(a["messages"].as_array().unwrap().len(), 3);
    assert_eq!(
        a["messages"][0]["content"],
        json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    );
    assert_eq!(
        a["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "c"}]})
    );
    let g = conv(O, b, G);
    assert_eq!(
        g["contents"][0]["parts"],
        json!([{"text": "a"}, {"text": "b"}])
    );
    assert_eq!(g["contents"][1]["role"], "model");
}

#[test]
fn multi_turn_roles_from_gemini_and_anthropic_to_openai() {
    let g = gem(json!([
        {"role": "user", "parts": [{"text": "q1"}]},
        {"role": "model", "parts": [{"text": "a1"}]},
        {"parts": [{"text": "q2"}]}
    ]));
    let o = conv(G, g, O);
    assert_eq!(
        o["messages"],
        json!([
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "q2"}
        ])
    );
    let a = ant(
        json!([{"role": "user", "content": "q1"}, {"role": "assistant", "content": [{"type": "text", "text": "a1"}]}, {"role": "user", "content": "q2"}]),
    );
    assert_eq!(
        conv(A, a, G)["contents"][1],
        json!({"role": "model", "parts": [{"text": "a1"}]})
    );
}

// --- content parts --------------------------------------------------------------------------

#[test]
fn array_content_with_images_is_never_dropped_openai_to_anthropic_and_gemini() {
    let b = oai(json!([{"role": "user", "content": [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": "https://x.test/cat.png", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}
    ]}]));
    let a = conv(O, b.clone(), A);
    assert_eq!(
        a["messages"][0]["content"],
        json!([
            {"type": "text", "text": "what is this"},
            {"type": "image", "source": {"type": "url", "url": "https://x.test/cat.png"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"}}
        ])
    );
    let g = conv(O, b, G);
    assert_eq!(
        g["contents"][0]["parts"],
        json!([
            {"text": "what is this"},
            {"fileData": {"mimeType": "image/png", "fileUri": "https://x.test/cat.png"}},
            {"inlineData": {"mimeType": "image/jpeg", "data": "AAAA"}}
        ])
    );
}

#[test]
fn anthropic_images_to_openai_data_urls_and_gemini_inline_data() {
    let b = ant(json!([{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}},
        {"type": "text", "text": "compare"}
    ]}]));
    let o = conv(A, b.clone(), O);
    assert_eq!(
        o["messages"][0]["content"],
        json!([
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            {"type": "image_url", "image_url": {"url": "https://x.test/a.jpg"}},
            {"type": "text", "text": "compare"}
        ])
    );
    let g = conv(A, b, G);
    assert_eq!(
        g["contents"][0]["parts"][0],
        json!({"inlineData": {"mimeType": "image/png", "data": "iVBO"}})
    );
    assert_eq!(
        g["contents"][0]["parts"][1],
        json!({"fileData": {"mimeType": "image/jpeg", "fileUri": "https://x.test/a.jpg"}})
    );
}

#[test]
fn gemini_inline_and_file_data_to_openai_and_anthropic() {
    let b = gem(json!([{"role": "user", "parts": [
        {"inlineData": {"mimeType": "image/webp", "data": "UklG"}},
        {"fileData": {"mimeType": "image/png", "fileUri": "https://x.test/p"}},
        {"text": "describe"}
    ]}]));
    let o = conv(G, b.clone(), O);
    assert_eq!(
        o["messages"][0]["content"][0],
        json!({"type": "image_url", "image_url": {"url": "data:image/webp;base64,UklG"}})
    );
    assert_eq!(
        o["messages"][0]["content"][1],
        json!({"type": "image_url", "image_url": {"url": "https://x.test/p"}})
    );
    let a = conv(G, b, A);
    assert_eq!(
        a["messages"][0]["content"][0]["source"],
        json!({"type": "base64", "media_type": "image/webp", "data": "UklG"})
    );
}

#[test]
fn pdf_documents_between_all_three() {
    let b = ant(json!([{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}},
        {"type": "text", "text": "summarize"}
    ]}]));
    let o = conv(A, b.clone(), O);
    assert_eq!(o["messages"][0]["content"][0]["type"], "file");
    assert_eq!(
        o["messages"][0]["content"][0]["file"]["file_data"],
        "data:application/pdf;base64,JVBE"
    );
    let g = conv(A, b, G);
    assert_eq!(
        g["contents"][0]["parts"][0],
        json!({"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}})
    );
    let from_openai = oai(
        json!([{"role": "user", "content": [{"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBE"}}]}]),
    );
    let a = conv(O, from_openai, A);
    assert_eq!(
        a["messages"][0]["content"][0],
        json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}})
    );
}

#[test]
fn anthropic_text_document_becomes_text() {
    let b = ant(
        json!([{"role": "user", "content": [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "the doc"}}]}]),
    );
    assert_eq!(conv(A, b, O)["messages"][0]["content"], "the doc");
}

#[test]
fn openai_audio_input_to_gemini_inline_data() {
    let b = oai(
        json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}]}]),
    );
    let r = parse(O, b);
    assert_eq!(r.unsupported_for(A).as_deref(), Some("audio input"));
    assert_eq!(r.unsupported_for(G), None);
    assert_eq!(
        body(&r, G)["contents"][0]["parts"][0],
        json!({"inlineData": {"mimeType": "audio/wav", "data": "UklGR"}})
    );
}

// --- tools ----------------------------------------------------------------------------------

fn weather_tool_openai() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
}

#[test]
fn tools_openai_to_anthropic_input_schema_and_gemini_declarations() {
    let mut b = oai(json!([{"role": "user", "content": "weather?"}]));
    b["tools"] = json!([weather_tool_openai()]);
    let a = conv(O, b.clone(), A);
    assert_eq!(
        a["tools"],
        json!([{"name": "get_weather", "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
    );
    let g = conv(O, b, G);
    assert_eq!(
        g["tools"],
        json!([{"functionDeclarations": [{"name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}}]}])
    );
}

#[test]
fn tool_schema_beyond_gemini_schema_goes_as_parameters_json_schema() {
    let mut b = oai(json!([{"role": "user", "content": "x"}]));
    b["tools"] = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}}}]);
    let g = conv(O, b, G);
    let d = &g["tools"][0]["functionDeclarations"][0];
    assert!(d.get("parameters").is_none());
    assert_eq!(d["parametersJsonSchema"]["additionalProperties"], false);
}

#[test]
fn tool_without_parameters_gets_an_empty_object_schema_for_anthropic() {
    let mut b = oai(json!([{"role": "user", "content": "x"}]));
    b["tools"] = json!([{"type": "function", "function": {"name": "now"}}]);
    assert_eq!(
        conv(O, b.clone(), A)["tools"][0]["input_schema"],
        json!({"type": "object", "properties": {}})
    );
    assert!(conv(O, b, G)["tools"][0]["functionDeclarations"][0]
        .get("parameters")
        .is_none());
}

#[test]
fn tools_anthropic_and_gemini_to_openai() {
    let mut a = ant(json!([{"role": "user", "content": "x"}]));
    a["tools"] = json!([{"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {}}, "cache_control": {"type": "ephemeral"}}]);
    assert_eq!(
        conv(A, a, O)["tools"],
        json!([{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}])
    );
    let mut g = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
    g["tools"] = json!([{"functionDeclarations": [{"name": "f", "parameters": {"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}}}}]}]);
    assert_eq!(
        conv(G, g, O)["tools"][0]["function"]["parameters"],
        json!({"type": "object", "properties": {"n": {"type": "integer"}}})
    );
}

#[test]
fn tool_choice_mapping_table() {
    // (OpenAI, Anthropic, Gemini functionCallingConfig)
    let table = [
        (
            json!("auto"),
            json!({"type": "auto"}),
            json!({"mode": "AUTO"}),
        ),
        (
            json!("none"),
            json!({"type": "none"}),
            json!({"mode": "NONE"}),
        ),
        (
            json!("required"),
            json!({"type": "any"}),
            json!({"mode": "ANY"}),
        ),
        (
            json!({"type": "function", "function": {"name": "get_weather"}}),
            json!({"type": "tool", "name": "get_weather"}),
            json!({"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
        ),
    ];
    for (o, a, g) in table {
        let mut ob = oai(json!([{"role": "user", "content": "x"}]));
        ob["tools"] = json!([weather_tool_openai()]);
        ob["tool_choice"] = o.clone();
        assert_eq!(
            conv(O, ob.clone(), A)["tool_choice"],
            a,
            "openai {o} -> anthropic"
        );
        assert_eq!(
            conv(O, ob, G)["toolConfig"]["functionCallingConfig"],
            g,
            "openai {o} -> gemini"
        );

        let mut ab = ant(json!([{"role": "user", "content": "x"}]));
        ab["tools"] = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
        ab["tool_choice"] = a.clone();
        assert_eq!(
            conv(A, ab.clone(), O)["tool_choice"],
            o,
            "anthropic {a} -> openai"
        );
        assert_eq!(
            conv(A, ab, G)["toolConfig"]["functionCallingConfig"],
            g,
            "anthropic {a} -> gemini"
        );

        let mut gb = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
        gb["tools"] = json!([{"functionDeclarations": [{"name": "get_weather"}]}]);
        gb["toolConfig"] = json!({"functionCallingConfig": g.clone()});
        assert_eq!(
            conv(G, gb.clone(), O)["tool_choice"],
            o,
            "gemini {g} -> openai"
        );
        assert_eq!(conv(G, gb, A)["tool_choice"], a, "gemini {g} -> anthropic");
    }
}

#[test]
fn tool_choice_without_tools_is_not_sent() {
    let mut g = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
    g["toolConfig"] = json!({"functionCallingConfig": {"mode": "AUTO"}});
    assert!(conv(G, g.clone(), O).get("tool_choice").is_none());
    assert!(conv(G, g, A).get("tool_choice").is_none());
    let mut a = ant(json!([{"role": "user", "content": "x"}]));
    a["tool_choice"] = json!({"type": "auto"});
    assert!(conv(A, a, G).get("toolConfig").is_none());
}

#[test]
fn parallel_tool_calls_false_is_disable_parallel_tool_use() {
    let mut b = oai(json!([{"role": "user", "content": "x"}]));
    b["tools"] = json!([weather_tool_openai()]);
    b["parallel_tool_calls"] = json!(false);
    assert_eq!(
        conv(O, b, A)["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    let mut a = ant(json!([{"role": "user", "content": "x"}]));
    a["tools"] = json!([{"name": "f", "input_schema": {"type": "object"}}]);
    a["tool_choice"] = json!({"type": "any", "disable_parallel_tool_use": true});
    let o = conv(A, a, O);
    assert_eq!(o["parallel_tool_calls"], false);
    assert_eq!(o["tool_choice"], "required");
}

#[test]
fn gemini_allowed_function_names_restrict_the_tools() {
    let mut gb = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
    gb["tools"] = json!([{"functionDeclarations": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}]);
    gb["toolConfig"] =
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a", "b"]}});
    let o = conv(G, gb, O);
    assert_eq!(o["tools"].as_array().unwrap().len(), 2);
    assert_eq!(o["tool_choice"], "required");
}

fn openai_tool_history() -> Value {
    let mut b = oai(json!([
        {"role": "user", "content": "weather in Paris and Rome?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_p", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "call_r", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_p", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_r", "content": [{"type": "text", "text": "rain"}]},
        {"role": "user", "content": "thanks"}
    ]));
    b["tools"] = json!([weather_tool_openai()]);
    b
}

#[test]
fn tool_call_ids_openai_to_anthropic() {
    let a = conv(O, openai_tool_history(), A);
    assert_eq!(
        a["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_p", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_r", "name": "get_weather", "input": {"city": "Rome"}}
        ]})
    );
    assert_eq!(
        a["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_p", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "call_r", "content": "rain"},
            {"type": "text", "text": "thanks"}
        ]})
    );
}

#[test]
fn tool_call_ids_and_names_openai_to_gemini() {
    let g = conv(O, openai_tool_history(), G);
    assert_eq!(
        g["contents"][1],
        json!({"role": "model", "parts": [
            {"functionCall": {"id": "call_p", "name": "get_weather", "args": {"city": "Paris"}}},
            {"functionCall": {"id": "call_r", "name": "get_weather", "args": {"city": "Rome"}}}
        ]})
    );
    assert_eq!(
        g["contents"][2]["parts"][0],
        json!({"functionResponse": {"id": "call_p", "name": "get_weather", "response": {"output": "sunny"}}})
    );
    assert_eq!(
        g["contents"][2]["parts"][1]["functionResponse"]["name"],
        "get_weather"
    );
    assert_eq!(g["contents"][2]["parts"][2], json!({"text": "thanks"}));
}

#[test]
fn tool_results_anthropic_to_openai_tool_messages_first() {
    let b = ant(json!([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "text", "text": "let me check"}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "42"}], "is_error": false}, {"type": "text", "text": "go on"}]}
    ]));
    let o = conv(A, b, O);
    assert_eq!(
        o["messages"][1],
        json!({"role": "assistant", "content": "let me check", "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]})
    );
    assert_eq!(
        o["messages"][2],
        json!({"role": "tool", "tool_call_id": "toolu_1", "content": "42"})
    );
    assert_eq!(
        o["messages"][3],
        json!({"role": "user", "content": "go on"})
    );
}

#[test]
fn gemini_history_without_ids_gets_stable_matching_ids() {
    let g = gem(json!([
        {"role": "user", "parts": [{"text": "q"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"x": 1}}}, {"functionCall": {"name": "g", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "g", "response": {"output": "G"}}}, {"functionResponse": {"name": "f", "response": {"temp": 20}}}]}
    ]));
    let o1 = conv(G, g.clone(), O);
    let o2 = conv(G, g, O);
    assert_eq!(o1, o2, "synthesized ids are stable");
    let calls = o1["messages"][1]["tool_calls"].as_array().unwrap();
    let (f_id, g_id) = (
        calls[0]["id"].as_str().unwrap(),
        calls[1]["id"].as_str().unwrap(),
    );
    assert_ne!(f_id, g_id);
    assert_eq!(
        o1["messages"][2],
        json!({"role": "tool", "tool_call_id": g_id, "content": "G"})
    );
    assert_eq!(o1["messages"][3]["tool_call_id"], f_id);
    assert_eq!(o1["messages"][3]["content"], "{\"temp\":20}");
}

#[test]
fn gemini_function_response_with_error_to_anthropic_is_error() {
    let g = gem(json!([
        {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "f", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "f", "response": {"error": "boom"}}}]}
    ]));
    let a = conv(G, g, A);
    assert_eq!(
        a["messages"][1]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "c1", "content": "boom", "is_error": true})
    );
}

#[test]
fn json_tool_result_becomes_a_gemini_response_object() {
    let b = oai(json!([
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "{\"temp\":20}"}
    ]));
    assert_eq!(
        conv(O, b, G)["contents"][1]["parts"][0]["functionResponse"]["response"],
        json!({"temp": 20})
    );
}

#[test]
fn orphan_tool_result_towards_gemini_is_malformed() {
    let b = oai(json!([{"role": "tool", "tool_call_id": "nope", "content": "x"}]));
    assert!(matches!(
        parse(O, b).to_body(G, "m", 1),
        Err(TranslateError::Malformed(_))
    ));
}

#[test]
fn tool_ids_are_sanitized_consistently_for_anthropic() {
    let b = oai(json!([
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call:1/x", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call:1/x", "content": "ok"}
    ]));
    let a = conv(O, b, A);
    assert_eq!(a["messages"][0]["content"][0]["id"], "call_1_x");
    assert_eq!(a["messages"][1]["content"][0]["tool_use_id"], "call_1_x");
}

// --- sampling parameters --------------------------------------------------------------------

#[test]
fn max_tokens_mapping_each_direction() {
    let o = oai(json!([{"role": "user", "content": "x"}]));
    let mut o1 = o.clone();
    o1["max_completion_tokens"] = json!(77);
    assert_eq!(conv(O, o1.clone(), A)["max_tokens"], 77);
    assert_eq!(conv(O, o1, G)["generationConfig"]["maxOutputTokens"], 77);
    let mut o2 = o.clone();
    o2["max_tokens"] = json!(55);
    assert_eq!(conv(O, o2, A)["max_tokens"], 55);
    assert_eq!(
        conv(O, o.clone(), A)["max_tokens"],
        1024,
        "default_max_tokens when absent"
    );
    assert!(conv(O, o, G).get("generationConfig").is_none());
    assert_eq!(
        conv(A, ant(json!([{"role": "user", "content": "x"}])), O)["max_completion_tokens"],
        100
    );
    let mut g = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
    g["generationConfig"] = json!({"maxOutputTokens": 9});
    assert_eq!(conv(G, g.clone(), A)["max_tokens"], 9);
    assert_eq!(conv(G, g, O)["max_completion_tokens"], 9);
}

#[test]
fn temperature_top_p_top_k_mapping() {
    let mut a = ant(json!([{"role": "user", "content": "x"}]));
    a["temperature"] = json!(0.5);
    a["top_p"] = json!(0.9);
    a["top_k"] = json!(40);
    let g = conv(A, a.clone(), G);
    assert_eq!(g["generationConfig"]["temperature"], 0.5);
    assert_eq!(g["generationConfig"]["topP"], 0.9);
    assert_eq!(g["generationConfig"]["topK"], 40);
    assert_eq!(parse(A, a).unsupported_for(O).as_deref(), Some("top_k"));
    let mut o = oai(json!([{"role": "user", "content": "x"}]));
    o["temperature"] = json!(1.6);
    o["top_p"] = json!(0.8);
    let an = conv(O, o.clone(), A);
    assert_eq!(an["temperature"], 1.0, "clamped to Anthropic's 0..1");
    assert_eq!(an["top_p"], 0.8);
    assert_eq!(conv(O, o, G)["generationConfig"]["temperature"], 1.6);
    let mut gk = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
    gk["generationConfig"] = json!({"topK": 3, "temperature": 0.2});
    let r = parse(G, gk);
    assert_eq!(r.unsupported_for(O).as_deref(), Some("top_k"));
    assert_eq!(body(&r, A)["top_k"], 3);
}

#[test]
fn stop_sequences_mapping() {
    let mut o = oai(json!([{"role": "user", "content": "x"}]));
    o["stop"] = json!("END");
    assert_eq!(conv(O, o.clone(), A)["stop_sequences"], json!(["END"]));
    o["stop"] = json!(["a", "b"]);
    assert_eq!(
        conv(O, o, G)["generationConfig"]["stopSequences"],
        json!(["a", "b"])
    );
    let mut a = ant(json!([{"role": "user", "content": "x"}]));
    a["stop_sequences"] = json!(["x"]);
    assert_eq!(conv(A, a, O)["stop"], json!(["x"]));
    let mut g = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
    g["generationConfig"] = json!({"stopSequences": ["y"]});
    assert_eq!(conv(G, g, A)["stop_sequences"], json!(["y"]));
}

#[test]
fn penalties_and_seed_openai_to_gemini() {
    let mut o = oai(json!([{"role": "user", "content": "x"}]));
    o["presence_penalty"] = json!(0.5);
    o["frequency_penalty"] = json!(0.25);
    o["seed"] = json!(7);
    let r = parse(O, o);
    let g = body(&r, G);
    assert_eq!(g["generationConfig"]["presencePenalty"], 0.5);
    assert_eq!(g["generationConfig"]["frequencyPenalty"], 0.25);
    assert_eq!(g["generationConfig"]["seed"], 7);
    assert_eq!(r.unsupported_for(A).as_deref(), Some("presence_penalty"));
    let mut zero = oai(json!([{"role": "user", "content": "x"}]));
    zero["presence_penalty"] = json!(0);
    assert_eq!(
        parse(O, zero).unsupported_for(A),
        None,
        "a zero penalty is the default"
    );
}

// --- JSON mode ------------------------------------------------------------------------------

#[test]
fn json_mode_openai_to_gemini() {
    let mut o = oai(json!([{"role": "user", "content": "x"}]));
    o["response_format"] = json!({"type": "json_object"});
    assert_eq!(
        conv(O, o.clone(), G)["generationConfig"],
        json!({"responseMimeType": "application/json"})
    );
    o["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}, "strict": true}});
    assert_eq!(
        conv(O, o, G)["generationConfig"],
        json!({"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}})
    );
}

#[test]
fn json_mode_gemini_to_openai() {
    let mut g = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
    g["generationConfig"] = json!({"responseMimeType": "application/json"});
    assert_eq!(
        conv(G, g.clone(), O)["response_format"],
        json!({"type": "json_object"})
    );
    g["generationConfig"]["responseSchema"] =
        json!({"type": "OBJECT", "properties": {"a": {"type": "STRING"}}});
    assert_eq!(
        conv(G, g.clone(), O)["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "response", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}})
    );
    assert!(parse(G, g)
        .unsupported_for(A)
        .unwrap()
        .starts_with("JSON mode"));
}

#[test]
fn json_mode_towards_anthropic_is_unsupported() {
    let mut o = oai(json!([{"role": "user", "content": "x"}]));
    o["response_format"] = json!({"type": "json_object"});
    let r = parse(O, o);
    assert_eq!(
        r.unsupported_for(A).as_deref(),
        Some("response_format json_object")
    );
    assert_eq!(
        r.to_body(A, "m", 1),
        Err(TranslateError::Unsupported(
            "response_format json_object".into()
        ))
    );
    let mut t = oai(json!([{"role": "user", "content": "x"}]));
    t["response_format"] = json!({"type": "text"});
    assert_eq!(parse(O, t).unsupported_for(A), None);
}

// --- unsupported features -------------------------------------------------------------------

#[test]
fn unsupported_feature_table() {
    let u = json!([{"role": "user", "content": "x"}]);
    let gu = json!([{"role": "user", "parts": [{"text": "x"}]}]);
    let with = |mut b: Value, k: &str, v: Value| {
        b[k] = v;
        b
    };
    // (client, body, target, expected feature or None)
    let cases: Vec<(Protocol, Value, Protocol, Option<&str>)> = vec![
        (O, with(oai(u.clone()), "n", json!(2)), A, Some("n > 1")),
        (O, with(oai(u.clone()), "n", json!(2)), G, None),
        (
            O,
            with(oai(u.clone()), "logprobs", json!(true)),
            A,
            Some("logprobs"),
        ),
        (
            O,
            with(oai(u.clone()), "logprobs", json!(true)),
            G,
            Some("logprobs"),
        ),
        (
            O,
            with(oai(u.clone()), "logit_bias", json!({"50256": -100})),
            G,
            Some("logit_bias"),
        ),
        (
            O,
            with(oai(u.clone()), "modalities", json!(["text", "audio"])),
            G,
            Some("audio output"),
        ),
        (
            O,
            with(
                oai(u.clone()),
                "audio",
                json!({"voice": "alloy", "format": "wav"}),
            ),
            A,
            Some("audio output"),
        ),
        (
            O,
            with(oai(u.clone()), "web_search_options", json!({})),
            A,
            Some("web_search_options"),
        ),
        (
            O,
            with(
                oai(u.clone()),
                "tools",
                json!([{"type": "custom", "custom": {"name": "x"}}]),
            ),
            A,
            Some("tool type custom"),
        ),
        (
            O,
            with(oai(u.clone()), "functions", json!([{"name": "f"}])),
            G,
            Some("legacy functions"),
        ),
        (
            O,
            oai(
                json!([{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}]),
            ),
            A,
            Some("file_id reference"),
        ),
        (
            O,
            oai(
                json!([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}]}]),
            ),
            A,
            Some("audio input"),
        ),
        (
            A,
            with(
                ant(u.clone()),
                "thinking",
                json!({"type": "enabled", "budget_tokens": 2048}),
            ),
            O,
            Some("thinking"),
        ),
        (
            A,
            with(
                ant(u.clone()),
                "thinking",
                json!({"type": "enabled", "budget_tokens": 2048}),
            ),
            G,
            None,
        ),
        (A, with(ant(u.clone()), "top_k", json!(5)), O, Some("top_k")),
        (
            A,
            with(
                ant(u.clone()),
                "tools",
                json!([{"type": "web_search_20250305", "name": "web_search"}]),
            ),
            G,
            Some("server tool web_search_20250305"),
        ),
        (
            A,
            with(ant(u.clone()), "mcp_servers", json!([{}])),
            O,
            Some("mcp_servers"),
        ),
        (
            A,
            ant(
                json!([{"role": "user", "content": "x"}, {"role": "assistant", "content": "The answer is"}]),
            ),
            O,
            Some("assistant prefill (last message from the assistant)"),
        ),
        (
            A,
            ant(
                json!([{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]),
            ),
            G,
            Some("image source type file"),
        ),
        (
            A,
            ant(
                json!([{"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}}]}]),
            ),
            O,
            Some("document (PDF) input by URL"),
        ),
        (
            A,
            ant(
                json!([{"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}}]}]),
            ),
            G,
            None,
        ),
        (
            A,
            ant(
                json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}]}]}]),
            ),
            O,
            Some("media in a tool result"),
        ),
        (
            A,
            ant(
                json!([{"role": "user", "content": [{"type": "search_result", "source": "s", "title": "t", "content": []}]}]),
            ),
            O,
            Some("content block type search_result"),
        ),
        (
            G,
            with(
                gem(gu.clone()),
                "generationConfig",
                json!({"candidateCount": 2}),
            ),
            A,
            Some("candidateCount > 1"),
        ),
        (
            G,
            with(
                gem(gu.clone()),
                "generationConfig",
                json!({"candidateCount": 2}),
            ),
            O,
            None,
        ),
        (
            G,
            with(
                gem(gu.clone()),
                "cachedContent",
                json!("cachedContents/abc"),
            ),
            O,
            Some("cachedContent"),
        ),
        (
            G,
            with(gem(gu.clone()), "tools", json!([{"googleSearch": {}}])),
            A,
            Some("Gemini tool googleSearch"),
        ),
        (
            G,
            with(
                gem(gu.clone()),
                "generationConfig",
                json!({"responseModalities": ["TEXT", "IMAGE"]}),
            ),
            O,
            Some("non-text responseModalities"),
        ),
        (
            G,
            with(
                gem(gu.clone()),
                "generationConfig",
                json!({"responseMimeType": "text/x.enum"}),
            ),
            O,
            Some("responseMimeType text/x.enum"),
        ),
        (
            G,
            with(
                gem(gu.clone()),
                "generationConfig",
                json!({"thinkingConfig": {"includeThoughts": true}}),
            ),
            A,
            Some("thinkingConfig.includeThoughts"),
        ),
        (
            G,
            with(
                gem(gu.clone()),
                "generationConfig",
                json!({"thinkingConfig": {"thinkingBudget": 1024}}),
            ),
            A,
            None,
        ),
        (
            G,
            gem(
                json!([{"role": "user", "parts": [{"inlineData": {"mimeType": "audio/ogg", "data": "x"}}]}]),
            ),
            O,
            Some("audio input"),
        ),
        (
            G,
            gem(
                json!([{"role": "user", "parts": [{"inlineData": {"mimeType": "video/mp4", "data": "x"}}]}]),
            ),
            A,
            Some("video input"),
        ),
        (
            G,
            gem(
                json!([{"role": "user", "parts": [{"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/a.pdf"}}]}]),
            ),
            A,
            Some("non-HTTP file URI (gs)"),
        ),
        (
            G,
            gem(
                json!([{"role": "user", "parts": [{"fileData": {"mimeType": "image/png", "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc"}}]}]),
            ),
            O,
            Some("Gemini File API reference"),
        ),
        (
            G,
            gem(
                json!([{"role": "user", "parts": [{"executableCode": {"language": "PYTHON", "code": "1"}}]}]),
            ),
            O,
            Some("code execution parts"),
        ),
    ];
    for (client, b, target, want) in cases {
        let r = ChatRequest::parse(client, b.to_string().as_bytes(), "m", false).unwrap();
        assert_eq!(
            r.unsupported_for(target).as_deref(),
            want,
            "{client} -> {target}: {b}"
        );
        assert_eq!(
            r.unsupported_for(client),
            None,
            "never unsupported towards the client's own protocol"
        );
        match want {
            Some(f) => assert_eq!(
                r.to_body(target, "m", 1),
                Err(TranslateError::Unsupported(f.into()))
            ),
            None => assert!(
                r.to_body(target, "m", 1).is_ok(),
                "{client} -> {target}: {b}"
            ),
        }
    }
}

#[test]
fn streaming_n_greater_than_one_is_unsupported_everywhere_else() {
    let mut o = oai(json!([{"role": "user", "content": "x"}]));
    o["n"] = json!(2);
    o["stream"] = json!(true);
    let r = parse(O, o);
    assert_eq!(
        r.unsupported_for(G).as_deref(),
        Some("n > 1 with streaming")
    );
    assert_eq!(
        r.unsupported_for(A).as_deref(),
        Some("n > 1"),
        "the first feature is named"
    );
}

#[test]
fn dropped_hints_do_not_block() {
    let mut o = oai(
        json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/i.png", "detail": "low"}}]}]),
    );
    for (k, v) in [
        ("user", json!("u1")),
        ("metadata", json!({"a": "b"})),
        ("store", json!(true)),
        ("service_tier", json!("auto")),
        ("reasoning_effort", json!("low")),
        ("prediction", json!({"type": "content", "content": "x"})),
    ] {
        o[k] = v;
    }
    let r = parse(O, o);
    for t in Protocol::ALL {
        assert_eq!(r.unsupported_for(t), None, "{t}");
    }
    assert_eq!(
        body(&r, A)["metadata"],
        json!({"user_id": "u1"}),
        "user becomes Anthropic metadata.user_id"
    );
    let mut a = ant(
        json!([{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}]),
    );
    a["metadata"] = json!({"user_id": "u2"});
    a["service_tier"] = json!("auto");
    let r = parse(A, a);
    assert_eq!(r.unsupported_for(O), None);
    assert_eq!(body(&r, O)["user"], "u2");
}

#[test]
fn anthropic_thinking_towards_gemini_is_a_thinking_budget() {
    let mut a = ant(json!([{"role": "user", "content": "x"}]));
    a["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
    assert_eq!(
        conv(A, a, G)["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 2048})
    );
}

#[test]
fn anthropic_thinking_history_blocks_are_dropped_for_other_targets() {
    let a = ant(json!([
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "y"}]},
        {"role": "user", "content": "z"}
    ]));
    assert_eq!(
        conv(A, a, O)["messages"][1],
        json!({"role": "assistant", "content": "y"})
    );
}

// --- stream flags, model, passthrough -------------------------------------------------------

#[test]
fn stream_flag_per_target() {
    let mut o = oai(json!([{"role": "user", "content": "x"}]));
    o["stream"] = json!(true);
    let r = parse(O, o);
    assert!(r.stream());
    assert!(!r.include_usage());
    let a = body(&r, A);
    assert_eq!(a["stream"], true);
    assert_eq!(a["model"], "up-model");
    let g = body(&r, G);
    assert!(
        g.get("stream").is_none() && g.get("model").is_none(),
        "Gemini: model and stream are in the URL"
    );
    let a = ant(json!([{"role": "user", "content": "x"}]));
    let mut a2 = a.clone();
    a2["stream"] = json!(true);
    let o = conv(A, a2, O);
    assert_eq!(o["stream"], true);
    assert_eq!(
        o["stream_options"],
        json!({"include_usage": true}),
        "usage always known"
    );
    assert!(conv(A, a, O).get("stream_options").is_none());
    let gr = ChatRequest::parse(
        G,
        gem(json!([{"role": "user", "parts": [{"text": "x"}]}]))
            .to_string()
            .as_bytes(),
        "gemini-2.5-flash",
        true,
    )
    .unwrap();
    assert!(gr.stream());
    assert_eq!(gr.model(), "gemini-2.5-flash");
    assert_eq!(body(&gr, O)["stream"], true);
}

#[test]
fn model_and_stream_come_from_the_body_for_openai_and_anthropic() {
    let mut o = oai(json!([{"role": "user", "content": "x"}]));
    o["stream"] = json!(true);
    o["stream_options"] = json!({"include_usage": true});
    let r = ChatRequest::parse(O, o.to_string().as_bytes(), "fallback", false).unwrap();
    assert_eq!(
        (r.model(), r.stream(), r.include_usage(), r.protocol()),
        ("gpt-x", true, true, O)
    );
    let no_model = json!({"messages": [{"role": "user", "content": "x"}]});
    assert_eq!(
        ChatRequest::parse(O, no_model.to_string().as_bytes(), "fallback", true)
            .unwrap()
            .model(),
        "fallback"
    );
    let r = ChatRequest::parse(A, ant(json!([])).to_string().as_bytes(), "fallback", true).unwrap();
    assert_eq!((r.model(), r.stream()), ("claude-x", true));
}

#[test]
fn same_protocol_body_keeps_everything_and_swaps_the_model() {
    let mut o = oai(json!([{"role": "user", "content": "x"}]));
    o["stream"] = json!(true);
    o["some_vendor_field"] = json!(1);
    let b = body(&parse(O, o), O);
    assert_eq!(b["model"], "up-model");
    assert_eq!(b["some_vendor_field"], 1);
    assert_eq!(b["stream_options"]["include_usage"], true);
    let mut a = ant(json!([{"role": "user", "content": "x"}]));
    a.as_object_mut().unwrap().remove("max_tokens");
    let b = body(&parse(A, a), A);
    assert_eq!(
        (b["model"].as_str(), b["max_tokens"].as_u64()),
        (Some("up-model"), Some(1024))
    );
    let g = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
    assert_eq!(body(&parse(G, g.clone()), G), g);
}

#[test]
fn round_trip_openai_anthropic_openai_keeps_messages_tools_and_ids() {
    let original = openai_tool_history();
    let a = conv(O, original.clone(), A);
    let back = body(
        &ChatRequest::parse(A, a.to_string().as_bytes(), "", false).unwrap(),
        O,
    );
    let want_msgs = json!([
        {"role": "user", "content": "weather in Paris and Rome?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_p", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "call_r", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_p", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_r", "content": "rain"},
        {"role": "user", "content": "thanks"}
    ]);
    assert_eq!(back["messages"], want_msgs);
    assert_eq!(back["tools"], original["tools"]);
}

#[test]
fn round_trip_openai_gemini_openai_keeps_messages_tools_and_ids() {
    let original = openai_tool_history();
    let g = conv(O, original.clone(), G);
    let back = body(
        &ChatRequest::parse(G, g.to_string().as_bytes(), "m", false).unwrap(),
        O,
    );
    assert_eq!(back["messages"][1]["tool_calls"][1]["id"], "call_r");
    assert_eq!(
        back["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_r", "content": "rain"})
    );
    assert_eq!(back["tools"], original["tools"]);
}

// --- count tokens ---------------------------------------------------------------------------

#[test]
fn anthropic_count_tokens_body_parses_and_renders_for_gemini() {
    let b = json!({"model": "claude-x", "system": "s", "messages": [{"role": "user", "content": "hello"}]});
    let r = parse(A, b);
    let g: Value =
        serde_json::from_slice(&r.to_count_tokens_body(G, "gemini-2.5-flash").unwrap()).unwrap();
    assert_eq!(
        g["generateContentRequest"]["model"],
        "models/gemini-2.5-flash"
    );
    assert_eq!(
        g["generateContentRequest"]["contents"],
        json!([{"role": "user", "parts": [{"text": "hello"}]}])
    );
    assert_eq!(
        g["generateContentRequest"]["systemInstruction"]["parts"][0]["text"],
        "s"
    );
    let same: Value =
        serde_json::from_slice(&r.to_count_tokens_body(A, "claude-y").unwrap()).unwrap();
    assert_eq!(same["model"], "claude-y");
    assert!(same.get("max_tokens").is_none());
    assert!(matches!(
        r.to_count_tokens_body(O, "x"),
        Err(TranslateError::Unsupported(_))
    ));
}

#[test]
fn gemini_count_tokens_bodies_parse_in_both_forms() {
    let bare = json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]});
    let wrapped = json!({"generateContentRequest": {"model": "models/gemini-x", "contents": [{"role": "user", "parts": [{"text": "hello"}]}]}});
    for b in [bare.clone(), wrapped.clone()] {
        let r = ChatRequest::parse(G, b.to_string().as_bytes(), "", false).unwrap();
        let a: Value =
            serde_json::from_slice(&r.to_count_tokens_body(A, "claude-x").unwrap()).unwrap();
        assert_eq!(
            a,
            json!({"model": "claude-x", "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]})
        );
    }
    let r = ChatRequest::parse(G, wrapped.to_string().as_bytes(), "", false).unwrap();
    assert_eq!(r.model(), "gemini-x");
    let same: Value =
        serde_json::from_slice(&r.to_count_tokens_body(G, "gemini-y").unwrap()).unwrap();
    assert_eq!(same["generateContentRequest"]["model"], "models/gemini-y");
    let r = ChatRequest::parse(G, bare.to_string().as_bytes(), "", false).unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&r.to_count_tokens_body(G, "g").unwrap()).unwrap(),
        bare
    );
}

#[test]
fn count_tokens_ignores_generation_only_features() {
    let mut o = oai(json!([{"role": "user", "content": "x"}]));
    o["response_format"] = json!({"type": "json_object"});
    let r = parse(O, o);
    assert!(r.to_body(A, "m", 1).is_err());
    assert!(r.to_count_tokens_body(A, "m").is_ok());
}

#[test]
fn count_tokens_answers_per_protocol() {
    assert_eq!(count_tokens_response(A, 12), r#"{"input_tokens":12}"#);
    assert_eq!(count_tokens_response(G, 12), r#"{"totalTokens":12}"#);
    assert_eq!(
        parse_count_tokens_response(A, br#"{"input_tokens":7}"#),
        Some(7)
    );
    assert_eq!(
        parse_count_tokens_response(G, br#"{"totalTokens":8,"promptTokensDetails":[]}"#),
        Some(8)
    );
    assert_eq!(
        parse_count_tokens_response(O, count_tokens_response(O, 9).as_bytes()),
        Some(9)
    );
    assert_eq!(parse_count_tokens_response(G, b"nope"), None);
}

#[test]
fn estimate_counts_all_text_and_tool_schemas() {
    let b = oai(
        json!([{"role": "system", "content": "12345678"}, {"role": "user", "content": "abcd"}]),
    );
    assert_eq!(parse(O, b.clone()).estimate_input_tokens(), 3);
    let mut t = b;
    t["tools"] = json!([weather_tool_openai()]);
    assert!(parse(O, t).estimate_input_tokens() > 10);
    let img = oai(
        json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]}]),
    );
    assert_eq!(parse(O, img).estimate_input_tokens(), MEDIA_TOKEN_ESTIMATE);
}

#[test]
fn the_estimate_is_a_quarter_of_every_character_plus_each_media_part() {
    let mut b = oai(
        json!([{"role": "system", "content": "12345678"}, {"role": "user", "content": "abcd"}]),
    );
    b["tools"] = json!([weather_tool_openai()]);
    let schema = weather_tool_openai()["function"]["parameters"]
        .to_string()
        .len();
    let chars = 8 + 4 + "get_weather".len() + "Weather for a city".len() + schema;
    assert_eq!(
        parse(O, b).estimate_input_tokens(),
        (chars as u64).div_ceil(4)
    );
    // A call counts its name and arguments, a result its content.
    let calls = oai(json!([
        {"role": "user", "content": "abcd"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ff", "arguments": "{\"a\":12}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "xyzw"},
    ]));
    assert_eq!(
        parse(O, calls).estimate_input_tokens(),
        (4 + 2 + 8 + 4u64).div_ceil(4)
    );
}

#[test]
fn the_requests_own_facts_are_read_back() {
    let chat = ChatRequest::parse(O, br#"{"model":"m","messages":[]}"#, "", false).unwrap();
    assert!(!chat.stream() && !chat.is_responses() && !chat.asks_to_store());
    let streamed = ChatRequest::parse(
        O,
        br#"{"model":"m","messages":[],"stream":true}"#,
        "",
        false,
    )
    .unwrap();
    assert!(streamed.stream());
    let stored = |body: &str| {
        let r = ChatRequest::parse_responses(body.as_bytes(), "", false).unwrap();
        assert!(r.is_responses());
        r.asks_to_store()
    };
    assert!(
        stored(r#"{"model":"m","input":"hi"}"#),
        "stored unless told not to"
    );
    assert!(stored(r#"{"model":"m","input":"hi","store":true}"#));
    assert!(!stored(r#"{"model":"m","input":"hi","store":false}"#));
}

#[test]
fn a_streamed_second_gemini_candidate_is_named_as_gemini_says_it() {
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"candidateCount": 2}});
    let r = ChatRequest::parse(G, body.to_string().as_bytes(), "m", true).unwrap();
    assert_eq!(
        r.unsupported_for(O).as_deref(),
        Some("candidateCount > 1 with streaming")
    );
}

#[test]
fn a_streamed_responses_request_gets_no_chat_stream_options() {
    let r = ChatRequest::parse_responses(br#"{"model":"m","input":"hi","stream":true}"#, "", false)
        .unwrap();
    let sent = body(&r, O);
    assert_eq!(sent["model"], "up-model");
    assert!(sent.get("stream_options").is_none(), "{sent}");
}

#[test]
fn one_streamed_choice_is_no_second_choice() {
    let body = json!({"model": "m", "n": 1, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = ChatRequest::parse(O, body.to_string().as_bytes(), "m", true).unwrap();
    assert_eq!(r.unsupported_for(A), None);
}

#[test]
fn the_clients_own_stream_options_are_kept_beside_include_usage() {
    let request = json!({"model": "m", "stream": true, "stream_options": {"include_obfuscation": false},
        "messages": [{"role": "user", "content": "hi"}]});
    let r = ChatRequest::parse(O, request.to_string().as_bytes(), "m", true).unwrap();
    assert_eq!(
        body(&r, O)["stream_options"],
        json!({"include_obfuscation": false, "include_usage": true})
    );
}

#[test]
fn a_feature_kept_to_the_clients_protocol_blocks_every_other() {
    let mut r = parse(
        A,
        json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
    );
    r.keep_to_own_protocol("only here");
    assert_eq!(r.unsupported_for(O).as_deref(), Some("only here"));
    assert_eq!(r.unsupported_for(G).as_deref(), Some("only here"));
    assert_eq!(r.unsupported_for(A), None);
}

#[test]
fn a_feature_blocked_twice_is_blocked_for_both_sets_of_targets() {
    let mut ir = Ir::default();
    ir.block("x", &[O], true);
    ir.block("x", &[A], false);
    assert_eq!(ir.features.len(), 1);
    let blocked = ir.features[0].blocked;
    assert!(blocked[O.idx()] && blocked[A.idx()] && !blocked[G.idx()]);
}

// --- malformed input ------------------------------------------------------------------------

#[test]
fn malformed_requests_are_malformed_never_a_panic() {
    let garbage: [&[u8]; 8] = [
        b"",
        b"{",
        b"null",
        b"[]",
        b"\xff\xfe",
        b"{\"messages\":3}",
        b"{\"contents\":{}}",
        b"{\"messages\":[{\"role\":\"wizard\"}]}",
    ];
    for p in Protocol::ALL {
        for g in garbage {
            match ChatRequest::parse(p, g, "m", false) {
                Err(TranslateError::Malformed(_)) => {}
                other => panic!("{p} {:?}: {other:?}", String::from_utf8_lossy(g)),
            }
        }
    }
}

#[test]
fn truncated_requests_never_panic() {
    let bodies = [
        (O, openai_tool_history()),
        (
            A,
            ant(
                json!([{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}]}]),
            ),
        ),
        (
            G,
            gem(
                json!([{"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]}, {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]),
            ),
        ),
    ];
    for (p, b) in bodies {
        let bytes = b.to_string().into_bytes();
        for cut in 0..bytes.len() {
            if let Ok(r) = ChatRequest::parse(p, &bytes[..cut], "m", false) {
                for t in Protocol::ALL {
                    let _ = r.to_body(t, "m", 1);
                }
            }
        }
    }
}

#[test]
fn wrong_shapes_inside_valid_json_are_malformed() {
    let cases = [
        (O, json!({"messages": [{"role": "user", "content": 5}]})),
        (
            O,
            json!({"messages": [{"role": "user", "content": [{"text": "no type"}]}]}),
        ),
        (
            O,
            json!({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}),
        ),
        (O, json!({"messages": [{"role": "tool", "content": "x"}]})),
        (
            O,
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,notbase64"}}]}]}),
        ),
        (
            A,
            json!({"messages": [{"role": "user", "content": [{"type": "tool_use", "name": "f"}]}]}),
        ),
        (A, json!({"system": 3, "messages": []})),
        (G, json!({"contents": [{"role": "user", "parts": [5]}]})),
        (
            G,
            json!({"contents": [{"role": "model", "parts": [{"functionCall": {"args": {}}}]}]}),
        ),
        (G, json!({"generateContentRequest": 1})),
    ];
    for (p, b) in cases {
        assert!(
            matches!(
                ChatRequest::parse(p, b.to_string().as_bytes(), "m", false),
                Err(TranslateError::Malformed(_))
            ),
            "{p}: {b}"
        );
    }
}

// --- rules pinned one by one (each mapping rule fails a test when it breaks) ------------------

fn blocked(p: Protocol, b: Value, t: Protocol) -> Option<String> {
    parse(p, b).unsupported_for(t)
}

fn malformed_message(p: Protocol, b: Value) -> String {
    match ChatRequest::parse(p, b.to_string().as_bytes(), "m", false) {
        Err(TranslateError::Malformed(m)) => m,
        other => panic!("{p} {b}: {other:?}"),
    }
}

#[test]
fn gemini_snake_case_fields_are_read_like_camel_case() {
    let b = json!({
        "system_instruction": {"parts": [{"text": "sys"}]},
        "contents": [
            {"role": "user", "parts": [
                {"inline_data": {"mime_type": "image/png", "data": "AAAA"}},
                {"file_data": {"mime_type": "image/jpeg", "file_uri": "https://e.com/a"}},
            ]},
            {"role": "model", "parts": [{"function_call": {"id": "c1", "name": "f", "args": {"x": 1}}}]},
            {"role": "function", "parts": [{"function_response": {"id": "c1", "name": "f", "response": {"output": "ok"}}}]},
        ],
        "tools": [{"function_declarations": [{"name": "f"}]}],
    });
    let o = conv(G, b, O);
    assert_eq!(
        o["messages"][0],
        json!({"role": "system", "content": "sys"})
    );
    assert_eq!(
        o["messages"][1]["content"],
        json!([
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "image_url", "image_url": {"url": "https://e.com/a"}},
        ])
    );
    assert_eq!(o["messages"][2]["tool_calls"][0]["id"], "c1");
    assert_eq!(
        o["messages"][2]["tool_calls"][0]["function"]["arguments"],
        "{\"x\":1}"
    );
    // A `function` role is the user's.
    assert_eq!(
        o["messages"][3],
        json!({"role": "tool", "tool_call_id": "c1", "content": "ok"})
    );
    assert_eq!(o["tools"][0]["function"]["name"], "f");
}

#[test]
fn gemini_media_without_a_mime_type() {
    // Inline bytes without a type are an unknown file.
    let b = gem(json!([{"role": "user", "parts": [{"inlineData": {"data": "AAAA"}}]}]));
    assert_eq!(
        blocked(G, b, O).as_deref(),
        Some("file input (application/octet-stream)")
    );
    // A file URI's type is guessed from its extension; without one it is a JPEG image.
    let b = gem(
        json!([{"role": "user", "parts": [{"fileData": {"fileUri": "https://e.com/doc.pdf"}}]}]),
    );
    assert_eq!(
        blocked(G, b.clone(), O).as_deref(),
        Some("document (PDF) input by URL")
    );
    assert_eq!(
        conv(G, b, A)["messages"][0]["content"][0],
        json!({"type": "document", "source": {"type": "url", "url": "https://e.com/doc.pdf"}})
    );
    let b =
        gem(json!([{"role": "user", "parts": [{"fileData": {"fileUri": "https://e.com/pic"}}]}]));
    assert_eq!(blocked(G, b.clone(), O), None);
    assert_eq!(conv(G, b, A)["messages"][0]["content"][0]["type"], "image");
}

#[test]
fn gemini_parts_that_carry_nothing_or_an_unknown_kind() {
    // Thoughts are dropped; part metadata alone is no content and blocks nothing.
    let b = gem(json!([{"role": "user", "parts": [
        {"text": "hidden", "thought": true},
        {"thoughtSignature": "sig"},
        {"videoMetadata": {"fps": 1}},
        {"partMetadata": {}},
        {"text": "seen", "thought": false},
    ]}]));
    assert_eq!(blocked(G, b.clone(), O), None);
    assert_eq!(
        conv(G, b, O)["messages"],
        json!([{"role": "user", "content": "seen"}])
    );
    let b = gem(json!([{"role": "user", "parts": [{"text": "x"}, {"toolCall": {}}]}]));
    assert_eq!(
        blocked(G, b.clone(), A).as_deref(),
        Some("part type toolCall")
    );
    assert_eq!(blocked(G, b, O).as_deref(), Some("part type toolCall"));
    let b = gem(json!([{"role": "model", "parts": [{"codeExecutionResult": {"output": "1"}}]}]));
    assert_eq!(blocked(G, b, O).as_deref(), Some("code execution parts"));
}

#[test]
fn gemini_function_responses_find_their_calls() {
    let b = gem(json!([
        {"role": "model", "parts": [
            {"functionCall": {"id": "a", "name": "f", "args": {}}},
            {"functionCall": {"name": "f", "args": {}}},
        ]},
        {"role": "user", "parts": [
            // Answered by id: the call is no longer pending...
            {"functionResponse": {"id": "a", "name": "f", "response": {"result": "one"}}},
            // ...so an id-less response of the same name answers the second call.
            {"functionResponse": {"name": "f", "response": {"content": "two"}}},
            // Nothing pending: a stable id of its own.
            {"functionResponse": {"name": "f", "response": {"output": "three"}}},
        ]},
    ]));
    let o = conv(G, b, O);
    let second = crate::util::synth_call_id(&["gemini-history", "0", "1", "f"]);
    let orphan = crate::util::synth_call_id(&["gemini-orphan", "1", "2", "f"]);
    assert_eq!(o["messages"][0]["tool_calls"][1]["id"], json!(second));
    assert_eq!(
        o["messages"][1],
        json!({"role": "tool", "tool_call_id": "a", "content": "one"})
    );
    assert_eq!(
        o["messages"][2],
        json!({"role": "tool", "tool_call_id": second, "content": "two"})
    );
    assert_eq!(
        o["messages"][3],
        json!({"role": "tool", "tool_call_id": orphan, "content": "three"})
    );
}

#[test]
fn gemini_function_response_objects_become_text() {
    let text = |response: Value| {
        let b = gem(json!([
            {"role": "model", "parts": [{"functionCall": {"id": "a", "name": "f", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"id": "a", "name": "f", "response": response}}]},
        ]));
        let a = conv(G, b, A);
        let r = a["messages"][1]["content"][0].clone();
        (r["content"].clone(), r.get("is_error").cloned())
    };
    // One text field is the text; anything else is the object's JSON.
    assert_eq!(text(json!({"output": "o"})).0, "o");
    assert_eq!(text(json!({"result": "r"})).0, "r");
    assert_eq!(text(json!({"content": "c"})).0, "c");
    assert_eq!(
        text(json!({"output": "o", "extra": 1})).0,
        "{\"extra\":1,\"output\":\"o\"}"
    );
    assert_eq!(text(json!({"output": 5})).0, "{\"output\":5}");
    // A lone `error` is an error result.
    let (content, is_error) = text(json!({"error": {"code": 1}}));
    assert_eq!(content, "{\"code\":1}");
    assert_eq!(is_error, Some(json!(true)));
    assert_ne!(text(json!({"output": "o"})).1, Some(json!(true)));
}

#[test]
fn gemini_function_calling_modes() {
    let with = |fcc: Value| {
        let mut b = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
        b["tools"] =
            json!([{"functionDeclarations": [{"name": "f"}, {"name": "g"}, {"name": "h"}]}]);
        b["toolConfig"] = json!({"functionCallingConfig": fcc});
        conv(G, b, O)
    };
    for mode in ["AUTO", "VALIDATED", "MODE_UNSPECIFIED"] {
        assert_eq!(with(json!({"mode": mode}))["tool_choice"], "auto", "{mode}");
    }
    assert_eq!(with(json!({}))["tool_choice"], "auto");
    assert_eq!(with(json!({"mode": "NONE"}))["tool_choice"], "none");
    assert_eq!(with(json!({"mode": "ANY"}))["tool_choice"], "required");
    let two = with(json!({"mode": "ANY", "allowedFunctionNames": ["f", "h"]}));
    assert_eq!(two["tool_choice"], "required");
    let names: Vec<&str> = two["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["f", "h"]);
    let one = with(json!({"mode": "ANY", "allowedFunctionNames": ["g"]}));
    assert_eq!(
        one["tool_choice"],
        json!({"type": "function", "function": {"name": "g"}})
    );
    let mut b = gem(json!([]));
    b["toolConfig"] = json!({"functionCallingConfig": {"mode": "SOMETIMES"}});
    assert_eq!(
        malformed_message(G, b),
        "functionCallingConfig.mode `SOMETIMES`"
    );
}

#[test]
fn gemini_generation_config_rules() {
    let with = |g: Value| {
        let mut b = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
        b["generationConfig"] = g;
        b
    };
    let o = conv(
        G,
        with(
            json!({"seed": 7, "candidateCount": 1, "presencePenalty": 0.0, "frequencyPenalty": 0.5}),
        ),
        O,
    );
    assert_eq!(o["seed"], 7);
    assert_eq!(o.get("n"), None);
    assert_eq!(o.get("presence_penalty"), None);
    assert_eq!(o["frequency_penalty"], 0.5);
    assert_eq!(
        blocked(G, with(json!({"frequencyPenalty": 0.5})), A).as_deref(),
        Some("frequencyPenalty")
    );
    assert_eq!(
        blocked(G, with(json!({"presencePenalty": 0.5})), A).as_deref(),
        Some("presencePenalty")
    );
    assert_eq!(blocked(G, with(json!({"presencePenalty": 0.0})), A), None);
    assert_eq!(
        blocked(G, with(json!({"topK": 3})), O).as_deref(),
        Some("top_k")
    );
    assert_eq!(conv(G, with(json!({"topK": 3})), A)["top_k"], 3);
    assert_eq!(
        blocked(G, with(json!({"candidateCount": 2})), O),
        None,
        "OpenAI can give several choices"
    );
    assert_eq!(conv(G, with(json!({"candidateCount": 2})), O)["n"], 2);
    // Plain text is the default; no response format.
    let o = conv(G, with(json!({"responseMimeType": "text/plain"})), O);
    assert_eq!(o.get("response_format"), None);
    assert_eq!(
        blocked(G, with(json!({"responseMimeType": "text/plain"})), A),
        None
    );
    // Outputs only Gemini gives.
    for (g, feature) in [
        (json!({"responseLogprobs": true}), "logprobs"),
        (json!({"logprobs": 3}), "logprobs"),
        (json!({"speechConfig": {}}), "speechConfig"),
    ] {
        assert_eq!(
            blocked(G, with(g.clone()), O).as_deref(),
            Some(feature),
            "{g}"
        );
        assert_eq!(
            blocked(G, with(g.clone()), A).as_deref(),
            Some(feature),
            "{g}"
        );
    }
    for g in [
        json!({"responseLogprobs": false}),
        json!({"responseModalities": ["TEXT"]}),
        json!({"thinkingConfig": {"includeThoughts": false}}),
    ] {
        assert_eq!(blocked(G, with(g.clone()), O), None, "{g}");
    }
}

#[test]
fn gemini_json_schema_spellings() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let with = |g: Value| {
        let mut b = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
        b["generationConfig"] = g;
        conv(G, b, O)["response_format"].clone()
    };
    let expected =
        json!({"type": "json_schema", "json_schema": {"name": "response", "schema": schema}});
    assert_eq!(
        with(json!({"responseMimeType": "application/json", "_responseJsonSchema": schema})),
        expected
    );
    // Gemini's own schema dialect is read as JSON Schema.
    assert_eq!(
        with(json!({"responseMimeType": "application/json",
            "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "STRING"}}}})),
        expected
    );
    // A schema without the JSON MIME type is no response format.
    assert_eq!(with(json!({"responseJsonSchema": schema})), Value::Null);
}

#[test]
fn gemini_malformed_requests_name_the_field() {
    let part = |p: Value| gem(json!([{"role": "user", "parts": [p]}]));
    for (b, message) in [
        (json!({}), "`contents` must be an array"),
        (json!({"contents": {}}), "`contents` must be an array"),
        (
            gem(json!([{"role": "user", "parts": {}}])),
            "contents[0].parts must be an array",
        ),
        (
            gem(json!([{"role": "system"}])),
            "contents[0].role `system`",
        ),
        (
            part(json!({"inlineData": {"mimeType": "image/png"}})),
            "inlineData.data missing",
        ),
        (
            part(json!({"fileData": {"mimeType": "image/png"}})),
            "fileData.fileUri missing",
        ),
        (
            part(json!({"functionCall": {"args": {}}})),
            "functionCall.name missing",
        ),
        (
            part(json!({"functionResponse": {"response": {}}})),
            "functionResponse.name missing",
        ),
        (part(json!("text")), "part is not an object"),
        (
            json!({"contents": [], "tools": [3]}),
            "tools[] is not an object",
        ),
        (
            json!({"contents": [], "tools": [{"functionDeclarations": [{}]}]}),
            "functionDeclarations[].name missing",
        ),
        (
            json!({"contents": [], "systemInstruction": 3}),
            "systemInstruction must be a Content object",
        ),
    ] {
        assert_eq!(malformed_message(G, b.clone()), message, "{b}");
    }
    // Parts may be left out or null.
    let b = gem(json!([{"role": "user"}, {"role": "user", "parts": null}]));
    assert!(ChatRequest::parse(G, b.to_string().as_bytes(), "m", false).is_ok());
}

#[test]
fn openai_message_rules() {
    // A refusal stands for the content only when there is none.
    let o = |m: Value| conv(O, oai(json!([{"role": "user", "content": "q"}, m])), A);
    assert_eq!(
        o(json!({"role": "assistant", "refusal": "no"}))["messages"][1]["content"],
        json!([{"type": "text", "text": "no"}])
    );
    assert_eq!(
        o(json!({"role": "assistant", "content": "yes", "refusal": "no"}))["messages"][1]
            ["content"],
        json!([{"type": "text", "text": "yes"}])
    );
    for (m, feature) in [
        (
            json!({"role": "assistant", "content": "x", "function_call": {"name": "f", "arguments": "{}"}}),
            "legacy function_call",
        ),
        (
            json!({"role": "assistant", "audio": {"id": "audio_1"}}),
            "assistant audio in history",
        ),
        (
            json!({"role": "function", "name": "f", "content": "x"}),
            "legacy function messages",
        ),
    ] {
        let b = oai(json!([{"role": "user", "content": "q"}, m, {"role": "user", "content": "r"}]));
        assert_eq!(blocked(O, b.clone(), A).as_deref(), Some(feature), "{m}");
        assert_eq!(blocked(O, b, G).as_deref(), Some(feature), "{m}");
    }
    let b = oai(
        json!([{"role": "user", "content": "q"}, {"role": "assistant", "function_call": null, "audio": null, "content": "a"}]),
    );
    assert_eq!(blocked(O, b, A), None);
    assert_eq!(
        malformed_message(O, oai(json!([{"role": "wizard", "content": "x"}]))),
        "unknown role `wizard`"
    );
    assert_eq!(
        malformed_message(O, oai(json!([{"content": "x"}]))),
        "messages[0].role missing"
    );
}

#[test]
fn openai_request_field_rules() {
    let u = || oai(json!([{"role": "user", "content": "x"}]));
    let with = |k: &str, v: Value| {
        let mut b = u();
        b[k] = v;
        b
    };
    // max_completion_tokens wins over max_tokens.
    let mut b = with("max_completion_tokens", json!(10));
    b["max_tokens"] = json!(20);
    assert_eq!(conv(O, b, A)["max_tokens"], 10);
    assert_eq!(conv(O, with("max_tokens", json!(20)), A)["max_tokens"], 20);
    assert_eq!(conv(O, with("top_k", json!(4)), A)["top_k"], 4);
    assert_eq!(
        conv(O, with("stop", json!("END")), A)["stop_sequences"],
        json!(["END"])
    );
    assert_eq!(
        conv(O, with("user", json!("u1")), A)["metadata"],
        json!({"user_id": "u1"})
    );
    assert_eq!(
        conv(O, with("presence_penalty", json!(0)), G)["generationConfig"],
        Value::Null
    );
    assert_eq!(
        blocked(O, with("presence_penalty", json!(0.2)), A).as_deref(),
        Some("presence_penalty")
    );
    assert_eq!(
        blocked(O, with("frequency_penalty", json!(0.2)), A).as_deref(),
        Some("frequency_penalty")
    );
    assert_eq!(blocked(O, with("frequency_penalty", json!(0)), A), None);
    assert_eq!(
        blocked(O, with("top_logprobs", json!(2)), G).as_deref(),
        Some("logprobs")
    );
    assert_eq!(blocked(O, with("logprobs", json!(false)), G), None);
    assert_eq!(blocked(O, with("logit_bias", json!({})), G), None);
    assert_eq!(blocked(O, with("modalities", json!(["text"])), G), None);
    assert_eq!(blocked(O, with("audio", Value::Null), G), None);
    assert_eq!(blocked(O, with("n", json!(1)), A), None);
    // tool_choice: a mode string, a named function, or another type (blocked).
    let mut b = with("tools", json!([weather_tool_openai()]));
    b["tool_choice"] = json!({"type": "allowed_tools", "allowed_tools": {}});
    assert_eq!(
        blocked(O, b.clone(), A).as_deref(),
        Some("tool_choice type allowed_tools")
    );
    b["tool_choice"] = json!("sometimes");
    assert_eq!(
        malformed_message(O, b.clone()),
        "unknown tool_choice `sometimes`"
    );
    b["tool_choice"] = json!({"type": "function", "function": {}});
    assert_eq!(malformed_message(O, b), "tool_choice.function.name missing");
    // response_format
    assert_eq!(
        conv(O, with("response_format", json!({"type": "text"})), G)["generationConfig"],
        Value::Null
    );
    assert_eq!(
        blocked(O, with("response_format", json!({"type": "grammar"})), G).as_deref(),
        Some("response_format grammar")
    );
    assert_eq!(
        blocked(
            O,
            with(
                "response_format",
                json!({"type": "json_schema", "json_schema": {"schema": {}}})
            ),
            A
        )
        .as_deref(),
        Some("response_format json_schema")
    );
    assert_eq!(
        blocked(
            O,
            with("response_format", json!({"type": "json_object"})),
            A
        )
        .as_deref(),
        Some("response_format json_object")
    );
    assert_eq!(
        malformed_message(O, with("response_format", json!({"type": "json_schema"}))),
        "response_format.json_schema missing"
    );
    let rf = parse(
        O,
        with(
            "response_format",
            json!({"type": "json_schema", "json_schema": {"strict": true}}),
        ),
    )
    .ir
    .response_format;
    assert_eq!(
        rf,
        Some(ResponseFormat::JsonSchema {
            name: "response".into(),
            schema: json!({}),
            strict: Some(true)
        })
    );
}

#[test]
fn anthropic_request_field_rules() {
    let u = || ant(json!([{"role": "user", "content": "x"}]));
    let with = |k: &str, v: Value| {
        let mut b = u();
        b[k] = v;
        b
    };
    assert_eq!(
        malformed_message(A, with("system", json!([{"type": "image"}]))),
        "system block type image"
    );
    assert_eq!(
        malformed_message(A, ant(json!([{"role": "system", "content": "x"}]))),
        "messages[0].role `system`"
    );
    assert_eq!(
        malformed_message(A, ant(json!([{"content": "x"}]))),
        "messages[0].role `missing`"
    );
    let tools =
        json!([{"name": "f", "input_schema": {"type": "object"}}, {"type": "custom", "name": "g"}]);
    let tc = |choice: Value| {
        let mut b = with("tools", tools.clone());
        b["tool_choice"] = choice;
        b
    };
    assert_eq!(
        conv(A, tc(json!({"type": "none"})), O)["tool_choice"],
        "none"
    );
    assert_eq!(
        conv(A, tc(json!({"type": "any"})), O)["tool_choice"],
        "required"
    );
    assert_eq!(
        conv(A, tc(json!({"type": "auto"})), O)["tool_choice"],
        "auto"
    );
    assert_eq!(
        conv(A, tc(json!({"type": "tool", "name": "g"})), O)["tool_choice"],
        json!({"type": "function", "function": {"name": "g"}})
    );
    assert_eq!(
        conv(A, tc(json!({"type": "auto"})), O)["tools"][1]["function"]["name"],
        "g"
    );
    let o = conv(
        A,
        tc(json!({"type": "auto", "disable_parallel_tool_use": true})),
        O,
    );
    assert_eq!(o["parallel_tool_calls"], false);
    let o = conv(
        A,
        tc(json!({"type": "auto", "disable_parallel_tool_use": false})),
        O,
    );
    assert_eq!(o.get("parallel_tool_calls"), None);
    assert_eq!(
        malformed_message(A, tc(json!({"type": "tool"}))),
        "tool_choice.name missing"
    );
    assert_eq!(
        malformed_message(A, tc(json!({"type": "maybe"}))),
        "tool_choice type maybe"
    );
    // thinking: disabled is nothing; a type other than enabled is adaptive (-1).
    let g = conv(A, with("thinking", json!({"type": "disabled"})), G);
    assert_eq!(
        g.get("generationConfig")
            .and_then(|c| c.get("thinkingConfig")),
        None
    );
    assert_eq!(
        blocked(A, with("thinking", json!({"type": "disabled"})), O),
        None
    );
    let g = conv(A, with("thinking", json!({"type": "adaptive"})), G);
    assert_eq!(
        g["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": -1})
    );
    assert_eq!(
        blocked(A, with("thinking", json!({"type": "adaptive"})), O).as_deref(),
        Some("thinking")
    );
    assert_eq!(
        conv(A, with("metadata", json!({"user_id": "u7"})), O)["user"],
        "u7"
    );
    assert_eq!(
        blocked(A, with("container", json!("c1")), G).as_deref(),
        Some("container")
    );
    assert_eq!(blocked(A, with("container", Value::Null), G), None);
    // A conversation ending on an assistant tool call is no prefill.
    let b = ant(json!([
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
    ]));
    assert_eq!(blocked(A, b, O), None);
}

#[test]
fn finish_reasons_from_each_protocol() {
    for r in [
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
        "LANGUAGE",
    ] {
        assert_eq!(Finish::from_gemini(r), Finish::ContentFilter, "{r}");
    }
    assert_eq!(Finish::from_gemini("MAX_TOKENS"), Finish::Length);
    assert_eq!(Finish::from_gemini("STOP"), Finish::Stop);
    assert_eq!(Finish::from_gemini("OTHER"), Finish::Stop);
    assert_eq!(Finish::from_anthropic("max_tokens", None), Finish::Length);
    assert_eq!(
        Finish::from_anthropic("model_context_window_exceeded", None),
        Finish::Length
    );
    assert_eq!(Finish::from_anthropic("tool_use", None), Finish::ToolCalls);
    assert_eq!(
        Finish::from_anthropic("refusal", None),
        Finish::ContentFilter
    );
    assert_eq!(
        Finish::from_anthropic("stop_sequence", Some("END")),
        Finish::StopSequence(Some("END".into()))
    );
    assert_eq!(Finish::from_anthropic("pause_turn", None), Finish::Stop);
    assert_eq!(Finish::from_openai("function_call"), Finish::ToolCalls);
    assert_eq!(Finish::from_openai("tool_calls"), Finish::ToolCalls);
    assert_eq!(Finish::from_openai("content_filter"), Finish::ContentFilter);
    assert_eq!(Finish::from_openai("length"), Finish::Length);
    assert_eq!(Finish::from_openai("stop"), Finish::Stop);
    assert_eq!(
        Finish::StopSequence(None).to_anthropic(),
        ("end_turn", None)
    );
    assert_eq!(Finish::StopSequence(Some("x".into())).to_openai(), "stop");
    assert_eq!(Finish::ToolCalls.to_gemini(), "STOP");
    assert_eq!(Finish::ContentFilter.to_gemini(), "SAFETY");
    assert_eq!(Finish::ContentFilter.to_anthropic(), ("refusal", None));
}

#[test]
fn gemini_generation_config_field_by_field() {
    let mut b = oai(json!([{"role": "user", "content": "x"}]));
    for (k, v) in [
        ("max_tokens", json!(64)),
        ("temperature", json!(0.5)),
        ("top_p", json!(0.9)),
        ("top_k", json!(7)),
        ("stop", json!(["END", "STOP"])),
        ("n", json!(3)),
        ("seed", json!(-4)),
        ("presence_penalty", json!(0.25)),
        ("frequency_penalty", json!(-0.5)),
        (
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}),
        ),
    ] {
        b[k] = v;
    }
    assert_eq!(
        conv(O, b, G)["generationConfig"],
        json!({
            "maxOutputTokens": 64, "temperature": 0.5, "topP": 0.9, "topK": 7,
            "stopSequences": ["END", "STOP"], "candidateCount": 3, "seed": -4,
            "presencePenalty": 0.25, "frequencyPenalty": -0.5,
            "responseMimeType": "application/json", "responseJsonSchema": {"type": "object"},
        })
    );
    // One candidate is the default; JSON mode is the MIME type alone; nothing set is no config.
    let mut b = oai(json!([{"role": "user", "content": "x"}]));
    b["n"] = json!(1);
    assert_eq!(conv(O, b.clone(), G).get("generationConfig"), None);
    b["response_format"] = json!({"type": "json_object"});
    assert_eq!(
        conv(O, b, G)["generationConfig"],
        json!({"responseMimeType": "application/json"})
    );
    let mut a = ant(json!([{"role": "user", "content": "x"}]));
    a["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    assert_eq!(
        conv(A, a, G)["generationConfig"],
        json!({"maxOutputTokens": 100, "thinkingConfig": {"thinkingBudget": 1024}})
    );
}

#[test]
fn anthropic_media_block_rules() {
    let user = |block: Value| ant(json!([{"role": "user", "content": [block]}]));
    // A document of content blocks is those blocks.
    let b = user(json!({"type": "document", "source": {"type": "content",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}));
    assert_eq!(
        conv(A, b, O)["messages"][0]["content"],
        json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    );
    // Base64 media is of the kind its media type says, whatever the block's type.
    let b = user(
        json!({"type": "image", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}}),
    );
    assert_eq!(
        conv(A, b, G)["contents"][0]["parts"][0],
        json!({"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}})
    );
    for (block, message) in [
        (json!({"type": "image"}), "block without source"),
        (
            json!({"type": "image", "source": {}}),
            "source.type missing",
        ),
        (
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png"}}),
            "source.data missing",
        ),
        (
            json!({"type": "document", "source": {"type": "url"}}),
            "source.url missing",
        ),
        (json!({"type": "text"}), "text block without text"),
        (json!({"text": "x"}), "content block without type"),
        (
            json!({"type": "tool_use", "id": "t"}),
            "tool_use.name missing",
        ),
        (
            json!({"type": "tool_result"}),
            "tool_result.tool_use_id missing",
        ),
    ] {
        assert_eq!(
            malformed_message(A, user(block.clone())),
            message,
            "{block}"
        );
    }
}

#[test]
fn openai_content_part_rules() {
    let part = |p: Value| {
        let b = oai(json!([{"role": "user", "content": [p]}]));
        conv(O, b, G)["contents"][0]["parts"][0].clone()
    };
    let audio = |a: Value| part(json!({"type": "input_audio", "input_audio": a}));
    assert_eq!(
        audio(json!({"data": "AA", "format": "mp3"})),
        json!({"inlineData": {"mimeType": "audio/mpeg", "data": "AA"}})
    );
    assert_eq!(
        audio(json!({"data": "AA"})),
        json!({"inlineData": {"mimeType": "audio/wav", "data": "AA"}})
    );
    assert_eq!(
        audio(json!({"data": "AA", "format": "flac"})),
        json!({"inlineData": {"mimeType": "audio/flac", "data": "AA"}})
    );
    // File data: a data URL keeps its type; bare base64 is a PDF.
    assert_eq!(
        part(json!({"type": "file", "file": {"file_data": "data:text/plain;base64,aGk="}})),
        json!({"inlineData": {"mimeType": "text/plain", "data": "aGk="}})
    );
    assert_eq!(
        part(json!({"type": "file", "file": {"file_data": "JVBE"}})),
        json!({"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}})
    );
    // An image URL may be given bare; a data URL without a type keeps the part's kind.
    assert_eq!(
        part(json!({"type": "image_url", "image_url": "https://e.com/x.png"})),
        json!({"fileData": {"mimeType": "image/png", "fileUri": "https://e.com/x.png"}})
    );
    assert_eq!(
        part(json!({"type": "input_text", "text": "t"})),
        json!({"text": "t"})
    );
    assert_eq!(
        part(json!({"type": "refusal", "refusal": "no"})),
        json!({"text": "no"})
    );
    let user = |p: Value| oai(json!([{"role": "user", "content": [p]}]));
    for (p, message) in [
        (
            json!({"type": "input_audio"}),
            "input_audio part without input_audio",
        ),
        (
            json!({"type": "input_audio", "input_audio": {}}),
            "input_audio.data missing",
        ),
        (json!({"type": "file"}), "file part without file"),
        (
            json!({"type": "image_url"}),
            "image_url part without image_url",
        ),
        (
            json!({"type": "image_url", "image_url": {}}),
            "image_url.url missing",
        ),
        (json!({"type": "text"}), "text part without text"),
    ] {
        assert_eq!(malformed_message(O, user(p.clone())), message, "{p}");
    }
    assert_eq!(
        blocked(O, user(json!({"type": "video_url", "video_url": "x"})), G).as_deref(),
        Some("content part type video_url")
    );
}

// --- rules pinned by the mutation run of the provider crate -----------------------------------

#[test]
fn anthropic_content_left_out_is_empty_not_malformed() {
    // A tool result without `content` is an empty result; a message without it, no parts.
    let b = ant(json!([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        {"role": "assistant"},
        {"role": "user", "content": "r"}
    ]));
    let o = conv(A, b, O);
    assert_eq!(
        o["messages"][2],
        json!({"role": "tool", "tool_call_id": "toolu_1", "content": ""})
    );
    assert_eq!(
        o["messages"][3],
        json!({"role": "assistant", "content": ""})
    );
}

#[test]
fn empty_text_parts_are_left_out_towards_anthropic() {
    let b = oai(json!([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    ]));
    assert_eq!(
        conv(O, b, A)["messages"][1]["content"],
        json!([{"type": "tool_use", "id": "call_1", "name": "f", "input": {}}])
    );
}

#[test]
fn anthropic_thinking_is_sent_only_for_a_positive_budget() {
    // -1 is an adaptive budget (Gemini's `thinkingBudget`), which Anthropic has no `enabled`
    // form for; 0 is no thinking.
    let mut ir = parse(O, oai(json!([{"role": "user", "content": "x"}]))).ir;
    for (budget, want) in [
        (
            Some(2048),
            json!({"type": "enabled", "budget_tokens": 2048}),
        ),
        (Some(1), json!({"type": "enabled", "budget_tokens": 1})),
        (Some(0), Value::Null),
        (Some(-1), Value::Null),
        (None, Value::Null),
    ] {
        ir.thinking_budget = budget;
        assert_eq!(
            anthropic::emit_request(&ir, "m", false, None)["thinking"],
            want,
            "{budget:?}"
        );
    }
}

#[test]
fn gemini_system_instruction_may_be_null_or_a_bare_string() {
    let mut b = gem(json!([{"role": "user", "parts": [{"text": "hi"}]}]));
    b["systemInstruction"] = Value::Null;
    assert_eq!(conv(G, b.clone(), O)["messages"][0]["role"], "user");
    b["systemInstruction"] = json!("sys");
    assert_eq!(
        conv(G, b, O)["messages"][0],
        json!({"role": "system", "content": "sys"})
    );
}

#[test]
fn gemini_one_candidate_is_no_candidate_count_for_anthropic() {
    let mut b = gem(json!([{"role": "user", "parts": [{"text": "x"}]}]));
    b["generationConfig"] = json!({"candidateCount": 1});
    assert_eq!(blocked(G, b.clone(), A), None);
    b["generationConfig"] = json!({"candidateCount": 2});
    assert_eq!(blocked(G, b, A).as_deref(), Some("candidateCount > 1"));
}

#[test]
fn empty_text_parts_are_left_out_towards_gemini() {
    let b = oai(json!([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    ]));
    assert_eq!(
        conv(O, b, G)["contents"][1],
        json!({"role": "model", "parts": [{"functionCall": {"id": "call_1", "name": "f", "args": {}}}]})
    );
}

#[test]
fn an_empty_object_schema_is_left_out_of_a_gemini_declaration() {
    for schema in [
        json!({"type": "object", "properties": {}}),
        json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false}),
    ] {
        let mut b = oai(json!([{"role": "user", "content": "x"}]));
        b["tools"] =
            json!([{"type": "function", "function": {"name": "now", "parameters": schema}}]);
        assert_eq!(
            conv(O, b, G)["tools"][0]["functionDeclarations"][0],
            json!({"name": "now"}),
            "{schema}"
        );
    }
}

#[test]
fn gemini_audio_to_openai_names_its_format() {
    for (mime, format) in [
        ("audio/mpeg", "mp3"),
        ("audio/mp3", "mp3"),
        ("audio/wav", "wav"),
    ] {
        let b = gem(
            json!([{"role": "user", "parts": [{"inlineData": {"mimeType": mime, "data": "QUJD"}}]}]),
        );
        assert_eq!(
            conv(G, b, O)["messages"][0]["content"],
            json!([{"type": "input_audio", "input_audio": {"data": "QUJD", "format": format}}]),
            "{mime}"
        );
    }
}

#[test]
fn gemini_schema_items_any_of_and_type_lists() {
    use super::schema::to_gemini_schema;
    assert_eq!(
        to_gemini_schema(&json!({"type": "array", "items": {"type": "string"}})),
        Some(json!({"type": "ARRAY", "items": {"type": "STRING"}}))
    );
    assert_eq!(
        to_gemini_schema(&json!({"anyOf": [{"type": "string"}, {"type": "integer"}]})),
        Some(json!({"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}))
    );
    assert_eq!(
        to_gemini_schema(&json!({"type": ["string", "null"]})),
        Some(json!({"type": "STRING", "nullable": true}))
    );
    assert_eq!(
        to_gemini_schema(&json!({"type": ["string"]})),
        Some(json!({"type": "STRING"}))
    );
    // Two types that are not one type and null: Gemini's `Schema` cannot say it.
    assert_eq!(
        to_gemini_schema(&json!({"type": ["string", "integer"]})),
        None
    );
    assert_eq!(
        to_gemini_schema(&json!({"type": ["string", "null", "null"]})),
        None
    );
}

#[test]
fn gemini_schema_items_are_converted_back_too() {
    assert_eq!(
        super::schema::from_gemini_schema(
            &json!({"type": "ARRAY", "items": {"type": "STRING", "nullable": true}})
        ),
        json!({"type": "array", "items": {"type": ["string", "null"]}})
    );
    assert_eq!(
        super::schema::from_gemini_schema(
            &json!({"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]})
        ),
        json!({"anyOf": [{"type": "string"}, {"type": "integer"}]})
    );
}
