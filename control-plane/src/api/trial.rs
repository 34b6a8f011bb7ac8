//! `POST /api/v1/members/{id}/trial`: the console's trial call through one chosen member.
//!
//! The control plane makes the call itself, with the shared probe of `switchyard-upstream` (a real
//! one-token generation in the channel's own protocol, built by the same per-channel runtime the
//! proxies use), so the console needs no data-plane address, no downstream token and no
//! cross-origin access. The member's channel is taken from the snapshot this replica serves;
//! secrets are resolved as the recovery probes resolve them (inline, or `secret_env` from the
//! control plane's environment). A failure is reported to the fleet's shared state exactly as a
//! proxy reports a failed attempt of that member (`report_failure`: the member's cooldown, streak
//! and health record, and the channel's consecutive failures toward its breaker, counted once as
//! for one request), so the live state shows what it did; a pass changes nothing.

use std::time::Duration;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use switchyard_engine::{Channel, Member, Route, SecretSource, Snapshot, SplitMix64};
use switchyard_state::{unix_ms, AttemptFailure, FailureKind, FailurePolicy};
use switchyard_upstream::{ChannelRuntime, ProbeFailure, ProbeResult};
use utoipa::ToSchema;

use super::extract::Path;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::live::LiveState;
use crate::state::AppState;

/// How long one trial may take.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize, ToSchema)]
pub struct TrialResponse {
    pub member_id: i64,
    pub route_id: i64,
    pub channel_id: i64,
    pub upstream_model: String,
    pub passed: bool,
    /// The upstream's status, when it answered.
    pub status: Option<u16>,
    /// Why it failed: `status`, `timeout`, `transport`, `request`, or `no_credential`.
    pub failure: Option<String>,
    /// A `transport` failure's cause: `dns`, `refused`, `reset`, `tls`, `timeout` or `other`.
    pub cause: Option<String>,
    /// The credential that answered last (never its secret).
    pub credential_id: Option<i64>,
    pub latency_ms: u64,
    /// The failure was reported to the fleet's shared state (needs `REDIS_URL`).
    pub recorded: bool,
    /// When the failure cooled the member: until when (Unix ms).
    pub cooled_until: Option<u64>,
    /// The channel's consecutive failed attempts after this one, when it counted toward the
    /// channel's breaker (an upstream 4xx never does).
    pub channel_failures: Option<u32>,
    /// This failure tripped the channel's breaker.
    pub breaker_tripped: bool,
}

fn kind_of(result: &ProbeResult) -> Option<FailureKind> {
    match result {
        ProbeResult::Passed { .. } => None,
        ProbeResult::Failed { reason, status } => match reason {
            ProbeFailure::Status => match status {
                Some(408 | 429) | Some(500..=599) => Some(FailureKind::Retryable),
                Some(_) => Some(FailureKind::Rejected),
                None => Some(FailureKind::Retryable),
            },
            ProbeFailure::Timeout | ProbeFailure::Transport(_) => Some(FailureKind::Transport),
            // Our own request could not be built: says nothing about the upstream.
            ProbeFailure::Request => None,
        },
    }
}

#[utoipa::path(post, path = "/api/v1/members/{id}/trial", tag = "members", operation_id = "trial_member",
    responses(
        (status = 200, description = "the trial's outcome (a failed upstream call is still a 200 \
                                      here: `passed: false`)", body = TrialResponse),
        (status = 404, description = "no such member in the current snapshot", body = ErrorBody),
        (status = 503, description = "no snapshot compiled yet", body = ErrorBody)))]
