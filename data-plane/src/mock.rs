//! `provider: mock`: an in-process simulated upstream for demos, drills and quick starts. It
//! answers natively in the client's own protocol (OpenAI, Anthropic or Gemini), so requests to
//! it are never translated. Answer shapes come from `switchyard_mock_upstream::sim`, the same builders as the mock
//! HTTP server, so the two never diverge.
//!
//! A mock channel's options travel in its `base_url` (`mock://sim?latency_ms=20&failure_rate=0.3`)
//! so that snapshots from the control plane carry them too, with no extra field.

use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde::Deserialize;
use switchyard_engine::RandomSource;
use switchyard_mock_upstream::sim;
use switchyard_provider::Protocol;

use crate::endpoint::Endpoint;
use crate::upstream::UpstreamResponse;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockOptions {
    /// Time before the response starts.
    pub latency_ms: u64,
    /// Share of requests (0..=1) answered with `failure_status`.
    pub failure_rate: f64,
    pub failure_status: u16,
    /// Content chunks of a streamed answer.
    pub stream_chunks: usize,
    /// Gap between streamed chunks.
    pub chunk_gap_ms: u64,
    /// The assistant's answer.
    pub content: Option<String>,
}

impl Default for MockOptions {
    fn default() -> MockOptions {
        MockOptions {
            latency_ms: 0,
            failure_rate: 0.0,
            failure_status: 500,
            stream_chunks: 4,
            chunk_gap_ms: 0,
            content: None,
        }
    }
}

impl MockOptions {
    pub fn to_url(&self) -> String {
        let mut url = format!(
            "mock://sim?latency_ms={}&failure_rate={}&failure_status={}&stream_chunks={}&chunk_gap_ms={}",
            self.latency_ms,
            self.failure_rate,
            self.failure_status,
            self.stream_chunks,
            self.chunk_gap_ms
        );
        if let Some(content) = &self.content {
            url.push_str("&content=");
            url.push_str(&percent_encode(content));
        }
        url
    }

    pub fn from_url(url: &str) -> Result<MockOptions, String> {
        let rest = url
            .strip_prefix("mock://")
            .ok_or_else(|| format!("a mock channel's base_url starts with mock://, got {url:?}"))?;
        let query = rest.split_once('?').map(|(_, q)| q).unwrap_or("");
        let mut options = MockOptions::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let bad =
                |_: std::num::ParseIntError| format!("mock option {key}: bad value {value:?}");
            match key {
                "latency_ms" => options.latency_ms = value.parse().map_err(bad)?,
                "failure_rate" => {
                    options.failure_rate = value
                        .parse()
                        .map_err(|_| format!("mock option {key}: bad value {value:?}"))?
                }
                "failure_status" => options.failure_status = value.parse().map_err(bad)?,
                "stream_chunks" => options.stream_chunks = value.parse().map_err(bad)?,
                "chunk_gap_ms" => options.chunk_gap_ms = value.parse().map_err(bad)?,
                "content" => options.content = Some(percent_decode(value)),
                _ => return Err(format!("unknown mock option {key:?}")),
            }
        }
        if !(0.0..=1.0).contains(&options.failure_rate) {
            return Err("mock option failure_rate must be between 0 and 1".to_owned());
        }
        if StatusCode::from_u16(options.failure_status).is_err() {
            return Err("mock option failure_status is not an HTTP status".to_owned());
        }
        Ok(options)
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match decoded {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the simulation needs to know about the request.
pub struct MockRequest<'a> {
    pub endpoint: Endpoint,
    pub model: &'a str,
    pub stream: bool,
    pub inputs: usize,
    pub prompt_tokens: u64,
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
    if options.failure_rate > 0.0 && rng.next_f64() < options.failure_rate {
        let status = options.failure_status;
        let protocol = match request.endpoint.protocol() {
            Protocol::OpenAi => sim::Protocol::OpenAi,
            Protocol::Anthropic => sim::Protocol::Anthropic,
            Protocol::Gemini => sim::Protocol::Gemini,
        };
        let body = sim::error_json(protocol, status, "simulated upstream failure");
        return json_response(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            body,
        );
    }
    let model = request.model;
    let n = options.stream_chunks.max(1);
    let events = |events: Vec<String>| sse_response(events, options.chunk_gap_ms);
    match (request.endpoint, request.stream) {
        (Endpoint::ChatCompletions, false) => json_response(
            StatusCode::OK,
            sim::chat_completion_json_with_usage(model, content, request.prompt_tokens),
        ),
        (Endpoint::ChatCompletions, true) => events(sim::chat_chunks(model, content, n)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_round_trip_through_the_url() {
        let options = MockOptions {
            latency_ms: 20,
            failure_rate: 0.25,
            failure_status: 503,
            stream_chunks: 6,
            chunk_gap_ms: 15,
            content: Some("hi there & bye".into()),
        };
        assert_eq!(MockOptions::from_url(&options.to_url()), Ok(options));
        assert_eq!(
            MockOptions::from_url("mock://sim"),
            Ok(MockOptions::default())
        );
        assert!(MockOptions::from_url("mock://sim?failure_rate=2").is_err());
        assert!(MockOptions::from_url("mock://sim?colour=red").is_err());
    }
}
