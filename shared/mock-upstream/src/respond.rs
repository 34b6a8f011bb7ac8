//! Turns a request and the [`Behavior`] chosen for it into a response: the answer of each
//! endpoint in its protocol (OpenAI, Anthropic Messages, Gemini; built with [`crate::sim`] from
//! the behaviour's text, tool calls and cached tokens), scripted errors in the shape of the
//! path's protocol, and streamed bodies that can stall or break.
//!
//! Streams are decided per endpoint: OpenAI and Anthropic paths stream on the body's
//! `"stream": true`, Gemini's `:streamGenerateContent` always streams (SSE with `?alt=sse`, a
//! JSON array written piece by piece without), and any endpoint streams when the behaviour
//! forces it (`stream`, `cut_after_chunks`).

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use serde_json::Value;
use switchyard_sim::{self as sim, Protocol};
use tokio::time::Sleep;

use crate::azure;
use crate::script::{Behavior, RecordedRequest, ReportedUsage};
use crate::vertex;

/// Chunks streamed when the request asks for `"stream": true` and no rule says otherwise.
pub const DEFAULT_STREAM_CHUNKS: usize = 3;

/// Body of every mock response: a complete buffer, or SSE events released one by one (with an
/// optional gap) that can end in an abrupt error, which hyper turns into a dropped connection.
pub struct MockBody {
    kind: Kind,
}

enum Kind {
    Full(Option<Bytes>),
    Events {
        events: VecDeque<Bytes>,
        gap: Duration,
        sleep: Option<Pin<Box<Sleep>>>,
        cut: bool,
        cutting: bool,
    },
}

impl MockBody {
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        Self {
            kind: Kind::Full(Some(bytes.into())),
        }
    }

    pub(crate) fn events<E: Into<Bytes>>(events: Vec<E>, gap: Duration, cut: bool) -> Self {
        Self {
            kind: Kind::Events {
                events: events.into_iter().map(Into::into).collect(),
                gap,
                sleep: None,
                cut,
                cutting: false,
            },
        }
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match &mut self.get_mut().kind {
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Events {
                events,
                gap,
                sleep,
                cut,
                cutting,
            } => {
                if let Some(timer) = sleep {
                    ready!(timer.as_mut().poll(cx));
                    *sleep = None;
                }
                if *cutting {
                    return Poll::Ready(Some(Err(cut_error())));
                }
                match events.pop_front() {
                    Some(event) => {
                        if !gap.is_zero() && !events.is_empty() {
                            *sleep = Some(Box::pin(tokio::time::sleep(*gap)));
                        }
                        Poll::Ready(Some(Ok(Frame::data(event))))
                    }
                    None if *cut => {
                        // Yield once before failing so hyper flushes the events already written;
                        // failing at once could discard them from its write buffer.
                        *cutting = true;
                        let mut timer = Box::pin(tokio::time::sleep(Duration::from_millis(5)));
                        if timer.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(Some(Err(cut_error())));
                        }
                        *sleep = Some(timer);
                        Poll::Pending
                    }
                    None => Poll::Ready(None),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(bytes) => bytes.is_none(),
            Kind::Events { .. } => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Kind::Full(None) => SizeHint::with_exact(0),
            Kind::Events { .. } => SizeHint::default(),
        }
    }
}

fn cut_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "mock upstream: connection cut mid-stream",
    )
}

/// What kind of API answers on a path; decides the shape of answers and of streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    Chat,
    Completions,
    Embeddings,
    Responses,
    Images,
    Speech,
    Transcriptions,
    Models,
    Model,
    Messages,
    MessagesCountTokens,
    GeminiGenerate,
    GeminiStream,
    GeminiCountTokens,
    Moderations,
    Rerank,
}

