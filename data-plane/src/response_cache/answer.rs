//! A cached answer's one canonical form — the plain answer in the client's protocol — made from
//! what the client got (a plain answer as it is, a stream read back into its plain answer), and
//! served again: plain as it is, or to a streaming client as the events a live stream gives
//! (Gemini's stream without `alt=sse`: the JSON array it gives).

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{header, HeaderValue};
use serde_json::Value;
use switchyard_engine::cache::CacheRule;
use switchyard_provider::stream::whole::{
    completion_answer, completion_stream, gemini_array_answer, gemini_array_stream,
    responses_answer, responses_stream,
};
use switchyard_provider::{StreamAssembler, StreamTranslator, Usage};
use switchyard_state::cache::CacheEntry;

use super::key::{refused, Shape};
use crate::endpoint::Endpoint;

/// The canonical form of a whole answer: the plain answer `plain`, or the stream `chunks` (of
/// `shape`) read back; `None` when there is no whole answer to keep (a cut stream, an answer
/// that is not JSON) or it is a refusal.
pub fn canonical(
    endpoint: Endpoint,
    shape: Shape,
    plain: Option<&Bytes>,
    chunks: Option<Vec<Bytes>>,
    model: &str,
    usage: Usage,
) -> Option<Vec<u8>> {
    let body = match (plain, chunks) {
        (Some(plain), _) => plain.to_vec(),
        (None, Some(chunks)) => read_back(endpoint, shape, &chunks, model, usage)?,
        (None, None) => return None,
    };
    let parsed: Value = serde_json::from_slice(&body).ok()?;
    (!refused(endpoint, &parsed)).then_some(body)
}

/// A whole stream as the plain answer of its endpoint.
fn read_back(
    endpoint: Endpoint,
    shape: Shape,
    chunks: &[Bytes],
    model: &str,
    usage: Usage,
) -> Option<Vec<u8>> {
    match (endpoint, shape) {
        (Endpoint::Completions, _) => completion_answer(&chunks.concat(), usage),
        (Endpoint::Responses, _) => responses_answer(&chunks.concat()),
        (_, Shape::JsonArray) => gemini_array_answer(&chunks.concat(), model, usage),
        _ => {
            let mut assembler = StreamAssembler::new(endpoint.protocol());
            for chunk in chunks {
                assembler.push(chunk);
            }
            assembler.finish(model, usage)
        }
    }
}

/// A hit's answer: the canonical body as it is, or replayed as the client's stream (`shape`).
/// `include_usage`: the OpenAI client asked for the usage chunk.
pub fn replay(
    endpoint: Endpoint,
    body: &[u8],
    shape: Shape,
    model: &str,
    include_usage: bool,
) -> Option<Response> {
    let (out, events) = match (shape, endpoint) {
        (Shape::Plain, _) => (Bytes::copy_from_slice(body), false),
        (Shape::JsonArray, _) => (Bytes::from(gemini_array_stream(body, model).ok()?), false),
        (Shape::Events, Endpoint::Completions) => (
            Bytes::from(completion_stream(body, include_usage).ok()?),
            true,
        ),
        (Shape::Events, Endpoint::Responses) => (Bytes::from(responses_stream(body).ok()?), true),
        (Shape::Events, _) => {
            let protocol = endpoint.protocol();
            let mut out = Vec::with_capacity(body.len() * 2);
            StreamTranslator::new(protocol, protocol, model, include_usage)
                .whole_answer(body, &mut out)
                .ok()?;
            (Bytes::from(out), true)
        }
    };
    let mut response = Response::new(Body::from(out));
    if events {
        *response.headers_mut() = crate::attempt::sse_headers();
    } else {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    Some(response)
}

/// Whether a stored answer may be served under `rule` at `now`: only while it is younger than
/// the rule's TTL as the rule is now. A store expires an entry at the TTL it was stored with; a
/// TTL lowered since applies to the entries already stored at once.
pub fn fresh(rule: &CacheRule, entry: &CacheEntry, now: u64) -> bool {
    now.saturating_sub(entry.stored_at) < rule.ttl_seconds.saturating_mul(1000)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const OPENAI: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;

    #[tokio::test]
    async fn a_canonical_answer_replays_as_a_stream_that_reads_back_to_it() {
        let replayed = replay(
            Endpoint::ChatCompletions,
            OPENAI.as_bytes(),
            Shape::Events,
            "m",
            false,
        )
        .unwrap();
        assert_eq!(
            replayed.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        let bytes = axum::body::to_bytes(replayed.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        let back = canonical(
            Endpoint::ChatCompletions,
            Shape::Events,
            None,
            Some(vec![bytes]),
            "m",
            Usage::default(),
        )
        .unwrap();
        let back: Value = serde_json::from_slice(&back).unwrap();
        assert_eq!(back["choices"][0]["message"]["content"], "Hello");
    }

    #[test]
    fn a_refusal_or_a_cut_stream_has_no_canonical_form() {
        let refusal = OPENAI.replace(
            "\"finish_reason\":\"stop\"",
            "\"finish_reason\":\"content_filter\"",
        );
        let plain = Bytes::from(refusal);
        assert!(canonical(
            Endpoint::ChatCompletions,
            Shape::Plain,
            Some(&plain),
            None,
            "m",
            Usage::default()
        )
        .is_none());
        let cut = Bytes::from_static(
            b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"He\"}}]}\n\n",
        );
        assert!(canonical(
            Endpoint::ChatCompletions,
            Shape::Events,
            None,
            Some(vec![cut]),
            "m",
            Usage::default()
        )
        .is_none());
    }
}
