//! Pure builders for the answers a simulated upstream gives, in each protocol's own wire format:
//! OpenAI (chat, completions, responses, embeddings, ...), Anthropic Messages and Gemini
//! `generateContent`, as JSON bodies and SSE events. No sockets and no state beyond a
//! process-wide id counter, so the data plane's in-process `provider: mock` and the mock HTTP
//! server produce byte-for-byte the same shapes.
//!
//! Two generations of builders live here:
//! - the original text-only ones (`chat_completion_json_with_usage`, `chat_chunks`,
//!   `anthropic_message_json`, `anthropic_events`, ...), kept unchanged for their callers;
//! - the [`Answer`]-based ones (`chat_answer_json`, `chat_answer_chunks`,
//!   `anthropic_answer_json`, `anthropic_answer_events`, `gemini_response_json`,
//!   `gemini_events`, ...), which also carry tool calls and cached-token usage. An [`Answer`]
//!   says *what* the upstream answers; the builder of each protocol says it in that protocol.
//!
//! Errors come in each provider's shape ([`openai_error_json`], [`anthropic_error_json`],
//! [`gemini_error_json`]); [`Protocol::of_path`] and [`error_json`] pick the shape a request path
//! expects.
//!
//! Every SSE helper returns complete events, ready to be written to the wire one by one:
//! `data: ...\n\n` (OpenAI chat and completions), `event: ...\ndata: ...\n\n` (Anthropic and
//! Responses) or `data: ...\r\n\r\n` (Gemini, which ends its lines with CRLF).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

mod anthropic;
mod gemini;
mod openai;

pub use anthropic::{
    anthropic_answer_events, anthropic_answer_json, anthropic_count_tokens_json, anthropic_events,
    anthropic_message_json,
};
pub use gemini::{
    gemini_count_tokens_json, gemini_error_json, gemini_error_status, gemini_events,
    gemini_response_json, gemini_stream_responses,
};
pub use openai::*;

/// The assistant text of every default answer.
pub const DEFAULT_CONTENT: &str = "Hello from mock";
/// The model echoed when a request names none.
pub const DEFAULT_MODEL: &str = "mock-model";
/// The models listed by `GET /v1/models` unless told otherwise.
pub const DEFAULT_MODELS: &[&str] = &["mock-model", "gpt-4o-mini", "text-embedding-3-small"];
/// Number of floats in each mock embedding (unless the request asks for `dimensions`).
pub const EMBEDDING_DIMENSIONS: usize = 8;
/// The SSE terminator of OpenAI streams.
pub const DONE_EVENT: &str = "data: [DONE]\n\n";

/// One tool (function) call the simulated model makes. `arguments` is the JSON text of the call's
/// arguments, the way OpenAI carries it; Anthropic (`input`) and Gemini (`args`) carry the parsed
/// object, which is `{}` when `arguments` is not a JSON object.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    pub fn new(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The arguments as a JSON object (`{}` when they are not one).
    pub fn arguments_object(&self) -> Value {
        match serde_json::from_str::<Value>(&self.arguments) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({}),
        }
    }
}

/// What a simulated model answers, independent of the protocol it is said in: optional text,
/// then zero or more tool calls, and the usage to report.
///
/// An answer with no text and no tool calls is an *empty completion*, said in each protocol's
/// own empty shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub model: String,
    /// Assistant text, before any tool call (may be empty).
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// Prompt tokens, cached ones included (raised to `cached_tokens` when lower).
    pub prompt_tokens: u64,
    /// Prompt tokens served from the provider's prompt cache.
    pub cached_tokens: u64,
}

impl Answer {
    /// A text answer with 1 prompt token and no cache use.
    pub fn new(model: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            text: text.into(),
            tool_calls: Vec::new(),
            prompt_tokens: 1,
            cached_tokens: 0,
        }
    }

    /// Adds a tool call after the text and the calls already there.
    pub fn tool_call(mut self, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        self.tool_calls.push(ToolCall::new(name, arguments));
        self
    }

    pub fn prompt_tokens(mut self, n: u64) -> Self {
        self.prompt_tokens = n;
        self
    }

    pub fn cached_tokens(mut self, n: u64) -> Self {
        self.cached_tokens = n;
        self
    }

    /// Prompt tokens in all, never fewer than the cached ones.
    pub fn input_tokens(&self) -> u64 {
        self.prompt_tokens.max(self.cached_tokens)
    }

    /// Estimated output tokens: the text plus each call's name and arguments.
    pub fn output_tokens(&self) -> u64 {
        estimate_tokens(&self.text)
            + self
                .tool_calls
                .iter()
                .map(|c| estimate_tokens(&c.name) + estimate_tokens(&c.arguments))
                .sum::<u64>()
    }

    /// No text and no tool call.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.tool_calls.is_empty()
    }

    /// Why the answer stopped, in a protocol's words: `on_calls` when it calls a tool, else
    /// `on_end`.
    pub(crate) fn stop_word(&self, on_end: &'static str, on_calls: &'static str) -> &'static str {
        if self.tool_calls.is_empty() {
            on_end
        } else {
            on_calls
        }
    }
}

