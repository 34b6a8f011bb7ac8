//! Explicit conversions between the wire [`v1::Snapshot`] and the engine's [`Snapshot`].
//!
//! Engine → wire is infallible. Wire → engine validates every field once (enum values, ranges,
//! patterns, group names, token hashes, unique ids) and names the offending path on failure, so a
//! proxy never installs a snapshot the engine could misread; it keeps its last good one instead.

use std::collections::{BTreeMap, HashSet};

use switchyard_engine::cache::{
    parse_endpoints, CacheRule, CacheScope, SemanticMode, SemanticPart,
};
use switchyard_engine::guard::rule::{GuardChecks, Guardrail, GuardrailSpec};
use switchyard_engine::limit::{LimitOnly, ScopeKind};
use switchyard_engine::model::validate_group;
use switchyard_engine::settings::check_range;
use switchyard_engine::subject::subject_of;
use switchyard_engine::{
    validate_pattern, Capabilities, Channel, ChannelStatus, Credential, Limit, LimitRule, Member,
    PlanEntry, Price, Provider, Route, RoutingMode, SecretSource, Settings, ShadowRule,
    ShadowTarget, Snapshot, SnapshotParts, StopReason, Team, Token,
};

use crate::v1;

/// Wire schema version this crate writes and understands.
pub const SCHEMA_VERSION: u32 = 1;

