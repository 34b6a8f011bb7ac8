//! `provider: mock`: an in-process simulated upstream for demos, drills and quick starts. It
//! answers natively in the client's own protocol (OpenAI, Anthropic or Gemini), so requests to
//! it are never translated. Answer shapes come from `switchyard_upstream::sim`, the same
//! builders as the mock HTTP server, so the two never diverge.
//!
//! A mock channel's options ([`MockOptions`], from `switchyard-upstream`) travel in its
//! `base_url` (`mock://sim?latency_ms=20&failure_rate=0.3`) so that snapshots from the control
//! plane carry them too, with no extra field.

use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use switchyard_engine::RandomSource;
use switchyard_provider::Protocol;
use switchyard_upstream::sim;
pub use switchyard_upstream::MockOptions;

use crate::endpoint::Endpoint;
use crate::upstream::UpstreamResponse;

/// What the simulation needs to know about the request.
pub struct MockRequest<'a> {
    pub endpoint: Endpoint,
    pub model: &'a str,
    pub stream: bool,
    pub inputs: usize,
    pub prompt_tokens: u64,
    /// An OpenAI chat stream asked for its usage chunk (`stream_options.include_usage`).
    pub stream_usage: bool,
}

/// Answers one request as the simulated upstream would.
pub async fn respond(
    options: &MockOptions,
    request: &MockRequest<'_>,
    rng: &mut impl RandomSource,
) -> UpstreamResponse {
    if options.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(options.latency_ms)).await;
    }
    let content = options.content.as_deref().unwrap_or(sim::DEFAULT_CONTENT);
    if let Some(status) = options.draw_failure(rng) {
        let protocol = match request.endpoint.protocol() {
            Protocol::OpenAi => sim::Protocol::OpenAi,
            Protocol::Anthropic => sim::Protocol::Anthropic,
            Protocol::Gemini => sim::Protocol::Gemini,
        };
        let body = sim::error_json(protocol, status.as_u16(), "simulated upstream failure");
        return json_response(status, body);
    }
    let model = request.model;
    let n = options.stream_chunks.max(1);
    let events = |events: Vec<String>| sse_response(events, options.chunk_gap_ms);
    match (request.endpoint, request.stream) {
        (Endpoint::ChatCompletions, false) => json_response(
            StatusCode::OK,
            sim::chat_completion_json_with_usage(model, content, request.prompt_tokens),
        ),
        (Endpoint::ChatCompletions, true) => events(sim::chat_chunks_with_usage(
            model,
            content,
            n,
            request.stream_usage.then_some(request.prompt_tokens),
        )),
        (Endpoint::Completions, false) => json_response(
            StatusCode::OK,
            sim::completion_json(model, content, request.prompt_tokens),
        ),
        (Endpoint::Completions, true) => events(sim::completion_chunks(model, content, n)),
        (Endpoint::Embeddings, _) => json_response(
            StatusCode::OK,
            sim::embeddings_json(model, request.inputs.max(1)),
        ),
        (Endpoint::Responses, false) => json_response(
            StatusCode::OK,
            sim::response_json(model, content, request.prompt_tokens),
        ),
        (Endpoint::Responses, true) => events(sim::response_events(
            model,
            content,
            n,
            request.prompt_tokens,
        )),
        (Endpoint::Messages, false) => json_response(
            StatusCode::OK,
            sim::anthropic_message_json(model, content, request.prompt_tokens),
        ),
        (Endpoint::Messages, true) => events(sim::anthropic_events(
            model,
            content,
            n,
            request.prompt_tokens,
        )),
        (Endpoint::MessagesCountTokens, _) => json_response(
            StatusCode::OK,
            sim::anthropic_count_tokens_json(request.prompt_tokens),
        ),
        (Endpoint::GeminiGenerate, false) => json_response(
            StatusCode::OK,
            sim::gemini_response_json(
                &sim::Answer::new(model, content).prompt_tokens(request.prompt_tokens),
            ),
        ),
        (Endpoint::GeminiGenerate, true) => events(sim::gemini_events(
            &sim::Answer::new(model, content).prompt_tokens(request.prompt_tokens),
            n,
        )),
        (Endpoint::GeminiCountTokens, _) => json_response(
            StatusCode::OK,
            sim::gemini_count_tokens_json(request.prompt_tokens),
        ),
        (Endpoint::ImagesGenerations, _) => json_response(StatusCode::OK, sim::images_json(1)),
        (Endpoint::AudioTranscriptions, _) => {
            json_response(StatusCode::OK, sim::transcription_json(content))
        }
        (Endpoint::AudioSpeech, _) => {
            let mut headers = HeaderMap::new();
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("audio/mpeg"),
            );
            UpstreamResponse {
                status: StatusCode::OK,
                headers,
                body: Body::from(sim::speech_bytes()),
            }
        }
        (Endpoint::Models, _) => json_response(StatusCode::OK, sim::models_json(&[model])),
    }
}

fn json_response(status: StatusCode, body: String) -> UpstreamResponse {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    UpstreamResponse {
        status,
        headers,
        body: Body::from(body),
    }
}

fn sse_response(events: Vec<String>, gap_ms: u64) -> UpstreamResponse {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    let gap = Duration::from_millis(gap_ms);
    let stream = futures_util::stream::unfold(
        (events.into_iter(), true),
        move |(mut events, first)| async move {
            let event = events.next()?;
            if !first && !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
            Some((Ok::<_, std::io::Error>(Bytes::from(event)), (events, false)))
        },
    );
    UpstreamResponse {
        status: StatusCode::OK,
        headers,
        body: Body::from_stream(stream),
    }
}