fn endpoint(method: &str, path: &str) -> Result<Endpoint, StatusCode> {
    let (want_post, endpoint) = match path {
        "/v1/chat/completions" => (true, Endpoint::Chat),
        "/v1/completions" => (true, Endpoint::Completions),
        "/v1/embeddings" => (true, Endpoint::Embeddings),
        "/v1/responses" => (true, Endpoint::Responses),
        "/v1/images/generations" => (true, Endpoint::Images),
        "/v1/audio/speech" => (true, Endpoint::Speech),
        "/v1/audio/transcriptions" => (true, Endpoint::Transcriptions),
        "/v1/models" => (false, Endpoint::Models),
        "/v1/messages" => (true, Endpoint::Messages),
        "/v1/messages/count_tokens" => (true, Endpoint::MessagesCountTokens),
        "/v1/moderations" => (true, Endpoint::Moderations),
        "/v1/rerank" | "/v2/rerank" => (true, Endpoint::Rerank),
        p if p.starts_with("/v1/models/") => (false, Endpoint::Model),
        p if p.starts_with("/v1beta/models/") => match p.rsplit_once(':') {
            Some((_, "generateContent")) => (true, Endpoint::GeminiGenerate),
            Some((_, "streamGenerateContent")) => (true, Endpoint::GeminiStream),
            Some((_, "countTokens")) => (true, Endpoint::GeminiCountTokens),
            _ => return Err(StatusCode::NOT_FOUND),
        },
        _ => return Err(StatusCode::NOT_FOUND),
    };
    let method_ok = if want_post {
        method == "POST"
    } else {
        method == "GET"
    };
    if method_ok {
        Ok(endpoint)
    } else {
        Err(StatusCode::METHOD_NOT_ALLOWED)
    }
}

/// The response for `request`, following `behavior` (the default answer when `None`), and the
/// usage that response reports (chat, Messages and Gemini generations that say their usage:
/// every answer but an OpenAI stream without `stream_options.include_usage`, a stream cut
/// short, or a scripted body). Hangs, latency and cuts before the first byte are handled by
/// the caller, which owns the connection.
pub fn respond(
    request: &RecordedRequest,
    behavior: Option<&Behavior>,
    models: &[String],
) -> (Response<MockBody>, Option<ReportedUsage>) {
    let default = Behavior::ok();
    let behavior = behavior.unwrap_or(&default);
    let mut reported = None;
    let response = answer(request, behavior, models, &mut reported);
    (with_headers(response, behavior), reported)
}

/// `response` with the behaviour's extra headers (`Retry-After`, ...) appended (a
/// `content-type` replaces the answer's).
pub(crate) fn with_headers(
    mut response: Response<MockBody>,
    behavior: &Behavior,
) -> Response<MockBody> {
    for (name, value) in &behavior.headers {
        match (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            // A rule's `content-type` replaces the answer's own (a scripted SSE body, say).
            (Ok(name), Ok(value)) if name == header::CONTENT_TYPE => {
                response.headers_mut().insert(name, value);
            }
            (Ok(name), Ok(value)) => {
                response.headers_mut().append(name, value);
            }
            _ => tracing::warn!(header = %name, "mock rule header is not valid HTTP; skipped"),
        }
    }
    response
}

fn answer(
    request: &RecordedRequest,
    behavior: &Behavior,
    models: &[String],
    reported: &mut Option<ReportedUsage>,
) -> Response<MockBody> {
    let protocol = Protocol::of_path(&request.path);
    if let Some(response) = scripted(protocol, behavior) {
        return response;
    }
    let status = behavior
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let path = match vertex::gemini_path(&request.path) {
        Some(gemini) => std::borrow::Cow::Owned(gemini),
        None => azure::openai_path(&request.path),
    };
    let endpoint = match endpoint(&request.method, &path) {
        Ok(endpoint) => endpoint,
        Err(status) => {
            let message = format!(
                "mock upstream: no route for {} {}",
                request.method, request.path
            );
            return full(
                status,
                "application/json",
                error_body(protocol, status, &message),
            );
        }
    };
    let said = Said::of(request, behavior);
    let wants_stream = match endpoint {
        Endpoint::GeminiStream => true,
        Endpoint::GeminiGenerate | Endpoint::GeminiCountTokens | Endpoint::MessagesCountTokens => {
            false
        }
        _ => said.json.get("stream").and_then(Value::as_bool) == Some(true),
    };
    if behavior.stream.is_some() || behavior.cut_after_chunks.is_some() || wants_stream {
        return stream_answer(request, behavior, endpoint, &said, status, reported);
    }
    plain_answer(endpoint, &path, behavior, models, &said, status, reported)
}

