//! `provider: mock`: an in-process simulated upstream for demos, drills and quick starts. It
//! answers natively in the client's own protocol (OpenAI, Anthropic or Gemini), so requests to
//! it are never translated. Answer shapes come from the `switchyard-sim` crate, the same
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
use switchyard_sim as sim;
pub use switchyard_upstream::MockOptions;

use tokio::time::timeout;

use super::exchange::{Attempt, SendError, Upstream, UpstreamResponse};
use crate::endpoint::Endpoint;

/// A mock channel's upstream: its simulation, with the channel's options.
pub struct Simulator<'a>(pub &'a MockOptions);

impl Upstream for Simulator<'_> {
    /// The simulated upstream answers, within the first-byte timeout.
    async fn send(
        &self,
        attempt: &Attempt<'_>,
        rng: &mut (impl RandomSource + Send),
    ) -> Result<UpstreamResponse, SendError> {
        let inspected = attempt.inspected;
        let request = MockRequest {
            endpoint: attempt.endpoint,
            model: attempt.upstream_model,
            stream: inspected.stream,
            inputs: inspected.inputs,
            prompt_tokens: u64::from(inspected.needs.estimated_prompt_tokens.unwrap_or(1)),
            // The simulation answers in the client's protocol: it reports stream usage when
            // the client or the gateway asked for it, like OpenAI.
            stream_usage: inspected.asked_stream_usage() || attempt.call.strip_usage_chunk,
            body: &attempt.call.body,
        };
        timeout(attempt.first_byte_limit(), respond(self.0, &request, rng))
            .await
            .map_err(|_| SendError::Timeout)
    }
}

/// What the simulation needs to know about the request.
pub struct MockRequest<'a> {
    pub endpoint: Endpoint,
    pub model: &'a str,
    pub stream: bool,
    pub inputs: usize,
    pub prompt_tokens: u64,
    /// An OpenAI chat stream asked for its usage chunk (`stream_options.include_usage`).
    pub stream_usage: bool,
    /// The body as sent upstream: what moderations and rerank score.
    pub body: &'a [u8],
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
    if let Some(status) = options.draw_failure(rng) {
        return failure(request.endpoint, status);
    }
    let content = options.content.as_deref().unwrap_or(sim::DEFAULT_CONTENT);
    if request.stream {
        let chunks = options.stream_chunks.max(1);
        if let Some(events) = stream_events(request, content, chunks) {
            return sse_response(events, options.chunk_gap_ms);
        }
    }
    plain_answer(request, content)
}

/// A drawn failure: the error status with an error body in the client's protocol.
fn failure(endpoint: Endpoint, status: StatusCode) -> UpstreamResponse {
    let protocol = match endpoint.protocol() {
        Protocol::OpenAi => sim::Protocol::OpenAi,
        Protocol::Anthropic => sim::Protocol::Anthropic,
        Protocol::Gemini => sim::Protocol::Gemini,
    };
    let body = sim::error_json(protocol, status.as_u16(), "simulated upstream failure");
    json_response(status, body)
}

/// The events of a streamed answer in `n` content chunks; `None` for an endpoint that never
/// streams (it gets its plain answer).
fn stream_events(request: &MockRequest<'_>, content: &str, n: usize) -> Option<Vec<String>> {
    let (model, prompt_tokens) = (request.model, request.prompt_tokens);
    let answer = sim::Answer::new(model, content).prompt_tokens(prompt_tokens);
    Some(match request.endpoint {
        Endpoint::ChatCompletions => sim::chat_answer_chunks(&answer, n, request.stream_usage),
        Endpoint::Completions => sim::completion_chunks(model, content, n),
        Endpoint::Responses => sim::response_events(model, content, n, prompt_tokens),
        Endpoint::Messages => sim::anthropic_answer_events(&answer, n),
        Endpoint::GeminiGenerate => sim::gemini_events(&answer, n),
        _ => return None,
    })
}

/// The answer of a request that does not stream (or of an endpoint that never does).
fn plain_answer(request: &MockRequest<'_>, content: &str) -> UpstreamResponse {
    let (model, prompt_tokens) = (request.model, request.prompt_tokens);
    let answer = sim::Answer::new(model, content).prompt_tokens(prompt_tokens);
    let body = match request.endpoint {
        Endpoint::ChatCompletions => sim::chat_answer_json(&answer),
        Endpoint::Completions => sim::completion_json(model, content, prompt_tokens),
        Endpoint::Embeddings => sim::embeddings_json(model, request.inputs.max(1)),
        Endpoint::Responses => sim::response_json(model, content, prompt_tokens),
        Endpoint::Messages => sim::anthropic_answer_json(&answer),
        Endpoint::MessagesCountTokens => sim::anthropic_count_tokens_json(prompt_tokens),
        Endpoint::GeminiGenerate => sim::gemini_response_json(&answer),
        Endpoint::GeminiCountTokens => sim::gemini_count_tokens_json(prompt_tokens),
        Endpoint::ImagesGenerations => sim::images_json(1),
        Endpoint::AudioTranscriptions => sim::transcription_json(content),
        Endpoint::AudioSpeech => return speech_response(),
        Endpoint::Models => sim::models_json(&[model]),
        Endpoint::Moderations => sim::moderation_json(Some(model), &request_json(request.body)),
        Endpoint::Rerank => sim::rerank_json(Some(model), &request_json(request.body)),
        // Never sent here: a mock channel allows no pass-through and keeps no files or batches.
        Endpoint::Passthrough | Endpoint::Files | Endpoint::Batches | Endpoint::MessageBatches => {
            let body = r#"{"error":{"message":"a simulated channel has no pass-through","type":"invalid_request_error"}}"#;
            return json_response(StatusCode::NOT_FOUND, body.into());
        }
        // Never an HTTP request: a realtime session is simulated by the realtime relay's own
        // simulated upstream; a plain request here is told so.
        Endpoint::Realtime => {
            return json_response(
                StatusCode::BAD_REQUEST,
                sim::openai_error_json(
                    "the Realtime API is a WebSocket session",
                    "invalid_request_error",
                    "websocket_required",
                ),
            )
        }
    };
    json_response(StatusCode::OK, body)
}

/// The request's JSON body (`null` when it is not JSON: the answer then scores nothing).
fn request_json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or(serde_json::Value::Null)
}

/// Speech: audio bytes, not JSON.
fn speech_response() -> UpstreamResponse {
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
