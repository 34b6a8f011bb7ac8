//! Domain types of a route snapshot: what the control plane compiles from Postgres, what a
//! standalone proxy reads from YAML, and what the engine selects from.
//!
//! These are validated domain values. Wire formats (protobuf, JSON, YAML) convert into them at the
//! edges; nothing here knows about those formats beyond `serde` for explain output and caching.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cache::CacheRule;
use crate::fxhash::FxHashMap;
use crate::guard::compile::CompiledGuards;
use crate::guard::rule::Guardrail;
use crate::limit::{Limit, LimitOnly, LimitRule, Price, ScopeKind};
use crate::pattern::RouteIndex;
use crate::settings::Settings;
use crate::shadow::ShadowRule;
use crate::slots::HealthSlots;
use crate::subject::SubjectLimits;

pub use crate::ids::{ChannelId, CredentialId, MemberId, RouteId, TeamId, TokenId, UnixMillis};

/// The name of the group used when a request names none.
pub const DEFAULT_GROUP: &str = "default";
/// Longest accepted group name, in characters.
pub const MAX_GROUP_NAME_CHARS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    Openai,
    /// Azure OpenAI: OpenAI's protocol behind Azure's URLs (the deployment in the path, an
    /// `api-version` query parameter) and its `api-key` header.
    Azure,
    Anthropic,
    Gemini,
    /// Google Vertex AI: Gemini's protocol at Vertex's project/location URLs, authorized with
    /// an OAuth access token the proxy obtains from a service-account key.
    Vertex,
    /// AWS Bedrock: the Converse API, signed with AWS Signature Version 4 from an access key;
    /// planned as Anthropic's Messages (converted at the wire).
    Bedrock,
    /// In-process simulated OpenAI-style upstream (demos, drills, quick starts).
    Mock,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::Azure => "azure",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
            Provider::Vertex => "vertex",
            Provider::Bedrock => "bedrock",
            Provider::Mock => "mock",
        }
    }

    /// This provider's bit in [`RequestNeeds::unsupported_providers`]: one bit per wire
    /// protocol, so Azure shares OpenAI's, Vertex Gemini's and Bedrock Anthropic's (what a protocol cannot express,
    /// a channel speaking it cannot either). The in-process mock answers in whatever protocol the client
    /// speaks, so nothing is ever untranslatable to it (bit 0).
    pub fn protocol_bit(self) -> u8 {
        match self {
            Provider::Openai | Provider::Azure => 1,
            Provider::Anthropic | Provider::Bedrock => 2,
            Provider::Gemini | Provider::Vertex => 4,
            Provider::Mock => 0,
        }
    }

    /// Whether the channel needs a credential to be called (the in-process mock does not).
    pub fn needs_credential(self) -> bool {
        self != Provider::Mock
    }

    /// Whether a channel of this provider can authenticate with the proxy's workload identity
    /// (`auth: workload`): Azure OpenAI (Entra ID), Bedrock (AWS) and Vertex AI (Google).
    pub fn has_workload_identity(self) -> bool {
        matches!(self, Provider::Azure | Provider::Bedrock | Provider::Vertex)
    }

    pub fn parse(s: &str) -> Option<Provider> {
        match s {
            "openai" => Some(Provider::Openai),
            "azure" => Some(Provider::Azure),
            "anthropic" => Some(Provider::Anthropic),
            "gemini" => Some(Provider::Gemini),
            "vertex" => Some(Provider::Vertex),
            "bedrock" => Some(Provider::Bedrock),
            "mock" => Some(Provider::Mock),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelStatus {
    Enabled,
    /// Disabled by an operator; never undone by a recovery probe.
    Disabled,
    /// Disabled by the breaker or a keyword rule; a passing recovery probe re-enables it.
    AutoDisabled,
}

impl ChannelStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelStatus::Enabled => "enabled",
            ChannelStatus::Disabled => "disabled",
            ChannelStatus::AutoDisabled => "auto_disabled",
        }
    }

    pub fn parse(s: &str) -> Option<ChannelStatus> {
        match s {
            "enabled" => Some(ChannelStatus::Enabled),
            "disabled" => Some(ChannelStatus::Disabled),
            "auto_disabled" => Some(ChannelStatus::AutoDisabled),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoutingMode {
    Auto,
    Weighted,
    Latency,
    Adaptive,
    Single,
}

impl RoutingMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RoutingMode::Auto => "auto",
            RoutingMode::Weighted => "weighted",
            RoutingMode::Latency => "latency",
            RoutingMode::Adaptive => "adaptive",
            RoutingMode::Single => "single",
        }
    }

    pub fn parse(s: &str) -> Option<RoutingMode> {
        match s {
            "auto" => Some(RoutingMode::Auto),
            "weighted" => Some(RoutingMode::Weighted),
            "latency" => Some(RoutingMode::Latency),
            "adaptive" => Some(RoutingMode::Adaptive),
            "single" => Some(RoutingMode::Single),
            _ => None,
        }
    }
}

