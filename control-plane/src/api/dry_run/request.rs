//! A dry run's request: the changes proposed, each in the terms of the REST call it stands for,
//! and what applying each answered.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::{
    cache_rules, channels, credentials, guardrails, limits, members, prices, routes, schema,
    shadows, teams, tokens, webhooks,
};

/// At most this many changes in one dry run.
pub const MAX_CHANGES: usize = 100;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DryRunRequest {
    /// Applied in order, as if sent one after the other; none is kept.
    pub changes: Vec<ProposedChange>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ChangeOp {
    Create,
    Patch,
    Delete,
    /// Settings only: replace the whole document (`PUT /api/v1/settings`).
    Put,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    Channel,
    Credential,
    Route,
    Member,
    Token,
    Team,
    Price,
    Limit,
    Shadow,
    CacheRule,
    Guardrail,
    Webhook,
    Settings,
}

/// One change, in the terms of the REST call it stands for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProposedChange {
    pub op: ChangeOp,
    pub resource: ResourceKind,
    /// The resource's id (`patch`, `delete`).
    pub id: Option<i64>,
    /// The parent's id for a `create` of a credential (its channel) or a member (its route).
    pub parent_id: Option<i64>,
    /// The request body the REST call would send (`create`, `patch`, `put`); validated the same way.
    #[schema(value_type = Option<ChangeBody>)]
    pub body: Option<Value>,
}

/// Schema only: a change's body is the body of the REST call it stands for.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum ChangeBody {
    ChannelCreate(channels::ChannelCreate),
    ChannelPatch(channels::ChannelPatch),
    CredentialCreate(credentials::CredentialCreate),
    CredentialPatch(credentials::CredentialPatch),
    RouteCreate(routes::RouteCreate),
    RoutePatch(routes::RoutePatch),
    MemberCreate(members::MemberCreate),
    MemberPatch(members::MemberPatch),
    TokenCreate(tokens::TokenCreate),
    TokenPatch(tokens::TokenPatch),
    TeamCreate(teams::TeamCreate),
    TeamPatch(teams::TeamPatch),
    PriceCreate(prices::PriceCreate),
    PricePatch(prices::PricePatch),
    LimitCreate(limits::LimitCreate),
    LimitPatch(limits::LimitPatch),
    ShadowCreate(shadows::ShadowCreate),
    ShadowPatch(shadows::ShadowPatch),
    CacheRuleCreate(cache_rules::CacheRuleCreate),
    CacheRulePatch(cache_rules::CacheRulePatch),
    GuardrailCreate(guardrails::GuardrailCreate),
    GuardrailPatch(guardrails::GuardrailPatch),
    WebhookCreate(webhooks::WebhookCreate),
    WebhookPatch(webhooks::WebhookPatch),
    SettingsChanges(schema::SettingsChanges),
}

/// What applying one change answered inside the dry run.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeResult {
    pub index: usize,
    /// The HTTP status the real call would have answered.
    pub status: u16,
    /// The id a create would have produced (it does not exist after the dry run).
    pub id: Option<i64>,
}
