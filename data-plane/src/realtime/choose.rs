//! Where a realtime session goes: the engine picks a member (of a channel that serves realtime
//! sessions), the session's handshake is tried on it with one of its channel's credentials, and
//! a failed handshake is reported to the store like a failed attempt (cooldown, breaker) before
//! the next member is picked — until a handshake succeeds, the route's retry rounds or the
//! request's deadline run out. Once a handshake succeeded nothing is retried: the session is
//! the client's from its first frame.

use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use switchyard_engine::{select, CredentialId, RandomSource, RetryBudget, SplitMix64};
use switchyard_provider::Protocol;
use switchyard_state::{unix_ms, AttemptFailure, FailurePolicy, InFlightGuard};
use switchyard_upstream::realtime::{Handshake, HandshakeError, UpstreamSocket};
use switchyard_upstream::TransportCause;
use tokio::io::DuplexStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::WebSocketStream;

use crate::attempt::{classify_status, AttemptError};
use crate::context::Ctx;
use crate::errors::{mask_key_like, GatewayError};
use crate::failover::{as_picked, learn_success, name_final, unservable, Picked};
use crate::metrics::AttemptOutcome;
use crate::realtime::simulated;
use crate::record::AttemptLog;
use crate::state::AppState;

/// A session's upstream end.
pub enum Upstream {
    Socket(Box<UpstreamSocket>),
    /// A simulated channel's session, served in this process.
    Simulated(Box<WebSocketStream<DuplexStream>>),
}

/// The opened upstream, and the channel's in-flight count it holds for the session's life.
pub struct Chosen {
    pub upstream: Upstream,
    pub in_flight: InFlightGuard,
}

/// A failed handshake, as the client may be told.
struct Failure {
    error: AttemptError,
    cause: Option<TransportCause>,
    /// The upstream's answer to the handshake, when it gave one.
    answer: Option<(u16, Bytes)>,
    channel: String,
}

/// Picks and opens the session's upstream; the trail logs each handshake and names the final
/// channel. `Err` is the client's answer: why nothing could be picked, or, when every handshake
/// failed, the last upstream answer (an upstream's refusal of the gateway's own credential as
/// `upstream_auth_failed`, never as the client's 401).
pub async fn choose(
    state: &Arc<AppState>,
    ctx: &mut Ctx<'_>,
    beta: Option<&HeaderValue>,
    config: WebSocketConfig,
) -> Result<Chosen, Response> {
    let view = ctx.view;
    let settings = &view.snapshot.settings;
    let deadline = ctx.started + Duration::from_millis(settings.request_timeout_ms);
    let mut rng = SplitMix64::new(ctx.seed);
    let mut last: Option<Failure> = None;
    let mut tries_left: Option<u32> = None;
    while tries_left != Some(0) && Instant::now() < deadline {
        let now = unix_ms();
        let mut decided = None;
        let mut route = None;
        let asked: &Ctx<'_> = ctx;
        state.store.with_view(&mut |health| {
            let model = asked.inspected.model.as_str();
            let decision = select(
                &view.snapshot,
                health,
                &asked.constraint,
                model,
                now,
                &mut rng,
            );
            let picked = decision.selected().and_then(|c| as_picked(view, c, health));
            route = decision.route.map(|r| (r.id, r.model_pattern.clone()));
            decided = Some(match (picked, decision.budget) {
                (Some(picked), Some(budget)) => Ok((picked, budget)),
                _ => Err(unservable(&decision, asked, Protocol::OpenAi)),
            });
        });
        if ctx.trail.route.is_none() {
            ctx.trail.route = route;
        }
        let (picked, budget) = match decided {
            Some(Ok(pair)) => pair,
            Some(Err(e)) if last.is_none() => return Err(e.into_response(Protocol::OpenAi)),
            None => return Err(GatewayError::not_ready().into_response(Protocol::OpenAi)),
            Some(Err(_)) => break,
        };
        let tries = tries_left.get_or_insert(1 + rounds(&budget));
        *tries -= 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = Duration::from_millis(settings.first_byte_timeout_ms).min(left);
        let credential = pick_credential(&picked, &mut rng);
        // The channel counts the session in flight from its handshake to its end.
        let in_flight = InFlightGuard::acquire(&state.store, picked.channel.id);
        match attempt(state, ctx, &picked, credential, beta, config, timeout).await {
            Ok(upstream) => {
                report_success(state, ctx, &picked);
                return Ok(Chosen {
                    upstream,
                    in_flight,
                });
            }
            Err(failure) => {
                report_failure(state, ctx, &picked, &budget, &failure);
                last = Some(failure);
            }
        }
    }
    Err(exhausted(last))
}