/// What a channel (or one member, overriding its channel) declares it can do.
/// `None` means "not declared": the engine assumes support rather than guessing a refusal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    pub max_context: Option<u32>,
    pub streaming: Option<bool>,
    pub tools: Option<bool>,
    pub vision: Option<bool>,
    pub json_mode: Option<bool>,
}

impl Capabilities {
    /// Member-level declarations win field by field over the channel's.
    pub fn overlay(self, over: Capabilities) -> Capabilities {
        Capabilities {
            max_context: over.max_context.or(self.max_context),
            streaming: over.streaming.or(self.streaming),
            tools: over.tools.or(self.tools),
            vision: over.vision.or(self.vision),
            json_mode: over.json_mode.or(self.json_mode),
        }
    }
}

/// Where a credential's secret comes from. The secret itself never appears in `Debug` output.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretSource {
    /// The secret value itself.
    Inline(String),
    /// The name of an environment variable on the proxy that holds the secret.
    Env(String),
    /// No stored secret: the proxy obtains short-lived credentials from its own workload
    /// identity (the pod's cloud identity), the one credential of an `auth: workload` channel.
    Workload,
}

impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Inline(_) => f.write_str("Inline(***)"),
            SecretSource::Env(name) => write!(f, "Env({name})"),
            SecretSource::Workload => f.write_str("Workload"),
        }
    }
}

/// How a channel authenticates upstream: with its stored credentials (the default), or with the
/// proxy's workload identity (`workload`: no stored secret; the snapshot carries one credential
/// whose source is [`SecretSource::Workload`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChannelAuth {
    #[default]
    Credentials,
    Workload,
}

impl ChannelAuth {
    pub fn parse(s: &str) -> Option<ChannelAuth> {
        match s {
            "credentials" => Some(ChannelAuth::Credentials),
            "workload" => Some(ChannelAuth::Workload),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ChannelAuth::Credentials => "credentials",
            ChannelAuth::Workload => "workload",
        }
    }

