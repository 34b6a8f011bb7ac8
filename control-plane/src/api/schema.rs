//! Schema-only types of the OpenAPI document: the enums the API stores and answers as strings
//! (so clients see `enum`s, not free strings), and the bodies whose Rust types live in other
//! crates (settings, explain's decision, the shared-state dump). Tests parse real responses into
//! the mirror types with unknown fields denied, so the document cannot drift from what is sent.
//! The mirrors repeat their originals' fields on purpose (the originals' crates do not depend on
//! utoipa), so a duplicate-code report lists them beside those originals.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// The wire protocol a channel speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderName {
    Openai,
    /// Azure OpenAI: OpenAI's protocol; the member's upstream model is the deployment, the
    /// channel's `api-version` header entry the API version (default `2024-10-21`, and
    /// `2025-04-01-preview` for the Responses API), `api-version-{kind}` that of one kind.
    Azure,
    Anthropic,
    Gemini,
    /// Google Vertex AI: Gemini's protocol at
    /// `{base_url}/v1/projects/{project}/locations/{location}/publishers/google/models/{model}`;
    /// each credential is a service-account key file (JSON) exchanged for access tokens. The
    /// project is the key's `project_id` unless the `base_url` ends in
    /// `/v1/projects/{project}/locations/{location}`; the location is the endpoint's
    /// (`{location}-aiplatform.googleapis.com`), else `us-central1`.
    Vertex,
    /// AWS Bedrock: the Converse API at `{base_url}/model/{model}/converse` (and
    /// `converse-stream`), requests signed with AWS Signature Version 4; each credential is an
    /// AWS access key, a JSON object `{"access_key_id", "secret_access_key", "session_token"
    /// (optional), "region" (optional)}`. The region is the `base_url`'s
    /// (`https://bedrock-runtime.{region}.amazonaws.com`), else the credential's, else
    /// `us-east-1`.
    Bedrock,
    Mock,
}

/// A channel's status. Operators set `enabled` or `disabled`; `auto_disabled` is set by the
/// breaker (and lifted by a passed recovery probe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChannelStatusName {
    Enabled,
    Disabled,
    AutoDisabled,
}

/// How a channel authenticates upstream: its stored credentials, or the proxies' own workload
/// identity (`azure`, `bedrock` and `vertex` channels; no stored secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChannelAuthName {
    Credentials,
    Workload,
}

/// Where a credential's secret comes from: stored (`inline`) or an environment variable on the
/// proxies (`env`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CredentialSource {
    Inline,
    Env,
}

/// How a route picks among the members of its highest eligible tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoutingModeName {
    Auto,
    Weighted,
    Latency,
    Adaptive,
    Single,
}

/// Whom a limit applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitScopeName {
    Token,
    Team,
    Route,
    Channel,
    Member,
    /// Every request carrying the limit's `tag`.
    Tag,
    /// The limit's `end_user`, or, without one, each end user on a counter of its own.
    EndUser,
}

/// What a limit counts: requests, tokens (input + output), requests in progress, or spend (USD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitMetricName {
    Requests,
    Tokens,
    Concurrent,
    Spend,
}

/// A limit's counting window: a UTC calendar window (`minute`, `hour`, `day`, `week` from
/// Monday 00:00, `month`) or a rolling window of the last N UTC days (`2d` to `90d`, counted in
/// day buckets); `none` for `concurrent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(
    value_type = String,
    pattern = "^(none|minute|hour|day|week|month|([2-9]|[1-8][0-9]|90)d)$",
    example = "7d"
)]
pub struct LimitWindowName(pub String);

/// `hard` refuses requests beyond the limit; `soft` lets them pass and reports the crossing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitModeName {
    Hard,
    Soft,
}

