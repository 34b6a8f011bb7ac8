//! The failover loop of SPEC §3, written once: ask the engine, try the member (re-sending on the
//! same channel with the next credential), classify, report to the state store, and ask the
//! engine again with what was tried excluded — until success, a non-retryable outcome, the
//! budget or the deadline.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde::Serialize;
use switchyard_engine::{
    select, Channel, ChannelId, CredentialId, Member, MemberId, Outcome as Selection, Provider,
    RandomSource, Reason, RouteId, SelectionConstraint, SplitMix64, Sticky,
};
use switchyard_provider::{ChatRequest, TranslateError, Usage};
use switchyard_state::{AttemptFailure, AttemptSuccess, FailureKind, FailurePolicy, InFlightGuard};
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::attempt::{Answer, Attempt, Committed, Failed, Outcome, Scope};
use crate::endpoint::Endpoint;
use crate::errors::GatewayError;
use crate::metrics::AttemptOutcome;
use crate::record::StreamSlot;
use crate::relay::{relay, StreamOwner};
use crate::request::Inspected;
use crate::snapshot::View;
use crate::upstream::{channel_protocol, returnable, MOCK_CREDENTIAL};
use crate::wire::{plan, protocol_index, ClientRequest};
use crate::AppState;

/// One proxied request, as the loop sees it.
pub struct ProxyRequest<'a> {
    pub endpoint: Endpoint,
    pub inspected: &'a Inspected,
    pub body: &'a Bytes,
    pub headers: &'a HeaderMap,
    /// The client's query string without credentials.
    pub query: Option<&'a str>,
    /// The request in neutral form, for translatable endpoints.
    pub chat: Option<&'a ChatRequest>,
    /// Per protocol (as [`Protocol::ALL`]): the feature it cannot express, if any.
    pub unsupported: &'a [Option<String>; 3],
    pub constraint: SelectionConstraint,
    pub request_id: &'a str,
    pub started: Instant,
    pub seed: u64,
}

/// One attempt in the request's trail (logged; never secrets).
#[derive(Debug, Clone, Serialize)]
pub struct AttemptLog {
    pub member_id: MemberId,
    pub channel_id: ChannelId,
    pub credential_id: CredentialId,
    pub status: Option<u16>,
    pub error: Option<&'static str>,
    pub latency_ms: f64,
}

/// What happened to one request, for headers, the log line and metrics.
#[derive(Default)]
pub struct Trail {
    /// The authenticated token's name and team (set by the HTTP edge).
    pub token: Option<String>,
    pub team: Option<String>,
    /// Usage read from a plain (non-streamed) answer.
    pub usage: Option<Usage>,
    /// A committed stream: its record is written when it ends.
    pub stream: Option<Arc<StreamSlot>>,
    pub route: Option<(RouteId, String)>,
    pub final_channel: Option<String>,
    /// The upstream model of the final attempt.
    pub final_model: Option<String>,
    pub attempts: Vec<AttemptLog>,
    pub breaker_tripped: bool,
    pub sticky: Option<&'static str>,
    pub upstream_micros: u64,
}

struct Picked<'s> {
    member: &'s Member,
    channel: &'s Channel,
    canary: bool,
    credentials: Vec<CredentialId>,
}

fn sticky_label(sticky: Option<Sticky>) -> Option<&'static str> {
    Some(match sticky? {
        Sticky::Disabled => return None,
        Sticky::NoSession => "no_session",
        Sticky::Pinned => "pinned",
        Sticky::Unbound => "unbound",
        Sticky::Expired { .. } => "expired",
        Sticky::Hit { .. } => "hit",
        Sticky::Escaped { .. } => "escaped",
    })
}

/// One attempt's trace span, a child of the request's (disabled unless traces are exported).
/// Ids and the channel's name only: never the credential itself.
fn attempt_span(picked: &Picked<'_>, credential_id: CredentialId) -> Span {
    if !crate::telemetry::enabled() {
        return Span::none();
    }
    tracing::info_span!(
        "attempt",
        otel.kind = "client",
        otel.status_code = Empty,
        member_id = picked.member.id,
        channel_id = picked.channel.id,
        channel = picked.channel.name.as_str(),
        upstream_model = picked.member.upstream_model.as_str(),
        gen_ai.provider.name = genai_provider(picked.channel.provider),
        gen_ai.request.model = picked.member.upstream_model.as_str(),
        credential_id,
        canary = picked.canary,
        status = Empty,
        error = Empty,
        latency_ms = Empty,
    )
}

