//! OpenAI-style answers: chat, completions, embeddings, models, responses, images, audio.

use serde_json::{json, Value};

use crate::answer::{estimate_tokens, Answer};
use crate::wire::{
    base64_encode, next_id, now_secs, split_content, split_even, sse_data, sse_event,
};

/// The models listed by `GET /v1/models` unless told otherwise.
pub const DEFAULT_MODELS: &[&str] = &["mock-model", "gpt-4o-mini", "text-embedding-3-small"];
/// Number of floats in each mock embedding (unless the request asks for `dimensions`).
pub const EMBEDDING_DIMENSIONS: usize = 8;
/// The SSE terminator of OpenAI streams.
pub const DONE_EVENT: &str = "data: [DONE]\n\n";

/// The usage block of the legacy completions: the prompt and completion tokens and their sum.
fn usage_openai(prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens
    })
}

/// One `chat.completion.chunk` of stream `id` carrying `choices`.
fn chunk_envelope(id: &str, created: u64, model: &str, choices: Value) -> Value {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_mock",
        "choices": choices
    })
}

/// The usage block of an [`Answer`], with `prompt_tokens_details.cached_tokens`.
fn answer_usage(answer: &Answer) -> Value {
    let prompt = answer.input_tokens();
    let completion = answer.output_tokens();
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": answer.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}
    })
}

/// A non-streaming `chat.completion` saying `answer`: `message.content` (`null` when there are
/// tool calls and no text), `message.tool_calls[{id: "call_…", type: "function", function:
/// {name, arguments}}]`, `finish_reason` `"tool_calls"` or `"stop"`, and a usage block with
/// `prompt_tokens_details.cached_tokens`.
pub fn chat_answer_json(answer: &Answer) -> String {
    let content = if answer.text.is_empty() && !answer.tool_calls.is_empty() {
        Value::Null
    } else {
        json!(answer.text)
    };
    let mut message = json!({"role": "assistant", "content": content, "refusal": null});
    if !answer.tool_calls.is_empty() {
        let calls: Vec<Value> = answer
            .tool_calls
            .iter()
            .map(|call| {
                json!({
                    "id": format!("call_mock_{}", next_id()),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments}
                })
            })
            .collect();
        if let Some(obj) = message.as_object_mut() {
            obj.insert("tool_calls".into(), Value::Array(calls));
        }
    }
    json!({
        "id": format!("chatcmpl-mock-{}", next_id()),
        "object": "chat.completion",
        "created": now_secs(),
        "model": answer.model,
        "system_fingerprint": "fp_mock",
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": answer.stop_word("stop", "tool_calls")
        }],
        "usage": answer_usage(answer)
    })
    .to_string()
}

