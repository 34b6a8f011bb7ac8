//! Pure builders for the answers a simulated upstream gives: OpenAI and Anthropic JSON bodies and
//! SSE events. No sockets and no state beyond a process-wide id counter, so the data plane's
//! in-process `provider: mock` and the mock HTTP server produce byte-for-byte the same shapes.
//!
//! Every SSE helper returns complete events (`data: ...\n\n`, or `event: ...\ndata: ...\n\n` for
//! Anthropic and Responses streams), ready to be written to the wire one by one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

mod anthropic;
mod openai;

pub use anthropic::{anthropic_events, anthropic_message_json};
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
    fn base64_matches_known_vectors() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
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