/// The OpenTelemetry GenAI `gen_ai.provider.name` of a channel's provider.
fn genai_provider(provider: Provider) -> &'static str {
    match provider {
        Provider::Openai => "openai",
        Provider::Anthropic => "anthropic",
        Provider::Gemini => "gcp.gemini",
        Provider::Mock => "switchyard.mock",
    }
}

fn record_attempt(span: &Span, log: &AttemptLog) {
    if span.is_disabled() {
        return;
    }
    if let Some(status) = log.status {
        span.record("status", i64::from(status));
    }
    if let Some(error) = log.error {
        span.record("error", error);
        span.record("otel.status_code", "ERROR");
    }
    span.record("latency_ms", log.latency_ms);
}

/// Backoff before re-send `n` (1-based): 25 ms doubling to 400 ms, times a jitter in [0.5, 1].
fn backoff(n: u32, rng: &mut impl RandomSource) -> Duration {
    let base = 25u64 << n.saturating_sub(1).min(4);
    Duration::from_micros((base as f64 * 1000.0 * (0.5 + 0.5 * rng.next_f64())) as u64)
}

/// The pause before re-send `n`, or `None` when it would not end before the deadline (`left`
/// is what remains of the request's budget): a re-send never sleeps past the deadline.
fn pause_before(n: u32, left: Duration, rng: &mut impl RandomSource) -> Option<Duration> {
    let pause = backoff(n, rng);
    (left > pause).then_some(pause)
}