/// An OpenAI chat stream saying `answer`, the way OpenAI streams it:
/// - the text in `n` content chunks, the first also carrying `role: "assistant"` (when there is
///   no text but tool calls, one role chunk with `content: null` instead);
/// - per tool call `i`: a `tool_calls` delta with `index: i`, the `id`, `type` and
///   `function.name` and empty `arguments`, then the arguments in up to `n` pieces (deltas with
///   only `index` and `function.arguments`);
/// - the finish chunk (`finish_reason` `"tool_calls"` or `"stop"`, empty delta);
/// - with `include_usage` (the request's `stream_options.include_usage`), a usage chunk with
///   `choices: []`;
/// - `data: [DONE]`.
pub fn chat_answer_chunks(answer: &Answer, n: usize, include_usage: bool) -> Vec<String> {
    let id = format!("chatcmpl-mock-{}", next_id());
    let created = now_secs();
    let model = &answer.model;
    let envelope = |choices: Value| chunk_envelope(&id, created, model, choices);
    let delta_chunk = |delta: Value, finish: Value| {
        sse_data(&envelope(json!([{
            "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish
        }])))
    };
    let mut events = Vec::new();
    if answer.text.is_empty() && !answer.tool_calls.is_empty() {
        events.push(delta_chunk(
            json!({"role": "assistant", "content": null, "refusal": null}),
            Value::Null,
        ));
    } else {
        for (i, piece) in split_content(&answer.text, n).into_iter().enumerate() {
            let delta = if i == 0 {
                json!({"role": "assistant", "content": piece})
            } else {
                json!({"content": piece})
            };
            events.push(delta_chunk(delta, Value::Null));
        }
    }
    for (index, call) in answer.tool_calls.iter().enumerate() {
        events.push(delta_chunk(
            json!({"tool_calls": [{
                "index": index,
                "id": format!("call_mock_{}", next_id()),
                "type": "function",
                "function": {"name": call.name, "arguments": ""}
            }]}),
            Value::Null,
        ));
        for piece in split_even(&call.arguments, n) {
            events.push(delta_chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    events.push(delta_chunk(
        json!({}),
        json!(answer.stop_word("stop", "tool_calls")),
    ));
    if include_usage {
        let mut usage_chunk = envelope(json!([]));
        if let Some(obj) = usage_chunk.as_object_mut() {
            obj.insert("usage".into(), answer_usage(answer));
        }
        events.push(sse_data(&usage_chunk));
    }
    events.push(DONE_EVENT.to_owned());
    events
}

/// A legacy `text_completion` (`/v1/completions`).
pub fn completion_json(model: &str, text: &str, prompt_tokens: u64) -> String {
    json!({
        "id": format!("cmpl-mock-{}", next_id()),
        "object": "text_completion",
        "created": now_secs(),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": "stop"}],
        "usage": usage_openai(prompt_tokens, estimate_tokens(text))
    })
    .to_string()
}

/// A legacy completions stream: `n` text chunks, a finish chunk, `[DONE]`.
pub fn completion_chunks(model: &str, text: &str, n: usize) -> Vec<String> {
    let id = format!("cmpl-mock-{}", next_id());
    let created = now_secs();
    let chunk = |piece: &str, finish: Value| {
        sse_data(&json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": piece, "logprobs": null, "finish_reason": finish}]
        }))
    };
    let mut events: Vec<String> = split_content(text, n)
        .iter()
        .map(|piece| chunk(piece, Value::Null))
        .collect();
    events.push(chunk("", json!("stop")));
    events.push(DONE_EVENT.to_owned());
    events
}

/// An embeddings list with one deterministic vector per input.
pub fn embeddings_json(model: &str, n_inputs: usize) -> String {
    embeddings_json_with(model, n_inputs, EMBEDDING_DIMENSIONS, false)
}

/// Embeddings with a chosen dimension; `base64` encodes each vector as little-endian f32 the way
/// OpenAI does for `encoding_format: "base64"` (the Python SDK's default).
pub fn embeddings_json_with(
    model: &str,
    n_inputs: usize,
    dimensions: usize,
    base64: bool,
) -> String {
    embeddings_json_for(model, &vec![""; n_inputs], dimensions, base64)
}

/// Embeddings of `texts`, one vector each: a text with words gets a vector made of its words
/// (each lowercase word adds ±1 to one dimension chosen by its hash), so texts with the same
/// words point the same way, texts sharing most words score high by cosine similarity and
/// texts sharing none score low; an input without words (or given as tokens) gets a fixed
/// vector of its position.
pub fn embeddings_json_for(model: &str, texts: &[&str], dimensions: usize, base64: bool) -> String {
    let n_inputs = texts.len();
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let vector = word_vector(text, dimensions)
                .unwrap_or_else(|| embedding_vector(index, dimensions));
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|f| f.to_le_bytes()).collect();
                json!(base64_encode(&bytes))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let tokens = n_inputs as u64 * 4;
    json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}
    })
    .to_string()
}

/// The mock's embedding of a text by its words; `None` for a text without any.
pub fn word_vector(text: &str, dimensions: usize) -> Option<Vec<f32>> {
    let mut v = vec![0f32; dimensions.max(1)];
    let mut any = false;
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        // FNV-1a, 64 bits: stable across builds and platforms.
        let hash = word
            .to_lowercase()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        let slot = (hash % v.len() as u64) as usize;
        v[slot] += if (hash >> 32) & 1 == 1 { 1.0 } else { -1.0 };
        any = true;
    }
    any.then_some(v)
}

fn embedding_vector(index: usize, dimensions: usize) -> Vec<f32> {
    (0..dimensions)
        .map(|d| {
            let x = ((index * 31 + d * 7) % 97) as f32 / 97.0;
            (x * 2.0 - 1.0) * 0.5
        })
        .collect()
}