/// Handshakes after the first: the route's cross-channel rounds (none when failover across
/// channels is off).
fn rounds(budget: &RetryBudget) -> u32 {
    if budget.cross_channel_failover {
        budget.retry_times
    } else {
        0
    }
}

/// One of the member's usable credentials, drawn at random (the simulator needs none).
fn pick_credential(picked: &Picked<'_>, rng: &mut SplitMix64) -> Option<CredentialId> {
    let n = picked.credentials.len() as u64;
    (n > 0).then(|| picked.credentials[(rng.next_u64() % n) as usize])
}

/// One handshake with the picked member, logged in the trail (and its latency counted as
/// upstream time).
async fn attempt(
    state: &AppState,
    ctx: &mut Ctx<'_>,
    picked: &Picked<'_>,
    credential_id: Option<CredentialId>,
    beta: Option<&HeaderValue>,
    config: WebSocketConfig,
    timeout: Duration,
) -> Result<Upstream, Failure> {
    let started = Instant::now();
    let channel = picked.channel;
    let model = picked.member.upstream_model.as_str();
    let runtime = ctx.view.channel_runtime(channel.id);
    let credential = runtime
        .zip(credential_id)
        .and_then(|(rt, id)| rt.credential(id));
    let result = match (runtime, credential) {
        (Some(runtime), _) if runtime.mock.is_some() => Ok(Upstream::Simulated(Box::new(
            simulated::open(model, config).await,
        ))),
        (Some(runtime), Some(credential)) => Handshake {
            runtime,
            credential,
            model,
            beta,
            config,
            timeout,
        }
        .open(state.client())
        .await
        .map(|socket| Upstream::Socket(Box::new(socket)))
        .map_err(|e| failure_of(channel, e)),
        _ => Err(Failure {
            error: AttemptError::CredentialUnresolved,
            cause: None,
            answer: None,
            channel: channel.name.clone(),
        }),
    };
    let elapsed = started.elapsed();
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    ctx.trail.upstream_micros = ctx.trail.upstream_micros.saturating_add(micros);
    let failure = result.as_ref().err();
    ctx.trail.attempts.push(AttemptLog {
        member_id: picked.member.id,
        channel_id: channel.id,
        credential_id: credential_id.unwrap_or_default(),
        status: match failure {
            None => Some(101),
            Some(f) => f.answer.as_ref().map(|(status, _)| *status),
        },
        error: failure.map(|f| f.error),
        cause: failure.and_then(|f| f.cause),
        latency_ms: elapsed.as_secs_f64() * 1000.0,
    });
    if let Some(cause) = failure.and_then(|f| f.cause) {
        state.metrics.transport_failure(&channel.name, cause);
    }
    result
}

/// A failed handshake classified as an attempt's failure: an answer by its status (and body),
/// else a connection failure or a timeout.
fn failure_of(channel: &switchyard_engine::Channel, e: HandshakeError) -> Failure {
    let cause = e.cause();
    let (error, answer) = match e {
        HandshakeError::Refused { status, body } => {
            let lowercase = String::from_utf8_lossy(&body).to_ascii_lowercase();
            (
                classify_status(channel, status, &lowercase),
                Some((status, body)),
            )
        }
        HandshakeError::TimedOut => (AttemptError::FirstByteTimeout, None),
        HandshakeError::Connect(_) => (AttemptError::ConnectError, None),
        HandshakeError::Protocol { .. } => (AttemptError::TransportError, None),
    };
    Failure {
        error,
        cause,
        answer,
        channel: channel.name.clone(),
    }
}