pub async fn proxy(
    state: &Arc<AppState>,
    view: &View,
    mut req: ProxyRequest<'_>,
) -> (Response, Trail) {
    let snapshot = &*view.snapshot;
    let settings = &snapshot.settings;
    let protocol = req.endpoint.protocol();
    let client = ClientRequest {
        endpoint: req.endpoint,
        inspected: req.inspected,
        body: req.body,
        query: req.query,
        chat: req.chat,
    };
    let retry_allowed = req.endpoint.retry_allowed(req.headers);
    let deadline = req.started + Duration::from_millis(settings.request_timeout_ms);
    let first_byte_timeout = Duration::from_millis(settings.first_byte_timeout_ms);
    let idle_timeout = Duration::from_millis(settings.stream_idle_timeout_ms);
    let mut rng = SplitMix64::new(req.seed);
    let mut trail = Trail::default();
    let mut last: Option<Answer> = None;
    let mut last_error: Option<&'static str> = None;
    let mut prev_channel: Option<ChannelId> = None;
    let mut rounds_used = 0u32;
    let mut counted_channels: Vec<ChannelId> = Vec::new();
    let mut disabled_here: Vec<CredentialId> = Vec::new();
    let model = req.inspected.model.as_str();
    let fail = |e: GatewayError, trail: Trail| (e.into_response(protocol), trail);

    loop {
        let now = crate::unix_ms();
        let mut picked: Option<Picked<'_>> = None;
        let mut decision_out = None;
        let mut untranslatable: Option<Provider> = None;
        state.store.with_view(&mut |health| {
            let decision = select(snapshot, health, &req.constraint, model, now, &mut rng);
            if decision.selected().is_none() {
                // Nothing eligible: was it only because no member's protocol can express it?
                let unsupported = |c: &switchyard_engine::Candidate<'_>| {
                    c.reasons.contains(Reason::ProtocolUnsupported)
                };
                if !decision.candidates.is_empty() && decision.candidates.iter().all(unsupported) {
                    untranslatable = decision
                        .candidates
                        .iter()
                        .find_map(|c| c.channel.map(|ch| ch.provider));
                }
            }
            if let Some(c) = decision.selected() {
                if let Some(channel) = c.channel {
                    let runtime = view.channel_runtime(channel.id);
                    let mut credentials: Vec<CredentialId> = channel
                        .credentials
                        .iter()
                        .filter(|cred| cred.enabled && !health.credential_disabled(cred.id))
                        .filter(|cred| runtime.is_some_and(|rt| rt.credential(cred.id).is_some()))
                        .map(|cred| cred.id)
                        .collect();
                    if !channel.provider.needs_credential() && credentials.is_empty() {
                        credentials.push(MOCK_CREDENTIAL);
                    }
                    picked = Some(Picked {
                        member: c.member,
                        channel,
                        canary: c.canary,
                        credentials,
                    });
                }
            }
            decision_out = Some((
                decision.outcome,
                decision.route,
                decision.budget,
                decision.sticky,
            ));
        });
        let Some((outcome, route, budget, sticky)) = decision_out else {
            return fail(GatewayError::not_ready(), trail);
        };
        if trail.attempts.is_empty() {
            trail.route = route.map(|r| (r.id, r.model_pattern.clone()));
            trail.sticky = sticky_label(sticky);
            match sticky {
                Some(Sticky::Hit { .. }) => state.metrics.sticky_hits.fetch_add(1, Relaxed),
                Some(Sticky::Escaped { .. }) => state.metrics.sticky_escapes.fetch_add(1, Relaxed),
                _ => 0,
            };
        }
        let (Some(picked), Some(budget), Some(route)) = (picked, budget, route) else {
            if !trail.attempts.is_empty() {
                break;
            }
            if let Some(provider) = untranslatable {
                let feature = req.unsupported[protocol_index(channel_protocol(provider, protocol))]
                    .clone()
                    .unwrap_or_else(|| "this request".to_owned());
                return fail(
                    GatewayError::bad_request(
                        "protocol_unsupported",
                        format!("The request uses {feature}, which no upstream serving `{model}` can express."),
                    ),
                    trail,
                );
            }
            let e = match outcome {
                Selection::ModelNotFound => GatewayError::new(
                    StatusCode::NOT_FOUND,
                    "invalid_request_error",
                    "model_not_found",
                    format!("The model `{model}` does not exist or is not served by this gateway."),
                ),
                Selection::ModelNotAllowed => GatewayError::new(
                    StatusCode::FORBIDDEN,
                    "permission_error",
                    "model_not_allowed",
                    format!("This API key may not use the model `{model}`."),
                ),
                _ => GatewayError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "no_eligible_member",
                    format!("No upstream can serve `{model}` right now (all disabled, excluded or incapable)."),
                ),
            };
            return fail(e, trail);
        };
        if picked.credentials.is_empty() {
            // The engine saw a usable credential that this proxy cannot resolve (unset env).
            req.constraint.attempted.push(picked.member.id);
            last_error = Some("credential_unresolved");
            continue;
        }

        // Cross-channel rounds: moving to another channel spends one.
        if let Some(prev) = prev_channel {
            if prev != picked.channel.id {
                if rounds_used >= budget.cross_channel_rounds() {
                    break;
                }
                rounds_used += 1;
            }
            state.metrics.failovers.fetch_add(1, Relaxed);
        }
        let policy = FailurePolicy {
            fault_protection: settings.fault_protection_enabled,
            cooldown_ms: u64::from(budget.cooldown_seconds) * 1000,
            breaker_threshold: settings.breaker_failure_threshold,
        };
        let runtime = view.channel_runtime(picked.channel.id);
        let Some(runtime) = runtime else {
            req.constraint.attempted.push(picked.member.id);
            continue;
        };
        let call = match plan(
            &client,
            picked.channel.provider,
            &picked.member.upstream_model,
        ) {
            Ok(call) => call,
            Err(TranslateError::Malformed(message)) => {
                return fail(GatewayError::bad_request("invalid_request", message), trail);
            }
            Err(TranslateError::Unsupported(_)) => {
                // The engine already skips these members; a stale view may not have.
                req.constraint.attempted.push(picked.member.id);
                continue;
            }
        };
        let sends = if retry_allowed {
            1 + budget.channel_retry_times
        } else {
            1
        };
        let guard = InFlightGuard::acquire(&state.store, picked.channel.id);
        let start = (rng.next_u64() % picked.credentials.len() as u64) as usize;
        let mut failure: Option<Failed> = None;
        for send in 0..sends {
            if send > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                let Some(pause) = pause_before(send, left, &mut rng) else {
                    break;
                };
                tokio::time::sleep(pause).await;
            }
            let usable: Vec<CredentialId> = picked
                .credentials
                .iter()
                .copied()
                .filter(|c| !disabled_here.contains(c))
                .collect();
            let Some(credential_id) = usable
                .get((start + send as usize) % usable.len().max(1))
                .copied()
            else {
                break;
            };
            let Some(credential) = runtime.credential(credential_id) else {
                break;
            };
            if Instant::now() >= deadline {
                break;
            }
            let sent_at = Instant::now();
            let attempt = Attempt {
                client: &state.client,
                endpoint: req.endpoint,
                inspected: req.inspected,
                upstream_model: &picked.member.upstream_model,
                client_model: model,
                call: &call,
                client_headers: req.headers,
                channel: picked.channel,
                runtime,
                credential,
                first_byte_timeout,
                idle_timeout,
                deadline,
            };
            let span = attempt_span(&picked, credential_id);
            let result = attempt.run(&mut rng).instrument(span.clone()).await;
            let elapsed = sent_at.elapsed();
            let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
            trail.upstream_micros = trail.upstream_micros.saturating_add(micros);
            state.metrics.upstream_latency.observe_micros(micros);
            let latency_ms = elapsed.as_secs_f64() * 1000.0;
            match result {
                Outcome::Committed(committed) => {
                    let log = AttemptLog {
                        member_id: picked.member.id,
                        channel_id: picked.channel.id,
                        credential_id,
                        status: Some(committed.response.status.as_u16()),
                        error: None,
                        latency_ms,
                    };
                    record_attempt(&span, &log);
                    trail.attempts.push(log);
                    state
                        .metrics
                        .attempt(&picked.channel.name, AttemptOutcome::Success);
                    let now = crate::unix_ms();
                    let effect = state.store.record_success(
                        &AttemptSuccess {
                            member: picked.member.id,
                            channel: picked.channel.id,
                            upstream_model: &picked.member.upstream_model,
                            latency_ms,
                            canary: picked.canary,
                            promote_after: settings.stable_first_promote_requests,
                        },
                        now,
                    );
                    if effect.promoted {
                        tracing::info!(
                            member_id = picked.member.id,
                            "canary member promoted to stable"
                        );
                    }
                    let sticky_on = route.sticky_session.unwrap_or(settings.sticky_enabled);
                    if let (true, false, Some(key)) = (
                        sticky_on,
                        req.constraint.is_pinned(),
                        req.constraint.session_key.as_deref(),
                    ) {
                        let ttl = u64::from(settings.sticky_ttl_minutes) * 60_000;
                        state
                            .store
                            .bind_sticky(route.id, key, picked.member.id, ttl, now);
                    }
                    trail.final_channel = Some(picked.channel.name.clone());
                    trail.final_model = Some(picked.member.upstream_model.clone());
                    let owner = StreamOwner {
                        state: state.clone(),
                        member: picked.member.id,
                        channel: picked.channel.id,
                        upstream_model: picked.member.upstream_model.clone(),
                        channel_name: picked.channel.name.clone(),
                        policy,
                        protocol,
                        request_id: req.request_id.to_owned(),
                        guard,
                        slot: StreamSlot::new(),
                    };
                    trail.usage = committed.usage;
                    if committed.first_chunk.is_some() {
                        trail.stream = Some(owner.slot.clone());
                    }
                    return (committed_response(committed, idle_timeout, owner), trail);
                }
                Outcome::Failed(failed) => {
                    let log = AttemptLog {
                        member_id: picked.member.id,
                        channel_id: picked.channel.id,
                        credential_id,
                        status: failed.status,
                        error: Some(failed.error),
                        latency_ms,
                    };
                    record_attempt(&span, &log);
                    trail.attempts.push(log);
                    state
                        .metrics
                        .attempt(&picked.channel.name, failed.outcome());
                    if let (Some(keyword), true) = (failed.ban_keyword, policy.fault_protection) {
                        let now = crate::unix_ms();
                        if picked.channel.credentials.len() > 1 {
                            state.store.disable_credential(credential_id, keyword, now);
                            disabled_here.push(credential_id);
                            state.metrics.credentials_disabled.fetch_add(1, Relaxed);
                        } else {
                            state.store.trip_breaker(picked.channel.id, keyword, now);
                            state.metrics.breaker_trips.fetch_add(1, Relaxed);
                            trail.breaker_tripped = true;
                        }
                        tracing::warn!(channel = %picked.channel.name, credential_id, keyword, "auto-ban keyword matched");
                    }
                    let again = failed.scope == Scope::SameChannel;
                    if let Some(answer) = failed.answer.clone() {
                        last = Some(answer);
                    }
                    last_error = Some(failed.error);
                    failure = Some(failed);
                    if !again {
                        break;
                    }
                }
            }
        }
        drop(guard);

        // The member failed: cool it, count its channel once per request, and move on.
        let Some(failed) = failure else { break };
        let now = crate::unix_ms();
        let effect = state.store.record_failure(
            &AttemptFailure {
                member: picked.member.id,
                channel: picked.channel.id,
                upstream_model: &picked.member.upstream_model,
                kind: failed.kind,
                retry_after_ms: failed.retry_after_ms,
            },
            &policy,
            now,
        );
        if effect.cooled_until.is_some() {
            state.metrics.cooldowns.fetch_add(1, Relaxed);
        }
        if failed.kind != FailureKind::Rejected && !counted_channels.contains(&picked.channel.id) {
            counted_channels.push(picked.channel.id);
            let channel_effect =
                state
                    .store
                    .record_channel_failure(picked.channel.id, &policy, now);
            if channel_effect.tripped {
                state.metrics.breaker_trips.fetch_add(1, Relaxed);
                trail.breaker_tripped = true;
                tracing::warn!(
                    channel = %picked.channel.name,
                    consecutive_failures = channel_effect.consecutive_failures,
                    "channel breaker tripped"
                );
            }
        }
        req.constraint.attempted.push(picked.member.id);
        req.constraint.prefer_channel =
            (failed.scope == Scope::PreferChannel).then_some(picked.channel.id);
        prev_channel = Some(picked.channel.id);
        trail.final_channel = Some(picked.channel.name.clone());
        trail.final_model = Some(picked.member.upstream_model.clone());
        if !retry_allowed || Instant::now() >= deadline {
            break;
        }
    }

    // Every attempt failed: the last upstream answer, not a generic error.
    match last {
        Some(answer) => (answer_response(answer), trail),
        None => {
            let e = match last_error {
                Some("first_byte_timeout" | "body_timeout") => GatewayError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "server_error",
                    "upstream_timeout",
                    "The upstream did not answer within the request's time budget.",
                ),
                Some("stream_cut_before_first_byte") => GatewayError::new(
                    StatusCode::BAD_GATEWAY,
                    "server_error",
                    "upstream_stream_cut",
                    "Every upstream stream ended before its first byte.",
                ),
                _ => GatewayError::new(
                    StatusCode::BAD_GATEWAY,
                    "server_error",
                    "upstream_unreachable",
                    "No upstream could be reached.",
                ),
            };
            fail(e, trail)
        }
    }
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (name, value) in from {
        if returnable(name) {
            to.append(name.clone(), value.clone());
        }
    }
}

