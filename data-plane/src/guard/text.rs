//! The checkable text of a request or an answer, per protocol, and writing changed texts back.
//!
//! A text is a JSON string value of the body found where its protocol puts what a person wrote
//! or a model answered (OpenAI chat messages, string or parts; a completions prompt; a Responses
//! input and instructions; embeddings input; Anthropic messages and system; Gemini contents and
//! system instruction; and the same places of each protocol's answers and stream deltas). Each
//! [`Piece`] keeps the byte span of its string literal, so a changed text is spliced in and every
//! other byte stays as it was: the body is never re-serialised.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::value::RawValue;

use crate::endpoint::Endpoint;

/// One checkable text: the byte span of its JSON string literal (quotes included) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub span: (usize, usize),
    pub text: String,
}

/// One step of a path to the texts.
#[derive(Clone, Copy)]
enum Step {
    /// The object's member of that name.
    Key(&'static str),
    /// Every element of the array.
    Each,
    /// The texts here: a string, or an array of strings and of objects whose `text` is one.
    Text,
}

use Step::{Each, Key, Text};

/// Where a request's texts are, per endpoint (none: the endpoint carries no checkable text).
fn request_paths(endpoint: Endpoint) -> &'static [&'static [Step]] {
    match endpoint {
        Endpoint::ChatCompletions => &[&[Key("messages"), Each, Key("content"), Text]],
        Endpoint::Completions => &[&[Key("prompt"), Text]],
        Endpoint::Embeddings => &[&[Key("input"), Text]],
        Endpoint::Responses => &[
            &[Key("instructions"), Text],
            &[Key("input"), Text],
            &[Key("input"), Each, Key("content"), Text],
        ],
        Endpoint::Messages => &[
            &[Key("system"), Text],
            &[Key("messages"), Each, Key("content"), Text],
        ],
        Endpoint::GeminiGenerate => &[
            &[Key("systemInstruction"), Key("parts"), Text],
            &[Key("system_instruction"), Key("parts"), Text],
            &[Key("contents"), Each, Key("parts"), Text],
        ],
        Endpoint::MessagesCountTokens => request_paths(Endpoint::Messages),
        Endpoint::GeminiCountTokens => &[
            &[Key("contents"), Each, Key("parts"), Text],
            &[
                Key("generateContentRequest"),
                Key("systemInstruction"),
                Key("parts"),
                Text,
            ],
            &[
                Key("generateContentRequest"),
                Key("contents"),
                Each,
                Key("parts"),
                Text,
            ],
        ],
        Endpoint::Moderations => &[&[Key("input"), Text]],
        Endpoint::Rerank => &[&[Key("query"), Text], &[Key("documents"), Text]],
        Endpoint::ImagesGenerations => &[&[Key("prompt"), Text]],
        Endpoint::AudioSpeech => &[&[Key("input"), Text], &[Key("instructions"), Text]],
        _ => &[],
    }
}

/// What the gateway can see of one side (request or answer) of an endpoint's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Its texts are found and checked.
    Texts,
    /// It carries nothing a text check applies to (vectors, scores, counts, a listing, audio
    /// spoken from a checked text).
    Nothing,
    /// It carries content the gateway cannot read (another API's body, an upload, a live
    /// session, audio to transcribe): a rule with `uninspectable: block` refuses it.
    Opaque,
}

/// What the gateway can see of an endpoint's requests.
pub fn request_side(endpoint: Endpoint) -> Side {
    match endpoint {
        Endpoint::Models => Side::Nothing,
        Endpoint::AudioTranscriptions
        | Endpoint::Passthrough
        | Endpoint::Realtime
        | Endpoint::Files
        | Endpoint::Batches
        | Endpoint::MessageBatches => Side::Opaque,
        _ => Side::Texts,
    }
}

/// What the gateway can see of an endpoint's answers.
pub fn answer_side(endpoint: Endpoint) -> Side {
    match endpoint {
        Endpoint::Passthrough
        | Endpoint::Realtime
        | Endpoint::Files
        | Endpoint::Batches
        | Endpoint::MessageBatches => Side::Opaque,
        _ if answer_paths(endpoint).is_empty() => Side::Nothing,
        _ => Side::Texts,
    }
}

