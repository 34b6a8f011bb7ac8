//! What the caller asks for on one selection round. The proxy builds one per request and
//! changes it between failover rounds (attempted members, preferred channel).

use serde::{Deserialize, Serialize};

use crate::model::{ChannelId, MemberId, TeamId};

/// What the request needs from a member (capability contract: an undeclared capability is assumed
/// supported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestNeeds {
    pub streaming: bool,
    pub tools: bool,
    pub vision: bool,
    pub json_mode: bool,
    /// A cheap estimate of the prompt's tokens, when known.
    pub estimated_prompt_tokens: Option<u32>,
    /// Providers whose protocol cannot express this request (an OR of
    /// [`crate::Provider::protocol_bit`]s): their members are skipped as `protocol_unsupported`.
    #[serde(default)]
    pub unsupported_providers: u8,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectionConstraint {
    /// The requested group (the token's `route_group_name`, or the request's explicit group).
    /// Trimmed; empty or `None` means `default`.
    pub route_group: Option<String>,
    /// Members this request already tried: excluded with the reason `already_attempted`.
    pub attempted: Vec<MemberId>,
    /// Members without room under an upstream limit (their channel's or their own, as the
    /// caller's limiter sees it): ineligible with the reason `rate_limited`.
    #[serde(default)]
    pub rate_limited: Vec<MemberId>,
    /// Members the caller excludes: filtered without a reason code.
    pub excluded_members: Vec<MemberId>,
    /// Channels the caller excludes: filtered without a reason code.
    pub excluded_channels: Vec<ChannelId>,
    /// Finish this channel's variants (top tier, member order) before leaving it.
    pub prefer_channel: Option<ChannelId>,
    /// Call exactly this member (console trial calls, probes). Beats `pinned_channel`.
    pub pinned_member: Option<MemberId>,
    /// Call only this channel's members.
    pub pinned_channel: Option<ChannelId>,
    /// The caller's team: model and member authorization, plan overrides, failover caps.
    pub team: Option<TeamId>,
    pub needs: RequestNeeds,
    /// The session key for stickiness, already derived (and hashed if long) by the caller.
    pub session_key: Option<String>,
}

impl SelectionConstraint {
    pub fn is_pinned(&self) -> bool {
        self.pinned_member.is_some() || self.pinned_channel.is_some()
    }
}
