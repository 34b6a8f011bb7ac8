//! A Bedrock channel's upstream, [`Bedrock`]: an adapter over [`Http`] whose answers are
//! converted to Anthropic's Messages shape before the attempt reads them: the channel is planned as Anthropic's (its requests converted to the Converse API by
//! `switchyard_upstream::bedrock`), so everything after this point — checks, usage, translation
//! to the client's protocol, pass-through to an Anthropic client — sees Anthropic answers:
//!
//! - a `Converse` answer becomes an Anthropic message, a `CountTokens` answer Anthropic's count
//!   (an answer that cannot be converted is left as it is, and is then found malformed);
//! - a `ConverseStream` answer (`application/vnd.amazon.eventstream`) becomes Anthropic's SSE
//!   events as its frames arrive; a broken frame (bad CRC, length out of bounds) or a stream
//!   that ends before `messageStop` breaks the body, and an exception message becomes
//!   Anthropic's `error` event, the last one;
//! - an error answer becomes Anthropic's error body, status and headers (`Retry-After`) kept;
//! - a request the Converse API cannot express (an image URL) is answered here as Bedrock's 400
//!   `ValidationException` ([`refusal`]), never sent.

use std::io;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures_util::stream;
use http::{header, HeaderValue};
use http_body_util::{BodyExt, Limited};
use switchyard_provider::bedrock::{
    anthropic_count, anthropic_error, anthropic_message, message_id, StreamConverter,
};

use switchyard_engine::RandomSource;

use super::exchange::{Attempt, SendError, Upstream, UpstreamResponse};
use super::http::{Http, Unsent};

/// A Bedrock channel's upstream: sent over [`Http`], answered in Anthropic's shape.
pub struct Bedrock;

impl Upstream for Bedrock {
    async fn send(
        &self,
        attempt: &Attempt<'_>,
        _: &mut (impl RandomSource + Send),
    ) -> Result<UpstreamResponse, SendError> {
        let request = Http::authorized(attempt).await;
        let request = match request.and_then(|credential| Http::request(attempt, &credential)) {
            Ok(request) => request,
            // What the Converse API cannot express is Bedrock's refusal of the request, in the
            // shape the channel is planned in: a 400 the client hears (a rejection, not a
            // transport failure of the channel).
            Err(Unsent::Inexpressible(message)) => return Ok(refusal(&message)),
            Err(unsent) => return unsent.into_result(),
        };
        let response = Http::exchange(attempt, request).await?;
        // Converse answers in Anthropic's shape, which the channel is planned in.
        let limit = attempt.idle_limit();
        let count_tokens = attempt.endpoint.is_count_tokens();
        // Boxed, so that its states are not part of every request's exchange.
        let adapting = adapt(response, attempt.upstream_model, count_tokens, limit);
        Ok(Box::pin(adapting).await)
    }
}

/// Most bytes of a plain answer read.
const MAX_ANSWER: usize = 16 * 1024 * 1024;
/// Most bytes of an error answer read.
const MAX_ERROR: usize = 1024 * 1024;

/// Bedrock's 400 `ValidationException` for a request the Converse API cannot express
/// (`message` names the feature), in Anthropic's shape like every answer of the channel.
fn refusal(message: &str) -> UpstreamResponse {
    let body = anthropic_error(
        400,
        Some("ValidationException"),
        serde_json::json!({ "message": message })
            .to_string()
            .as_bytes(),
    );
    let mut headers = http::HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    UpstreamResponse {
        status: http::StatusCode::BAD_REQUEST,
        headers,
        body: Body::from(body),
    }
}

/// Reads the whole body within `limit`: `None` when it breaks, is too long or is too slow.
async fn read(body: Body, max: usize, limit: Duration) -> Option<Bytes> {
    match tokio::time::timeout(limit, Limited::new(body, max).collect()).await {
        Ok(Ok(collected)) => Some(collected.to_bytes()),
        _ => None,
    }
}

fn broken() -> Body {
    Body::from_stream(stream::once(async {
        Err::<Bytes, io::Error>(io::Error::other("the Bedrock answer could not be read"))
    }))
}

/// `response` from a Bedrock channel in Anthropic's shape. `model` is the upstream model (the
/// message's `model`), `count_tokens` whether it answers a token count, `limit` the time left
/// to read a whole plain answer.
async fn adapt(
    mut response: UpstreamResponse,
    model: &str,
    count_tokens: bool,
    limit: Duration,
) -> UpstreamResponse {
    let headers = &mut response.headers;
    let request_id = headers
        .get("x-amzn-requestid")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    headers.remove(header::CONTENT_LENGTH);
    let body = std::mem::take(&mut response.body);
    if !response.status.is_success() {
        let exception = headers
            .get("x-amzn-errortype")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let raw = read(body, MAX_ERROR, limit).await.unwrap_or_default();
        let converted = anthropic_error(response.status.as_u16(), exception.as_deref(), &raw);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response.body = Body::from(converted);
        return response;
    }
    let id = message_id(&request_id);
    if content_type.starts_with(switchyard_upstream::bedrock::EVENT_STREAM) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response.body = converted_stream(body, StreamConverter::new(model, &id));
        return response;
    }
    let Some(raw) = read(body, MAX_ANSWER, limit).await else {
        response.body = broken();
        return response;
    };
    let converted = if count_tokens {
        anthropic_count(&raw)
    } else {
        anthropic_message(&raw, model, &id)
    };
    response.body = match converted {
        Ok(body) => Body::from(body),
        Err(e) => {
            tracing::debug!(error = %e, "a Bedrock answer could not be converted");
            Body::from(raw)
        }
    };
    response
}

/// The event stream `body` as Anthropic's SSE events.
fn converted_stream(body: Body, converter: StreamConverter) -> Body {
    struct State {
        body: Body,
        converter: StreamConverter,
        ended: bool,
    }
    let state = State {
        body,
        converter,
        ended: false,
    };
    Body::from_stream(stream::unfold(state, |mut s| async move {
        loop {
            if s.ended {
                return None;
            }
            let mut out = Vec::new();
            match s.body.frame().await {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if let Err(e) = s.converter.push(&data, &mut out) {
                        s.ended = true;
                        return Some((Err(io::Error::other(e)), s));
                    }
                    if s.converter.done() {
                        s.ended = true;
                    }
                }
                Some(Err(e)) => {
                    s.ended = true;
                    return Some((Err(io::Error::other(e)), s));
                }
                None => {
                    s.ended = true;
                    if let Err(e) = s.converter.finish(&mut out) {
                        return Some((Err(io::Error::other(e)), s));
                    }
                }
            }
            if !out.is_empty() {
                return Some((Ok(Bytes::from(out)), s));
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_or_error_body_is_read_up_to_its_cap_and_refused_beyond() {
        let within = Duration::from_secs(10);
        for max in [MAX_ANSWER, MAX_ERROR] {
            for len in [max - 1, max] {
                let body = read(Body::from(vec![b'x'; len]), max, within).await;
                assert_eq!(body.map(|b| b.len()), Some(len), "{len} bytes, cap {max}");
            }
            let over = read(Body::from(vec![b'x'; max + 1]), max, within).await;
            assert_eq!(over, None, "cap {max}");
        }
    }
}