/// Where a plain answer's texts are, per endpoint.
fn answer_paths(endpoint: Endpoint) -> &'static [&'static [Step]] {
    match endpoint {
        Endpoint::ChatCompletions => {
            &[&[Key("choices"), Each, Key("message"), Key("content"), Text]]
        }
        Endpoint::Completions => &[&[Key("choices"), Each, Key("text"), Text]],
        Endpoint::Responses => &[&[Key("output"), Each, Key("content"), Text]],
        Endpoint::Messages => &[&[Key("content"), Text]],
        Endpoint::GeminiGenerate => {
            &[&[Key("candidates"), Each, Key("content"), Key("parts"), Text]]
        }
        Endpoint::Rerank => &[&[Key("results"), Each, Key("document"), Key("text"), Text]],
        Endpoint::ImagesGenerations => &[&[Key("data"), Each, Key("revised_prompt"), Text]],
        Endpoint::AudioTranscriptions => &[&[Key("text"), Text]],
        _ => &[],
    }
}

/// Where one stream event's text delta is, per endpoint (the event's `data`, parsed alone).
/// A Responses stream's deltas are its `response.output_text.delta` events' `delta`; an
/// Anthropic stream's, its `content_block_delta` events' `delta.text`.
fn delta_paths(endpoint: Endpoint) -> &'static [&'static [Step]] {
    match endpoint {
        Endpoint::ChatCompletions => &[&[Key("choices"), Each, Key("delta"), Key("content"), Text]],
        Endpoint::Completions => &[&[Key("choices"), Each, Key("text"), Text]],
        Endpoint::Responses => &[&[Key("delta"), Text]],
        Endpoint::Messages => &[&[Key("delta"), Key("text"), Text]],
        Endpoint::GeminiGenerate => {
            &[&[Key("candidates"), Each, Key("content"), Key("parts"), Text]]
        }
        _ => &[],
    }
}

/// Where a request's declared tools' names are, per endpoint.
fn tool_paths(endpoint: Endpoint) -> &'static [&'static [Step]] {
    match endpoint {
        Endpoint::ChatCompletions => &[&[Key("tools"), Each, Key("function"), Key("name"), Text]],
        Endpoint::Responses | Endpoint::Messages => &[&[Key("tools"), Each, Key("name"), Text]],
        Endpoint::GeminiGenerate => &[
            &[
                Key("tools"),
                Each,
                Key("functionDeclarations"),
                Each,
                Key("name"),
                Text,
            ],
            &[
                Key("tools"),
                Each,
                Key("function_declarations"),
                Each,
                Key("name"),
                Text,
            ],
        ],
        _ => &[],
    }
}

/// Where a plain answer's tool calls' names are, per endpoint.
fn call_paths(endpoint: Endpoint) -> &'static [&'static [Step]] {
    match endpoint {
        Endpoint::ChatCompletions => &[&[
            Key("choices"),
            Each,
            Key("message"),
            Key("tool_calls"),
            Each,
            Key("function"),
            Key("name"),
            Text,
        ]],
        Endpoint::Responses => &[&[Key("output"), Each, Key("name"), Text]],
        Endpoint::Messages => &[&[Key("content"), Each, Key("name"), Text]],
        Endpoint::GeminiGenerate => &[&[
            Key("candidates"),
            Each,
            Key("content"),
            Key("parts"),
            Each,
            Key("functionCall"),
            Key("name"),
            Text,
        ]],
        _ => &[],
    }
}

/// The names of the tools a request declares.
pub fn request_tools(endpoint: Endpoint, body: &[u8]) -> Vec<String> {
    texts(tool_paths(endpoint), body)
        .into_iter()
        .map(|p| p.text)
        .collect()
}

/// The names of the tools a plain answer calls.
pub fn answer_tools(endpoint: Endpoint, body: &[u8]) -> Vec<String> {
    texts(call_paths(endpoint), body)
        .into_iter()
        .map(|p| p.text)
        .collect()
}