fn settings_object(all_required: bool) -> Schema {
    let defaults = serde_json::to_value(switchyard_engine::Settings::default())
        .ok()
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    let mut object =
        ObjectBuilder::new().additional_properties(Some(AdditionalProperties::FreeForm(false)));
    for (name, default) in &defaults {
        let mut property = ObjectBuilder::new().default(Some(default.clone()));
        property = if default.is_boolean() {
            property.schema_type(SchemaType::Type(Type::Boolean))
        } else {
            let property = property
                .schema_type(SchemaType::Type(Type::Integer))
                .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                    utoipa::openapi::KnownFormat::Int64,
                )));
            match switchyard_engine::settings::range_of(name) {
                Some((lo, hi)) => property.minimum(Some(lo as f64)).maximum(Some(hi as f64)),
                None => property.minimum(Some(0.0)),
            }
        };
        object = object.property(name.clone(), property);
        if all_required {
            object = object.required(name.clone());
        }
    }
    Schema::Object(
        object
            .description(Some(if all_required {
                "Every global setting, defaults filled in."
            } else {
                "Global settings to write: PUT replaces the document (absent keys take their \
                 defaults), PATCH changes only the keys it sends. Unknown keys and out-of-range \
                 values are a 422 naming the key."
            }))
            .build(),
    )
}

/// The global settings as the API answers them: generated from the engine's `Settings` (its
/// serialised defaults and `RANGES`), so a new setting appears here by itself.
pub struct SettingsDocument;

impl PartialSchema for SettingsDocument {
    fn schema() -> RefOr<Schema> {
        RefOr::T(settings_object(true))
    }
}

impl ToSchema for SettingsDocument {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Settings")
    }
}

/// A PUT or PATCH body of the global settings: any subset of the keys. (`Deserialize` only so
/// that the dry run's schema-only `ChangeBody` can name it.)
#[derive(Deserialize)]
pub struct SettingsChanges;

impl PartialSchema for SettingsChanges {
    fn schema() -> RefOr<Schema> {
        RefOr::T(settings_object(false))
    }
}

impl ToSchema for SettingsChanges {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("SettingsChanges")
    }
}

// ------------------------------------------------------------------------------------ explain

/// Why a candidate is not eligible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    MemberDisabled,
    ChannelDisabled,
    CredentialUnavailable,
    CoolingDown,
    AlreadyAttempted,
    InvalidWeight,
    SingleModeOtherMember,
    CapabilityMismatch,
    ContextTooLong,
    ProtocolUnsupported,
    SecretsWithheld,
    /// No room under the member's channel or member limits.
    RateLimited,
}

/// The selection's result (`model_not_found` is answered as a 404 instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeName {
    Selected,
    ModelNotFound,
    ModelNotAllowed,
    NoEligibleMember,
}

/// How the selected member was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    Pinned,
    Sticky,
    PreferredChannel,
    Strategy,
    CoolingFallback,
}

/// The matched route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteSummary {
    pub id: i64,
    pub model_pattern: String,
    pub routing_mode: RoutingModeName,
    pub single_member_id: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StrategyView {
    pub mode: RoutingModeName,
    pub latency_aware: bool,
    pub error_aware: bool,
    pub concurrency_aware: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CanaryPool {
    Canary,
    Stable,
}

/// The stable-first canary draw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CanaryDrawView {
    pub enabled: bool,
    pub denominator: u32,
    pub pool: Option<CanaryPool>,
    pub drawn: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StickyState {
    Disabled,
    NoSession,
    Pinned,
    Unbound,
    Expired,
    Hit,
    Escaped,
}

/// What stickiness did. `member_id` for `expired`, `hit` and `escaped`; `reasons` and
/// `in_pool` for `escaped`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StickyView {
    pub state: StickyState,
    pub member_id: Option<i64>,
    pub reasons: Option<Vec<ReasonCode>>,
    pub in_pool: Option<bool>,
}

/// The retry budget in force for the route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryBudgetView {
    pub retry_times: u32,
    pub channel_retry_times: u32,
    pub cross_channel_failover: bool,
    pub cooldown_seconds: u32,
}

