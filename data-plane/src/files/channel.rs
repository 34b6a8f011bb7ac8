//! One call to the channel that holds a file or batch: its runtime's URL and auth (the shared
//! upstream layer's, as every call), a credential the store has not disabled, the first-byte
//! timeout for the head and the request timeout for the whole; the body read within a bound,
//! or handed on as a stream.

use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, Limited};
use switchyard_engine::{Channel, ChannelId, CredentialId};
use switchyard_upstream::Target;
use tokio::time::timeout;

use crate::errors::GatewayError;
use crate::snapshot::View;
use crate::state::AppState;
use crate::upstream::{ChannelRuntime, MOCK_CREDENTIAL};

/// The largest JSON answer read from a channel (a file or batch object, a deletion).
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

/// A channel call: the method, the path in OpenAI's API, the body and its content type.
pub struct Call {
    pub method: Method,
    pub path: String,
    pub content_type: Option<HeaderValue>,
    pub body: Bytes,
}

impl Call {
    /// A call without a body.
    pub fn bare(method: Method, path: String) -> Call {
        Call {
            method,
            path,
            content_type: None,
            body: Bytes::new(),
        }
    }
}

/// An answer's head with its body still to come.
pub struct Head {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
    /// How long the body may take.
    pub budget: Duration,
    /// How long the body may stall between two chunks.
    pub idle: Duration,
}

impl Head {
    /// The answer for the client as it comes, with its content headers: a body that stalls
    /// longer than [`Head::idle`] between two chunks ends with an error (the client sees a cut
    /// answer, never a connection held forever).
    pub fn streamed(self) -> axum::response::Response {
        let idle = self.idle;
        let frames = futures_util::stream::unfold(Some(self.body), move |body| async move {
            let mut body = body?;
            match timeout(idle, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    let data = frame.into_data().unwrap_or_default();
                    Some((Ok(data), Some(body)))
                }
                Ok(Some(Err(e))) => Some((Err(std::io::Error::other(e)), None)),
                Ok(None) => None,
                Err(_) => Some((
                    Err(std::io::Error::other("the channel's answer stalled")),
                    None,
                )),
            }
        });
        let mut response = axum::response::Response::new(Body::from_stream(frames));
        *response.status_mut() = self.status;
        for name in [
            header::CONTENT_TYPE,
            header::CONTENT_LENGTH,
            header::CONTENT_DISPOSITION,
        ] {
            if let Some(value) = self.headers.get(&name) {
                response.headers_mut().insert(name, value.clone());
            }
        }
        response
    }
}

/// A whole answer.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The channel `id` of the view, with its runtime; `None` when the snapshot no longer has it.
pub fn reach(view: &View, id: ChannelId) -> Option<(&Channel, &ChannelRuntime)> {
    Some((view.snapshot.channel(id)?, view.channel_runtime(id)?))
}

/// Sends `call` to `channel` and waits for the answer's head.
pub async fn send(
    state: &AppState,
    view: &View,
    channel: &Channel,
    call: Call,
) -> Result<Head, GatewayError> {
    let runtime = view
        .channel_runtime(channel.id)
        .ok_or(GatewayError::NoSuchObject("channel"))?;
    let unavailable = || GatewayError::ChannelUnavailable {
        channel: channel.name.clone(),
        why: "it has no credential this proxy can use",
    };
    let credential_id = usable_credential(state, channel, runtime).ok_or_else(unavailable)?;
    let credential = runtime.credential(credential_id).ok_or_else(unavailable)?;
    let settings = &view.snapshot.settings;
    let first_byte = Duration::from_millis(settings.first_byte_timeout_ms);
    let client = state.client();
    let credential = credential
        .authorized(client, first_byte)
        .await
        .map_err(|_| unavailable())?;
    let target = Target {
        method: &call.method,
        path: &call.path,
        query: None,
        model: "",
    };
    let mut request = runtime
        .request(target, None, &credential, call.body)
        .map_err(|_| {
            GatewayError::InvalidRequest("the channel's request could not be built".into())
        })?;
    if let Some(content_type) = call.content_type {
        request
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
    }
    let response = match timeout(first_byte, Box::pin(client.request(request))).await {
        Err(_) => return Err(GatewayError::UpstreamTimeout),
        Ok(Err(e)) => return Err(GatewayError::UpstreamUnreachableBy(e.cause())),
        Ok(Ok(response)) => response,
    };
    let (parts, body) = response.into_parts();
    if matches!(parts.status.as_u16(), 401 | 403) {
        tracing::warn!(channel = %channel.name, credential_id, status = parts.status.as_u16(), "the channel refused the gateway's credential on a files or batch call");
        return Err(GatewayError::UpstreamAuthFailed {
            channel: channel.name.clone(),
            status: parts.status.as_u16(),
            said: String::new(),
        });
    }
    Ok(Head {
        status: parts.status,
        headers: parts.headers,
        body: Body::new(body),
        budget: Duration::from_millis(settings.request_timeout_ms),
        idle: Duration::from_millis(settings.stream_idle_timeout_ms),
    })
}

/// Sends `call` and reads the whole answer, at most `limit` bytes.
pub async fn exchange(
    state: &AppState,
    view: &View,
    channel: &Channel,
    call: Call,
    limit: usize,
) -> Result<Reply, GatewayError> {
    let head = send(state, view, channel, call).await?;
    let body = match timeout(head.budget, Limited::new(head.body, limit).collect()).await {
        Err(_) => return Err(GatewayError::UpstreamTimeout),
        Ok(Err(_)) => {
            return Err(GatewayError::UpstreamInvalidAnswer(format!(
                "its answer could not be read within {limit} bytes"
            )))
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    Ok(Reply {
        status: head.status,
        headers: head.headers,
        body,
    })
}

/// An enabled credential of the channel that the store has not disabled and this proxy can
/// resolve (a channel that needs none: the mock credential).
fn usable_credential(
    state: &AppState,
    channel: &Channel,
    runtime: &ChannelRuntime,
) -> Option<CredentialId> {
    let mut usable = None;
    state.store.with_view(&mut |health| {
        usable = channel
            .credentials
            .iter()
            .filter(|c| c.enabled && !health.credential_disabled(c.id))
            .find(|c| runtime.credential(c.id).is_some())
            .map(|c| c.id);
    });
    usable.or_else(|| (!channel.provider.needs_credential()).then_some(MOCK_CREDENTIAL))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use futures_util::StreamExt;

    use super::*;

    /// A streamed answer passes its chunks and its content headers on; one that stalls longer
    /// than the idle bound between two chunks ends with an error (the clock is paused: the
    /// wait is the bound itself, not a real one).
    #[tokio::test(start_paused = true)]
    async fn a_streamed_answer_that_stalls_ends_with_an_error() {
        let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from("one"))])
            .chain(futures_util::stream::pending());
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/jsonl"),
        );
        headers.insert("x-internal", HeaderValue::from_static("not passed on"));
        let head = Head {
            status: StatusCode::OK,
            headers,
            body: Body::from_stream(chunks),
            budget: Duration::from_secs(60),
            idle: Duration::from_secs(5),
        };
        let response = head.streamed();
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/jsonl"
        );
        assert!(response.headers().get("x-internal").is_none());
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "one");
        let started = tokio::time::Instant::now();
        let Some(Err(e)) = body.frame().await else {
            panic!("a stalled answer did not end with an error");
        };
        assert!(e.to_string().contains("stalled"), "{e}");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }
}