fn answer_response(answer: Answer) -> Response {
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = answer.status;
    copy_headers(&answer.headers, response.headers_mut());
    response
}

fn committed_response(committed: Committed, idle: Duration, owner: StreamOwner) -> Response {
    let Committed {
        response: upstream,
        first_chunk,
        translator,
        usage: _,
    } = committed;
    let body = match first_chunk {
        Some(first) => relay(first, upstream.body, idle, owner, translator),
        None => upstream.body,
    };
    let mut response = Response::new(body);
    *response.status_mut() = upstream.status;
    copy_headers(&upstream.headers, response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that always answers `value`.
    struct Fixed(u64);

    impl RandomSource for Fixed {
        fn next_u64(&mut self) -> u64 {
            self.0
        }
    }

    /// Draws at the two ends of the jitter range.
    const LOWEST: u64 = 0;
    const HIGHEST: u64 = u64::MAX;

    #[test]
    fn backoff_doubles_from_25_ms_to_400_ms_with_jitter_in_half_to_full() {
        for (n, base_ms) in [
            (1, 25),
            (2, 50),
            (3, 100),
            (4, 200),
            (5, 400),
            (6, 400),
            (40, 400),
        ] {
            let base = Duration::from_millis(base_ms);
            assert_eq!(backoff(n, &mut Fixed(LOWEST)), base / 2, "re-send {n}");
            let high = backoff(n, &mut Fixed(HIGHEST));
            assert!(
                high <= base && high > base * 99 / 100,
                "re-send {n}: {high:?}"
            );
        }
        // Jitter spreads the pauses: different draws, different pauses.
        let mut rng = SplitMix64::new(7);
        let pauses: std::collections::BTreeSet<Duration> =
            (0..50).map(|_| backoff(3, &mut rng)).collect();
        assert!(pauses.len() > 40, "{pauses:?}");
        assert!(pauses
            .iter()
            .all(|p| *p >= Duration::from_millis(50) && *p < Duration::from_millis(100)));
    }

    #[test]
    fn a_pause_that_would_end_past_the_deadline_is_not_taken() {
        let full = Duration::from_millis(25);
        assert_eq!(
            pause_before(1, Duration::from_secs(10), &mut Fixed(HIGHEST)),
            Some(backoff(1, &mut Fixed(HIGHEST)))
        );
        // The longest pause of re-send 1 is 25 ms: it must end before the deadline, not on it.
        assert_eq!(pause_before(1, full, &mut Fixed(HIGHEST)), None);
        assert_eq!(pause_before(1, full, &mut Fixed(LOWEST)), Some(full / 2));
        assert_eq!(pause_before(1, full / 2, &mut Fixed(LOWEST)), None);
        assert_eq!(
            pause_before(5, Duration::from_millis(150), &mut Fixed(LOWEST)),
            None
        );
        assert_eq!(pause_before(1, Duration::ZERO, &mut Fixed(LOWEST)), None);
    }
}