/// One member of the route as the engine saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CandidateView {
    pub member_id: i64,
    pub channel_id: i64,
    pub channel: Option<String>,
    pub upstream_model: String,
    pub group: String,
    pub priority: i32,
    pub weight: i32,
    pub canary: bool,
    pub eligible: bool,
    pub reasons: Vec<ReasonCode>,
    /// Unix milliseconds.
    pub cooldown_until: Option<u64>,
    pub latency_factor: f64,
    pub error_factor: f64,
    /// The channel is recovering: in its slow-start window after a passed probe.
    pub recovering: bool,
    /// Slow-start factor (`slow_start_initial_percent`/100 rising linearly to 1 over
    /// `slow_start_seconds`; 1 when not recovering). Multiplies the selection weight, so it is in
    /// `probability` but not in `score`.
    pub ramp_factor: f64,
    /// `weight × latency factor × error factor`.
    pub score: f64,
    pub probability: f64,
}

/// Where explain's health data came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthViewSource {
    /// The fleet's shared state (`REDIS_URL`).
    Redis,
    /// An in-memory view.
    Memory,
    /// No `REDIS_URL`: no cooldowns, breakers, in-flight counts or health records are seen.
    None,
}

/// The engine's decision for a model: the choice and its explanation in one value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainResponse {
    pub model: String,
    pub route: Option<RouteSummary>,
    pub outcome: OutcomeName,
    /// With `outcome: selected`.
    pub member_id: Option<i64>,
    /// With `outcome: selected`.
    pub channel_id: Option<i64>,
    /// With `outcome: selected`.
    pub via: Option<Via>,
    pub requested_group: String,
    pub route_group: Option<String>,
    pub group_fallback: bool,
    pub tier: Option<i32>,
    pub strategy: Option<StrategyView>,
    pub canary: Option<CanaryDrawView>,
    pub sticky: Option<StickyView>,
    pub budget: Option<RetryBudgetView>,
    pub candidates: Vec<CandidateView>,
    /// The snapshot revision the decision was made on.
    pub revision: u64,
    /// Seed of the random draws (pass it back to reproduce the decision).
    pub seed: u64,
    /// Unix milliseconds.
    pub now_ms: u64,
    pub health_view: HealthViewSource,
    /// With `token`: the token the selection was made for.
    #[serde(default)]
    pub token: Option<ExplainTokenView>,
    /// With `token`: the limits its request would be under (the token's, its team's and the
    /// route's; with `tags` and `end_user`, those of its tags and its end user too).
    #[serde(default)]
    pub limits: Option<Vec<ExplainLimitView>>,
    /// The response cache rule that applies to the request at `endpoint` (the first, by id,
    /// that covers it); `null`: none, the request is never looked up.
    #[serde(default)]
    pub cache_rule: Option<ExplainCacheRuleView>,
    /// The guardrails the request would run (enabled, attached to its route, team, token or
    /// all traffic), in id order; with `text`, what each would do to it.
    #[serde(default)]
    pub guardrails: Vec<ExplainGuardrailView>,
    /// The semantic part of the cache rule that applies, when it has one (`null`: none); with
    /// `prompt`, whether that prompt would match a stored one and with what score.
    #[serde(default)]
    pub semantic_cache: Option<ExplainSemanticView>,
}

/// What explain says of the applicable cache rule's semantic part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainSemanticView {
    pub rule_id: i64,
    /// `trial` (counted, never served) or `serve`.
    pub mode: String,
    /// The cosine similarity a stored prompt must reach.
    pub threshold: f64,
    /// Whether the prompt was scored; when not, `reason` says why.
    pub evaluated: bool,
    /// The rule's shared vectors searched.
    #[serde(default)]
    pub vectors: Option<u64>,
    /// The best similarity found (three decimals); `null`: no vector in the prompt's partition.
    #[serde(default)]
    pub score: Option<f64>,
    /// Whether the score reaches the threshold.
    #[serde(default)]
    pub would_hit: Option<bool>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// A guardrail explain found for the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainGuardrailView {
    pub id: i64,
    pub name: String,
    /// `all`, `route`, `team` or `token`.
    pub scope: String,
    pub scope_id: Option<i64>,
    /// The stages it runs at for this request: `request`, `response`.
    pub stages: Vec<String>,
    /// `block`, `redact` or `log`.
    pub action: String,
    /// `enforce` or `shadow`.
    pub mode: String,
    /// What it does on a finding: its action, or `log` in shadow mode.
    pub effective_action: String,
    pub restore: bool,
    /// `allow` or `block`: what it does with content the gateway cannot inspect.
    pub uninspectable: String,
    /// The checks it holds: `patterns`, `detectors`, `max_input_tokens`, `max_messages`,
    /// `tools`, `json_schema`, `webhook`, `moderation`.
    pub checks: Vec<String>,
    /// With `text` and a rule that runs on requests: what it would do to that text.
    #[serde(default)]
    pub sample: Option<ExplainGuardSampleView>,
}

