//! What the semantic cache reads of a request, purely: its prompt text (the text parts of its
//! messages in order, or its prompt, or its input; system instructions first) and its
//! partition — the exact key of the same request with every prompt text emptied, so only
//! requests alike in every other part (endpoint, route, model, scope, headers, parameters, the
//! messages' roles and non-text parts) are compared by meaning.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::endpoint::Endpoint;
use crate::response_cache::key::{normalised, KeyParts};

/// The most prompt text embedded; a longer prompt is not looked up by meaning.
pub const MAX_PROMPT_BYTES: usize = 32 << 10;

/// The prompt's text, its parts joined by newlines; `None` when it has none or more than
/// [`MAX_PROMPT_BYTES`].
pub fn prompt_text(endpoint: Endpoint, body: &Value) -> Option<String> {
    let mut body = body.clone();
    let mut parts: Vec<String> = Vec::new();
    let mut size = 0usize;
    visit_texts(endpoint, &mut body, &mut |text| {
        size += text.len() + 1;
        if size <= MAX_PROMPT_BYTES + 1 {
            parts.push(std::mem::take(text));
        }
    });
    let text = parts.join("\n");
    (size <= MAX_PROMPT_BYTES + 1 && !text.trim().is_empty()).then_some(text)
}

/// The partition of a request: its exact key (`parts`, of `body`) with every prompt text
/// emptied, under the embedding model (vectors of another model are never compared).
pub fn partition(parts: &KeyParts<'_>, body: &Value, embedding_model: &str) -> [u8; 32] {
    let mut body = body.clone();
    visit_texts(parts.endpoint, &mut body, &mut |text| text.clear());
    let key = KeyParts {
        body: &normalised(&body),
        ..*parts
    }
    .key();
    let mut hash = Sha256::new();
    hash.update(b"switchyard-semantic-v1\0");
    hash.update(key.0);
    hash.update(embedding_model.as_bytes());
    hash.finalize().into()
}

/// Calls `f` on every prompt text of `body`, in order.
fn visit_texts(endpoint: Endpoint, body: &mut Value, f: &mut dyn FnMut(&mut String)) {
    let Some(map) = body.as_object_mut() else {
        return;
    };
    let fields: &[&str] = match endpoint {
        Endpoint::ChatCompletions => &["messages"],
        Endpoint::Messages => &["system", "messages"],
        Endpoint::GeminiGenerate => &["systemInstruction", "system_instruction", "contents"],
        Endpoint::Completions => &["prompt"],
        Endpoint::Responses => &["instructions", "input"],
        _ => &[],
    };
    for field in fields {
        if let Some(value) = map.get_mut(*field) {
            texts_of(value, f);
        }
    }
}

/// The texts of a message list, a message, its content or a part: a string is text; an object
/// gives its `text` (a text part), its `content` (a message, or an input item) and its `parts`
/// (a Gemini content); an array each of its items. Anything else (images, tool calls, roles) is
/// left alone: it stays in the partition.
fn texts_of(value: &mut Value, f: &mut dyn FnMut(&mut String)) {
    match value {
        Value::String(text) => f(text),
        Value::Array(items) => items.iter_mut().for_each(|item| texts_of(item, f)),
        Value::Object(map) => {
            for field in ["text", "content", "parts"] {
                if let Some(inner) = map.get_mut(field) {
                    texts_of(inner, f);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http::HeaderMap;
    use serde_json::json;
    use switchyard_engine::{CacheScope, Token};

    fn token() -> Token {
        Token {
            id: 1,
            name: "t".into(),
            hash: String::new(),
            route_group_name: None,
            team_id: Some(3),
            allow_pinning: false,
            enabled: true,
            expires_at: None,
        }
    }

    fn part(endpoint: Endpoint, body: &Value) -> [u8; 32] {
        part_of(endpoint, body, "e")
    }

    fn part_of(endpoint: Endpoint, body: &Value, model: &str) -> [u8; 32] {
        let (t, h) = (token(), HeaderMap::new());
        partition(
            &KeyParts {
                endpoint,
                route: 1,
                model: "m",
                scope: CacheScope::Team,
                token: &t,
                headers: &h,
                query: None,
                body: &[],
            },
            body,
            model,
        )
    }

    #[test]
    fn each_protocols_prompt_text_is_read_in_order() {
        let chat = json!({"messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hello"},
                {"type": "image_url", "image_url": {"url": "http://x"}}]}]});
        let text = prompt_text(Endpoint::ChatCompletions, &chat);
        assert_eq!(text.as_deref(), Some("Be brief.\nHello"));
        let messages = json!({"system": "S", "messages": [{"role": "user", "content": "Hi"}]});
        assert_eq!(
            prompt_text(Endpoint::Messages, &messages).as_deref(),
            Some("S\nHi")
        );
        let gemini =
            json!({"contents": [{"role": "user", "parts": [{"text": "A"}, {"text": "B"}]}]});
        assert_eq!(
            prompt_text(Endpoint::GeminiGenerate, &gemini).as_deref(),
            Some("A\nB")
        );
        let completion = json!({"prompt": ["one", "two"]});
        assert_eq!(
            prompt_text(Endpoint::Completions, &completion).as_deref(),
            Some("one\ntwo")
        );
        let responses = json!({"instructions": "I", "input": [{"role": "user",
            "content": [{"type": "input_text", "text": "Q"}]}]});
        assert_eq!(
            prompt_text(Endpoint::Responses, &responses).as_deref(),
            Some("I\nQ")
        );
        assert_eq!(
            prompt_text(Endpoint::Embeddings, &json!({"input": "x"})),
            None
        );
        assert_eq!(
            prompt_text(Endpoint::ChatCompletions, &json!({"messages": []})),
            None
        );
    }

    #[test]
    fn a_prompt_over_the_bound_is_not_read() {
        let at = "a".repeat(MAX_PROMPT_BYTES);
        let body = json!({"prompt": at});
        assert_eq!(
            prompt_text(Endpoint::Completions, &body).unwrap().len(),
            MAX_PROMPT_BYTES
        );
        let over = json!({"prompt": [at, "b"]});
        assert_eq!(prompt_text(Endpoint::Completions, &over), None);
    }

    #[test]
    fn the_partition_is_the_same_for_other_texts_and_differs_for_other_parameters() {
        let chat = |text: &str, temperature: f64| {
            json!({"model": "m", "temperature": temperature,
                "messages": [{"role": "user", "content": text}]})
        };
        let a = part(Endpoint::ChatCompletions, &chat("What is Rust?", 0.0));
        assert_eq!(
            a,
            part(Endpoint::ChatCompletions, &chat("Tell me of Rust", 0.0))
        );
        assert_ne!(
            a,
            part(Endpoint::ChatCompletions, &chat("What is Rust?", 0.5))
        );
        let system = json!({"model": "m", "temperature": 0.0,
            "messages": [{"role": "system", "content": "What is Rust?"}]});
        assert_ne!(a, part(Endpoint::ChatCompletions, &system), "roles stay");
        assert_ne!(a, part(Endpoint::Completions, &chat("What is Rust?", 0.0)));
        let other_model = part_of(Endpoint::ChatCompletions, &chat("What is Rust?", 0.0), "f");
        assert_ne!(a, other_model, "another embedding model");
    }
}