/// The answers a behaviour scripts whatever the endpoint: a malformed body, an error status (with
/// its scripted body, else the protocol's error), or a fixed body; `None` for a generated answer.
pub(crate) fn scripted(protocol: Protocol, behavior: &Behavior) -> Option<Response<MockBody>> {
    let status = behavior.status.and_then(|s| StatusCode::from_u16(s).ok());
    if behavior.malformed {
        let status = status.unwrap_or(StatusCode::OK);
        return Some(full(status, "application/json", malformed_body(protocol)));
    }
    if let Some(status) = status.filter(|s| !s.is_success()) {
        let body = behavior
            .body
            .clone()
            .unwrap_or_else(|| error_body(protocol, status, "mock upstream scripted error"));
        return Some(full(status, content_type_of(&body), body));
    }
    let status = status.unwrap_or(StatusCode::OK);
    let body = behavior.body.as_ref()?;
    Some(full(status, content_type_of(body), body.clone()))
}

/// What the generated answer to a request says, whatever its endpoint.
struct Said<'a> {
    /// The request's body as JSON (`null` when it is not).
    json: Value,
    model: &'a str,
    prompt_tokens: u64,
    /// What chat, messages and Gemini say (text and tool calls).
    answer: sim::Answer,
    /// The text of the endpoints that cannot carry tool calls.
    plain_text: &'a str,
}

impl<'a> Said<'a> {
    fn of(request: &'a RecordedRequest, behavior: &'a Behavior) -> Self {
        let model = request.model.as_deref().unwrap_or(sim::DEFAULT_MODEL);
        let prompt_tokens = sim::estimate_tokens(&String::from_utf8_lossy(&request.body)).max(1);
        let plain_text = if behavior.empty_completion {
            ""
        } else {
            behavior.text.as_deref().unwrap_or(sim::DEFAULT_CONTENT)
        };
        Said {
            json: request.json(),
            model,
            prompt_tokens,
            answer: script_answer(behavior, model, prompt_tokens),
            plain_text,
        }
    }
}

/// The chunks a streamed answer is said in: the behaviour's stream shape, else enough for its
/// cut, else [`DEFAULT_STREAM_CHUNKS`].
pub(crate) fn stream_chunks(behavior: &Behavior) -> usize {
    match (behavior.stream, behavior.cut_after_chunks) {
        (Some(shape), _) => shape.chunks,
        (None, Some(cut)) => DEFAULT_STREAM_CHUNKS.max(cut),
        (None, None) => DEFAULT_STREAM_CHUNKS,
    }
}

/// A streamed answer: the endpoint's events, released with the behaviour's gap, cut where it
/// says.
fn stream_answer(
    request: &RecordedRequest,
    behavior: &Behavior,
    endpoint: Endpoint,
    said: &Said<'_>,
    status: StatusCode,
    reported: &mut Option<ReportedUsage>,
) -> Response<MockBody> {
    let gap = behavior.stream.map(|s| s.gap).unwrap_or_default();
    let (content_type, mut events) =
        stream_events(request, endpoint, said, stream_chunks(behavior), reported);
    let cut = behavior.cut_after_chunks.is_some();
    if let Some(n) = behavior.cut_after_chunks {
        // A cut stream may stop before its usage event: report none.
        *reported = None;
        // Never reach the terminating event: the stream must break, not end.
        events.truncate(n.min(events.len().saturating_sub(1)));
    }
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(MockBody::events(events, gap, cut))
        .unwrap_or_else(|_| internal_error())
}

