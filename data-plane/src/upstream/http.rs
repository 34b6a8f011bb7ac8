//! The network upstream: the call as the channel's HTTP request (its credential's auth, the
//! client's headers when passed through, the trace continued), sent on the calling thread's
//! pooled client within the first-byte timeout.

use std::borrow::Cow;

use axum::body::Body;
use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Full;
use switchyard_engine::RandomSource;
use switchyard_upstream::bedrock::RequestError;
use switchyard_upstream::{CredentialRuntime, Target, TokenError, TransportCause};
use tokio::time::timeout;

use super::exchange::{Attempt, SendError, Upstream, UpstreamResponse};
use crate::request::names::{TRACEPARENT, TRACESTATE};

/// An upstream reached over HTTP.
pub struct Http;

/// Why a call was not sent.
pub enum Unsent {
    /// The provider's answer without a send: a Vertex credential's or a workload identity's
    /// token endpoint refused (or failed), classified as the provider's own answer.
    Answered(UpstreamResponse),
    /// No request: the token endpoint could not be reached, or the request could not be built.
    Failed(SendError),
    /// The channel's API cannot express the request (only a Bedrock channel's request can be
    /// such; its adapter answers it as Bedrock's refusal): what it cannot express.
    Inexpressible(String),
}

impl Unsent {
    /// The answer or failure of a send that never happened.
    pub fn into_result(self) -> Result<UpstreamResponse, SendError> {
        match self {
            Unsent::Answered(response) => Ok(response),
            Unsent::Failed(error) => Err(error),
            Unsent::Inexpressible(_) => Err(SendError::BadRequest),
        }
    }
}

impl Upstream for Http {
    async fn send(
        &self,
        attempt: &Attempt<'_>,
        _: &mut (impl RandomSource + Send),
    ) -> Result<UpstreamResponse, SendError> {
        let request = Http::authorized(attempt).await;
        match request.and_then(|credential| Http::request(attempt, &credential)) {
            Ok(request) => Http::exchange(attempt, request).await,
            Err(unsent) => unsent.into_result(),
        }
    }
}

impl Http {
    /// The attempt's credential ready for the send: a Vertex credential's or a workload
    /// identity's access token (or temporary keys) cached, or obtained now within the
    /// first-byte budget; other credentials as they are.
    pub async fn authorized<'a>(
        attempt: &Attempt<'a>,
    ) -> Result<Cow<'a, CredentialRuntime>, Unsent> {
        let limit = attempt.first_byte_limit();
        match attempt.credential.authorized(attempt.client, limit).await {
            Ok(credential) => Ok(credential),
            Err(e) => Err(match token_failure(attempt, &e) {
                Some(answer) => Unsent::Answered(answer),
                None => Unsent::Failed(token_network_error(&e)),
            }),
        }
    }

    /// The call as the channel's request, with the credential's auth ([`Http::authorized`])
    /// and the trace continued. Not an `async fn`: the request (a few hundred bytes) is built
    /// in the sender's own future rather than moved out of one of its own.
    pub fn request(
        attempt: &Attempt<'_>,
        credential: &CredentialRuntime,
    ) -> Result<http::Request<Full<Bytes>>, Unsent> {
        let call = attempt.call;
        let request = attempt.runtime.request(
            Target {
                method: &call.method,
                path: &call.path,
                query: call.query.as_deref(),
                model: attempt.upstream_model,
            },
            call.passthrough.then_some(attempt.client_headers),
            credential,
            call.body.clone(),
        );
        let mut request = match request {
            Ok(request) => request,
            Err(RequestError::Translate(message)) => return Err(Unsent::Inexpressible(message)),
            Err(_) => return Err(Unsent::Failed(SendError::BadRequest)),
        };
        propagate_trace(attempt.client_headers, request.headers_mut());
        Ok(request)
    }

    /// Sends the request and waits for the answer's head, classifying what went wrong on the
    /// way.
    pub async fn exchange(
        attempt: &Attempt<'_>,
        request: http::Request<Full<Bytes>>,
    ) -> Result<UpstreamResponse, SendError> {
        // The connector enforces the connect timeout; the first-byte timeout (which starts with
        // the attempt, connection included) and the remaining budget bound the whole wait.
        let limit = attempt.first_byte_limit();
        // Boxed: the client's future (about 1 KB) is moved once, into its box, instead of into
        // the timeout and then with it into this future.
        let response = match timeout(limit, Box::pin(attempt.client.request(request))).await {
            Err(_) => return Err(SendError::Timeout),
            Ok(Err(e)) if e.is_connect() => return Err(SendError::Connect(e.cause())),
            // The connection was up but closed before the answer started: for a stream this is
            // a "cut before the first byte": a failure specific to this member.
            Ok(Err(e)) if attempt.inspected.stream => return Err(SendError::StreamCut(e.cause())),
            Ok(Err(e)) => return Err(SendError::Transport(e.cause())),
            Ok(Ok(response)) => response,
        };
        let (parts, body) = response.into_parts();
        Ok(UpstreamResponse {
            status: parts.status,
            headers: parts.headers,
            body: Body::new(body),
        })
    }
}

/// The upstream request continues the attempt's trace (`traceparent`, `tracestate`).
pub fn propagate_trace(client_headers: &HeaderMap, headers: &mut HeaderMap) {
    let header = |name| client_headers.get(name).and_then(|v| v.to_str().ok());
    for (name, value) in switchyard_telemetry::context::upstream_headers(
        &tracing::Span::current(),
        header(&TRACEPARENT),
        header(&TRACESTATE),
    ) {
        if let Ok(value) = http::HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
}

/// A credential got no access token (a Vertex service account's, a workload identity's): a
/// refusal (or a limited, failing or garbled token endpoint) is classified as the provider's
/// answer in the channel's error shape — a refused identity as its 401. `None` for a network
/// failure ([`token_network_error`]). The log names whose exchange failed and why, never a
/// secret.
fn token_failure(attempt: &Attempt<'_>, e: &TokenError) -> Option<UpstreamResponse> {
    tracing::warn!(
        channel = %attempt.channel.name,
        credential_id = attempt.credential.id,
        identity = %attempt.credential.token_subject(),
        error = e.as_str(),
        cause = e.cause().map(TransportCause::as_str),
        "no upstream access token for this credential"
    );
    let (status, headers, body) = attempt.credential.token_failure_answer(e)?;
    Some(UpstreamResponse {
        status,
        headers,
        body: Body::from(body),
    })
}

/// A token endpoint that could not be reached or did not answer in time, as the send's failure
/// (retryable, like the upstream itself being unreachable).
fn token_network_error(e: &TokenError) -> SendError {
    let cause = e.cause().unwrap_or(TransportCause::Other);
    match e {
        TokenError::Connect(_) => SendError::Connect(cause),
        TokenError::Timeout => SendError::Timeout,
        _ => SendError::Transport(cause),
    }
}
