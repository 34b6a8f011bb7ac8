//! Request translation: a realistic multi-turn request with tools, a tool call and its result,
//! an image and sampling settings, parsed from each client protocol and rendered for each other
//! target (`parse` alone, then `parse` + `to_body`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use switchyard_provider::{ChatRequest, Protocol};

const SCHEMA: &str = r#"{"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"]}, "days": {"type": "integer"}}, "required": ["city"]}"#;
const LONG: &str = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.";

fn openai() -> String {
    let tools: Vec<String> = (0..4)
        .map(|i| format!(r#"{{"type": "function", "function": {{"name": "tool_{i}", "description": "Tool number {i}", "parameters": {SCHEMA}}}}}"#))
        .collect();
    format!(
        r#"{{"model": "gpt-4o", "max_tokens": 512, "temperature": 0.7, "top_p": 0.9, "stop": ["END"],
        "tools": [{tools}], "tool_choice": "auto", "user": "u-1",
        "messages": [
          {{"role": "system", "content": "You are a helpful assistant. {LONG}"}},
          {{"role": "user", "content": "{LONG}"}},
          {{"role": "assistant", "content": null, "tool_calls": [{{"id": "call_1", "type": "function", "function": {{"name": "tool_0", "arguments": "{{\"city\": \"Paris\"}}"}}}}]}},
          {{"role": "tool", "tool_call_id": "call_1", "content": "{{\"temp\": 21}}"}},
          {{"role": "assistant", "content": "{LONG}"}},
          {{"role": "user", "content": [{{"type": "text", "text": "And this picture? {LONG}"}}, {{"type": "image_url", "image_url": {{"url": "https://example.com/cat.png"}}}}]}}
        ]}}"#,
        tools = tools.join(",")
    )
}

fn anthropic() -> String {
    let tools: Vec<String> = (0..4)
        .map(|i| format!(r#"{{"name": "tool_{i}", "description": "Tool number {i}", "input_schema": {SCHEMA}}}"#))
        .collect();
    format!(
        r#"{{"model": "claude-sonnet-4-5", "max_tokens": 512, "temperature": 0.7, "top_p": 0.9, "stop_sequences": ["END"],
        "system": "You are a helpful assistant. {LONG}",
        "tools": [{tools}], "tool_choice": {{"type": "auto"}}, "metadata": {{"user_id": "u-1"}},
        "messages": [
          {{"role": "user", "content": "{LONG}"}},
          {{"role": "assistant", "content": [{{"type": "tool_use", "id": "toolu_1", "name": "tool_0", "input": {{"city": "Paris"}}}}]}},
          {{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "toolu_1", "content": "{{\"temp\": 21}}"}}]}},
          {{"role": "assistant", "content": "{LONG}"}},
          {{"role": "user", "content": [{{"type": "text", "text": "And this picture? {LONG}"}}, {{"type": "image", "source": {{"type": "url", "url": "https://example.com/cat.png"}}}}]}}
        ]}}"#,
        tools = tools.join(",")
    )
}

fn gemini() -> String {
    let decls: Vec<String> = (0..4)
        .map(|i| format!(r#"{{"name": "tool_{i}", "description": "Tool number {i}", "parametersJsonSchema": {SCHEMA}}}"#))
        .collect();
    format!(
        r#"{{"systemInstruction": {{"parts": [{{"text": "You are a helpful assistant. {LONG}"}}]}},
        "tools": [{{"functionDeclarations": [{decls}]}}],
        "toolConfig": {{"functionCallingConfig": {{"mode": "AUTO"}}}},
        "generationConfig": {{"maxOutputTokens": 512, "temperature": 0.7, "topP": 0.9, "stopSequences": ["END"]}},
        "contents": [
          {{"role": "user", "parts": [{{"text": "{LONG}"}}]}},
          {{"role": "model", "parts": [{{"functionCall": {{"id": "call_1", "name": "tool_0", "args": {{"city": "Paris"}}}}}}]}},
          {{"role": "user", "parts": [{{"functionResponse": {{"id": "call_1", "name": "tool_0", "response": {{"temp": 21}}}}}}]}},
          {{"role": "model", "parts": [{{"text": "{LONG}"}}]}},
          {{"role": "user", "parts": [{{"text": "And this picture? {LONG}"}}, {{"fileData": {{"mimeType": "image/png", "fileUri": "https://example.com/cat.png"}}}}]}}
        ]}}"#,
        decls = decls.join(",")
    )
}

fn responses() -> String {
    let tools: Vec<String> = (0..4)
        .map(|i| format!(r#"{{"type": "function", "name": "tool_{i}", "description": "Tool number {i}", "parameters": {SCHEMA}}}"#))
        .collect();
    format!(
        r#"{{"model": "gpt-4o", "max_output_tokens": 512, "temperature": 0.7, "top_p": 0.9, "store": false,
        "instructions": "You are a helpful assistant. {LONG}",
        "tools": [{tools}], "tool_choice": "auto", "user": "u-1",
        "input": [
          {{"role": "user", "content": "{LONG}"}},
          {{"type": "function_call", "call_id": "call_1", "name": "tool_0", "arguments": "{{\"city\": \"Paris\"}}"}},
          {{"type": "function_call_output", "call_id": "call_1", "output": "{{\"temp\": 21}}"}},
          {{"role": "assistant", "content": "{LONG}"}},
          {{"role": "user", "content": [{{"type": "input_text", "text": "And this picture? {LONG}"}}, {{"type": "input_image", "image_url": "https://example.com/cat.png"}}]}}
        ]}}"#,
        tools = tools.join(",")
    )
}

const ALL: [Protocol; 3] = [Protocol::OpenAi, Protocol::Anthropic, Protocol::Gemini];

fn parse(client: &str, body: &[u8]) -> ChatRequest {
    match client {
        "responses" => ChatRequest::parse_responses(body, "", false).unwrap(),
        "openai" => ChatRequest::parse(Protocol::OpenAi, body, "", false).unwrap(),
        "anthropic" => ChatRequest::parse(Protocol::Anthropic, body, "", false).unwrap(),
        _ => ChatRequest::parse(Protocol::Gemini, body, "gemini-2.5-flash", false).unwrap(),
    }
}

fn requests(c: &mut Criterion) {
    let mut group = c.benchmark_group("request");
    for (client, body) in [
        ("openai", openai()),
        ("anthropic", anthropic()),
        ("gemini", gemini()),
        ("responses", responses()),
    ] {
        let body = body.into_bytes();
        group.bench_function(format!("{client}/parse"), |b| {
            b.iter(|| black_box(parse(client, black_box(&body))))
        });
        let own = parse(client, &body).protocol();
        for target in ALL {
            if target == own && client != "responses" {
                continue;
            }
            // Every target must be able to take the request (no unsupported feature).
            parse(client, &body).to_body(target, "m", 4096).unwrap();
            group.bench_function(format!("{client}/to_{target:?}").to_lowercase(), |b| {
                b.iter(|| {
                    let req = parse(client, black_box(&body));
                    black_box(req.to_body(target, "m", 4096).unwrap())
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, requests);
criterion_main!(benches);