/// The content type and the events of `endpoint`'s stream in `chunks` pieces, noting in
/// `reported` the usage they say.
fn stream_events(
    request: &RecordedRequest,
    endpoint: Endpoint,
    said: &Said<'_>,
    chunks: usize,
    reported: &mut Option<ReportedUsage>,
) -> (&'static str, Vec<String>) {
    let (model, text, answer) = (said.model, said.plain_text, &said.answer);
    let events = match endpoint {
        Endpoint::Completions => sim::completion_chunks(model, text, chunks),
        Endpoint::Responses => sim::response_events(model, text, chunks, said.prompt_tokens),
        Endpoint::Messages | Endpoint::MessagesCountTokens => {
            *reported = Some(ReportedUsage::of(answer));
            sim::anthropic_answer_events(answer, chunks)
        }
        Endpoint::GeminiStream if request.query_param("alt") != Some("sse") => {
            // Without `alt=sse` Gemini streams one JSON array of responses.
            *reported = Some(ReportedUsage::of(answer));
            let responses = sim::gemini_stream_responses(answer, chunks);
            return ("application/json", json_array_pieces(responses));
        }
        Endpoint::GeminiGenerate | Endpoint::GeminiStream | Endpoint::GeminiCountTokens => {
            *reported = Some(ReportedUsage::of(answer));
            sim::gemini_events(answer, chunks)
        }
        // Other endpoints have no stream of their own; a forced stream uses the chat shape.
        _ => {
            let include_usage = said
                .json
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true);
            if include_usage && endpoint == Endpoint::Chat {
                *reported = Some(ReportedUsage::of(answer));
            }
            sim::chat_answer_chunks(answer, chunks, include_usage)
        }
    };
    ("text/event-stream", events)
}

/// `endpoint`'s answer in one body (JSON, but speech's audio), noting in `reported` the usage it
/// says.
fn plain_answer(
    endpoint: Endpoint,
    path: &str,
    behavior: &Behavior,
    models: &[String],
    said: &Said<'_>,
    status: StatusCode,
    reported: &mut Option<ReportedUsage>,
) -> Response<MockBody> {
    let (model, text, answer) = (said.model, said.plain_text, &said.answer);
    if matches!(
        endpoint,
        Endpoint::Chat | Endpoint::Messages | Endpoint::GeminiGenerate | Endpoint::GeminiStream
    ) {
        *reported = Some(ReportedUsage::of(answer));
    }
    let body = match endpoint {
        Endpoint::Chat => sim::chat_answer_json(answer),
        Endpoint::Completions => sim::completion_json(model, text, said.prompt_tokens),
        Endpoint::Embeddings => embeddings(model, &said.json),
        Endpoint::Responses => sim::response_json(model, text, said.prompt_tokens),
        Endpoint::Images => {
            let n = said.json.get("n").and_then(Value::as_u64).unwrap_or(1);
            sim::images_json(n.min(10) as usize)
        }
        Endpoint::Speech => return full(status, "audio/mpeg", sim::speech_bytes()),
        Endpoint::Transcriptions => {
            sim::transcription_json(behavior.text.as_deref().unwrap_or(sim::DEFAULT_CONTENT))
        }
        Endpoint::Models => {
            let ids: Vec<&str> = models.iter().map(String::as_str).collect();
            sim::models_json(&ids)
        }
        Endpoint::Model => {
            return model_answer(path.trim_start_matches("/v1/models/"), models, status)
        }
        Endpoint::Messages => sim::anthropic_answer_json(answer),
        Endpoint::MessagesCountTokens => sim::anthropic_count_tokens_json(said.prompt_tokens),
        Endpoint::GeminiGenerate | Endpoint::GeminiStream => sim::gemini_response_json(answer),
        Endpoint::GeminiCountTokens => sim::gemini_count_tokens_json(said.prompt_tokens),
        Endpoint::Moderations => sim::moderation_json(None, &said.json),
        Endpoint::Rerank => sim::rerank_json(None, &said.json),
    };
    full(status, "application/json", body)
}