/// The three wire protocols the mock speaks natively.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// OpenAI and OpenAI-compatible paths (`/v1/chat/completions`, `/v1/embeddings`, ...).
    OpenAi,
    /// Anthropic Messages: `/v1/messages` and `/v1/messages/...`.
    Anthropic,
    /// Gemini native: `/v1beta/...`.
    Gemini,
}

impl Protocol {
    /// The protocol whose shapes (answers and errors) a request to `path` expects.
    pub fn of_path(path: &str) -> Self {
        if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            Self::Anthropic
        } else if path.starts_with("/v1beta/") || path.contains("/publishers/google/models/") {
            Self::Gemini
        } else {
            Self::OpenAi
        }
    }
}

/// An error body for HTTP `status` in `protocol`'s shape, its type/code/status derived from the
/// status ([`openai_error_kind`], [`anthropic_error_kind`], [`gemini_error_status`]).
pub fn error_json(protocol: Protocol, status: u16, message: &str) -> String {
    match protocol {
        Protocol::OpenAi => {
            let (kind, code) = openai_error_kind(status);
            openai_error_json(message, kind, code)
        }
        Protocol::Anthropic => anthropic_error_json(message, anthropic_error_kind(status)),
        Protocol::Gemini => gemini_error_json(status, message, gemini_error_status(status)),
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh process-unique number for response ids (`chatcmpl-mock-N`, `msg_mock_N`, ...).
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A rough token count (4 characters a token, at least 1 for non-empty text), good enough for
/// plausible `usage` blocks.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

pub(crate) fn sse_data(value: &Value) -> String {
    format!("data: {value}\n\n")
}

/// A Gemini SSE event: `data: {json}` and a CRLF blank line.
pub(crate) fn sse_data_crlf(value: &Value) -> String {
    format!("data: {value}\r\n\r\n")
}

/// Splits `text` into at most `n` non-empty consecutive pieces of nearly equal length (in
/// characters) that concatenate back to it; fewer when `text` is shorter than `n`, none when it
/// is empty. Used for tool-call arguments, which have few spaces to split at.
pub fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = n.min(chars.len());
    if n == 0 {
        return Vec::new();
    }
    let per = chars.len() / n;
    let extra = chars.len() % n;
    let mut pieces = Vec::with_capacity(n);
    let mut at = 0;
    for i in 0..n {
        let len = per + usize::from(i < extra);
        pieces.push(chars[at..at + len].iter().collect());
        at += len;
    }
    pieces
}

pub(crate) fn sse_event(name: &str, value: &Value) -> String {
    format!("event: {name}\ndata: {value}\n\n")
}

/// Splits `content` into exactly `n` consecutive pieces that concatenate back to it (word
/// boundaries where there are enough words; empty pieces when the text is shorter than `n`).
pub fn split_content(content: &str, n: usize) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    // Words keep their leading space so that concatenation restores the text exactly.
    let mut words: Vec<String> = Vec::new();
    for (i, word) in content.split(' ').enumerate() {
        words.push(if i == 0 {
            word.to_owned()
        } else {
            format!(" {word}")
        });
    }
    words.retain(|w| !w.is_empty());
    let mut pieces = vec![String::new(); n];
    if words.len() <= n {
        for (piece, word) in pieces.iter_mut().zip(words) {
            *piece = word;
        }
    } else {
        // More words than pieces: spread them evenly, earlier pieces take the remainder.
        let per = words.len() / n;
        let extra = words.len() % n;
        let mut words = words.into_iter();
        for (i, piece) in pieces.iter_mut().enumerate() {
            let take = per + usize::from(i < extra);
            *piece = words.by_ref().take(take).collect();
        }
    }
    pieces
}

/// `{"error":{"message","type","code"}}`, the OpenAI error shape.
pub fn openai_error_json(message: &str, error_type: &str, code: &str) -> String {
    json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
        .to_string()
}

/// `{"type":"error","error":{"type","message"}}`, the Anthropic error shape.
pub fn anthropic_error_json(message: &str, error_type: &str) -> String {
    json!({"type": "error", "error": {"type": error_type, "message": message}}).to_string()
}

