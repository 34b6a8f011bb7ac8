//! Pass-through: `ANY /passthrough/{channel}/{path}` reaches a path of one channel's own API
//! that the gateway does not model (fine-tuning, files, assistants, model management …), with
//! the channel's credential in place of the client's key.
//!
//! The request walks its own short phases: the key authenticated as for every endpoint, the
//! channel found among those open to the key (it lists path patterns, and a team key reaches only
//! the channels of its routes), the path checked (no segment that could resolve elsewhere
//! upstream, a pattern matching it), the body read within the size limit, the key's and team's
//! limits admitting it (request counts and concurrency: a pass-through body's tokens cannot be
//! counted), one send with one of the channel's credentials, and the answer given back as it
//! came — status, headers but hop-by-hop ones, body streamed, SSE included — within the
//! upstream timeouts. No route, no selection, no failover, no translation; the finish is every
//! request's (metrics, the log line, the gateway's headers).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use switchyard_engine::passthrough::{check_path, path_allowed};
use switchyard_engine::{Channel, ChannelStatus, CredentialId, RandomSource, SplitMix64, Token};
use switchyard_provider::Protocol;
use switchyard_upstream::{CredentialRuntime, Target, TokenError};
use tokio::time::{timeout, Instant, Sleep};
use tokio_util::sync::WaitForCancellationFutureOwned;
use tracing::Instrument;

use super::admit::admit_under;
use super::finish::{finish, name_client};
use super::guard::refuse_uninspectable;
use super::receive::{authenticated, read_limited_body};
use crate::admission::{self, Held};
use crate::context::Arrival;
use crate::endpoint::Endpoint;
use crate::errors::{mask_key_like, GatewayError};
use crate::metrics::AttemptOutcome;
use crate::record::Trail;
use crate::snapshot::View;
use crate::state::AppState;
use crate::upstream::{propagate_trace, returnable, ChannelRuntime, TransportCause};
use crate::wire;

/// The most of an upstream's refusal (401/403) read for its message.
const REFUSAL_BYTES: usize = 64 * 1024;

/// Serves one pass-through request to the channel named `channel` (as the path gives it,
/// percent-decoded).
pub async fn serve(
    state: Arc<AppState>,
    arrival: Arrival,
    channel: String,
    request: Request,
) -> Response {
    let view = state.views.load_full();
    let mut trail: Box<Trail> = Box::default();
    let served = async {
        let view = view.as_ref().ok_or_else(GatewayError::not_ready)?;
        forward(&state, view, &arrival, &channel, request, &mut trail).await
    };
    let response = match served.instrument(arrival.span.clone()).await {
        Ok(response) => response,
        Err(e) => e.into_response(Protocol::OpenAi),
    };
    finish(&state, arrival, response, trail, String::new())
}

/// The request's phases up to the upstream's answer head.
async fn forward(
    state: &AppState,
    view: &Arc<View>,
    arrival: &Arrival,
    name: &str,
    request: Request,
    trail: &mut Trail,
) -> Result<Response, GatewayError> {
    let (mut parts, body) = request.into_parts();
    wire::drop_unforwarded(&mut parts.headers);
    let token = authenticated(view, &parts.headers, parts.uri.query())?;
    name_client(view, token, trail);
    // No route: only a rule on the key, its team or all traffic sees a pass-through call.
    let scope = (None, token.team_id, Some(token.id));
    let guards = view.snapshot.guards();
    let endpoint = Endpoint::Passthrough;
    refuse_uninspectable(state, guards, endpoint, scope, &arrival.request_id)?;
    let (channel, path) = open_path(view, token, name, parts.uri.path())?;
    trail.final_channel = Some(channel.name.clone());
    if channel.secrets_withheld {
        return Err(unavailable(
            channel,
            "the control plane sent it without its secrets (it has no fleet token)",
        ));
    }
    let settings = &view.snapshot.settings;
    let body = read_limited_body(&parts.headers, body, settings.max_request_body_bytes).await?;
    // The key's and its team's limits; no route, no token estimate and no tag or end user (the
    // body is not read).
    let client_limits = admission::client_limits(
        &view.snapshot,
        token,
        None,
        None,
        switchyard_engine::subject::Attribution::default(),
    );
    admit_under(state, token, client_limits, 0, trail).await?;
    let runtime = view
        .channel_runtime(channel.id)
        .ok_or_else(|| unavailable(channel, "it is not compiled on this proxy"))?;
    let credential = pick_credential(state, channel, runtime, arrival.seed)
        .ok_or_else(|| unavailable(channel, "none of its credentials is usable on this proxy"))?;
    let limits = Limits::of(arrival.started, settings);
    // A Vertex credential's access token, cached or obtained now within the first-byte budget.
    let credential = credential
        .authorized(state.client(), limits.first_byte())
        .await
        .map_err(|e| token_failure(state, channel, &e))?;
    let query = wire::strip_key_param(parts.uri.query());
    let target = Target {
        method: &parts.method,
        path,
        query: query.as_deref(),
        model: "",
    };
    let mut upstream = runtime
        .passthrough_request(target, &parts.headers, &credential, body)
        .map_err(|e| {
            tracing::warn!(channel = %channel.name, error = %e, "pass-through request not built");
            GatewayError::InvalidRequest("the pass-through request could not be built".to_owned())
        })?;
    propagate_trace(&parts.headers, upstream.headers_mut());
    send(state, channel, &credential, upstream, limits, trail).await
}