/// What a guardrail would do to explain's sample text (one request message).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainGuardSampleView {
    /// `pass`, `block`, `redact` or `log`.
    pub outcome: String,
    /// What its patterns and detectors found (byte offsets into the text).
    pub findings: Vec<ExplainGuardFindingView>,
    /// A size limit the text is over (tokens estimated as characters / 4).
    pub violation: Option<ExplainGuardViolationView>,
    /// With `outcome: redact`: the text as it would go upstream.
    pub redacted_text: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainGuardFindingView {
    /// `EMAIL`, `CARD`, a pattern's label…
    pub kind: String,
    /// The detector's name, or `patterns[i]`.
    pub check: String,
    pub start: usize,
    pub end: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainGuardViolationView {
    /// `max_input_tokens` or `max_messages`.
    pub check: String,
    pub message: String,
}

/// The response cache rule explain found for the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainCacheRuleView {
    pub id: i64,
    pub name: String,
    /// The endpoint explain asked about.
    pub endpoint: String,
    /// `route`, `team` or `token`.
    pub scope: String,
    pub ttl_seconds: u64,
    pub max_entry_bytes: u64,
    pub deterministic_only: bool,
}

/// The token explain selected for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainTokenView {
    pub id: i64,
    pub name: String,
    pub team_id: Option<i64>,
    pub route_group_name: Option<String>,
    /// A disabled token is refused (401) before any selection.
    pub enabled: bool,
    /// RFC 3339 UTC; `null`: never expires.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// Expired: refused (401 `token_expired`) before any selection.
    pub expired: bool,
}

/// One limit a token's request is under, and its state as this control plane's state store
/// sees it (`null` figures: no shared state configured).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainLimitView {
    pub limit_id: i64,
    pub scope: LimitScopeName,
    pub scope_id: i64,
    pub metric: LimitMetricName,
    pub window: LimitWindowName,
    pub mode: LimitModeName,
    /// Narrowed to requests for models matching this pattern; `null`: every model.
    pub model_pattern: Option<String>,
    /// Narrowed to requests through this route; `null`: every route.
    pub route_id: Option<i64>,
    /// Why it applies: whose limit it is and what it is narrowed to.
    pub why: String,
    /// For `spend`, USD as an exact decimal string; otherwise a whole number.
    #[schema(value_type = super::amount::LimitValueOutput)]
    pub value: serde_json::Value,
    /// Taken in the current window.
    #[schema(value_type = Option<super::amount::LimitValueOutput>)]
    pub used: Option<serde_json::Value>,
    #[schema(value_type = Option<super::amount::LimitValueOutput>)]
    pub remaining: Option<serde_json::Value>,
    /// When the window ends (RFC 3339 UTC); `null` for `concurrent`.
    #[schema(format = DateTime)]
    pub reset_at: Option<String>,
    /// A hard limit without room: the request would be refused (429) now.
    pub would_refuse: Option<bool>,
}