pub async fn trial(
    State(state): State<AppState>,
    Path(id): Path<i64>,
) -> ApiResult<Json<TrialResponse>> {
    let published = state
        .publisher
        .current()
        .ok_or_else(|| ApiError::Unavailable {
            message: "no route snapshot compiled yet".to_owned(),
        })?;
    let snapshot = &published.snapshot;
    let (route, member) = snapshot
        .member(id)
        .ok_or_else(|| ApiError::not_found("member", id))?;
    let channel = snapshot
        .channel(member.channel_id)
        .ok_or_else(|| ApiError::not_found("channel", member.channel_id))?;
    let mut channel = channel.clone();
    channel.credentials.retain(|c| c.enabled);
    let started = tokio::time::Instant::now();
    let last = call(&state, &channel, &member.upstream_model).await;
    let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut response = TrialResponse {
        member_id: member.id,
        route_id: route.id,
        channel_id: channel.id,
        upstream_model: member.upstream_model.clone(),
        passed: false,
        status: None,
        failure: Some("no_credential".to_owned()),
        cause: None,
        credential_id: None,
        latency_ms,
        recorded: false,
        cooled_until: None,
        channel_failures: None,
        breaker_tripped: false,
    };
    let Some((result, credential_id)) = last else {
        // Keeps the reason free of secrets: only which kind of source is missing.
        let env_only = channel
            .credentials
            .iter()
            .all(|c| matches!(c.secret, SecretSource::Env(_)));
        tracing::info!(
            member_id = id,
            env_only,
            "trial call: no enabled credential with a resolvable secret"
        );
        return Ok(Json(response));
    };
    response.credential_id = Some(credential_id);
    response.outcome(&result);
    if let (Some(kind), Some(live)) = (kind_of(&result), &state.live) {
        response.record(live, snapshot, route, member, kind);
    }
    tracing::info!(
        member_id = id,
        channel_id = channel.id,
        passed = response.passed,
        status = response.status,
        failure = response.failure.as_deref(),
        cause = response.cause.as_deref(),
        latency_ms,
        "trial call"
    );
    Ok(Json(response))
}

/// Probes the channel's credentials in turn until one passes: the last result, with the
/// credential that gave it (`None`: no credential with a resolvable secret).
async fn call(
    state: &AppState,
    channel: &Channel,
    upstream_model: &str,
) -> Option<(ProbeResult, i64)> {
    let env = |name: &str| std::env::var(name).ok();
    let runtime = ChannelRuntime::compile(channel, &env);
    let client = switchyard_upstream::HttpClient::new(state.upstream.clone());
    let mut rng = SplitMix64::new(super::explain::random_seed());
    let mut last: Option<(ProbeResult, i64)> = None;
    for credential in &runtime.credentials {
        let result = switchyard_upstream::probe_credential(
            &client,
            &runtime,
            credential,
            upstream_model,
            TRIAL_TIMEOUT,
            &mut rng,
        )
        .await;
        let passed = result.passed();
        last = Some((result, credential.id));
        if passed {
            break;
        }
    }
    last
}

impl TrialResponse {
    /// What the upstream answered.
    fn outcome(&mut self, result: &ProbeResult) {
        match result {
            ProbeResult::Passed { status } => {
                self.passed = true;
                self.status = Some(*status);
                self.failure = None;
            }
            ProbeResult::Failed { reason, status } => {
                self.status = *status;
                self.failure = Some(reason.as_str().to_owned());
                self.cause = reason.cause().map(|c| c.as_str().to_owned());
            }
        }
    }

    /// Reports the failure to the fleet's shared state as a proxy reports a failed attempt of
    /// the member, and shows what it did there.
    fn record(
        &mut self,
        live: &LiveState,
        snapshot: &Snapshot,
        route: &Route,
        member: &Member,
        kind: FailureKind,
    ) {
        let settings = &snapshot.settings;
        let cooldown_seconds = route.cooldown_seconds.unwrap_or(settings.cooldown_seconds);
        let policy = FailurePolicy {
            fault_protection: settings.fault_protection_enabled,
            cooldown_ms: u64::from(cooldown_seconds) * 1000,
            breaker_threshold: settings.breaker_failure_threshold,
        };
        // One request on one channel: its failure counts for the channel once, as a proxy's.
        let reported = live.store().report_failure(
            &AttemptFailure {
                member: member.id,
                channel: member.channel_id,
                upstream_model: &member.upstream_model,
                kind,
                retry_after_ms: None,
            },
            &policy,
            true,
            unix_ms(),
        );
        self.recorded = true;
        self.cooled_until = reported.member.cooled_until;
        self.channel_failures = reported.channel.map(|c| c.consecutive_failures);
        self.breaker_tripped = reported.channel.is_some_and(|c| c.tripped);
    }
}