/// `/v1/embeddings`: one vector per input, the `dimensions` and `encoding_format` asked for; a
/// text's vector is made of its words (see `sim::embeddings_json_for`).
fn embeddings(model: &str, json: &Value) -> String {
    let texts: Vec<&str> = match json.get("input") {
        Some(Value::Array(items)) if !items.is_empty() => {
            items.iter().map(|i| i.as_str().unwrap_or("")).collect()
        }
        Some(Value::String(text)) => vec![text.as_str()],
        _ => vec![""],
    };
    let dimensions = json
        .get("dimensions")
        .and_then(Value::as_u64)
        .map_or(sim::EMBEDDING_DIMENSIONS, |d| d.clamp(1, 4096) as usize);
    let base64 = json.get("encoding_format").and_then(Value::as_str) == Some("base64");
    sim::embeddings_json_for(model, &texts, dimensions, base64)
}

/// `GET /v1/models/{id}`: the model when listed, else OpenAI's 404 `model_not_found`.
fn model_answer(id: &str, models: &[String], status: StatusCode) -> Response<MockBody> {
    if !models.iter().any(|m| m == id) {
        let message = format!("The model `{id}` does not exist");
        let body = sim::openai_error_json(&message, "invalid_request_error", "model_not_found");
        return full(StatusCode::NOT_FOUND, "application/json", body);
    }
    let body = serde_json::json!({"id": id, "object": "model", "created": 1_700_000_000u64, "owned_by": "switchyard-mock"});
    full(status, "application/json", body.to_string())
}

/// What `behavior` makes the model say: its text (the default text unless it scripts tool calls),
/// its tool calls and cached tokens; nothing at all for an empty completion.
pub(crate) fn script_answer(behavior: &Behavior, model: &str, prompt_tokens: u64) -> sim::Answer {
    let answer = sim::Answer::new(model, "")
        .prompt_tokens(prompt_tokens)
        .cached_tokens(behavior.cached_tokens);
    if behavior.empty_completion {
        return answer;
    }
    let default_text = if behavior.tool_calls.is_empty() {
        sim::DEFAULT_CONTENT
    } else {
        ""
    };
    sim::Answer {
        text: behavior
            .text
            .clone()
            .unwrap_or_else(|| default_text.to_owned()),
        tool_calls: behavior.tool_calls.clone(),
        ..answer
    }
}

/// A JSON array written piece by piece (`[` r0, `,\r\n` r1, ..., `]`), the way Gemini streams
/// `streamGenerateContent` without `alt=sse`.
fn json_array_pieces(items: Vec<String>) -> Vec<String> {
    let mut pieces: Vec<String> = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            if i == 0 {
                format!("[{item}")
            } else {
                format!(",\r\n{item}")
            }
        })
        .collect();
    if pieces.is_empty() {
        pieces.push("[".to_owned());
    }
    pieces.push("]".to_owned());
    pieces
}

/// Looks like the start of an answer of the protocol, then stops being JSON.
fn malformed_body(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::OpenAi => {
            "{\"id\":\"chatcmpl-mock\",\"object\":\"chat.completion\",\"choices\":[<<mock: malformed>>"
        }
        Protocol::Anthropic => {
            "{\"id\":\"msg_mock\",\"type\":\"message\",\"content\":[<<mock: malformed>>"
        }
        Protocol::Gemini => "{\"candidates\":[{\"content\":<<mock: malformed>>",
    }
}

fn error_body(protocol: Protocol, status: StatusCode, message: &str) -> String {
    let message = format!("{message} (HTTP {})", status.as_u16());
    sim::error_json(protocol, status.as_u16(), &message)
}

fn content_type_of(body: &str) -> &'static str {
    if serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// A complete response with a known body.
pub fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<MockBody> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(MockBody::full(body))
        .unwrap_or_else(|_| internal_error())
}

fn internal_error() -> Response<MockBody> {
    let mut response = Response::new(MockBody::full(Bytes::from_static(
        b"mock upstream: bad response",
    )));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
}