// -------------------------------------------------------------------------------- shared state

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CooldownView {
    pub member_id: i64,
    /// Unix milliseconds.
    pub until: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberFailuresView {
    pub member_id: i64,
    pub consecutive_failures: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelStateView {
    pub channel_id: i64,
    pub consecutive_failures: u32,
    pub breaker_open: bool,
    /// Unix milliseconds.
    pub tripped_at: Option<u64>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InFlightView {
    pub channel_id: i64,
    pub in_flight: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthRecordView {
    pub channel_id: i64,
    pub upstream_model: String,
    /// EWMA latency; `null` before the first success.
    pub latency_ms: Option<f64>,
    pub error_propensity: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DisabledCredentialView {
    pub credential_id: i64,
    pub reason: String,
    /// Unix milliseconds.
    pub at: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CanaryView {
    pub member_id: i64,
    pub successes: u32,
    pub promoted: bool,
}

/// A channel in its slow-start window after a passed recovery probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecoveringView {
    pub channel_id: i64,
    /// Unix milliseconds the probe passed.
    pub since: u64,
    /// Unix milliseconds the ramp ends.
    pub until: u64,
    /// What the channel's members' selection weight is multiplied by now.
    pub ramp_factor: f64,
    /// Whole seconds until full weight.
    pub seconds_left: u64,
}

/// The fleet's live shared state (`REDIS_URL`). Never a secret. Without `REDIS_URL`:
/// `configured: false`, a `message`, and empty lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SharedStateResponse {
    pub configured: bool,
    /// Without `REDIS_URL`: how to configure it.
    pub message: Option<String>,
    /// With `REDIS_URL`: `redis`.
    pub source: Option<String>,
    /// With `REDIS_URL`: whether the connection is up (`null`: not known yet).
    pub connected: Option<bool>,
    /// With `REDIS_URL`: Unix milliseconds of the dump.
    pub now_ms: Option<u64>,
    pub cooldowns: Vec<CooldownView>,
    /// Channels whose breaker is open.
    pub breakers: Vec<ChannelStateView>,
    pub in_flight: Vec<InFlightView>,
    pub health: Vec<HealthRecordView>,
    /// With `REDIS_URL`.
    pub member_failures: Option<Vec<MemberFailuresView>>,
    /// With `REDIS_URL`: every channel with state.
    pub channels: Option<Vec<ChannelStateView>>,
    /// With `REDIS_URL`.
    pub credentials_disabled: Option<Vec<DisabledCredentialView>>,
    /// With `REDIS_URL`.
    pub canaries: Option<Vec<CanaryView>>,
    /// With `REDIS_URL`: channels ramping back up after a passed probe.
    pub recovering: Option<Vec<RecoveringView>>,
    /// With `REDIS_URL`.
    pub sticky_bindings: Option<u64>,
    /// The proxies whose snapshot stream is open on *this* replica (each replica knows only its
    /// own), with the revision each was last sent.
    pub proxies: Vec<ConnectedProxyView>,
    /// With `REDIS_URL`: how far behind the fleet each other live member of it is, in its own
    /// words (published with its lease, about once a second; `null` without `REDIS_URL`).
    #[serde(default)]
    pub fleet_sync: Option<Vec<ProxySyncView>>,
}

// Restates the state crate's `SyncReport` as the documented contract (its own words and
// `deny_unknown_fields`); the field lists overlap on purpose (ARCHITECTURE.md, "one copy").
/// One fleet member's own account of its sync with the shared state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxySyncView {
    /// The member's instance id (its in-flight lease name in Redis).
    pub instance: String,
    /// Unix milliseconds of the report, by the member's clock.
    pub reported_at_ms: u64,
    /// Whether its writer was connected to Redis.
    pub connected: bool,
    /// Milliseconds since its last successful sync (full resync or received notification);
    /// `null` before the first.
    pub last_sync_age_ms: Option<u64>,
    /// Other members' updates it merged since its previous report.
    pub window_updates: u64,
    /// The largest propagation lag among them (writer queued it → in this member's view), in
    /// milliseconds; `null` without updates.
    pub window_max_lag_ms: Option<u64>,
    pub updates_total: u64,
    pub resyncs_total: u64,
    pub redis_errors_total: u64,
    /// Its writes waiting for Redis.
    pub queued_writes: u64,
}

// Restates `proxies::ConnectedProxy` as the documented contract; the field lists overlap on
// purpose (ARCHITECTURE.md, "one copy").
/// One proxy connected to this replica's snapshot stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectedProxyView {
    pub stream_id: u64,
    /// The identity the proxy announced (not authenticated).
    pub client_id: String,
    pub peer: Option<String>,
    /// Presented a valid fleet token.
    pub authenticated: bool,
    pub revision_at_connect: u64,
    /// The newest revision sent: what the proxy now holds.
    pub revision: u64,
    pub connected_at_ms: u64,
    /// Stream opened, snapshot sent or usage report received (Unix ms).
    pub last_contact_ms: u64,
}