    /// A channel's auth as its credentials say: `workload` when one of them is the workload
    /// identity.
    pub fn of(credentials: &[Credential]) -> ChannelAuth {
        if credentials
            .iter()
            .any(|c| c.secret == SecretSource::Workload)
        {
            ChannelAuth::Workload
        } else {
            ChannelAuth::Credentials
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    pub id: CredentialId,
    pub enabled: bool,
    pub secret: SecretSource,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Channel {
    pub id: ChannelId,
    pub name: String,
    pub provider: Provider,
    pub base_url: String,
    pub status: ChannelStatus,
    pub auto_ban: bool,
    /// `None`: the default limit of 64 applies for the concurrency factor.
    pub max_concurrency: Option<u32>,
    pub capabilities: Capabilities,
    pub credentials: Vec<Credential>,
    /// Extra upstream status codes this channel treats as retryable.
    pub retry_status_codes: Vec<u16>,
    /// Extra upstream body substrings this channel treats as retryable.
    pub retry_error_patterns: Vec<String>,
    /// Extra headers sent upstream.
    pub headers: Vec<(String, String)>,
    /// The control plane withheld this channel's secrets (inline credentials, header values,
    /// the base URL's password) from the holder of this snapshot, because it has no fleet token
    /// to tell a proxy from anyone else. Such a channel cannot be called as configured and is
    /// never selected (`secrets_withheld`).
    #[serde(default)]
    pub secrets_withheld: bool,
    /// Whether the upstream has the OpenAI Responses API (`/v1/responses`). An `openai` or
    /// `azure` channel without it (`false`: an OpenAI-compatible server that speaks only Chat
    /// Completions) serves Responses requests translated into Chat Completions. Always true for
    /// other providers.
    #[serde(default = "responses_api_default")]
    pub responses_api: bool,
    /// The provider preset the channel was configured from (`crate::catalog::PRESETS`), as
    /// given: its catalog prices apply to the channel (setting `price_catalog`), and an export
    /// writes it back.
    #[serde(default)]
    pub preset: Option<String>,
    /// The path patterns a client may reach on this channel's base URL through the gateway's
    /// pass-through routes (`crate::passthrough`). Empty (the default): no pass-through.
    #[serde(default)]
    pub passthrough: Vec<String>,
}

fn responses_api_default() -> bool {
    true
}

/// Default `max_concurrency` when a channel declares none.
pub const DEFAULT_MAX_CONCURRENCY: u32 = 64;

/// The [`RequestNeeds::unsupported_providers`] bit of OpenAI-protocol channels without the
/// Responses API: set for a Responses request that Chat Completions cannot express.
pub const CHAT_COMPLETIONS_ONLY_BIT: u8 = 8;

/// The [`RequestNeeds::unsupported_providers`] bit of Azure OpenAI channels: set for a request
/// of an OpenAI-protocol endpoint Azure does not serve (moderations, rerank).
pub const AZURE_BIT: u8 = 16;

impl Channel {
    /// Whether this channel speaks OpenAI's protocol but has no Responses API, so Responses
    /// requests reach it translated into Chat Completions.
    pub fn chat_completions_only(&self) -> bool {
        !self.responses_api && matches!(self.provider, Provider::Openai | Provider::Azure)
    }

    /// This channel's bits in [`RequestNeeds::unsupported_providers`]: its provider's protocol
    /// bit, plus [`CHAT_COMPLETIONS_ONLY_BIT`] for an OpenAI-protocol channel without the
    /// Responses API (what OpenAI's protocol cannot express, it cannot either), plus
    /// [`AZURE_BIT`] for an Azure channel.
    pub fn protocol_bits(&self) -> u8 {
        let azure = if self.provider == Provider::Azure {
            AZURE_BIT
        } else {
            0
        };
        if self.chat_completions_only() {
            self.provider.protocol_bit() | CHAT_COMPLETIONS_ONLY_BIT | azure
        } else {
            self.provider.protocol_bit() | azure
        }
    }

    pub fn concurrency_limit(&self) -> u32 {
        self.max_concurrency
            .filter(|limit| *limit > 0)
            .unwrap_or(DEFAULT_MAX_CONCURRENCY)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    pub id: MemberId,
    pub channel_id: ChannelId,
    pub upstream_model: String,
    pub group_name: String,
    pub priority: i32,
    pub weight: i32,
    pub enabled: bool,
    pub canary: bool,
    /// Member-level capability declarations, overlaid on the channel's.
    pub capabilities: Capabilities,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Route {
    pub id: RouteId,
    pub model_pattern: String,
    pub enabled: bool,
    pub routing_mode: RoutingMode,
    pub single_member_id: Option<MemberId>,
    /// `None` follows the global `sticky_enabled`; `Some(false)` disables it for this route.
    pub sticky_session: Option<bool>,
    pub stable_first: Option<bool>,
    pub stable_first_denominator: Option<u32>,
    pub retry_times: Option<u32>,
    pub channel_retry_times: Option<u32>,
    pub cooldown_seconds: Option<u32>,
    /// In tier order: priority descending, then member id ascending (the snapshot constructor
    /// guarantees it).
    pub members: Vec<Member>,
}

/// Priority / weight overrides a team applies to one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanEntry {
    pub priority: Option<i32>,
    pub weight: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Team {
    pub id: TeamId,
    pub name: String,
    /// Model patterns (exact or wildcard) this team may call. Empty: no model is allowed.
    pub models: Vec<String>,
    /// Member ids this team may use. Empty: every member of an allowed model.
    pub members: Vec<MemberId>,
    pub plan: BTreeMap<MemberId, PlanEntry>,
    /// Caps the cross-channel retry rounds.
    pub retry_limit: Option<u32>,
    pub disable_failover: bool,
}

/// A downstream API key, as the proxy sees it: only the hash of the plaintext.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub id: TokenId,
    pub name: String,
    /// Lowercase hex SHA-256 of the plaintext token.
    pub hash: String,
    pub route_group_name: Option<String>,
    pub team_id: Option<TeamId>,
    pub allow_pinning: bool,
    pub enabled: bool,
    /// After this instant (Unix ms) the token is refused as expired.
    #[serde(default)]
    pub expires_at: Option<UnixMillis>,
}

/// Everything a proxy needs to route, at one revision.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub revision: u64,
    pub settings: Settings,
    routes: Vec<Route>,
    /// Sorted by id; `channel_index` maps an id to its position.
    channels: Vec<Channel>,
    channel_index: FxHashMap<ChannelId, usize>,
    teams: Vec<Team>,
    team_index: FxHashMap<TeamId, usize>,
    tokens: Vec<Token>,
    prices: Vec<Price>,
    /// The built-in catalog's prices of the channels whose provider it knows (empty with the
    /// setting `price_catalog` off): what [`Snapshot::price`] falls back on.
    catalog_prices: Vec<Price>,
    limits: Vec<LimitRule>,
    /// Shadow rules, in id order.
    shadows: Vec<ShadowRule>,
    /// Response cache rules, in id order.
    cache_rules: Vec<CacheRule>,
    /// Guardrail rules, in id order.
    guardrails: Vec<Guardrail>,
    /// The guardrails compiled (patterns and detectors as automata), once per snapshot.
    guards: Arc<CompiledGuards>,
    /// (scope kind, scope id) -> the plain limits of that scope, in id order.
    limits_by_scope: FxHashMap<(ScopeKind, i64), Vec<Limit>>,
    /// (scope kind, scope id) -> the limits of that scope narrowed to a model pattern or a
    /// route, in id order.
    narrowed_by_scope: FxHashMap<(ScopeKind, i64), Vec<(LimitOnly, Limit)>>,
    /// The tag and end user limits, by tag and end user.
    subject_limits: SubjectLimits,
    /// Whether any channel or member carries a limit.
    upstream_limits: bool,
    index: RouteIndex,
    /// member id -> (index into `routes`, index into that route's `members`).
    member_index: FxHashMap<MemberId, (usize, usize)>,
    /// Derived per-route facts the engine would otherwise recompute per request; parallel to
    /// `routes`.
    route_meta: Vec<RouteMeta>,
    /// Every (channel, upstream model) the members use, at dense slots.
    health_slots: Arc<HealthSlots>,
}

/// Precomputed facts about one route.
#[derive(Debug, Clone, Default)]
pub(crate) struct RouteMeta {
    /// Position in `Snapshot::channels` of each member's channel; parallel to `Route::members`.
    pub channel_slots: Vec<Option<usize>>,
    /// The distinct group names of the route's members, in first-seen order.
    pub groups: Vec<String>,
    /// Each member's slot in `Snapshot::health_slots`; parallel to `Route::members`.
    pub health_slots: Vec<u32>,
}

/// The parts a snapshot is built from.
#[derive(Debug, Clone, Default)]
pub struct SnapshotParts {
    pub revision: u64,
    pub settings: Settings,
    pub routes: Vec<Route>,
    pub channels: Vec<Channel>,
    pub teams: Vec<Team>,
    pub tokens: Vec<Token>,
    pub prices: Vec<Price>,
    pub limits: Vec<LimitRule>,
    pub shadows: Vec<ShadowRule>,
    pub cache_rules: Vec<CacheRule>,
    pub guardrails: Vec<Guardrail>,
}

impl RouteMeta {
    /// A route's facts: its members' channel positions in `channels` (sorted by id), its
    /// distinct groups in first-seen order, its members' health slots (added to `health_slots`
    /// when new).
    fn new(route: &Route, channels: &[Channel], health_slots: &mut HealthSlots) -> RouteMeta {
        let mut groups: Vec<String> = Vec::new();
        for m in &route.members {
            if !groups.contains(&m.group_name) {
                groups.push(m.group_name.clone());
            }
        }
        RouteMeta {
            channel_slots: route
                .members
                .iter()
                .map(|m| channels.binary_search_by_key(&m.channel_id, |c| c.id).ok())
                .collect(),
            groups,
            health_slots: route
                .members
                .iter()
                .map(|m| health_slots.slot_or_insert(m.channel_id, &m.upstream_model))
                .collect(),
        }
    }
}

type ByScope<T> = FxHashMap<(ScopeKind, i64), Vec<T>>;

/// The limits (in id order) grouped by their scope: (scope kind, scope id) -> its plain
/// limits, and its narrowed ones with what they are narrowed to.
fn limits_by_scope(limits: &[LimitRule]) -> (ByScope<Limit>, ByScope<(LimitOnly, Limit)>) {
    let mut plain: ByScope<Limit> = FxHashMap::default();
    let mut narrowed: ByScope<(LimitOnly, Limit)> = FxHashMap::default();
    for rule in limits {
        let scope = (rule.limit.key.scope, rule.limit.key.scope_id);
        if scope.0.attributed() {
            // Found by what a request says about itself: `SubjectLimits`.
            continue;
        }
        if rule.only.is_plain() {
            plain.entry(scope).or_default().push(rule.limit);
        } else {
            narrowed
                .entry(scope)
                .or_default()
                .push((rule.only.clone(), rule.limit));
        }
    }
    (plain, narrowed)
}

/// The built-in catalog's prices of the channels whose provider it knows.
fn catalog_prices(channels: &[Channel]) -> Vec<Price> {
    channels
        .iter()
        .filter_map(|c| {
            let family = crate::catalog::price_family(
                c.preset.as_deref(),
                c.provider.as_str(),
                &c.base_url,
            )?;
            Some((family, c.id))
        })
        .flat_map(|(family, id)| crate::catalog::prices_for_channel(family, id))
        .collect()
}

/// member id -> (index into `routes`, index into that route's `members`).
fn member_index(routes: &[Route]) -> FxHashMap<MemberId, (usize, usize)> {
    routes
        .iter()
        .enumerate()
        .flat_map(|(ri, route)| {
            route
                .members
                .iter()
                .enumerate()
                .map(move |(mi, member)| (member.id, (ri, mi)))
        })
        .collect()
}

impl Snapshot {
    /// Builds the snapshot and its route index. Members are put in tier order (priority
    /// descending, member id ascending) once here, so selection needs no sort and every
    /// tie-break is deterministic whatever order the source listed them in.
    pub fn new(parts: SnapshotParts) -> Snapshot {
        let SnapshotParts {
            revision,
            settings,
            mut routes,
            mut channels,
            mut teams,
            tokens,
            mut prices,
            mut limits,
            mut shadows,
            mut cache_rules,
            mut guardrails,
        } = parts;
        cache_rules.sort_by_key(|c| c.id);
        guardrails.sort_by_key(|g| g.id);
        let guards = Arc::new(CompiledGuards::new(&guardrails));
        prices.sort_by_key(|p| p.id);
        shadows.sort_by_key(|s| s.id);
        limits.sort_by_key(|l| l.id);
        let (limits_by_scope, narrowed_by_scope) = limits_by_scope(&limits);
        let subject_limits = SubjectLimits::new(&limits);
        channels.sort_by_key(|c| c.id);
        let catalog_prices = if settings.price_catalog {
            catalog_prices(&channels)
        } else {
            Vec::new()
        };
        teams.sort_by_key(|t| t.id);
        let channel_index = channels
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id, i))
            .collect();
        let team_index = teams.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        routes.sort_by_key(|route| route.id);
        for route in &mut routes {
            route
                .members
                .sort_by_key(|m| (std::cmp::Reverse(m.priority), m.id));
        }
        let mut health_slots = HealthSlots::default();
        let route_meta = routes
            .iter()
            .map(|route| RouteMeta::new(route, &channels, &mut health_slots))
            .collect();
        let index = RouteIndex::build(
            routes
                .iter()
                .map(|r| (r.model_pattern.as_str(), r.id, r.enabled)),
        );
        let member_index = member_index(&routes);
        Snapshot {
            revision,
            settings,
            routes,
            channels,
            channel_index,
            teams,
            team_index,
            tokens,
            prices,
            catalog_prices,
            upstream_limits: limits.iter().any(|l| l.limit.key.scope.upstream()),
            limits,
            shadows,
            cache_rules,
            guardrails,
            guards,
            limits_by_scope,
            narrowed_by_scope,
            subject_limits,
            index,
            member_index,
            route_meta,
            health_slots: Arc::new(health_slots),
        }
    }

    /// The dense (channel, upstream model) table of this snapshot; a state view aligned with it
    /// serves aware selection by slot (see [`crate::HealthView::dense_health`]).
    pub fn health_slots(&self) -> &Arc<HealthSlots> {
        &self.health_slots
    }

    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    pub fn route(&self, id: RouteId) -> Option<&Route> {
        self.routes
            .binary_search_by_key(&id, |route| route.id)
            .ok()
            .map(|at| &self.routes[at])
    }

    pub fn channels(&self) -> impl Iterator<Item = &Channel> {
        self.channels.iter()
    }

    pub fn channel(&self, id: ChannelId) -> Option<&Channel> {
        self.channels.get(*self.channel_index.get(&id)?)
    }

    pub fn teams(&self) -> impl Iterator<Item = &Team> {
        self.teams.iter()
    }

    pub fn team(&self, id: TeamId) -> Option<&Team> {
        self.teams.get(*self.team_index.get(&id)?)
    }

    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    pub fn prices(&self) -> &[Price] {
        &self.prices
    }

    pub fn limits(&self) -> &[LimitRule] {
        &self.limits
    }

    /// The shadow rules, in id order.
    pub fn shadows(&self) -> &[ShadowRule] {
        &self.shadows
    }

    /// The response cache rules, in id order.
    pub fn cache_rules(&self) -> &[CacheRule] {
        &self.cache_rules
    }

    /// The guardrail rules, in id order.
    pub fn guardrails(&self) -> &[Guardrail] {
        &self.guardrails
    }

    /// The guardrails compiled once for this snapshot (the proxy and explain run these).
    pub fn guards(&self) -> &Arc<CompiledGuards> {
        &self.guards
    }

    /// The plain limits attached to one scope (a token, a team, a route, a channel or a
    /// member): every request of the scope counts.
    pub fn limits_of(&self, scope: ScopeKind, id: i64) -> &[Limit] {
        self.limits_by_scope
            .get(&(scope, id))
            .map_or(&[], Vec::as_slice)
    }

    /// The limits of one scope narrowed to a model pattern or a route that a request for
    /// `model` (`None`: not known) through `route` counts on, in id order.
    pub fn narrowed_limits_of<'a>(
        &'a self,
        scope: ScopeKind,
        id: i64,
        model: Option<&'a str>,
        route: Option<i64>,
    ) -> impl Iterator<Item = Limit> + 'a {
        let narrowed = self
            .narrowed_by_scope
            .get(&(scope, id))
            .map_or(&[][..], Vec::as_slice);
        narrowed
            .iter()
            .filter(move |(only, _)| only.applies(model, route))
            .map(|(_, limit)| *limit)
    }

    /// The tag and end user limits, found by a request's tags and end user.
    pub fn subject_limits(&self) -> &SubjectLimits {
        &self.subject_limits
    }

    /// Whether any channel or member carries a limit (the proxy checks upstream room only then).
    pub fn has_upstream_limits(&self) -> bool {
        self.upstream_limits
    }

    /// The price of `(channel, upstream model)`: the operator's (the `prices` table) when it
    /// has one, else the built-in catalog's for the channel's provider; `None`: unpriced.
    pub fn price(&self, channel: ChannelId, model: &str) -> Option<&Price> {
        self.priced(channel, model).map(|(price, _)| price)
    }

    /// [`Snapshot::price`] and whether it is the catalog's (`true`) or the operator's.
    pub fn priced(&self, channel: ChannelId, model: &str) -> Option<(&Price, bool)> {
        match crate::limit::price_for(&self.prices, channel, model) {
            Some(price) => Some((price, false)),
            None => crate::limit::price_for(&self.catalog_prices, channel, model)
                .map(|price| (price, true)),
        }
    }

    /// The enabled route serving `model`: exact match first, else the longest matching wildcard
    /// (ties: lowest route id). The model name is trimmed; matching is case-sensitive.
    pub fn resolve_route(&self, model: &str) -> Option<&Route> {
        self.resolve(model).map(|(route, _)| route)
    }

    /// The route for `model` with its precomputed facts.
    pub(crate) fn resolve(&self, model: &str) -> Option<(&Route, &RouteMeta)> {
        let id = self.index.resolve(model.trim())?;
        let at = self.routes.binary_search_by_key(&id, |r| r.id).ok()?;
        Some((self.routes.get(at)?, self.route_meta.get(at)?))
    }

    pub(crate) fn channel_at(&self, slot: usize) -> Option<&Channel> {
        self.channels.get(slot)
    }

    /// A member with its route, by member id (pins, state views).
    pub fn member(&self, id: MemberId) -> Option<(&Route, &Member)> {
        let (ri, mi) = *self.member_index.get(&id)?;
        let route = self.routes.get(ri)?;
        Some((route, route.members.get(mi)?))
    }

    /// Consumes the snapshot back into its parts (for re-serialising or editing).
    pub fn into_parts(self) -> SnapshotParts {
        SnapshotParts {
            revision: self.revision,
            settings: self.settings,
            routes: self.routes,
            channels: self.channels,
            teams: self.teams,
            tokens: self.tokens,
            prices: self.prices,
            limits: self.limits,
            shadows: self.shadows,
            cache_rules: self.cache_rules,
            guardrails: self.guardrails,
        }
    }

    pub fn to_parts(&self) -> SnapshotParts {
        self.clone().into_parts()
    }
}

/// Normalises a group name: trimmed, empty means `default`.
pub fn normalize_group(name: Option<&str>) -> &str {
    match name.map(str::trim) {
        None | Some("") => DEFAULT_GROUP,
        Some(name) => name,
    }
}

/// Checks a group name against its limit (at most 64 characters after trimming).
pub fn validate_group(name: &str) -> Result<(), String> {
    let n = name.trim().chars().count();
    if n > MAX_GROUP_NAME_CHARS {
        Err(format!(
            "group name is {n} characters long; at most {MAX_GROUP_NAME_CHARS} are allowed"
        ))
    } else {
        Ok(())
    }
}