/// How many messages (conversation turns, a system prompt counted) a request holds.
pub fn message_count(endpoint: Endpoint, body: &[u8]) -> usize {
    #[derive(serde::Deserialize)]
    struct Turns<'a> {
        #[serde(borrow, default)]
        messages: Option<Vec<&'a RawValue>>,
        #[serde(borrow, default)]
        contents: Option<Vec<&'a RawValue>>,
        #[serde(borrow, default)]
        input: Option<&'a RawValue>,
        #[serde(borrow, default)]
        system: Option<&'a RawValue>,
        #[serde(
            borrow,
            default,
            rename = "systemInstruction",
            alias = "system_instruction"
        )]
        system_instruction: Option<&'a RawValue>,
        #[serde(borrow, default)]
        instructions: Option<&'a RawValue>,
    }
    let Ok(turns) = serde_json::from_slice::<Turns<'_>>(body) else {
        return 0;
    };
    let listed = |list: Option<Vec<&RawValue>>| list.map_or(0, |l| l.len());
    let system = [turns.system, turns.system_instruction, turns.instructions]
        .iter()
        .filter(|s| s.is_some_and(|s| s.get() != "null"))
        .count();
    let turns_count = match endpoint {
        Endpoint::Responses => turns.input.map_or(0, |input| {
            serde_json::from_str::<Vec<&RawValue>>(input.get()).map_or(1, |l| l.len())
        }),
        Endpoint::GeminiGenerate => listed(turns.contents),
        _ => listed(turns.messages),
    };
    turns_count + system
}

/// The texts of a request body (empty when it is not JSON or holds none).
pub fn request_texts(endpoint: Endpoint, body: &[u8]) -> Vec<Piece> {
    texts(request_paths(endpoint), body)
}

/// The texts of a plain answer's body in the client's protocol.
pub fn answer_texts(endpoint: Endpoint, body: &[u8]) -> Vec<Piece> {
    texts(answer_paths(endpoint), body)
}

/// The text deltas of one stream event's `data` in the client's protocol (none for an event
/// that carries no answer text, such as a Responses event other than a text delta).
pub fn delta_texts(endpoint: Endpoint, event: Option<&str>, data: &str) -> Vec<Piece> {
    let named = event.or_else(|| type_of(data));
    let carries = match endpoint {
        Endpoint::Responses => named == Some("response.output_text.delta"),
        Endpoint::Messages => named == Some("content_block_delta"),
        _ => true,
    };
    if !carries {
        return Vec::new();
    }
    texts(delta_paths(endpoint), data.as_bytes())
}

/// Where one stream event names a tool call, per endpoint: an OpenAI chunk's tool call deltas
/// (the name comes once, in the call's first delta), an Anthropic `content_block_start` of a
/// `tool_use` block, a Gemini chunk's function calls, a Responses `response.output_item.added`
/// of a function call.
fn stream_call_paths(endpoint: Endpoint, named: Option<&str>) -> &'static [&'static [Step]] {
    match (endpoint, named) {
        (Endpoint::ChatCompletions, _) => &[&[
            Key("choices"),
            Each,
            Key("delta"),
            Key("tool_calls"),
            Each,
            Key("function"),
            Key("name"),
            Text,
        ]],
        (Endpoint::Messages, Some("content_block_start")) => {
            &[&[Key("content_block"), Key("name"), Text]]
        }
        (Endpoint::Responses, Some("response.output_item.added")) => {
            &[&[Key("item"), Key("name"), Text]]
        }
        (Endpoint::GeminiGenerate, _) => call_paths(Endpoint::GeminiGenerate),
        _ => &[],
    }
}

/// The names of the tools one stream event calls.
pub fn stream_tools(endpoint: Endpoint, event: Option<&str>, data: &str) -> Vec<String> {
    let named = event.or_else(|| type_of(data));
    texts(stream_call_paths(endpoint, named), data.as_bytes())
        .into_iter()
        .map(|p| p.text)
        .collect()
}

/// The `type` member of an event's data, when it has one.
pub fn type_of(data: &str) -> Option<&str> {
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<&'a str>,
    }
    serde_json::from_str::<Typed<'_>>(data).ok()?.kind
}

fn texts(paths: &[&[Step]], body: &[u8]) -> Vec<Piece> {
    let mut out = Vec::new();
    if paths.is_empty() {
        return out;
    }
    let Ok(root) = serde_json::from_slice::<&RawValue>(body) else {
        return out;
    };
    for path in paths {
        walk(body, root, path, &mut out);
    }
    out.sort_by_key(|p| p.span.0);
    out.dedup_by_key(|p| p.span.0);
    out
}