/// The enabled channel named `name` open to `token`, and the path of `uri_path` after the
/// channel (as sent, percent-encoded), checked and allowed by the channel's patterns.
fn open_path<'v, 'p>(
    view: &'v View,
    token: &Token,
    name: &str,
    uri_path: &'p str,
) -> Result<(&'v Channel, &'p str), GatewayError> {
    let channel = view
        .passthrough_channel(name, token.team_id)
        .filter(|c| c.status == ChannelStatus::Enabled)
        .ok_or(GatewayError::PassthroughNotFound)?;
    let path = path_after_channel(uri_path).ok_or(GatewayError::PassthroughNotFound)?;
    check_path(path).map_err(|why| GatewayError::PassthroughBadPath(why.describe()))?;
    if !path_allowed(&channel.passthrough, path) {
        return Err(GatewayError::PassthroughPathNotAllowed);
    }
    Ok((channel, path))
}

/// `/passthrough/{channel}/{path}` → `/{path}`, as sent.
fn path_after_channel(uri_path: &str) -> Option<&str> {
    let rest = uri_path.strip_prefix("/passthrough/")?;
    let at = rest.find('/')?;
    Some(&rest[at..])
}

fn unavailable(channel: &Channel, why: &'static str) -> GatewayError {
    GatewayError::ChannelUnavailable {
        channel: channel.name.clone(),
        why,
    }
}

/// One of the channel's credentials this proxy can use (enabled, not disabled by the shared
/// state, resolvable here), drawn by the request's seed so that a channel's keys share the load.
fn pick_credential<'r>(
    state: &AppState,
    channel: &Channel,
    runtime: &'r ChannelRuntime,
    seed: u64,
) -> Option<&'r CredentialRuntime> {
    let mut usable: Vec<CredentialId> = Vec::with_capacity(channel.credentials.len());
    state.store.with_view(&mut |health| {
        usable = channel
            .credentials
            .iter()
            .filter(|c| c.enabled && !health.credential_disabled(c.id))
            .filter(|c| runtime.credential(c.id).is_some())
            .map(|c| c.id)
            .collect();
    });
    if usable.is_empty() {
        return None;
    }
    let draw = SplitMix64::new(seed).next_u64() % usable.len() as u64;
    runtime.credential(usable[draw as usize])
}

/// A credential got no access token (Vertex, workload identity): a network failure is the upstream unreachable
/// (its cause named), anything else the gateway's own credential refused.
fn token_failure(state: &AppState, channel: &Channel, e: &TokenError) -> GatewayError {
    tracing::warn!(channel = %channel.name, error = e.as_str(), "no upstream access token for a pass-through request");
    match e {
        TokenError::Timeout => GatewayError::UpstreamTimeout,
        _ => match e.cause() {
            Some(cause) => {
                state.metrics.transport_failure(&channel.name, cause);
                GatewayError::UpstreamUnreachableBy(cause)
            }
            None => GatewayError::UpstreamAuthFailed {
                channel: channel.name.clone(),
                status: 401,
                said: e.as_str().to_owned(),
            },
        },
    }
}

/// The upstream timeouts of one pass-through request.
#[derive(Clone, Copy)]
struct Limits {
    first_byte: Duration,
    idle: Duration,
    deadline: Instant,
}

impl Limits {
    fn of(started: Instant, settings: &switchyard_engine::Settings) -> Limits {
        Limits {
            first_byte: Duration::from_millis(settings.first_byte_timeout_ms),
            idle: Duration::from_millis(settings.stream_idle_timeout_ms),
            deadline: started + Duration::from_millis(settings.request_timeout_ms),
        }
    }

    /// How long the answer's head may take from now.
    fn first_byte(&self) -> Duration {
        self.first_byte
            .min(self.deadline.saturating_duration_since(Instant::now()))
    }
}