/// `GET /v1/models`.
pub fn models_json(models: &[&str]) -> String {
    let data: Vec<Value> = models
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 1_700_000_000u64, "owned_by": "switchyard-mock"}))
        .collect();
    json!({"object": "list", "data": data}).to_string()
}

/// A Responses API (`/v1/responses`) answer with one output message.
pub fn response_json(model: &str, text: &str, input_tokens: u64) -> String {
    response_object(
        &format!("resp_mock_{}", next_id()),
        model,
        text,
        input_tokens,
        "completed",
    )
    .to_string()
}

fn response_object(id: &str, model: &str, text: &str, input_tokens: u64, status: &str) -> Value {
    let output_tokens = estimate_tokens(text);
    let output = if status == "completed" {
        json!([{
            "type": "message", "id": format!("msg_{id}"), "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]
        }])
    } else {
        json!([])
    };
    json!({
        "id": id,
        "object": "response",
        "created_at": now_secs(),
        "status": status,
        "model": model,
        "output": output,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "metadata": {},
        "parallel_tool_calls": true,
        "temperature": 1.0,
        "top_p": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens
        }
    })
}

/// A Responses stream: `response.created`, `response.output_item.added`,
/// `response.content_part.added`, `n` `response.output_text.delta` events, then the matching
/// `.done` events and `response.completed` (the sequence the official SDKs accumulate).
pub fn response_events(model: &str, text: &str, n: usize, input_tokens: u64) -> Vec<String> {
    let id = format!("resp_mock_{}", next_id());
    let item_id = format!("msg_{id}");
    let mut seq = 0u64;
    let mut event = |name: &str, mut body: Value| {
        seq += 1;
        if let Some(obj) = body.as_object_mut() {
            obj.insert("type".into(), json!(name));
            obj.insert("sequence_number".into(), json!(seq));
        }
        sse_event(name, &body)
    };
    let item = |status: &str, content: Value| {
        json!({"type": "message", "id": item_id, "status": status, "role": "assistant",
               "content": content})
    };
    let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
    let at = |extra: Value| {
        let mut v = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
        if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), extra) {
            obj.extend(extra);
        }
        v
    };
    let mut events = vec![
        event(
            "response.created",
            json!({"response": response_object(&id, model, "", input_tokens, "in_progress")}),
        ),
        event(
            "response.output_item.added",
            json!({"output_index": 0, "item": item("in_progress", json!([]))}),
        ),
        event("response.content_part.added", at(json!({"part": part("")}))),
    ];
    for piece in split_content(text, n) {
        events.push(event(
            "response.output_text.delta",
            at(json!({"delta": piece, "logprobs": []})),
        ));
    }
    events.push(event(
        "response.output_text.done",
        at(json!({"text": text, "logprobs": []})),
    ));
    events.push(event(
        "response.content_part.done",
        at(json!({"part": part(text)})),
    ));
    events.push(event(
        "response.output_item.done",
        json!({"output_index": 0, "item": item("completed", json!([part(text)]))}),
    ));
    events.push(event(
        "response.completed",
        json!({"response": response_object(&id, model, text, input_tokens, "completed")}),
    ));
    events
}

/// `/v1/images/generations`: `n` tiny images as `b64_json`.
pub fn images_json(n: usize) -> String {
    let data: Vec<Value> = (0..n.max(1))
        .map(|_| json!({"b64_json": base64_encode(TINY_PNG), "revised_prompt": "a mock image"}))
        .collect();
    json!({"created": now_secs(), "data": data}).to_string()
}

/// `/v1/audio/transcriptions` in its JSON form.
pub fn transcription_json(text: &str) -> String {
    json!({"text": text}).to_string()
}

/// A few bytes standing in for `/v1/audio/speech` output (an ID3 header and silence).
pub fn speech_bytes() -> Vec<u8> {
    let mut bytes = b"ID3\x04\x00\x00\x00\x00\x00\x00".to_vec();
    bytes.extend_from_slice(&[0xFF, 0xFB, 0x90, 0x64]);
    bytes.extend(std::iter::repeat_n(0u8, 400));
    bytes
}