/// Why a received snapshot was rejected: the path of the offending field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid snapshot at {path}: {message}")]
pub struct ConversionError {
    pub path: String,
    pub message: String,
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> ConversionError {
    ConversionError {
        path: path.into(),
        message: message.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// engine -> wire

/// Encodes a snapshot for the wire. `compiled_at_unix_ms` is informational.
pub fn snapshot_to_proto(snapshot: &Snapshot, compiled_at_unix_ms: u64) -> v1::Snapshot {
    v1::Snapshot {
        schema_version: SCHEMA_VERSION,
        revision: snapshot.revision,
        settings: Some(settings_to_proto(&snapshot.settings)),
        routes: snapshot.routes().iter().map(route_to_proto).collect(),
        channels: snapshot.channels().map(channel_to_proto).collect(),
        teams: snapshot.teams().map(team_to_proto).collect(),
        tokens: snapshot.tokens().iter().map(token_to_proto).collect(),
        compiled_at_unix_ms,
        prices: snapshot.prices().iter().map(price_to_proto).collect(),
        limits: snapshot.limits().iter().map(limit_to_proto).collect(),
        shadows: snapshot.shadows().iter().map(shadow_to_proto).collect(),
        cache_rules: snapshot
            .cache_rules()
            .iter()
            .map(cache_rule_to_proto)
            .collect(),
        guardrails: snapshot
            .guardrails()
            .iter()
            .map(guardrail_to_proto)
            .collect(),
    }
}

fn cache_rule_to_proto(r: &CacheRule) -> v1::CacheRule {
    v1::CacheRule {
        id: r.id,
        name: r.name.clone(),
        model_pattern: r.model_pattern.clone(),
        endpoints: r.endpoints.iter().map(|e| e.as_str().to_owned()).collect(),
        ttl_seconds: r.ttl_seconds,
        max_entry_bytes: r.max_entry_bytes,
        scope: r.scope.as_str().to_owned(),
        deterministic_only: r.deterministic_only,
        enabled: r.enabled,
        semantic_channel: r.semantic.as_ref().map(|s| s.channel),
        semantic_model: r
            .semantic
            .as_ref()
            .map(|s| s.model.clone())
            .unwrap_or_default(),
        semantic_threshold: r.semantic.as_ref().map_or(0.0, |s| s.threshold),
        semantic_mode: r
            .semantic
            .as_ref()
            .map(|s| s.mode.as_str().to_owned())
            .unwrap_or_default(),
        team: r.team,
    }
}

/// The rule's semantic part, present when its channel is.
fn semantic_from_proto(
    w: &v1::CacheRule,
    path: &str,
) -> Result<Option<SemanticPart>, ConversionError> {
    let Some(channel) = w.semantic_channel else {
        return Ok(None);
    };
    let mode = SemanticMode::parse(&w.semantic_mode).ok_or_else(|| {
        invalid(
            format!("{path}.semantic_mode"),
            format!("unknown mode {:?}", w.semantic_mode),
        )
    })?;
    Ok(Some(SemanticPart {
        channel,
        model: w.semantic_model.clone(),
        threshold: w.semantic_threshold,
        mode,
    }))
}

fn guardrail_to_proto(r: &Guardrail) -> v1::Guardrail {
    let spec = r.spec();
    v1::Guardrail {
        id: r.id,
        name: spec.name,
        scope: spec.scope,
        scope_id: spec.scope_id.unwrap_or(0),
        stage: spec.stage,
        action: spec.action,
        restore: spec.restore,
        mode: spec.mode,
        enabled: spec.enabled,
        checks_json: spec.checks.to_json(),
        uninspectable: spec.uninspectable,
    }
}

fn guardrail_from_proto(w: v1::Guardrail, path: &str) -> Result<Guardrail, ConversionError> {
    let checks = GuardChecks::from_json(&w.checks_json)
        .map_err(|m| invalid(format!("{path}.checks_json"), m))?;
    let spec = GuardrailSpec {
        name: w.name,
        scope_id: (w.scope != "all").then_some(w.scope_id),
        scope: w.scope,
        stage: w.stage,
        action: w.action,
        restore: w.restore,
        mode: w.mode,
        enabled: w.enabled,
        checks,
        uninspectable: w.uninspectable,
    };
    spec.into_rule(w.id)
        .map_err(|(field, message)| invalid(format!("{path}.{field}"), message))
}

fn cache_rule_from_proto(w: v1::CacheRule, path: &str) -> Result<CacheRule, ConversionError> {
    let endpoints =
        parse_endpoints(&w.endpoints).map_err(|m| invalid(format!("{path}.endpoints"), m))?;
    let scope = CacheScope::parse(&w.scope).ok_or_else(|| {
        invalid(
            format!("{path}.scope"),
            format!("unknown scope {:?}", w.scope),
        )
    })?;
    let semantic = semantic_from_proto(&w, path)?;
    let rule = CacheRule {
        id: w.id,
        name: w.name,
        model_pattern: w.model_pattern,
        endpoints,
        ttl_seconds: w.ttl_seconds,
        max_entry_bytes: w.max_entry_bytes,
        scope,
        deterministic_only: w.deterministic_only,
        enabled: w.enabled,
        semantic,
        team: w.team,
    };
    rule.check()
        .map_err(|(field, message)| invalid(format!("{path}.{field}"), message))?;
    Ok(rule)
}

fn shadow_to_proto(r: &ShadowRule) -> v1::Shadow {
    let (target_member_id, target_channel_id, target_model) = match &r.target {
        ShadowTarget::Member(id) => (*id, 0, String::new()),
        ShadowTarget::Channel {
            channel_id,
            upstream_model,
        } => (0, *channel_id, upstream_model.clone()),
    };
    v1::Shadow {
        id: r.id,
        name: r.name.clone(),
        model_pattern: r.model_pattern.clone(),
        target_member_id,
        target_channel_id,
        target_model,
        sample_basis_points: r.sample_basis_points,
        max_rps: r.max_rps,
        max_daily_spend_micros: r.max_daily_spend_micros,
        expires_at_unix_ms: r.expires_at,
        error_rate_stop_per_mille: r.error_rate_stop_per_mille,
        error_rate_min_sample: r.error_rate_min_sample,
        enabled: r.enabled,
        stopped: r
            .stopped
            .map(StopReason::as_str)
            .unwrap_or_default()
            .to_owned(),
    }
}

fn shadow_from_proto(w: v1::Shadow, path: &str) -> Result<ShadowRule, ConversionError> {
    let target = if w.target_member_id > 0 {
        ShadowTarget::Member(w.target_member_id)
    } else {
        ShadowTarget::Channel {
            channel_id: w.target_channel_id,
            upstream_model: w.target_model,
        }
    };
    let stopped = match w.stopped.as_str() {
        "" => None,
        other => Some(StopReason::parse(other).ok_or_else(|| {
            invalid(
                format!("{path}.stopped"),
                format!("unknown stop reason {other:?}"),
            )
        })?),
    };
    let rule = ShadowRule {
        id: w.id,
        name: w.name,
        model_pattern: w.model_pattern,
        target,
        sample_basis_points: w.sample_basis_points,
        max_rps: w.max_rps,
        max_daily_spend_micros: w.max_daily_spend_micros,
        expires_at: w.expires_at_unix_ms,
        error_rate_stop_per_mille: w.error_rate_stop_per_mille,
        error_rate_min_sample: w.error_rate_min_sample,
        enabled: w.enabled,
        stopped,
    };
    rule.check()
        .map_err(|(field, message)| invalid(format!("{path}.{field}"), message))?;
    Ok(rule)
}

fn settings_to_proto(s: &Settings) -> v1::Settings {
    v1::Settings {
        retry_times: Some(s.retry_times),
        channel_retry_times: Some(s.channel_retry_times),
        cross_channel_failover_enabled: Some(s.cross_channel_failover_enabled),
        request_timeout_ms: Some(s.request_timeout_ms),
        connect_timeout_ms: Some(s.connect_timeout_ms),
        first_byte_timeout_ms: Some(s.first_byte_timeout_ms),
        stream_idle_timeout_ms: Some(s.stream_idle_timeout_ms),
        latency_aware_enabled: Some(s.latency_aware_enabled),
        error_aware_enabled: Some(s.error_aware_enabled),
        concurrency_aware_enabled: Some(s.concurrency_aware_enabled),
        sticky_enabled: Some(s.sticky_enabled),
        sticky_ttl_minutes: Some(s.sticky_ttl_minutes),
        stable_first_enabled: Some(s.stable_first_enabled),
        stable_first_denominator: Some(s.stable_first_denominator),
        stable_first_promote_requests: Some(s.stable_first_promote_requests),
        fault_protection_enabled: Some(s.fault_protection_enabled),
        cooldown_seconds: Some(s.cooldown_seconds),
        breaker_failure_threshold: Some(s.breaker_failure_threshold),
        recovery_probe_enabled: Some(s.recovery_probe_enabled),
        recovery_probe_interval_seconds: Some(s.recovery_probe_interval_seconds),
        max_request_body_bytes: Some(s.max_request_body_bytes),
        slow_start_seconds: Some(s.slow_start_seconds),
        slow_start_initial_percent: Some(s.slow_start_initial_percent),
        responses_refuse_store: Some(s.responses_refuse_store),
        price_catalog: Some(s.price_catalog),
        batch_price_percent: Some(s.batch_price_percent),
    }
}

fn capabilities_to_proto(c: &Capabilities) -> v1::Capabilities {
    v1::Capabilities {
        max_context: c.max_context,
        streaming: c.streaming,
        tools: c.tools,
        vision: c.vision,
        json_mode: c.json_mode,
    }
}

fn routing_mode_to_proto(mode: RoutingMode) -> v1::RoutingMode {
    match mode {
        RoutingMode::Auto => v1::RoutingMode::Auto,
        RoutingMode::Weighted => v1::RoutingMode::Weighted,
        RoutingMode::Latency => v1::RoutingMode::Latency,
        RoutingMode::Adaptive => v1::RoutingMode::Adaptive,
        RoutingMode::Single => v1::RoutingMode::Single,
    }
}

fn route_to_proto(r: &Route) -> v1::Route {
    v1::Route {
        id: r.id,
        model_pattern: r.model_pattern.clone(),
        enabled: r.enabled,
        routing_mode: routing_mode_to_proto(r.routing_mode) as i32,
        single_member_id: r.single_member_id,
        sticky_session: r.sticky_session,
        stable_first: r.stable_first,
        stable_first_denominator: r.stable_first_denominator,
        retry_times: r.retry_times,
        channel_retry_times: r.channel_retry_times,
        cooldown_seconds: r.cooldown_seconds,
        members: r.members.iter().map(member_to_proto).collect(),
    }
}

fn member_to_proto(m: &Member) -> v1::Member {
    v1::Member {
        id: m.id,
        channel_id: m.channel_id,
        upstream_model: m.upstream_model.clone(),
        group_name: m.group_name.clone(),
        priority: m.priority,
        weight: m.weight,
        enabled: m.enabled,
        canary: m.canary,
        capabilities: Some(capabilities_to_proto(&m.capabilities)),
    }
}

fn provider_to_proto(p: Provider) -> v1::Provider {
    match p {
        Provider::Openai => v1::Provider::Openai,
        Provider::Azure => v1::Provider::Azure,
        Provider::Anthropic => v1::Provider::Anthropic,
        Provider::Gemini => v1::Provider::Gemini,
        Provider::Vertex => v1::Provider::Vertex,
        Provider::Bedrock => v1::Provider::Bedrock,
        Provider::Mock => v1::Provider::Mock,
    }
}

fn status_to_proto(s: ChannelStatus) -> v1::ChannelStatus {
    match s {
        ChannelStatus::Enabled => v1::ChannelStatus::Enabled,
        ChannelStatus::Disabled => v1::ChannelStatus::Disabled,
        ChannelStatus::AutoDisabled => v1::ChannelStatus::AutoDisabled,
    }
}

fn channel_to_proto(c: &Channel) -> v1::Channel {
    v1::Channel {
        id: c.id,
        name: c.name.clone(),
        provider: provider_to_proto(c.provider) as i32,
        base_url: c.base_url.clone(),
        status: status_to_proto(c.status) as i32,
        auto_ban: c.auto_ban,
        max_concurrency: c.max_concurrency,
        capabilities: Some(capabilities_to_proto(&c.capabilities)),
        credentials: c
            .credentials
            .iter()
            .map(|cred| v1::Credential {
                id: cred.id,
                enabled: cred.enabled,
                secret: Some(match &cred.secret {
                    SecretSource::Inline(value) => v1::credential::Secret::Inline(value.clone()),
                    SecretSource::Env(name) => v1::credential::Secret::Env(name.clone()),
                    SecretSource::Workload => v1::credential::Secret::Workload(true),
                }),
            })
            .collect(),
        retry_status_codes: c.retry_status_codes.iter().map(|&s| u32::from(s)).collect(),
        retry_error_patterns: c.retry_error_patterns.clone(),
        headers: c
            .headers
            .iter()
            .map(|(name, value)| v1::Header {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
        secrets_withheld: c.secrets_withheld,
        chat_completions_only: !c.responses_api,
        preset: c.preset.clone(),
        passthrough: c.passthrough.clone(),
    }
}

fn team_to_proto(t: &Team) -> v1::Team {
    v1::Team {
        id: t.id,
        name: t.name.clone(),
        models: t.models.clone(),
        members: t.members.clone(),
        plan: t
            .plan
            .iter()
            .map(|(&member_id, entry)| v1::PlanEntry {
                member_id,
                priority: entry.priority,
                weight: entry.weight,
            })
            .collect(),
        retry_limit: t.retry_limit,
        disable_failover: t.disable_failover,
    }
}

fn token_to_proto(t: &Token) -> v1::Token {
    v1::Token {
        id: t.id,
        name: t.name.clone(),
        hash: t.hash.clone(),
        route_group_name: t.route_group_name.clone(),
        team_id: t.team_id,
        allow_pinning: t.allow_pinning,
        enabled: t.enabled,
        expires_at_unix_ms: t.expires_at,
    }
}

fn price_to_proto(p: &Price) -> v1::Price {
    v1::Price {
        id: p.id,
        channel_id: p.channel_id,
        model_pattern: p.model_pattern.clone(),
        input_per_million: p.input_per_million,
        output_per_million: p.output_per_million,
        cached_input_per_million: p.cached_input_per_million,
    }
}

fn limit_to_proto(rule: &LimitRule) -> v1::Limit {
    let key = rule.limit.key;
    v1::Limit {
        id: rule.id,
        scope: key.scope.as_str().to_owned(),
        scope_id: key.scope_id,
        metric: key.metric.as_str().to_owned(),
        window: key.window.as_str().to_owned(),
        value: rule.limit.value,
        mode: rule.limit.mode.as_str().to_owned(),
        model_pattern: rule.only.model_pattern.clone(),
        route_id: rule.only.route_id,
        tag: rule.subject.clone().filter(|_| key.scope == ScopeKind::Tag),
        end_user: rule
            .subject
            .clone()
            .filter(|_| key.scope == ScopeKind::EndUser),
    }
}

// ---------------------------------------------------------------------------------------------
// wire -> engine

/// Validates a received snapshot and builds the engine's snapshot from it.
pub fn snapshot_from_proto(wire: v1::Snapshot) -> Result<Snapshot, ConversionError> {
    SnapshotParts::try_from(wire).map(Snapshot::new)
}

impl TryFrom<v1::Snapshot> for SnapshotParts {
    type Error = ConversionError;

    fn try_from(wire: v1::Snapshot) -> Result<SnapshotParts, ConversionError> {
        if wire.schema_version > SCHEMA_VERSION {
            return Err(invalid(
                "schema_version",
                format!(
                    "schema version {} is newer than the supported {SCHEMA_VERSION}",
                    wire.schema_version
                ),
            ));
        }
        let settings = settings_from_proto(wire.settings.unwrap_or_default())?;

        let mut credential_ids = HashSet::new();
        let channels = each(
            wire.channels,
            "channels",
            "channel",
            |c| c.id,
            |c, path| channel_from_proto(c, path, &mut credential_ids),
        )?;
        let mut member_ids = HashSet::new();
        let routes = each(
            wire.routes,
            "routes",
            "route",
            |r| r.id,
            |r, path| route_from_proto(r, path, &mut member_ids),
        )?;
        let teams = each(wire.teams, "teams", "team", |t| t.id, team_from_proto)?;
        let tokens = each(wire.tokens, "tokens", "token", |t| t.id, token_from_proto)?;
        let prices = each(wire.prices, "prices", "price", |p| p.id, price_from_proto)?;
        let limits = each(wire.limits, "limits", "limit", |l| l.id, limit_from_proto)?;
        let shadows = each(
            wire.shadows,
            "shadows",
            "shadow",
            |w| w.id,
            shadow_from_proto,
        )?;
        let cache_rules = each(
            wire.cache_rules,
            "cache_rules",
            "cache rule",
            |w| w.id,
            cache_rule_from_proto,
        )?;
        let guardrails = each(
            wire.guardrails,
            "guardrails",
            "guardrail",
            |w| w.id,
            guardrail_from_proto,
        )?;
        Ok(SnapshotParts {
            revision: wire.revision,
            settings,
            routes,
            channels,
            teams,
            tokens,
            prices,
            limits,
            shadows,
            cache_rules,
            guardrails,
        })
    }
}

/// Converts each entry of the list `name` at its path (`name[i]`), refusing an id that an
/// earlier entry already has.
fn each<W, T>(
    list: Vec<W>,
    name: &str,
    what: &str,
    id: impl Fn(&W) -> i64,
    mut convert: impl FnMut(W, &str) -> Result<T, ConversionError>,
) -> Result<Vec<T>, ConversionError> {
    let mut ids = HashSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, w) in list.into_iter().enumerate() {
        let path = format!("{name}[{i}]");
        let id = id(&w);
        if !ids.insert(id) {
            return Err(invalid(path, format!("duplicate {what} id {id}")));
        }
        out.push(convert(w, &path)?);
    }
    Ok(out)
}

fn limit_from_proto(l: v1::Limit, path: &str) -> Result<LimitRule, ConversionError> {
    let window = (l.window != "none").then_some(l.window.as_str());
    let limit = Limit::parse(&l.scope, l.scope_id, &l.metric, window, l.value, &l.mode)
        .map_err(|(field, message)| invalid(format!("{path}.{field}"), message))?;
    let only = LimitOnly {
        model_pattern: l.model_pattern,
        route_id: l.route_id,
    };
    only.check(limit.key.scope)
        .map_err(|(field, message)| invalid(format!("{path}.{field}"), message))?;
    let subject = subject_of(limit.key.scope, l.tag, l.end_user)
        .map_err(|(field, message)| invalid(format!("{path}.{field}"), message))?;
    Ok(LimitRule::new(l.id, limit, only).about(subject))
}

fn settings_from_proto(w: v1::Settings) -> Result<Settings, ConversionError> {
    let d = Settings::default();
    let settings = Settings {
        retry_times: w.retry_times.unwrap_or(d.retry_times),
        channel_retry_times: w.channel_retry_times.unwrap_or(d.channel_retry_times),
        cross_channel_failover_enabled: w
            .cross_channel_failover_enabled
            .unwrap_or(d.cross_channel_failover_enabled),
        request_timeout_ms: w.request_timeout_ms.unwrap_or(d.request_timeout_ms),
        connect_timeout_ms: w.connect_timeout_ms.unwrap_or(d.connect_timeout_ms),
        first_byte_timeout_ms: w.first_byte_timeout_ms.unwrap_or(d.first_byte_timeout_ms),
        stream_idle_timeout_ms: w.stream_idle_timeout_ms.unwrap_or(d.stream_idle_timeout_ms),
        latency_aware_enabled: w.latency_aware_enabled.unwrap_or(d.latency_aware_enabled),
        error_aware_enabled: w.error_aware_enabled.unwrap_or(d.error_aware_enabled),
        concurrency_aware_enabled: w
            .concurrency_aware_enabled
            .unwrap_or(d.concurrency_aware_enabled),
        sticky_enabled: w.sticky_enabled.unwrap_or(d.sticky_enabled),
        sticky_ttl_minutes: w.sticky_ttl_minutes.unwrap_or(d.sticky_ttl_minutes),
        stable_first_enabled: w.stable_first_enabled.unwrap_or(d.stable_first_enabled),
        stable_first_denominator: w
            .stable_first_denominator
            .unwrap_or(d.stable_first_denominator),
        stable_first_promote_requests: w
            .stable_first_promote_requests
            .unwrap_or(d.stable_first_promote_requests),
        fault_protection_enabled: w
            .fault_protection_enabled
            .unwrap_or(d.fault_protection_enabled),
        cooldown_seconds: w.cooldown_seconds.unwrap_or(d.cooldown_seconds),
        breaker_failure_threshold: w
            .breaker_failure_threshold
            .unwrap_or(d.breaker_failure_threshold),
        recovery_probe_enabled: w.recovery_probe_enabled.unwrap_or(d.recovery_probe_enabled),
        recovery_probe_interval_seconds: w
            .recovery_probe_interval_seconds
            .unwrap_or(d.recovery_probe_interval_seconds),
        slow_start_seconds: w.slow_start_seconds.unwrap_or(d.slow_start_seconds),
        slow_start_initial_percent: w
            .slow_start_initial_percent
            .unwrap_or(d.slow_start_initial_percent),
        max_request_body_bytes: w.max_request_body_bytes.unwrap_or(d.max_request_body_bytes),
        responses_refuse_store: w.responses_refuse_store.unwrap_or(d.responses_refuse_store),
        price_catalog: w.price_catalog.unwrap_or(d.price_catalog),
        batch_price_percent: w.batch_price_percent.unwrap_or(d.batch_price_percent),
    };
    if let Some(error) = settings.validate().into_iter().next() {
        return Err(invalid(format!("settings.{}", error.field), error.message));
    }
    Ok(settings)
}

fn capabilities_from_proto(
    w: Option<v1::Capabilities>,
    path: &str,
) -> Result<Capabilities, ConversionError> {
    let w = w.unwrap_or_default();
    if w.max_context == Some(0) {
        return Err(invalid(
            format!("{path}.capabilities.max_context"),
            "must be positive when set",
        ));
    }
    Ok(Capabilities {
        max_context: w.max_context,
        streaming: w.streaming,
        tools: w.tools,
        vision: w.vision,
        json_mode: w.json_mode,
    })
}

fn override_in_range(
    field: &'static str,
    value: Option<u32>,
    path: &str,
) -> Result<Option<u32>, ConversionError> {
    if let Some(v) = value {
        if let Some(error) = check_range(field, v.into()) {
            return Err(invalid(format!("{path}.{field}"), error.message));
        }
    }
    Ok(value)
}

fn group_from_wire(name: &str, path: &str) -> Result<String, ConversionError> {
    validate_group(name).map_err(|message| invalid(path, message))?;
    let trimmed = name.trim();
    Ok(if trimmed.is_empty() {
        switchyard_engine::DEFAULT_GROUP.to_owned()
    } else {
        trimmed.to_owned()
    })
}

fn route_from_proto(
    w: v1::Route,
    path: &str,
    member_ids: &mut HashSet<i64>,
) -> Result<Route, ConversionError> {
    validate_pattern(&w.model_pattern)
        .map_err(|message| invalid(format!("{path}.model_pattern"), message))?;
    let routing_mode = match v1::RoutingMode::try_from(w.routing_mode) {
        Ok(v1::RoutingMode::Auto) => RoutingMode::Auto,
        Ok(v1::RoutingMode::Weighted) => RoutingMode::Weighted,
        Ok(v1::RoutingMode::Latency) => RoutingMode::Latency,
        Ok(v1::RoutingMode::Adaptive) => RoutingMode::Adaptive,
        Ok(v1::RoutingMode::Single) => RoutingMode::Single,
        Ok(v1::RoutingMode::Unspecified) | Err(_) => {
            return Err(invalid(
                format!("{path}.routing_mode"),
                format!("unknown routing mode {}", w.routing_mode),
            ))
        }
    };
    let mut members = Vec::with_capacity(w.members.len());
    for (i, m) in w.members.into_iter().enumerate() {
        let mpath = format!("{path}.members[{i}]");
        if !member_ids.insert(m.id) {
            return Err(invalid(mpath, format!("duplicate member id {}", m.id)));
        }
        if m.upstream_model.is_empty() {
            return Err(invalid(
                format!("{mpath}.upstream_model"),
                "must not be empty",
            ));
        }
        members.push(Member {
            id: m.id,
            channel_id: m.channel_id,
            group_name: group_from_wire(&m.group_name, &format!("{mpath}.group_name"))?,
            upstream_model: m.upstream_model,
            priority: m.priority,
            weight: m.weight,
            enabled: m.enabled,
            canary: m.canary,
            capabilities: capabilities_from_proto(m.capabilities, &mpath)?,
        });
    }
    Ok(Route {
        id: w.id,
        model_pattern: w.model_pattern,
        enabled: w.enabled,
        routing_mode,
        single_member_id: w.single_member_id,
        sticky_session: w.sticky_session,
        stable_first: w.stable_first,
        stable_first_denominator: override_in_range(
            "stable_first_denominator",
            w.stable_first_denominator,
            path,
        )?,
        retry_times: override_in_range("retry_times", w.retry_times, path)?,
        channel_retry_times: override_in_range("channel_retry_times", w.channel_retry_times, path)?,
        cooldown_seconds: override_in_range("cooldown_seconds", w.cooldown_seconds, path)?,
        members,
    })
}

fn channel_from_proto(
    w: v1::Channel,
    path: &str,
    credential_ids: &mut HashSet<i64>,
) -> Result<Channel, ConversionError> {
    let provider = provider_from_proto(w.provider, path)?;
    let status = channel_status_from_proto(w.status, path)?;
    if w.chat_completions_only && !matches!(provider, Provider::Openai | Provider::Azure) {
        return Err(invalid(
            format!("{path}.chat_completions_only"),
            format!(
                "only openai and azure channels can lack the Responses API, not {}",
                provider.as_str()
            ),
        ));
    }
    let mut credentials = Vec::with_capacity(w.credentials.len());
    for (i, c) in w.credentials.into_iter().enumerate() {
        let cpath = format!("{path}.credentials[{i}]");
        if !credential_ids.insert(c.id) {
            return Err(invalid(cpath, format!("duplicate credential id {}", c.id)));
        }
        credentials.push(credential_from_proto(c, &cpath)?);
    }
    let retry_status_codes = retry_status_codes_from_proto(w.retry_status_codes, path)?;
    if let Err((index, message)) = switchyard_engine::passthrough::validate_patterns(&w.passthrough)
    {
        let at = match index {
            Some(i) => format!("{path}.passthrough[{i}]"),
            None => format!("{path}.passthrough"),
        };
        return Err(invalid(at, message));
    }
    Ok(Channel {
        id: w.id,
        name: w.name,
        provider,
        base_url: w.base_url,
        status,
        auto_ban: w.auto_ban,
        max_concurrency: w.max_concurrency,
        capabilities: capabilities_from_proto(w.capabilities, path)?,
        credentials,
        retry_status_codes,
        retry_error_patterns: w.retry_error_patterns,
        headers: w.headers.into_iter().map(|h| (h.name, h.value)).collect(),
        secrets_withheld: w.secrets_withheld,
        responses_api: !w.chat_completions_only,
        preset: w.preset,
        passthrough: w.passthrough,
    })
}

fn provider_from_proto(provider: i32, path: &str) -> Result<Provider, ConversionError> {
    match v1::Provider::try_from(provider) {
        Ok(v1::Provider::Openai) => Ok(Provider::Openai),
        Ok(v1::Provider::Azure) => Ok(Provider::Azure),
        Ok(v1::Provider::Anthropic) => Ok(Provider::Anthropic),
        Ok(v1::Provider::Gemini) => Ok(Provider::Gemini),
        Ok(v1::Provider::Vertex) => Ok(Provider::Vertex),
        Ok(v1::Provider::Bedrock) => Ok(Provider::Bedrock),
        Ok(v1::Provider::Mock) => Ok(Provider::Mock),
        Ok(v1::Provider::Unspecified) | Err(_) => Err(invalid(
            format!("{path}.provider"),
            format!("unknown provider {provider}"),
        )),
    }
}

fn channel_status_from_proto(status: i32, path: &str) -> Result<ChannelStatus, ConversionError> {
    match v1::ChannelStatus::try_from(status) {
        Ok(v1::ChannelStatus::Enabled) => Ok(ChannelStatus::Enabled),
        Ok(v1::ChannelStatus::Disabled) => Ok(ChannelStatus::Disabled),
        Ok(v1::ChannelStatus::AutoDisabled) => Ok(ChannelStatus::AutoDisabled),
        Ok(v1::ChannelStatus::Unspecified) | Err(_) => Err(invalid(
            format!("{path}.status"),
            format!("unknown channel status {status}"),
        )),
    }
}

fn credential_from_proto(c: v1::Credential, path: &str) -> Result<Credential, ConversionError> {
    let secret = match c.secret {
        Some(v1::credential::Secret::Inline(value)) => SecretSource::Inline(value),
        Some(v1::credential::Secret::Env(name)) if !name.is_empty() => SecretSource::Env(name),
        Some(v1::credential::Secret::Env(_)) => {
            return Err(invalid(format!("{path}.env"), "must not be empty"))
        }
        Some(v1::credential::Secret::Workload(true)) => SecretSource::Workload,
        Some(v1::credential::Secret::Workload(false)) => {
            return Err(invalid(format!("{path}.workload"), "must be true when set"))
        }
        None => return Err(invalid(format!("{path}.secret"), "missing")),
    };
    Ok(Credential {
        id: c.id,
        enabled: c.enabled,
        secret,
    })
}

fn retry_status_codes_from_proto(codes: Vec<u32>, path: &str) -> Result<Vec<u16>, ConversionError> {
    let mut out = Vec::with_capacity(codes.len());
    for (i, code) in codes.into_iter().enumerate() {
        match u16::try_from(code) {
            Ok(code) if (100..=599).contains(&code) => out.push(code),
            _ => {
                return Err(invalid(
                    format!("{path}.retry_status_codes[{i}]"),
                    format!("{code} is not an HTTP status code"),
                ))
            }
        }
    }
    Ok(out)
}

fn team_from_proto(w: v1::Team, path: &str) -> Result<Team, ConversionError> {
    for (i, pattern) in w.models.iter().enumerate() {
        validate_pattern(pattern)
            .map_err(|message| invalid(format!("{path}.models[{i}]"), message))?;
    }
    let mut plan = BTreeMap::new();
    for (i, entry) in w.plan.into_iter().enumerate() {
        let previous = plan.insert(
            entry.member_id,
            PlanEntry {
                priority: entry.priority,
                weight: entry.weight,
            },
        );
        if previous.is_some() {
            return Err(invalid(
                format!("{path}.plan[{i}]"),
                format!("duplicate plan entry for member {}", entry.member_id),
            ));
        }
    }
    Ok(Team {
        id: w.id,
        name: w.name,
        models: w.models,
        members: w.members,
        plan,
        retry_limit: override_in_range("retry_times", w.retry_limit, path)
            .map_err(|e| invalid(format!("{path}.retry_limit"), e.message))?,
        disable_failover: w.disable_failover,
    })
}

/// The form tokens are stored, shipped and looked up in: the lowercase hex SHA-256 of the
/// plaintext (see [`is_token_hash`]).
pub fn token_hash(plaintext: &str) -> String {
    sha256_hex(plaintext.as_bytes())
}

/// The SHA-256 digest of a presented token, as bytes: what [`token_hash`] writes in hex. A
/// lookup by digest needs neither the hex string nor its allocation.
pub fn token_digest(plaintext: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(plaintext.as_bytes()).into()
}

/// The digest a lowercase hex SHA-256 (a stored token hash) writes; `None` for anything else.
pub fn digest_from_hex(hash: &str) -> Option<[u8; 32]> {
    if !is_token_hash(hash) {
        return None;
    }
    let nibble = |b: u8| {
        if b.is_ascii_digit() {
            b - b'0'
        } else {
            b - b'a' + 10
        }
    };
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hash.as_bytes().chunks_exact(2)) {
        *byte = nibble(pair[0]) << 4 | nibble(pair[1]);
    }
    Some(digest)
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex(&Sha256::digest(bytes))
}

/// `bytes` as lowercase hex, two digits each.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// Is `hash` a lowercase hex SHA-256 digest?
pub fn is_token_hash(hash: &str) -> bool {
    hash.len() == 64 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn token_from_proto(w: v1::Token, path: &str) -> Result<Token, ConversionError> {
    if !is_token_hash(&w.hash) {
        return Err(invalid(
            format!("{path}.hash"),
            "must be a lowercase hex SHA-256 digest",
        ));
    }
    let route_group_name = match w.route_group_name {
        Some(name) => Some(group_from_wire(&name, &format!("{path}.route_group_name"))?),
        None => None,
    };
    Ok(Token {
        id: w.id,
        name: w.name,
        hash: w.hash,
        route_group_name,
        team_id: w.team_id,
        allow_pinning: w.allow_pinning,
        enabled: w.enabled,
        expires_at: w.expires_at_unix_ms,
    })
}

fn price_from_proto(w: v1::Price, path: &str) -> Result<Price, ConversionError> {
    if let Err(message) = validate_pattern(&w.model_pattern) {
        return Err(invalid(format!("{path}.model_pattern"), message));
    }
    Ok(Price {
        id: w.id,
        channel_id: w.channel_id,
        model_pattern: w.model_pattern,
        input_per_million: w.input_per_million,
        output_per_million: w.output_per_million,
        cached_input_per_million: w.cached_input_per_million,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_engine::ScopeKind;

    /// A stored hash decodes to the digest of its plaintext (how the proxy looks tokens up);
    /// anything that is not a lowercase hex SHA-256 decodes to nothing.
    #[test]
    fn a_token_hash_decodes_to_its_digest() {
        for plaintext in ["sk-test-token", "", "ünïcode key", "sk-switchyard-demo"] {
            assert_eq!(
                digest_from_hex(&token_hash(plaintext)),
                Some(token_digest(plaintext)),
                "{plaintext}"
            );
            assert_eq!(hex(&token_digest(plaintext)), token_hash(plaintext));
        }
        let digest: Vec<u8> = (0u8..32).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        assert_eq!(
            digest_from_hex(&hex(&digest)).map(|d| d.to_vec()),
            Some(digest)
        );
        let good = token_hash("x");
        for bad in [
            good.to_uppercase(),
            good[..62].to_owned(),
            format!("{good}00"),
            format!("{}g", &good[..63]),
            String::new(),
        ] {
            assert_eq!(digest_from_hex(&bad), None, "{bad}");
        }
    }

    fn sample() -> Snapshot {
        let channel = Channel {
            id: 1,
            name: "openai-main".into(),
            provider: Provider::Openai,
            base_url: "https://api.example.test/v1".into(),
            status: ChannelStatus::Enabled,
            auto_ban: true,
            max_concurrency: Some(8),
            capabilities: Capabilities {
                max_context: Some(128_000),
                streaming: Some(true),
                ..Capabilities::default()
            },
            credentials: vec![
                Credential {
                    id: 10,
                    enabled: true,
                    secret: SecretSource::Inline("sk-test".into()),
                },
                Credential {
                    id: 11,
                    enabled: false,
                    secret: SecretSource::Env("OPENAI_KEY_2".into()),
                },
            ],
            retry_status_codes: vec![409],
            retry_error_patterns: vec!["overloaded".into()],
            headers: vec![("x-org".into(), "acme".into())],
            secrets_withheld: false,
            responses_api: false,
            preset: Some("groq".to_owned()),
            passthrough: vec!["/v1/fine_tuning/*".into()],
        };
        let route = Route {
            id: 5,
            model_pattern: "gpt-4*".into(),
            enabled: true,
            routing_mode: RoutingMode::Weighted,
            single_member_id: None,
            sticky_session: Some(false),
            stable_first: None,
            stable_first_denominator: Some(10),
            retry_times: Some(3),
            channel_retry_times: None,
            cooldown_seconds: Some(60),
            members: vec![Member {
                id: 100,
                channel_id: 1,
                upstream_model: "gpt-4o".into(),
                group_name: "default".into(),
                priority: 10,
                weight: 3,
                enabled: true,
                canary: false,
                capabilities: Capabilities::default(),
            }],
        };
        let team = Team {
            id: 7,
            name: "research".into(),
            models: vec!["gpt-4*".into()],
            members: vec![100],
            plan: BTreeMap::from([(
                100,
                PlanEntry {
                    priority: Some(1),
                    weight: None,
                },
            )]),
            retry_limit: Some(1),
            disable_failover: false,
        };
        let token = Token {
            id: 3,
            name: "ci".into(),
            hash: "a".repeat(64),
            route_group_name: Some("batch".into()),
            team_id: Some(7),
            allow_pinning: true,
            enabled: true,
            expires_at: Some(1_800_000_000_000),
        };
        let price = Price {
            id: 5,
            channel_id: 1,
            model_pattern: "gpt-4o*".into(),
            input_per_million: 2_500_000,
            output_per_million: 10_000_000,
            cached_input_per_million: Some(1_250_000),
        };
        let limit = LimitRule::new(
            6,
            Limit::parse("token", 3, "requests", Some("minute"), 600, "hard").unwrap(),
            LimitOnly::default(),
        );
        let concurrent = LimitRule::new(
            8,
            Limit::parse("member", 1, "concurrent", None, 4, "soft").unwrap(),
            LimitOnly::default(),
        );
        let narrowed = LimitRule::new(
            9,
            Limit::parse("team", 7, "spend", Some("7d"), 5, "hard").unwrap(),
            LimitOnly {
                model_pattern: Some("gpt-4*".into()),
                route_id: Some(10),
            },
        );
        let tag = LimitRule::new(
            11,
            Limit::parse("tag", 0, "tokens", Some("day"), 50, "hard").unwrap(),
            LimitOnly::default(),
        )
        .about(Some("acme".into()));
        let each_end_user = LimitRule::new(
            12,
            Limit::parse("end_user", 0, "requests", Some("minute"), 3, "hard").unwrap(),
            LimitOnly::default(),
        );
        let one_end_user = LimitRule::new(
            13,
            Limit::parse("end_user", 0, "spend", Some("month"), 9, "soft").unwrap(),
            LimitOnly::default(),
        )
        .about(Some("alice".into()));
        Snapshot::new(SnapshotParts {
            revision: 42,
            settings: Settings {
                retry_times: 4,
                price_catalog: false,
                batch_price_percent: 50,
                ..Settings::default()
            },
            routes: vec![route],
            channels: vec![channel],
            teams: vec![team],
            tokens: vec![token],
            prices: vec![price],
            limits: vec![
                limit,
                concurrent,
                narrowed,
                tag,
                each_end_user,
                one_end_user,
            ],
            shadows: vec![ShadowRule {
                id: 4,
                name: "try".into(),
                model_pattern: "gpt-*".into(),
                target: ShadowTarget::Channel {
                    channel_id: 1,
                    upstream_model: "other".into(),
                },
                sample_basis_points: 2500,
                max_rps: 5,
                max_daily_spend_micros: Some(1_000_000),
                expires_at: Some(99),
                error_rate_stop_per_mille: Some(300),
                error_rate_min_sample: 10,
                enabled: true,
                stopped: Some(StopReason::SpendCap),
            }],
            cache_rules: vec![CacheRule {
                id: 9,
                name: "evals".into(),
                model_pattern: "gpt-*".into(),
                endpoints: vec![
                    switchyard_engine::CacheEndpoint::ChatCompletions,
                    switchyard_engine::CacheEndpoint::Responses,
                ],
                ttl_seconds: 600,
                max_entry_bytes: 4096,
                scope: CacheScope::Token,
                deterministic_only: true,
                enabled: true,
                semantic: Some(SemanticPart {
                    channel: 1,
                    model: "text-embedding-3-small".into(),
                    threshold: 0.95,
                    mode: SemanticMode::Serve,
                }),
                team: Some(4),
            }],
            guardrails: vec![sample_guardrail()],
        })
    }

    fn sample_guardrail() -> Guardrail {
        let checks = GuardChecks::from_json(
            r#"{"patterns":[{"regex":"EMP-[0-9]{6}","label":"EMPLOYEE_ID"}],
                "detectors":["email","api_keys"],"max_input_tokens":1000,"max_messages":20,
                "tools":{"allowed":["search"],"denied":["shell"]},
                "webhook":{"url":"https://guard.example/check","timeout_ms":500,"on_failure":"closed"},
                "moderation":{"channel":"openai","categories":["hate"]}}"#,
        )
        .unwrap();
        GuardrailSpec {
            name: "pii".into(),
            scope: "team".into(),
            scope_id: Some(7),
            stage: "request".into(),
            action: "block".into(),
            restore: false,
            mode: "shadow".into(),
            enabled: true,
            checks,
            uninspectable: "block".into(),
        }
        .into_rule(11)
        .unwrap()
    }

    #[test]
    fn round_trip_preserves_every_field() {
        let snapshot = sample();
        let wire = snapshot_to_proto(&snapshot, 1);
        let back = snapshot_from_proto(wire).unwrap();
        assert_eq!(back.revision, 42);
        assert_eq!(back.settings, snapshot.settings);
        assert_eq!(back.routes(), snapshot.routes());
        assert_eq!(
            back.channels().collect::<Vec<_>>(),
            snapshot.channels().collect::<Vec<_>>()
        );
        assert_eq!(
            back.teams().collect::<Vec<_>>(),
            snapshot.teams().collect::<Vec<_>>()
        );
        assert_eq!(back.tokens(), snapshot.tokens());
        assert_eq!(back.prices(), snapshot.prices());
        assert_eq!(back.limits(), snapshot.limits());
        assert_eq!(back.shadows(), snapshot.shadows());
        assert_eq!(back.cache_rules(), snapshot.cache_rules());
        assert_eq!(back.guardrails(), snapshot.guardrails());
        assert_eq!(back.guardrails()[0], sample_guardrail());
        assert_eq!(back.limits_of(ScopeKind::Token, 3).len(), 1);
        assert!(back.resolve_route("gpt-4o-mini").is_some());
    }

    #[test]
    fn absent_settings_take_their_defaults() {
        let wire = v1::Snapshot {
            revision: 1,
            ..v1::Snapshot::default()
        };
        let snapshot = snapshot_from_proto(wire).unwrap();
        assert_eq!(snapshot.settings, Settings::default());
    }

    fn rejects(mutate: impl FnOnce(&mut v1::Snapshot), path: &str) {
        let mut wire = snapshot_to_proto(&sample(), 1);
        mutate(&mut wire);
        let err = snapshot_from_proto(wire).unwrap_err();
        assert_eq!(err.path, path, "{err}");
    }

    #[test]
    fn a_bad_guardrail_is_refused_naming_its_field() {
        rejects(
            |w| w.guardrails[0].checks_json = r#"{"patterns":[{"regex":"("}]}"#.into(),
            "guardrails[0].checks.patterns[0].regex",
        );
        rejects(
            |w| w.guardrails[0].checks_json = r#"{"detectors":["ssn"]}"#.into(),
            "guardrails[0].checks_json",
        );
        rejects(
            |w| w.guardrails[0].stage = "later".into(),
            "guardrails[0].stage",
        );
        rejects(
            |w| w.guardrails[0].scope = "fleet".into(),
            "guardrails[0].scope",
        );
    }

    #[test]
    fn unspecified_routing_mode_is_rejected() {
        rejects(|w| w.routes[0].routing_mode = 0, "routes[0].routing_mode");
    }

    #[test]
    fn pass_through_patterns_round_trip_and_a_bad_one_is_refused_by_index() {
        let wire = snapshot_to_proto(&sample(), 1);
        assert_eq!(wire.channels[0].passthrough, vec!["/v1/fine_tuning/*"]);
        let back = snapshot_from_proto(wire).unwrap();
        let channel = back.channels().next().unwrap();
        assert_eq!(channel.passthrough, vec!["/v1/fine_tuning/*".to_owned()]);
        rejects(
            |w| w.channels[0].passthrough.push("v1/no-slash".into()),
            "channels[0].passthrough[1]",
        );
    }

    #[test]
    fn only_openai_protocol_channels_can_be_chat_completions_only() {
        assert!(snapshot_to_proto(&sample(), 1).channels[0].chat_completions_only);
        rejects(
            |w| w.channels[0].provider = provider_to_proto(Provider::Anthropic) as i32,
            "channels[0].chat_completions_only",
        );
    }

    #[test]
    fn every_provider_round_trips() {
        for provider in [
            Provider::Openai,
            Provider::Azure,
            Provider::Anthropic,
            Provider::Gemini,
            Provider::Vertex,
            Provider::Bedrock,
            Provider::Mock,
        ] {
            let mut wire = snapshot_to_proto(&sample(), 1);
            wire.channels[0].provider = provider_to_proto(provider) as i32;
            let openai_protocol = matches!(provider, Provider::Openai | Provider::Azure);
            if !openai_protocol {
                wire.channels[0].chat_completions_only = false;
            }
            let back = snapshot_from_proto(wire).unwrap();
            let channel = back.channels().next().unwrap();
            assert_eq!(channel.provider, provider);
            assert_eq!(channel.chat_completions_only(), openai_protocol);
        }
        assert_eq!(v1::Provider::Azure as i32, 5, "a wire number never changes");
        assert_eq!(
            v1::Provider::Vertex as i32,
            6,
            "a wire number never changes"
        );
        assert_eq!(
            v1::Provider::Bedrock as i32,
            7,
            "a wire number never changes"
        );
    }

    #[test]
    fn unknown_provider_is_rejected() {
        rejects(|w| w.channels[0].provider = 99, "channels[0].provider");
    }

    #[test]
    fn out_of_range_setting_is_rejected() {
        rejects(
            |w| w.settings.as_mut().unwrap().retry_times = Some(1000),
            "settings.retry_times",
        );
    }

    #[test]
    fn bad_pattern_is_rejected() {
        rejects(
            |w| w.routes[0].model_pattern = "gpt**".into(),
            "routes[0].model_pattern",
        );
    }

    #[test]
    fn a_limit_with_a_window_its_metric_cannot_have_is_rejected() {
        rejects(|w| w.limits[0].window = "month".into(), "limits[0].window");
        rejects(|w| w.limits[1].window = "minute".into(), "limits[1].window");
        rejects(|w| w.limits[0].value = 0, "limits[0].value");
        rejects(|w| w.limits[0].scope = "fleet".into(), "limits[0].scope");
        rejects(|w| w.limits[1].route_id = Some(3), "limits[1].route_id");
        rejects(
            |w| w.limits[2].model_pattern = Some("a b".into()),
            "limits[2].model_pattern",
        );
        // A tag limit names its tag; an end user is never empty; other scopes name neither.
        rejects(|w| w.limits[3].tag = None, "limits[3].tag");
        rejects(|w| w.limits[3].tag = Some("a b".into()), "limits[3].tag");
        rejects(
            |w| w.limits[4].end_user = Some(String::new()),
            "limits[4].end_user",
        );
        rejects(|w| w.limits[0].tag = Some("acme".into()), "limits[0].tag");
        rejects(
            |w| w.limits[0].end_user = Some("u".into()),
            "limits[0].end_user",
        );
        rejects(
            |w| w.prices[0].model_pattern = String::new(),
            "prices[0].model_pattern",
        );
    }

    #[test]
    fn uppercase_token_hash_is_rejected() {
        rejects(|w| w.tokens[0].hash = "A".repeat(64), "tokens[0].hash");
    }

    #[test]
    fn duplicate_member_id_is_rejected() {
        rejects(
            |w| {
                let dup = w.routes[0].members[0].clone();
                w.routes[0].members.push(dup);
            },
            "routes[0].members[1]",
        );
    }

    #[test]
    fn missing_credential_secret_is_rejected() {
        rejects(
            |w| w.channels[0].credentials[0].secret = None,
            "channels[0].credentials[0].secret",
        );
    }

    #[test]
    fn newer_schema_is_rejected() {
        rejects(|w| w.schema_version = SCHEMA_VERSION + 1, "schema_version");
    }

    #[test]
    fn override_out_of_range_is_rejected() {
        rejects(
            |w| w.routes[0].channel_retry_times = Some(6),
            "routes[0].channel_retry_times",
        );
    }
}