/// Sends the request and gives back the upstream's answer as it is (a refusal of the
/// channel's credential excepted), its body streamed under the idle timeout and the deadline.
async fn send(
    state: &AppState,
    channel: &Channel,
    credential: &CredentialRuntime,
    upstream: http::Request<http_body_util::Full<Bytes>>,
    limits: Limits,
    trail: &mut Trail,
) -> Result<Response, GatewayError> {
    let sent = Instant::now();
    let answer = timeout(
        limits.first_byte(),
        Box::pin(state.client().request(upstream)),
    )
    .await;
    trail.upstream_micros = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
    let response = match answer {
        Err(_) => {
            transport_failed(state, channel, TransportCause::Timeout);
            return Err(GatewayError::UpstreamTimeout);
        }
        Ok(Err(e)) => {
            transport_failed(state, channel, e.cause());
            return Err(GatewayError::UpstreamUnreachableBy(e.cause()));
        }
        Ok(Ok(response)) => response,
    };
    let (head, body) = response.into_parts();
    let status = head.status.as_u16();
    state
        .metrics
        .attempt(&channel.name, outcome_of(head.status));
    // A pass-through request names no model the gateway knows: its model label is empty.
    state
        .metrics
        .upstream_latency
        .observe_micros([&channel.name, ""], trail.upstream_micros);
    if matches!(status, 401 | 403) {
        // Never the upstream's 401/403: the client would take it for its own key's.
        let said = read_refusal(Body::new(body), limits).await;
        tracing::warn!(channel = %channel.name, credential_id = credential.id, status, "the upstream refused the channel's credential on a pass-through request");
        // A Vertex access token the upstream refused is obtained anew next time.
        credential.forget_token();
        return Err(GatewayError::UpstreamAuthFailed {
            channel: channel.name.clone(),
            status,
            said,
        });
    }
    let guarded = Guarded {
        body: Body::new(body),
        idle: limits.idle,
        deadline: limits.deadline,
        stall: Box::pin(tokio::time::sleep_until(limits.next_stall())),
        cut: Box::pin(state.streams_cut.clone().cancelled_owned()),
        _held: trail.admitted.take(),
    };
    let mut response = Response::new(Body::new(guarded));
    *response.status_mut() = head.status;
    let headers = response.headers_mut();
    for (name, value) in &head.headers {
        if returnable(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    Ok(response)
}

impl Limits {
    /// When the body stalls if nothing arrives from now: the idle timeout, within the deadline.
    fn next_stall(&self) -> Instant {
        (Instant::now() + self.idle).min(self.deadline)
    }
}

fn transport_failed(state: &AppState, channel: &Channel, cause: TransportCause) {
    state.metrics.transport_failure(&channel.name, cause);
    state
        .metrics
        .attempt(&channel.name, AttemptOutcome::Transport);
}

/// The attempt outcome an upstream status counts as, for the channel's attempt metric.
fn outcome_of(status: http::StatusCode) -> AttemptOutcome {
    match status.as_u16() {
        401 | 403 => AttemptOutcome::Rejected,
        429 | 500..=599 => AttemptOutcome::Retryable,
        _ => AttemptOutcome::Success,
    }
}

/// What an upstream said refusing the credential: its error message, key-like runs masked;
/// empty when it said nothing readable within the bound and the idle timeout.
async fn read_refusal(body: Body, limits: Limits) -> String {
    let read = timeout(
        limits
            .idle
            .min(limits.deadline.saturating_duration_since(Instant::now())),
        Limited::new(body, REFUSAL_BYTES).collect(),
    )
    .await;
    match read {
        Ok(Ok(collected)) => {
            mask_key_like(&switchyard_provider::error_message(&collected.to_bytes()))
        }
        _ => String::new(),
    }
}

/// The upstream's body as the client gets it: cut with an error when nothing arrives within
/// the idle timeout, the request's deadline passes or the shutdown grace period ends (the
/// gateway cannot speak inside a body it does not read, so the connection is cut); holding the
/// key's and team's limits (their concurrency slots) until it ends.
struct Guarded {
    body: Body,
    idle: Duration,
    deadline: Instant,
    stall: Pin<Box<Sleep>>,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
    _held: Option<Held>,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next = (Instant::now() + this.idle).min(this.deadline);
                this.stall.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending => {
                if this.cut.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(axum::Error::new(
                        "the shutdown grace period ended during a pass-through answer",
                    ))));
                }
                match this.stall.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(
                        "the upstream's pass-through answer stalled or ran past the request timeout",
                    )))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_after_the_channel_is_kept_as_sent() {
        assert_eq!(
            path_after_channel("/passthrough/up/v1/files"),
            Some("/v1/files")
        );
        assert_eq!(
            path_after_channel("/passthrough/my%20ch/v1/a%2Fb/"),
            Some("/v1/a%2Fb/")
        );
        assert_eq!(path_after_channel("/passthrough/up"), None);
        assert_eq!(path_after_channel("/v1/files"), None);
    }

    #[test]
    fn an_upstream_refusal_or_failure_is_counted_as_such() {
        let outcome = |s: u16| outcome_of(http::StatusCode::from_u16(s).unwrap()).label();
        assert_eq!(outcome(200), "success");
        assert_eq!(outcome(404), "success");
        assert_eq!(outcome(401), AttemptOutcome::Rejected.label());
        assert_eq!(outcome(429), AttemptOutcome::Retryable.label());
        assert_eq!(outcome(503), AttemptOutcome::Retryable.label());
    }
}