fn walk(body: &[u8], raw: &RawValue, path: &[Step], out: &mut Vec<Piece>) {
    let Some((step, rest)) = path.split_first() else {
        return;
    };
    match step {
        Key(name) => {
            if let Ok(object) = serde_json::from_str::<BTreeMap<Cow<'_, str>, &RawValue>>(raw.get())
            {
                if let Some(value) = object.get(*name) {
                    walk(body, value, rest, out);
                }
            }
        }
        Each => {
            if let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) {
                for item in items {
                    walk(body, item, rest, out);
                }
            }
        }
        Text => text_here(body, raw, out),
    }
}

/// A string, or an array of strings and of objects whose `text` is a string.
fn text_here(body: &[u8], raw: &RawValue, out: &mut Vec<Piece>) {
    if let Some(piece) = string_piece(body, raw) {
        out.push(piece);
        return;
    }
    let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
        return;
    };
    for item in items {
        if let Some(piece) = string_piece(body, item) {
            out.push(piece);
        } else if let Ok(object) =
            serde_json::from_str::<BTreeMap<Cow<'_, str>, &RawValue>>(item.get())
        {
            if let Some(piece) = object.get("text").and_then(|t| string_piece(body, t)) {
                out.push(piece);
            }
        }
    }
}

/// `raw` (a part of `body`) as a text, when it is a JSON string.
pub fn string_piece(body: &[u8], raw: &RawValue) -> Option<Piece> {
    let literal = raw.get();
    if !literal.starts_with('"') {
        return None;
    }
    let text = serde_json::from_str::<String>(literal).ok()?;
    let start = (literal.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    Some(Piece {
        span: (start, start + literal.len()),
        text,
    })
}

/// `body` with each piece whose new text is given written back in its place (as a JSON string
/// literal); every other byte as it was. `changes` pairs a piece with its new text; pieces are
/// in body order and do not overlap.
pub fn splice(body: &[u8], changes: &[(&Piece, String)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut at = 0;
    for (piece, text) in changes {
        let (start, end) = piece.span;
        if start < at || end > body.len() {
            continue;
        }
        out.extend_from_slice(&body[at..start]);
        // A `String` always serialises.
        out.extend_from_slice(serde_json::to_string(text).unwrap_or_default().as_bytes());
        at = end;
    }
    out.extend_from_slice(&body[at..]);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn values(endpoint: Endpoint, body: &str) -> Vec<String> {
        request_texts(endpoint, body.as_bytes())
            .into_iter()
            .map(|p| p.text)
            .collect()
    }

    #[test]
    fn openai_chat_texts_are_strings_and_text_parts() {
        let body = r#"{"model":"m","messages":[{"role":"system","content":"be kind"},{"role":"user","content":[{"type":"text","text":"hi \u00e9"},{"type":"image_url","image_url":{"url":"x"}}]}]}"#;
        assert_eq!(values(Endpoint::ChatCompletions, body), ["be kind", "hi é"]);
    }

    #[test]
    fn each_protocol_finds_its_own_texts() {
        let cases = [
            (
                Endpoint::Completions,
                r#"{"prompt":["a","b"]}"#,
                vec!["a", "b"],
            ),
            (Endpoint::Embeddings, r#"{"input":"e"}"#, vec!["e"]),
            (
                Endpoint::Responses,
                r#"{"instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"r"}]}]}"#,
                vec!["i", "r"],
            ),
            (Endpoint::Responses, r#"{"input":"plain"}"#, vec!["plain"]),
            (
                Endpoint::Messages,
                r#"{"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"u"}]}"#,
                vec!["s", "u"],
            ),
            (
                Endpoint::GeminiGenerate,
                r#"{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[{"role":"user","parts":[{"text":"g"}]}]}"#,
                vec!["s", "g"],
            ),
            (
                Endpoint::Rerank,
                r#"{"query":"q","documents":["d",{"text":"e"}]}"#,
                vec!["q", "d", "e"],
            ),
            (
                Endpoint::Moderations,
                r#"{"input":[{"type":"text","text":"m"},{"type":"image_url"}]}"#,
                vec!["m"],
            ),
            (Endpoint::ImagesGenerations, r#"{"prompt":"p"}"#, vec!["p"]),
            (
                Endpoint::AudioSpeech,
                r#"{"input":"say","instructions":"calm"}"#,
                vec!["say", "calm"],
            ),
            (
                Endpoint::MessagesCountTokens,
                r#"{"messages":[{"role":"user","content":"c"}]}"#,
                vec!["c"],
            ),
            (
                Endpoint::GeminiCountTokens,
                r#"{"contents":[{"parts":[{"text":"g"}]}]}"#,
                vec!["g"],
            ),
            (Endpoint::Files, r#"{"input":"x"}"#, vec![]),
        ];
        for (endpoint, body, want) in cases {
            assert_eq!(values(endpoint, body), want, "{endpoint:?}");
        }
    }

    #[test]
    fn a_changed_text_is_spliced_and_nothing_else_moves() {
        let body = r#"{ "model" : "m", "messages":[{"role":"user","content":"mail a@b.co now"}] , "x": 1 }"#;
        let pieces = request_texts(Endpoint::ChatCompletions, body.as_bytes());
        let out = splice(
            body.as_bytes(),
            &[(&pieces[0], "mail [EMAIL_1] \"now\"".into())],
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{ "model" : "m", "messages":[{"role":"user","content":"mail [EMAIL_1] \"now\""}] , "x": 1 }"#
        );
    }

    #[test]
    fn tools_and_turns_are_counted_per_protocol() {
        let chat = r#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"tools":[{"type":"function","function":{"name":"shell"}}]}"#;
        assert_eq!(
            request_tools(Endpoint::ChatCompletions, chat.as_bytes()),
            ["shell"]
        );
        assert_eq!(message_count(Endpoint::ChatCompletions, chat.as_bytes()), 2);
        let claude =
            r#"{"system":"s","messages":[{"role":"user","content":"u"}],"tools":[{"name":"t"}]}"#;
        assert_eq!(request_tools(Endpoint::Messages, claude.as_bytes()), ["t"]);
        assert_eq!(message_count(Endpoint::Messages, claude.as_bytes()), 2);
        let gemini = r#"{"contents":[{"parts":[{"text":"a"}]}],"tools":[{"functionDeclarations":[{"name":"g"}]}]}"#;
        assert_eq!(
            request_tools(Endpoint::GeminiGenerate, gemini.as_bytes()),
            ["g"]
        );
        assert_eq!(
            message_count(Endpoint::GeminiGenerate, gemini.as_bytes()),
            1
        );
        let called = r#"{"choices":[{"message":{"tool_calls":[{"function":{"name":"rm"}}]}}]}"#;
        assert_eq!(
            answer_tools(Endpoint::ChatCompletions, called.as_bytes()),
            ["rm"]
        );
    }

    #[test]
    fn answers_and_deltas_of_each_protocol() {
        let chat = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"ans"}}]}"#;
        assert_eq!(
            answer_texts(Endpoint::ChatCompletions, chat.as_bytes())[0].text,
            "ans"
        );
        let claude = r#"{"content":[{"type":"text","text":"c"},{"type":"tool_use","id":"t"}]}"#;
        assert_eq!(answer_texts(Endpoint::Messages, claude.as_bytes()).len(), 1);
        let delta =
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"d"}}"#;
        assert_eq!(
            delta_texts(Endpoint::Messages, Some("content_block_delta"), delta)[0].text,
            "d"
        );
        let start = r#"{"type":"message_start","message":{"content":[]}}"#;
        assert!(delta_texts(Endpoint::Messages, Some("message_start"), start).is_empty());
        let openai = r#"{"choices":[{"index":0,"delta":{"content":"o"}}]}"#;
        assert_eq!(
            delta_texts(Endpoint::ChatCompletions, None, openai)[0].text,
            "o"
        );
        let gemini = r#"{"candidates":[{"content":{"parts":[{"text":"g"}]}}]}"#;
        assert_eq!(
            delta_texts(Endpoint::GeminiGenerate, None, gemini)[0].text,
            "g"
        );
        let responses = r#"{"type":"response.output_text.delta","delta":"r"}"#;
        assert_eq!(
            delta_texts(Endpoint::Responses, None, responses)[0].text,
            "r"
        );
    }
}