/// The store learns the success (health, canary promotion); the trail names the final channel,
/// its upstream model and their price.
fn report_success(state: &AppState, ctx: &mut Ctx<'_>, picked: &Picked<'_>) {
    let latency_ms = ctx.trail.attempts.last().map_or(0.0, |a| a.latency_ms);
    learn_success(state, ctx.view, picked, latency_ms, unix_ms());
    set_final(ctx, picked);
}

/// The member failed its handshake: the store cools it (and counts its channel toward the
/// breaker, as the failure's kind says), and the next pick excludes it.
fn report_failure(
    state: &AppState,
    ctx: &mut Ctx<'_>,
    picked: &Picked<'_>,
    budget: &RetryBudget,
    failure: &Failure,
) {
    if failure.error == AttemptError::CredentialUnresolved {
        // This proxy cannot resolve the channel's credential (an unset variable): nothing was
        // sent, and nothing is the upstream's fault.
        ctx.constraint.attempted.push(picked.member.id);
        return;
    }
    let settings = &ctx.view.snapshot.settings;
    let policy = FailurePolicy {
        fault_protection: settings.fault_protection_enabled,
        cooldown_ms: u64::from(budget.cooldown_seconds) * 1000,
        breaker_threshold: settings.breaker_failure_threshold,
    };
    let channel = picked.channel;
    let first_for_channel = !ctx
        .trail
        .attempts
        .iter()
        .rev()
        .skip(1)
        .any(|a| a.channel_id == channel.id);
    let reported = state.store.report_failure(
        &AttemptFailure {
            member: picked.member.id,
            channel: channel.id,
            upstream_model: &picked.member.upstream_model,
            kind: failure.error.kind(),
            retry_after_ms: None,
        },
        &policy,
        first_for_channel,
        unix_ms(),
    );
    let outcome = match failure.error.kind() {
        switchyard_state::FailureKind::Transport => AttemptOutcome::Transport,
        switchyard_state::FailureKind::Retryable => AttemptOutcome::Retryable,
        switchyard_state::FailureKind::Rejected => AttemptOutcome::Rejected,
        switchyard_state::FailureKind::MemberSpecific => AttemptOutcome::MemberSpecific,
        switchyard_state::FailureKind::StreamBroken => AttemptOutcome::StreamBroken,
    };
    state.metrics.attempt(&channel.name, outcome);
    if reported.channel.is_some_and(|c| c.tripped) {
        state
            .metrics
            .breaker_trips
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ctx.trail.breaker_tripped = true;
        tracing::warn!(channel = %channel.name, "channel breaker tripped");
    }
    tracing::debug!(channel = %channel.name, error = failure.error.as_str(), "realtime handshake failed");
    ctx.constraint.attempted.push(picked.member.id);
    set_final(ctx, picked);
}

fn set_final(ctx: &mut Ctx<'_>, picked: &Picked<'_>) {
    name_final(&mut ctx.trail, ctx.view, picked.channel, picked.member);
}

/// Every handshake failed: the upstream's refusal of the gateway's credential as
/// `upstream_auth_failed`, else the last upstream answer, else the gateway's error naming the
/// last failure's cause.
fn exhausted(last: Option<Failure>) -> Response {
    let Some(last) = last else {
        return GatewayError::UpstreamUnreachable.into_response(Protocol::OpenAi);
    };
    match last.answer {
        Some((status @ (401 | 403), body)) => GatewayError::UpstreamAuthFailed {
            channel: last.channel,
            status,
            said: mask_key_like(&switchyard_provider::error_message(&body)),
        }
        .into_response(Protocol::OpenAi),
        Some((status, body)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let json = serde_json::from_slice::<serde_json::Value>(&body).is_ok();
            let content_type = if json {
                "application/json"
            } else {
                "text/plain"
            };
            (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
        }
        None => last
            .error
            .exhausted()
            .caused_by(last.cause)
            .into_response(Protocol::OpenAi),
    }
}