/// A 1x1 transparent PNG.
const TINY_PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DEFAULT_CONTENT;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn chat_completion_echoes_model_and_content() {
        let v = parse(&chat_answer_json(&Answer::new("m1", "hi there")));
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "m1");
        assert_eq!(v["choices"][0]["message"]["content"], "hi there");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-mock-"));
        let u = &v["usage"];
        assert_eq!(
            u["total_tokens"].as_u64().unwrap(),
            u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
        );
    }

    #[test]
    fn chat_chunks_are_complete_sse_events_ending_with_done() {
        let events = chat_answer_chunks(&Answer::new("m", DEFAULT_CONTENT), 3, false);
        assert_eq!(events.len(), 5);
        assert_eq!(events.last().unwrap(), DONE_EVENT);
        let mut text = String::new();
        for e in &events[..4] {
            assert!(e.starts_with("data: ") && e.ends_with("\n\n"));
            let v = parse(e.trim_start_matches("data: ").trim_end());
            assert_eq!(v["object"], "chat.completion.chunk");
            text.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
        }
        assert_eq!(text, DEFAULT_CONTENT);
        let with_usage = chat_answer_chunks(&Answer::new("m", "x").prompt_tokens(5), 1, true);
        let usage = parse(with_usage[2].trim_start_matches("data: ").trim_end());
        assert_eq!(usage["usage"]["prompt_tokens"], 5);
        assert_eq!(usage["choices"], json!([]));
    }

    fn data(event: &str) -> Value {
        parse(event.trim_start_matches("data: ").trim_end())
    }

    #[test]
    fn chat_answer_with_tool_calls_has_the_openai_shape() {
        let answer = Answer::new("m", "")
            .tool_call("get_weather", r#"{"city":"Paris"}"#)
            .tool_call("get_time", "{}")
            .cached_tokens(7);
        let v = parse(&chat_answer_json(&answer));
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        let call = &choice["message"]["tool_calls"][0];
        assert!(call["id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "get_weather");
        assert_eq!(call["function"]["arguments"], r#"{"city":"Paris"}"#);
        assert_eq!(
            choice["message"]["tool_calls"][1]["function"]["name"],
            "get_time"
        );
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 7);
        assert_eq!(v["usage"]["prompt_tokens"], 7);

        let plain = parse(&chat_answer_json(&Answer::new("m", "hi")));
        assert_eq!(plain["choices"][0]["message"]["content"], "hi");
        assert_eq!(plain["choices"][0]["finish_reason"], "stop");
        assert!(plain["choices"][0]["message"].get("tool_calls").is_none());
    }

    #[test]
    fn chat_answer_chunks_stream_tool_calls_in_pieces() {
        let answer = Answer::new("m", "Let me see").tool_call("get_weather", r#"{"city":"Paris"}"#);
        let events = chat_answer_chunks(&answer, 3, true);
        assert_eq!(events.last().unwrap(), DONE_EVENT);
        let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| data(e)).collect();
        // 3 text chunks, the call's head, 3 argument pieces, finish, usage.
        assert_eq!(chunks.len(), 3 + 1 + 3 + 1 + 1);
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let head = &chunks[3]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(head["index"], 0);
        assert_eq!(head["function"]["name"], "get_weather");
        assert_eq!(head["function"]["arguments"], "");
        let args: String = chunks[4..7]
            .iter()
            .map(|c| {
                let call = &c["choices"][0]["delta"]["tool_calls"][0];
                assert!(call.get("id").is_none());
                call["function"]["arguments"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(args, r#"{"city":"Paris"}"#);
        assert_eq!(chunks[7]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chunks[8]["choices"], json!([]));
        assert!(chunks[8]["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    }

    #[test]
    fn embeddings_have_one_vector_per_input() {
        let v = parse(&embeddings_json("e", 3));
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"].as_array().unwrap().len(), 3);
        assert_eq!(v["data"][2]["index"], 2);
        assert_eq!(
            v["data"][0]["embedding"].as_array().unwrap().len(),
            EMBEDDING_DIMENSIONS
        );
        let b = parse(&embeddings_json_with("e", 1, 4, true));
        // 4 floats = 16 bytes = 24 base64 characters.
        assert_eq!(b["data"][0]["embedding"].as_str().unwrap().len(), 24);
    }

    #[test]
    fn responses_stream_opens_items_before_deltas() {
        let events = response_events("r", DEFAULT_CONTENT, 2, 3);
        let names: Vec<&str> = events
            .iter()
            .map(|e| e.lines().next().unwrap().trim_start_matches("event: "))
            .collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
    }

    #[test]
    fn chat_usage_is_the_figures_given_and_their_sum() {
        // "one two three" is 13 characters: 4 tokens at 4 characters a token.
        let v = parse(&chat_answer_json(
            &Answer::new("m", "one two three").prompt_tokens(6),
        ));
        assert_eq!(
            v["usage"],
            json!({"prompt_tokens": 6, "completion_tokens": 4, "total_tokens": 10,
                   "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                   "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}})
        );
        let answer = Answer::new("m", "one two three")
            .prompt_tokens(9)
            .cached_tokens(3);
        let v = parse(&chat_answer_json(&answer));
        assert_eq!(v["usage"]["prompt_tokens"], 9);
        assert_eq!(v["usage"]["completion_tokens"], 4);
        assert_eq!(v["usage"]["total_tokens"], 13);
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
    }

    #[test]
    fn only_the_first_chunk_carries_the_role() {
        let events = chat_answer_chunks(&Answer::new("m", "one two three"), 3, false);
        let roles: Vec<Value> = events[..3]
            .iter()
            .map(|e| data(e)["choices"][0]["delta"]["role"].clone())
            .collect();
        assert_eq!(roles, [json!("assistant"), Value::Null, Value::Null]);
    }

    #[test]
    fn text_before_tool_calls_is_kept_and_an_empty_answer_streams_empty_content() {
        let answer = Answer::new("m", "Let me see").tool_call("f", "{}");
        let v = parse(&chat_answer_json(&answer));
        assert_eq!(v["choices"][0]["message"]["content"], "Let me see");
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        let empty = parse(&chat_answer_json(&Answer::new("m", "")));
        assert_eq!(empty["choices"][0]["message"]["content"], "");

        // No text and no call: the content chunks are empty strings, never `null`.
        let events = chat_answer_chunks(&Answer::new("m", ""), 2, false);
        assert_eq!(events.len(), 2 + 1 + 1);
        let first = data(&events[0]);
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(first["choices"][0]["delta"]["content"], "");
        assert_eq!(data(&events[1])["choices"][0]["delta"]["content"], "");
        assert_eq!(data(&events[2])["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn embeddings_count_four_tokens_an_input() {
        let v = parse(&embeddings_json("e", 3));
        assert_eq!(v["usage"], json!({"prompt_tokens": 12, "total_tokens": 12}));
        assert_eq!(v["model"], "e");
    }

    #[test]
    fn legacy_completions_answer_and_stream() {
        let v = parse(&completion_json("m", "one two three", 6));
        assert_eq!(v["object"], "text_completion");
        assert!(v["id"].as_str().unwrap().starts_with("cmpl-mock-"));
        assert_eq!(v["model"], "m");
        assert!(v["created"].as_u64().unwrap() > 1_700_000_000);
        assert_eq!(v["choices"][0]["text"], "one two three");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(
            v["usage"],
            json!({"prompt_tokens": 6, "completion_tokens": 4, "total_tokens": 10})
        );

        let events = completion_chunks("m", "one two three", 2);
        assert_eq!(events.len(), 4);
        assert_eq!(events[3], DONE_EVENT);
        let chunks: Vec<Value> = events[..3].iter().map(|e| data(e)).collect();
        let texts: Vec<&str> = chunks
            .iter()
            .map(|c| c["choices"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["one two", " three", ""]);
        let finishes: Vec<&Value> = chunks
            .iter()
            .map(|c| &c["choices"][0]["finish_reason"])
            .collect();
        assert_eq!(finishes, [&Value::Null, &Value::Null, &json!("stop")]);
        for c in &chunks {
            assert_eq!(c["object"], "text_completion");
            assert_eq!(c["id"], chunks[0]["id"]);
            assert!(c["id"].as_str().unwrap().starts_with("cmpl-mock-"));
        }
    }

    #[test]
    fn a_responses_answer_has_one_message_and_its_usage() {
        let v = parse(&response_json("r", "one two three", 5));
        let id = v["id"].as_str().unwrap();
        assert!(id.starts_with("resp_mock_"));
        assert_eq!(v["object"], "response");
        assert_eq!(v["status"], "completed");
        assert_eq!(v["model"], "r");
        let message = &v["output"][0];
        assert_eq!(message["type"], "message");
        assert_eq!(message["id"], format!("msg_{id}"));
        assert_eq!(message["status"], "completed");
        assert_eq!(message["content"][0]["type"], "output_text");
        assert_eq!(message["content"][0]["text"], "one two three");
        assert_eq!(v["usage"]["input_tokens"], 5);
        assert_eq!(v["usage"]["output_tokens"], 4);
        assert_eq!(v["usage"]["total_tokens"], 9);
    }

    #[test]
    fn a_responses_stream_numbers_its_events_and_completes_with_the_text() {
        let events = response_events("r", "one two three", 2, 5);
        let bodies: Vec<Value> = events
            .iter()
            .map(|e| parse(e.lines().nth(1).unwrap().trim_start_matches("data: ")))
            .collect();
        for (i, body) in bodies.iter().enumerate() {
            assert_eq!(body["sequence_number"], i as u64 + 1);
            let name = events[i]
                .lines()
                .next()
                .unwrap()
                .trim_start_matches("event: ");
            assert_eq!(body["type"], name);
        }
        let created = &bodies[0]["response"];
        assert_eq!(created["status"], "in_progress");
        assert_eq!(created["output"], json!([]));
        let id = created["id"].as_str().unwrap();
        let item_id = format!("msg_{id}");
        assert_eq!(bodies[1]["item"]["id"], item_id);
        assert_eq!(bodies[1]["item"]["status"], "in_progress");
        let deltas: String = bodies[3..5]
            .iter()
            .map(|b| {
                assert_eq!(b["item_id"], item_id);
                assert_eq!(b["output_index"], 0);
                assert_eq!(b["content_index"], 0);
                b["delta"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(deltas, "one two three");
        assert_eq!(bodies[5]["text"], "one two three");
        assert_eq!(bodies[6]["part"]["text"], "one two three");
        assert_eq!(bodies[7]["item"]["status"], "completed");
        assert_eq!(bodies[7]["item"]["content"][0]["text"], "one two three");
        let done = &bodies[8]["response"];
        assert_eq!(done["id"], id);
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][0]["content"][0]["text"], "one two three");
        assert_eq!(done["usage"]["total_tokens"], 9);
    }

    #[test]
    fn images_transcriptions_speech_and_models_have_their_shapes() {
        let one = parse(&images_json(0));
        assert_eq!(one["data"].as_array().unwrap().len(), 1);
        let three = parse(&images_json(3));
        assert_eq!(three["data"].as_array().unwrap().len(), 3);
        // The PNG signature, base64-encoded.
        assert!(three["data"][2]["b64_json"]
            .as_str()
            .unwrap()
            .starts_with("iVBORw0KGgo"));
        assert!(three["created"].as_u64().unwrap() > 1_700_000_000);

        assert_eq!(parse(&transcription_json("said")), json!({"text": "said"}));

        let speech = speech_bytes();
        assert_eq!(speech.len(), 10 + 4 + 400);
        assert!(speech.starts_with(b"ID3\x04"));
        assert_eq!(speech[10..14], [0xFF, 0xFB, 0x90, 0x64]);
        assert!(speech[14..].iter().all(|b| *b == 0));

        let models = parse(&models_json(&["a"]));
        assert_eq!(models["object"], "list");
        assert_eq!(
            models["data"][0],
            json!({"id": "a", "object": "model", "created": 1_700_000_000u64,
                   "owned_by": "switchyard-mock"})
        );
    }

    #[test]
    fn embedding_vectors_are_fixed_values_in_the_open_half_range() {
        let close = |got: &[f32], want: &[f32]| {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-6, "{got:?} != {want:?}");
            }
        };
        // x = (31 i + 7 d) mod 97 / 97, value x - 0.5.
        close(&embedding_vector(0, 2), &[-0.5, -0.427_835_05]);
        close(
            &embedding_vector(1, 3),
            &[-0.180_412_37, -0.108_247_42, -0.036_082_47],
        );
        // Past 97 the position wraps: (93 + 7) mod 97 = 3.
        close(&embedding_vector(3, 2), &[0.458_762_9, -0.469_072_16]);
        assert!(embedding_vector(5, 64)
            .iter()
            .all(|v| (-0.5..0.5).contains(v)));
    }
}
