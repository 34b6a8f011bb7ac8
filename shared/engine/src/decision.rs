//! The engine's output: a decision together with its explanation. The proxy reads
//! [`Decision::selected`]; explain serialises the whole thing. Both come from one computation.

use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};

use crate::model::{Channel, ChannelId, Member, MemberId, Route, RoutingMode, UnixMillis};

/// Why a candidate is not eligible. Codes are shown verbatim in explain and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Reason {
    MemberDisabled = 1 << 0,
    ChannelDisabled = 1 << 1,
    CredentialUnavailable = 1 << 2,
    CoolingDown = 1 << 3,
    AlreadyAttempted = 1 << 4,
    InvalidWeight = 1 << 5,
    SingleModeOtherMember = 1 << 6,
    CapabilityMismatch = 1 << 7,
    ContextTooLong = 1 << 8,
    ProtocolUnsupported = 1 << 9,
    /// The channel's secrets (inline credentials, header values, the base URL's password) were
    /// withheld from this snapshot's holder: it came from a control plane with no fleet token.
    SecretsWithheld = 1 << 10,
    /// The member's channel or the member itself has no room left under an upstream limit (a
    /// provider's own quota as configured).
    RateLimited = 1 << 11,
}

impl Reason {
    pub const ALL: [Reason; 12] = [
        Reason::MemberDisabled,
        Reason::ChannelDisabled,
        Reason::CredentialUnavailable,
        Reason::CoolingDown,
        Reason::AlreadyAttempted,
        Reason::InvalidWeight,
        Reason::SingleModeOtherMember,
        Reason::CapabilityMismatch,
        Reason::ContextTooLong,
        Reason::ProtocolUnsupported,
        Reason::SecretsWithheld,
        Reason::RateLimited,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Reason::MemberDisabled => "member_disabled",
            Reason::ChannelDisabled => "channel_disabled",
            Reason::CredentialUnavailable => "credential_unavailable",
            Reason::CoolingDown => "cooling_down",
            Reason::AlreadyAttempted => "already_attempted",
            Reason::InvalidWeight => "invalid_weight",
            Reason::SingleModeOtherMember => "single_mode_other_member",
            Reason::CapabilityMismatch => "capability_mismatch",
            Reason::ContextTooLong => "context_too_long",
            Reason::ProtocolUnsupported => "protocol_unsupported",
            Reason::SecretsWithheld => "secrets_withheld",
            Reason::RateLimited => "rate_limited",
        }
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

/// A set of reasons; no allocation on the hot path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reasons(u16);

impl Reasons {
    pub fn insert(&mut self, reason: Reason) {
        self.0 |= reason as u16;
    }
    pub fn contains(self, reason: Reason) -> bool {
        self.0 & reason as u16 != 0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Exactly this one reason and no other.
    pub fn is_only(self, reason: Reason) -> bool {
        self.0 == reason as u16
    }
    pub fn iter(self) -> impl Iterator<Item = Reason> {
        Reason::ALL.into_iter().filter(move |r| self.contains(*r))
    }
}

impl Serialize for Reasons {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for reason in self.iter() {
            seq.serialize_element(&reason)?;
        }
        seq.end()
    }
}

/// One candidate member, evaluated.
#[derive(Debug, Clone)]
pub struct Candidate<'s> {
    pub member: &'s Member,
    /// `None` when the snapshot lacks the member's channel (then `channel_disabled`).
    pub channel: Option<&'s Channel>,
    /// Priority after the team plan's override.
    pub priority: i32,
    /// Weight after the team plan's override.
    pub weight: i32,
    /// Canary after promotion is taken into account.
    pub canary: bool,
    pub reasons: Reasons,
    pub cooldown_until: Option<UnixMillis>,
    pub latency_factor: f64,
    pub error_factor: f64,
    pub concurrency_factor: f64,
    /// Slow-start factor of a recovering channel (1 otherwise); multiplies the selection weight
    /// like the concurrency factor, outside the score.
    pub ramp_factor: f64,
    /// The channel is in its slow-start window (and the ramp is on).
    pub recovering: bool,
    /// What operators see: `weight × latency factor × error factor` (never concurrency).
    pub score: f64,
    /// Chance that this decision picks this candidate, given everything but the random draws.
    pub probability: f64,
}

impl Candidate<'_> {
    pub fn eligible(&self) -> bool {
        self.reasons.is_empty()
    }
    pub fn member_id(&self) -> MemberId {
        self.member.id
    }
    pub fn channel_id(&self) -> ChannelId {
        self.member.channel_id
    }
}