/// The (type, code) an OpenAI-style upstream uses for an HTTP status.
pub fn openai_error_kind(status: u16) -> (&'static str, &'static str) {
    match status {
        400 => ("invalid_request_error", "invalid_request"),
        401 => ("invalid_request_error", "invalid_api_key"),
        403 => ("permission_error", "permission_denied"),
        404 => ("invalid_request_error", "model_not_found"),
        408 => ("timeout_error", "request_timeout"),
        409 => ("invalid_request_error", "conflict"),
        413 => ("invalid_request_error", "request_too_large"),
        422 => ("invalid_request_error", "unprocessable_entity"),
        429 => ("rate_limit_error", "rate_limit_exceeded"),
        500..=599 => ("server_error", "server_error"),
        _ => ("api_error", "upstream_error"),
    }
}

/// The Anthropic error `type` for an HTTP status.
pub fn anthropic_error_kind(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// Standard base64 with padding (small enough not to need a crate).
pub fn base64_encode(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn split_content_restores_the_text() {
        for n in 1..8 {
            let pieces = split_content(DEFAULT_CONTENT, n);
            assert_eq!(pieces.len(), n);
            assert_eq!(pieces.concat(), DEFAULT_CONTENT);
        }
        assert_eq!(
            split_content(DEFAULT_CONTENT, 3),
            ["Hello", " from", " mock"]
        );
        assert!(split_content("", 2).iter().all(String::is_empty));
    }

    #[test]
    fn split_even_restores_the_text() {
        let args = r#"{"city":"Paris"}"#;
        for n in 1..30 {
            let pieces = split_even(args, n);
            assert_eq!(pieces.len(), n.min(args.len()));
            assert!(pieces.iter().all(|p| !p.is_empty()));
            assert_eq!(pieces.concat(), args);
        }
        assert!(split_even("", 3).is_empty());
        assert!(split_even("abc", 0).is_empty());
    }

    #[test]
    fn errors_follow_the_protocol_of_the_path() {
        assert_eq!(Protocol::of_path("/v1/chat/completions"), Protocol::OpenAi);
        assert_eq!(Protocol::of_path("/v1/messages"), Protocol::Anthropic);
        assert_eq!(
            Protocol::of_path("/v1/messages/count_tokens"),
            Protocol::Anthropic
        );
        assert_eq!(Protocol::of_path("/v1/messagesx"), Protocol::OpenAi);
        assert_eq!(
            Protocol::of_path("/v1beta/models/g:generateContent"),
            Protocol::Gemini
        );
        let o = parse(&error_json(Protocol::OpenAi, 429, "m"));
        assert_eq!(o["error"]["type"], "rate_limit_error");
        let a = parse(&error_json(Protocol::Anthropic, 529, "m"));
        assert_eq!(a["error"]["type"], "overloaded_error");
        let g = parse(&error_json(Protocol::Gemini, 429, "m"));
        assert_eq!(g["error"]["code"], 429);
        assert_eq!(g["error"]["status"], "RESOURCE_EXHAUSTED");
    }

    #[test]
    fn answer_usage_counts_calls_and_keeps_cached_within_prompt() {
        let a = Answer::new("m", "")
            .tool_call("f", r#"{"a":1}"#)
            .prompt_tokens(2)
            .cached_tokens(10);
        assert_eq!(a.input_tokens(), 10);
        assert!(a.output_tokens() >= 2);
        assert!(!a.is_empty());
        assert!(Answer::new("m", "").is_empty());
        assert_eq!(a.tool_calls[0].arguments_object(), json!({"a": 1}));
        assert_eq!(ToolCall::new("f", "nope").arguments_object(), json!({}));
    }

    #[test]
    fn token_estimates_are_four_characters_a_token_rounded_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        // Characters, not bytes: four two-byte characters are one token.
        assert_eq!(estimate_tokens("éééé"), 1);
        // "one two three" is 4 tokens, "f" 1, `{"a":1}` 2.
        let a = Answer::new("m", "one two three")
            .tool_call("f", r#"{"a":1}"#)
            .tool_call("f", r#"{"a":1}"#);
        assert_eq!(a.output_tokens(), 4 + 2 * (1 + 2));
        assert_eq!(Answer::new("m", "").output_tokens(), 0);
    }

    #[test]
    fn input_tokens_are_the_prompt_never_below_the_cached() {
        assert_eq!(Answer::new("m", "x").input_tokens(), 1);
        assert_eq!(Answer::new("m", "x").prompt_tokens(9).input_tokens(), 9);
        assert_eq!(
            Answer::new("m", "x")
                .prompt_tokens(9)
                .cached_tokens(4)
                .input_tokens(),
            9
        );
        assert_eq!(
            Answer::new("m", "x")
                .prompt_tokens(2)
                .cached_tokens(4)
                .input_tokens(),
            4
        );
    }

    #[test]
    fn the_stop_word_names_tool_calls_only_when_there_are_some() {
        assert_eq!(Answer::new("m", "x").stop_word("stop", "calls"), "stop");
        assert_eq!(
            Answer::new("m", "")
                .tool_call("f", "{}")
                .stop_word("stop", "calls"),
            "calls"
        );
        assert!(!Answer::new("m", "x").is_empty());
    }

    #[test]
    fn vertex_publisher_paths_are_gemini() {
        assert_eq!(
            Protocol::of_path(
                "/v1/projects/p/locations/l/publishers/google/models/g:generateContent"
            ),
            Protocol::Gemini
        );
        assert_eq!(Protocol::of_path("/v1/models/g"), Protocol::OpenAi);
    }

    #[test]
    fn every_status_has_its_openai_and_anthropic_error_kind() {
        for (status, kind) in [
            (400, ("invalid_request_error", "invalid_request")),
            (401, ("invalid_request_error", "invalid_api_key")),
            (403, ("permission_error", "permission_denied")),
            (404, ("invalid_request_error", "model_not_found")),
            (408, ("timeout_error", "request_timeout")),
            (409, ("invalid_request_error", "conflict")),
            (413, ("invalid_request_error", "request_too_large")),
            (422, ("invalid_request_error", "unprocessable_entity")),
            (429, ("rate_limit_error", "rate_limit_exceeded")),
            (500, ("server_error", "server_error")),
            (599, ("server_error", "server_error")),
            (418, ("api_error", "upstream_error")),
            (600, ("api_error", "upstream_error")),
        ] {
            assert_eq!(openai_error_kind(status), kind, "{status}");
        }
        for (status, kind) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (529, "overloaded_error"),
            (500, "api_error"),
        ] {
            assert_eq!(anthropic_error_kind(status), kind, "{status}");
        }
        let o = parse(&error_json(Protocol::OpenAi, 401, "no"));
        assert_eq!(o["error"]["code"], "invalid_api_key");
        assert_eq!(o["error"]["message"], "no");
        assert_eq!(o["error"]["param"], Value::Null);
        let a = parse(&error_json(Protocol::Anthropic, 404, "gone"));
        assert_eq!(a["error"]["message"], "gone");
        let g = parse(&error_json(Protocol::Gemini, 503, "later"));
        assert_eq!(g["error"]["message"], "later");
    }

    #[test]
    fn ids_are_fresh_and_the_clock_is_unix_seconds() {
        let first = next_id();
        let second = next_id();
        assert!(second > first);
        // After 2023-11 and before 2100.
        let now = now_secs();
        assert!(now > 1_700_000_000 && now < 4_102_444_800, "{now}");
    }

    #[test]
    fn sse_helpers_frame_complete_events() {
        let v = json!({"a": 1});
        assert_eq!(sse_data(&v), "data: {\"a\":1}\n\n");
        assert_eq!(sse_data_crlf(&v), "data: {\"a\":1}\r\n\r\n");
        assert_eq!(sse_event("e", &v), "event: e\ndata: {\"a\":1}\n\n");
    }

    #[test]
    fn splits_give_the_earlier_pieces_the_remainder() {
        assert_eq!(split_content("a b c d e", 2), ["a b c", " d e"]);
        assert_eq!(split_content("a b c d e f g", 3), ["a b c", " d e", " f g"]);
        assert_eq!(split_content("a b", 4), ["a", " b", "", ""]);
        assert!(split_content("a b", 0).is_empty());
        assert_eq!(split_even("abcde", 2), ["abc", "de"]);
        assert_eq!(split_even("abcdefg", 3), ["abc", "de", "fg"]);
        assert_eq!(split_even("ab", 5), ["a", "b"]);
        assert_eq!(split_even("ééé", 2), ["éé", "é"]);
    }

    #[test]
    fn base64_matches_known_vectors() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"foob"), "Zm9vYg==");
        assert_eq!(base64_encode(b"fooba"), "Zm9vYmE=");
        // Every bit set, and the alphabet's last two characters.
        assert_eq!(base64_encode(&[0xFF, 0xFF, 0xFF]), "////");
        assert_eq!(base64_encode(&[0xFB, 0xEF]), "++8=");
    }

    #[test]
    fn models_and_errors_have_their_shapes() {
        let v = parse(&models_json(&["a", "b"]));
        assert_eq!(v["data"][1]["id"], "b");
        assert_eq!(v["data"][1]["object"], "model");
        let e = parse(&openai_error_json("boom", "server_error", "server_error"));
        assert_eq!(e["error"]["message"], "boom");
        assert_eq!(e["error"]["type"], "server_error");
        assert_eq!(e["error"]["code"], "server_error");
        let a = parse(&anthropic_error_json("slow down", "rate_limit_error"));
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "rate_limit_error");
    }
}
