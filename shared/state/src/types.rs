//! Reports the proxy sends to a store, the effects it gets back, and the admin dump.

use serde::Serialize;
use switchyard_engine::{ChannelId, CredentialId, MemberId, RouteId, UnixMillis};

/// Most sticky bindings an in-memory view holds; the binding that expires first is evicted.
pub const MAX_STICKY_BINDINGS: usize = 10_000;

/// How an attempt failed, as far as state is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Connect error, reset, timeout. The first of a member's streak only counts (network jitter
    /// must not cool a healthy member); a repeat cools.
    Transport,
    /// 408, 429, 5xx, or the channel's own retryable codes/patterns: cools the member.
    Retryable,
    /// Any other upstream 4xx: cools the member; never counts for the channel's breaker and
    /// leaves the health record alone (the request, not the upstream, is the likely culprit).
    Rejected,
    /// Failure specific to this member (stream cut before the first byte, empty completion,
    /// model not found): cools the member.
    MemberSpecific,
    /// The stream broke after its first byte reached the client: cools the member.
    StreamBroken,
}

impl FailureKind {
    /// Whether a failure of this kind is a failed *channel attempt*, counted toward the channel's
    /// breaker: every kind but [`FailureKind::Rejected`] (an upstream 4xx blames the request,
    /// not the channel).
    pub fn counts_toward_breaker(self) -> bool {
        self != FailureKind::Rejected
    }
}

/// The settings that govern what a failure does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailurePolicy {
    /// Off: no cooldowns and no breaker (health records still learn).
    pub fault_protection: bool,
    pub cooldown_ms: u64,
    /// Consecutive failed channel attempts that trip the breaker; 0 disables it.
    pub breaker_threshold: u32,
}

#[derive(Debug, Clone, Copy)]
pub struct AttemptFailure<'a> {
    pub member: MemberId,
    pub channel: ChannelId,
    pub upstream_model: &'a str,
    pub kind: FailureKind,
    /// The upstream's `Retry-After`, in milliseconds.
    pub retry_after_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureEffect {
    /// The member's failure streak after this failure.
    pub member_failures: u32,
    /// The member's cooldown end, when this failure cooled it (or extended its cooldown).
    pub cooled_until: Option<UnixMillis>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelFailureEffect {
    pub consecutive_failures: u32,
    /// This failure tripped the breaker (it was closed before).
    pub tripped: bool,
}

/// What [`crate::StateStore::report_failure`] did: the member's failure, and the channel's
/// when it counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportedFailure {
    pub member: FailureEffect,
    /// `Some` when the failure counted toward the channel's breaker (the caller's first of this
    /// channel in the request, and not an upstream 4xx).
    pub channel: Option<ChannelFailureEffect>,
}

/// What [`crate::StateStore::ban_keyword`] did about an auto-ban keyword in an error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeywordBan {
    /// Fault protection is off: nothing.
    Ignored,
    /// The channel has several credentials: this one is disabled at runtime.
    CredentialDisabled,
    /// The channel has a single credential: its breaker is open.
    BreakerTripped,
}

/// The reason a breaker records when a failed channel attempt ends a slow-start window.
pub const RECOVERING_TRIP_REASON: &str = "failed while recovering (slow start)";

#[derive(Debug, Clone, Copy)]
pub struct AttemptSuccess<'a> {
    pub member: MemberId,
    pub channel: ChannelId,
    pub upstream_model: &'a str,
    /// Latency of the response (time to first byte for streams).
    pub latency_ms: f64,
    /// The member is (still) a canary: count this success toward promotion.
    pub canary: bool,
    /// `stable_first_promote_requests`.
    pub promote_after: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuccessEffect {
    /// This success promoted the canary member to stable.
    pub promoted: bool,
}

/// The admin view of the live state.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StateDump {
    pub cooldowns: Vec<CooldownEntry>,
    pub member_failures: Vec<MemberFailures>,
    pub channels: Vec<ChannelState>,
    pub in_flight: Vec<InFlightEntry>,
    pub health: Vec<HealthEntry>,
    pub credentials_disabled: Vec<DisabledCredential>,
    pub canaries: Vec<CanaryEntry>,
    /// Channels in their slow-start window (a passed probe), still active at the dump's `now`.
    pub recovering: Vec<RecoveringEntry>,
    pub sticky_bindings: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecoveringEntry {
    pub channel_id: ChannelId,
    /// Unix ms the probe passed.
    pub since: UnixMillis,
    /// Unix ms the ramp ends.
    pub until: UnixMillis,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CooldownEntry {
    pub member_id: MemberId,
    pub until: UnixMillis,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberFailures {
    pub member_id: MemberId,
    pub consecutive_failures: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChannelState {
    pub channel_id: ChannelId,
    pub consecutive_failures: u32,
    pub breaker_open: bool,
    pub tripped_at: Option<UnixMillis>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InFlightEntry {
    pub channel_id: ChannelId,
    pub in_flight: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthEntry {
    pub channel_id: ChannelId,
    pub upstream_model: String,
    pub latency_ms: Option<f64>,
    pub error_propensity: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DisabledCredential {
    pub credential_id: CredentialId,
    pub reason: String,
    pub at: UnixMillis,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CanaryEntry {
    pub member_id: MemberId,
    pub successes: u32,
    pub promoted: bool,
}

/// Key of a sticky binding.
pub type StickyKey = (RouteId, String);