impl Serialize for Candidate<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            member_id: MemberId,
            channel_id: ChannelId,
            channel: Option<&'a str>,
            upstream_model: &'a str,
            group: &'a str,
            priority: i32,
            weight: i32,
            canary: bool,
            eligible: bool,
            reasons: Reasons,
            cooldown_until: Option<UnixMillis>,
            latency_factor: f64,
            error_factor: f64,
            recovering: bool,
            ramp_factor: f64,
            score: f64,
            probability: f64,
        }
        View {
            member_id: self.member.id,
            channel_id: self.member.channel_id,
            channel: self.channel.map(|c| c.name.as_str()),
            upstream_model: &self.member.upstream_model,
            group: &self.member.group_name,
            priority: self.priority,
            weight: self.weight,
            canary: self.canary,
            eligible: self.eligible(),
            reasons: self.reasons,
            cooldown_until: self.cooldown_until,
            latency_factor: self.latency_factor,
            error_factor: self.error_factor,
            recovering: self.recovering,
            ramp_factor: self.ramp_factor,
            score: self.score,
            probability: self.probability,
        }
        .serialize(s)
    }
}

/// How the selected member was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The caller pinned a member or channel.
    Pinned,
    /// The session's sticky binding.
    Sticky,
    /// `prefer_channel`: the next variant of the channel being worked through.
    PreferredChannel,
    /// The tier's strategy (weighted / latency / error / concurrency).
    Strategy,
    /// Nothing was eligible; the cooling member that recovers first.
    CoolingFallback,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Selected {
        /// Index into [`Decision::candidates`].
        #[serde(skip)]
        index: usize,
        member_id: MemberId,
        channel_id: ChannelId,
        via: Via,
    },
    /// No enabled route matches the model.
    ModelNotFound,
    /// The caller's team may not use this model.
    ModelNotAllowed,
    /// A route matched but no member can serve (not even a cooling one).
    NoEligibleMember,
}

/// The strategy in force for this route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Strategy {
    pub mode: RoutingMode,
    pub latency_aware: bool,
    pub error_aware: bool,
    pub concurrency_aware: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pool {
    Canary,
    Stable,
}

/// The stable-first canary draw.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CanaryDraw {
    pub enabled: bool,
    pub denominator: u32,
    /// The pool selection ran in (`None` when the draw did not apply: pins, stickiness...).
    pub pool: Option<Pool>,
    /// Whether a random draw happened (both pools had eligible members).
    pub drawn: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Sticky {
    /// Stickiness is off for this route.
    Disabled,
    /// The request carried no session key.
    NoSession,
    /// Not used for pinned requests.
    Pinned,
    /// No binding for this session.
    Unbound,
    /// The binding had expired.
    Expired { member_id: MemberId },
    /// The bound member was eligible and selected.
    Hit { member_id: MemberId },
    /// The bound member could not be used; normal selection ran.
    Escaped {
        member_id: MemberId,
        /// Its exclusion reasons; empty when it is no longer in the candidate pool at all.
        reasons: Reasons,
        in_pool: bool,
    },
}

/// Retry budgets in force for this request, after route overrides, single mode and team caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RetryBudget {
    pub retry_times: u32,
    pub channel_retry_times: u32,
    pub cross_channel_failover: bool,
    pub cooldown_seconds: u32,
}

impl RetryBudget {
    /// Cross-channel rounds actually allowed after the first channel.
    pub fn cross_channel_rounds(&self) -> u32 {
        if self.cross_channel_failover {
            self.retry_times
        } else {
            0
        }
    }
}

/// A decision with its full explanation.
#[derive(Debug, Clone, Serialize)]
pub struct Decision<'s> {
    pub model: String,
    #[serde(serialize_with = "route_summary")]
    pub route: Option<&'s Route>,
    #[serde(flatten)]
    pub outcome: Outcome,
    pub requested_group: String,
    /// The group every candidate belongs to; `None` when they span several groups.
    pub route_group: Option<&'s str>,
    pub group_fallback: bool,
    /// The priority tier selection ran in.
    pub tier: Option<i32>,
    pub strategy: Option<Strategy>,
    pub canary: Option<CanaryDraw>,
    pub sticky: Option<Sticky>,
    pub budget: Option<RetryBudget>,
    pub candidates: Vec<Candidate<'s>>,
}

fn route_summary<S: Serializer>(route: &Option<&Route>, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Summary<'a> {
        id: i64,
        model_pattern: &'a str,
        routing_mode: RoutingMode,
        single_member_id: Option<MemberId>,
    }
    route
        .map(|r| Summary {
            id: r.id,
            model_pattern: &r.model_pattern,
            routing_mode: r.routing_mode,
            single_member_id: r.single_member_id,
        })
        .serialize(s)
}

impl<'s> Decision<'s> {
    /// The chosen candidate, if any.
    pub fn selected(&self) -> Option<&Candidate<'s>> {
        match self.outcome {
            Outcome::Selected { index, .. } => self.candidates.get(index),
            _ => None,
        }
    }

    pub fn candidate(&self, member: MemberId) -> Option<&Candidate<'s>> {
        self.candidates.iter().find(|c| c.member.id == member)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_channel_rounds_are_the_retry_times_only_when_failover_is_on() {
        let budget = |cross_channel_failover| RetryBudget {
            retry_times: 3,
            channel_retry_times: 2,
            cross_channel_failover,
            cooldown_seconds: 30,
        };
        assert_eq!(budget(true).cross_channel_rounds(), 3);
        assert_eq!(budget(false).cross_channel_rounds(), 0);
    }
}
