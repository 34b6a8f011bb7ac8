//! The canonical form of a fleet configuration: the shared file schema ([`RawConfig`]) written the
//! one way both sides of a comparison agree on. The export is the canonical form of the tables; a
//! plan compares it with the canonical form of the file, resource by resource and field by field.
//!
//! Canonical means: resources sorted by their natural key (channels by name, routes by model
//! pattern, members by id, teams by name, tokens by name then hash, prices by channel then
//! pattern, limits by scope, metric and window, shadow, cache and guardrail rules by name), references by name (a member by its id),
//! amounts as exact decimal text, timestamps as RFC 3339 seconds, defaults left out, and never a
//! secret value: a credential is `${ENV_NAME}` or the id of a secret the control plane stores.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;
use switchyard_config::{
    Amount, RawCacheRule, RawChannel, RawConfig, RawCredential, RawGuardrail, RawLimit, RawMember,
    RawPrice, RawRoute, RawSemantic, RawShadow, RawTeam, RawToken,
};
use switchyard_engine::cache::CacheRule;
use switchyard_engine::guard::rule::{GuardScope, Guardrail};
use switchyard_engine::limit::{format_micros, format_rfc3339};
use switchyard_engine::{
    ChannelStatus, Metric, ScopeKind, ShadowRule, ShadowTarget, SnapshotParts, Window,
    DEFAULT_GROUP,
};

/// What the canonical form needs beside the snapshot parts.
pub(super) struct Extras<'a> {
    /// Channel name → its credentials, already in file form.
    pub credentials: &'a HashMap<String, Vec<RawCredential>>,
    /// Token hash → the prefix shown for it.
    pub prefixes: &'a HashMap<String, String>,
    /// Member ids the file gave (the tables: every id).
    pub explicit_member: &'a dyn Fn(i64) -> bool,
    /// Limit id → the limit's own notification thresholds, sorted (absent: none of its own).
    pub notify_at: &'a HashMap<i64, Vec<i32>>,
}

/// The names resources are referred to by in the file, by id.
struct Names<'a> {
    channels: HashMap<i64, &'a str>,
    teams: HashMap<i64, &'a str>,
    tokens: HashMap<i64, &'a str>,
    routes: HashMap<i64, &'a str>,
}

impl<'a> Names<'a> {
    fn of(parts: &'a SnapshotParts) -> Names<'a> {
        fn by_id<'a, T>(items: &'a [T], f: fn(&'a T) -> (i64, &'a str)) -> HashMap<i64, &'a str> {
            items.iter().map(f).collect()
        }
        Names {
            channels: by_id(&parts.channels, |c| (c.id, &c.name)),
            teams: by_id(&parts.teams, |t| (t.id, &t.name)),
            tokens: by_id(&parts.tokens, |t| (t.id, &t.name)),
            routes: by_id(&parts.routes, |r| (r.id, &r.model_pattern)),
        }
    }

    fn channel(&self, id: i64) -> Option<String> {
        name_in(&self.channels, id)
    }
}

fn name_in(names: &HashMap<i64, &str>, id: i64) -> Option<String> {
    names.get(&id).map(|n| (*n).to_owned())
}

/// The canonical file of `parts`.
pub(super) fn canonical(parts: &SnapshotParts, extras: &Extras<'_>) -> RawConfig {
    let names = Names::of(parts);
    let mut channels: Vec<RawChannel> = parts
        .channels
        .iter()
        .map(|c| raw_channel(c, extras))
        .collect();
    channels.sort_by(|a, b| a.name.cmp(&b.name));
    let mut routes: Vec<RawRoute> = parts
        .routes
        .iter()
        .map(|r| raw_route(r, extras, &names))
        .collect();
    routes.sort_by(|a, b| a.model_pattern.cmp(&b.model_pattern));
    let mut teams: Vec<RawTeam> = parts.teams.iter().map(raw_team).collect();
    teams.sort_by(|a, b| a.name.cmp(&b.name));
    let mut tokens: Vec<RawToken> = parts
        .tokens
        .iter()
        .map(|t| raw_token(t, extras, &names))
        .collect();
    tokens.sort_by(|a, b| (&a.name, &a.token_sha256).cmp(&(&b.name, &b.token_sha256)));
    let mut prices: Vec<RawPrice> = raw_prices(parts).into_iter().map(|(_, p)| p).collect();
    prices.sort_by(|a, b| (&a.channel, &a.model_pattern).cmp(&(&b.channel, &b.model_pattern)));
    let mut limits: Vec<RawLimit> = raw_limits(parts)
        .into_iter()
        .map(|(id, mut l)| {
            l.notify_at = extras.notify_at.get(&id).cloned();
            l
        })
        .collect();
    limits.sort_by_key(limit_key);
    let mut shadows: Vec<RawShadow> = parts
        .shadows
        .iter()
        .map(|rule| raw_shadow(rule, &|id| names.channel(id)))
        .collect();
    shadows.sort_by(|a, b| a.name.cmp(&b.name));
    let mut cache_rules: Vec<RawCacheRule> = parts
        .cache_rules
        .iter()
        .map(|rule| raw_cache_rule(rule, &names))
        .collect();
    cache_rules.sort_by(|a, b| a.name.cmp(&b.name));
    let mut guardrails: Vec<RawGuardrail> = parts
        .guardrails
        .iter()
        .map(|g| raw_guardrail(g, &names))
        .collect();
    guardrails.sort_by(|a, b| a.name.cmp(&b.name));
    RawConfig {
        listen: None,
        settings: parts.settings.clone(),
        channels,
        routes,
        teams,
        tokens,
        prices,
        limits,
        shadows,
        cache_rules,
        guardrails,
        // Not in a snapshot: added from the tables or the file.
        webhooks: Vec::new(),
    }
}

/// A guardrail in file form: what it is attached to by name (a route by its model pattern).
fn raw_guardrail(rule: &Guardrail, names: &Names<'_>) -> RawGuardrail {
    let (mut route, mut team, mut token) = (None, None, None);
    match rule.scope {
        GuardScope::All => {}
        GuardScope::Route(id) => route = name_in(&names.routes, id),
        GuardScope::Team(id) => team = name_in(&names.teams, id),
        GuardScope::Token(id) => token = name_in(&names.tokens, id),
    }
    RawGuardrail {
        id: None,
        name: rule.name.clone(),
        route,
        team,
        token,
        stage: rule.stage.as_str().to_owned(),
        action: rule.action.as_str().to_owned(),
        restore: rule.restore,
        mode: rule.mode.as_str().to_owned(),
        enabled: rule.enabled,
        checks: rule.checks.clone(),
        uninspectable: rule.uninspectable.as_str().to_owned(),
    }
}

fn raw_cache_rule(rule: &CacheRule, names: &Names<'_>) -> RawCacheRule {
    RawCacheRule {
        id: None,
        name: rule.name.clone(),
        model_pattern: rule.model_pattern.clone(),
        endpoints: rule
            .endpoints
            .iter()
            .map(|e| e.as_str().to_owned())
            .collect(),
        ttl_seconds: rule.ttl_seconds,
        max_entry_bytes: rule.max_entry_bytes,
        scope: rule.scope.as_str().to_owned(),
        deterministic_only: rule.deterministic_only,
        enabled: rule.enabled,
        semantic: rule.semantic.as_ref().map(|part| RawSemantic {
            channel: names.channel(part.channel).unwrap_or_default(),
            model: part.model.clone(),
            threshold: part.threshold,
            mode: part.mode.as_str().to_owned(),
        }),
        team: rule.team.and_then(|id| name_in(&names.teams, id)),
    }
}

fn raw_channel(c: &switchyard_engine::Channel, extras: &Extras<'_>) -> RawChannel {
    let mut channel = RawChannel {
        id: None,
        name: c.name.clone(),
        preset: c.preset.clone(),
        provider: c.provider.as_str().to_owned(),
        // As the file's validation writes it (the admin API keeps a trailing `/`).
        base_url: Some(c.base_url.trim_end_matches('/').to_owned()),
        // `auto_disabled` is the recovery job's state, not configuration: the file says
        // `enabled`, and an apply leaves the recovery job's decision alone.
        status: match c.status {
            ChannelStatus::Disabled => "disabled".to_owned(),
            _ => "enabled".to_owned(),
        },
        auto_ban: c.auto_ban,
        max_concurrency: c.max_concurrency,
        capabilities: c.capabilities,
        // A workload channel's one credential is its identity, not a stored one.
        credentials: extras.credentials.get(&c.name).cloned().unwrap_or_default(),
        retry_status_codes: c.retry_status_codes.clone(),
        retry_error_patterns: c.retry_error_patterns.clone(),
        headers: c.headers.iter().cloned().collect(),
        responses_api: Some(c.responses_api),
        passthrough: c.passthrough.clone(),
        auth: (switchyard_engine::ChannelAuth::of(&c.credentials)
            == switchyard_engine::ChannelAuth::Workload)
            .then(|| "workload".to_owned()),
        mock: None,
    };
    channel.leave_out_defaults();
    channel
}

fn raw_route(r: &switchyard_engine::Route, extras: &Extras<'_>, names: &Names<'_>) -> RawRoute {
    let mut members: Vec<(Option<i64>, RawMember)> = r
        .members
        .iter()
        .map(|m| {
            let id = (extras.explicit_member)(m.id).then_some(m.id);
            (
                id,
                RawMember {
                    id,
                    channel: names.channel(m.channel_id).unwrap_or_default(),
                    upstream_model: Some(m.upstream_model.clone()),
                    group: (m.group_name != DEFAULT_GROUP).then(|| m.group_name.clone()),
                    priority: m.priority,
                    weight: m.weight,
                    enabled: m.enabled,
                    canary: m.canary,
                    capabilities: m.capabilities,
                },
            )
        })
        .collect();
    // By id; members the file gave no id follow, in file order (a stable sort).
    members.sort_by_key(|(id, _)| id.map_or((1, 0), |id| (0, id)));
    RawRoute {
        id: None,
        model_pattern: r.model_pattern.clone(),
        enabled: r.enabled,
        routing_mode: r.routing_mode.as_str().to_owned(),
        single_member_id: r.single_member_id,
        sticky_session: r.sticky_session,
        stable_first: r.stable_first,
        stable_first_denominator: r.stable_first_denominator,
        retry_times: r.retry_times,
        channel_retry_times: r.channel_retry_times,
        cooldown_seconds: r.cooldown_seconds,
        members: members.into_iter().map(|(_, m)| m).collect(),
    }
}

fn raw_team(t: &switchyard_engine::Team) -> RawTeam {
    let mut models = t.models.clone();
    models.sort();
    models.dedup();
    let mut members = t.members.clone();
    members.sort_unstable();
    members.dedup();
    RawTeam {
        id: None,
        name: t.name.clone(),
        models,
        members,
        plan: t.plan.clone(),
        retry_limit: t.retry_limit,
        disable_failover: t.disable_failover,
    }
}

fn raw_token(t: &switchyard_engine::Token, extras: &Extras<'_>, names: &Names<'_>) -> RawToken {
    RawToken {
        id: None,
        name: t.name.clone(),
        token: None,
        token_sha256: Some(t.hash.clone()),
        prefix: extras
            .prefixes
            .get(&t.hash)
            .filter(|p| !p.is_empty())
            .cloned(),
        route_group: t.route_group_name.clone(),
        team: t.team_id.and_then(|id| name_in(&names.teams, id)),
        allow_pinning: t.allow_pinning,
        enabled: t.enabled,
        expires_at: t.expires_at.map(format_rfc3339),
    }
}

/// The stored prices in file form, each with its row id (in no order).
pub(super) fn raw_prices(parts: &SnapshotParts) -> Vec<(i64, RawPrice)> {
    let names = Names::of(parts);
    parts
        .prices
        .iter()
        .map(|p| {
            let price = RawPrice {
                id: None,
                channel: names.channel(p.channel_id).unwrap_or_default(),
                model_pattern: p.model_pattern.clone(),
                input_per_million: Amount::Text(format_micros(p.input_per_million)),
                output_per_million: Amount::Text(format_micros(p.output_per_million)),
                cached_input_per_million: p
                    .cached_input_per_million
                    .map(|v| Amount::Text(format_micros(v))),
            };
            (p.id, price)
        })
        .collect()
}

/// The stored limits in file form, each with its row id (in no order).
pub(super) fn raw_limits(parts: &SnapshotParts) -> Vec<(i64, RawLimit)> {
    let names = Names::of(parts);
    parts
        .limits
        .iter()
        .map(|rule| {
            let key = rule.limit.key;
            let mut raw = RawLimit {
                id: None,
                token: None,
                team: None,
                route: None,
                channel: None,
                member: None,
                tag: None,
                end_user: None,
                each_end_user: false,
                metric: key.metric.as_str().to_owned(),
                window: (key.window != Window::None).then(|| key.window.as_str().to_owned()),
                value: if key.metric == Metric::Spend {
                    Amount::Text(format_micros(rule.limit.value))
                } else {
                    Amount::Whole(rule.limit.value)
                },
                mode: rule.limit.mode.as_str().to_owned(),
                model_pattern: rule.only.model_pattern.clone(),
                on_route: rule.only.route_id.and_then(|id| name_in(&names.routes, id)),
                // Not in the snapshot: [`canonical`] adds it from the tables or the file.
                notify_at: None,
            };
            match key.scope {
                ScopeKind::Token => raw.token = name_in(&names.tokens, key.scope_id),
                ScopeKind::Team => raw.team = name_in(&names.teams, key.scope_id),
                ScopeKind::Route => raw.route = name_in(&names.routes, key.scope_id),
                ScopeKind::Channel => raw.channel = names.channel(key.scope_id),
                ScopeKind::Member => raw.member = Some(key.scope_id),
                ScopeKind::Tag => raw.tag = rule.subject.clone(),
                ScopeKind::EndUser => match &rule.subject {
                    Some(user) => raw.end_user = Some(user.clone()),
                    None => raw.each_end_user = true,
                },
            }
            (rule.id, raw)
        })
        .collect()
}

/// A shadow rule in file form. Whether it stopped by itself is state, not configuration (like a
/// channel's automatic disable): the file never says it.
fn raw_shadow(rule: &ShadowRule, channel_name: &dyn Fn(i64) -> Option<String>) -> RawShadow {
    let (target_member, target_channel, target_model) = match &rule.target {
        ShadowTarget::Member(id) => (Some(*id), None, None),
        ShadowTarget::Channel {
            channel_id,
            upstream_model,
        } => (
            None,
            Some(channel_name(*channel_id).unwrap_or_default()),
            Some(upstream_model.clone()),
        ),
    };
    RawShadow {
        id: None,
        name: rule.name.clone(),
        model_pattern: rule.model_pattern.clone(),
        target_member,
        target_channel,
        target_model,
        sample_percent: f64::from(rule.sample_basis_points) / 100.0,
        max_rps: rule.max_rps,
        max_daily_spend_usd: rule
            .max_daily_spend_micros
            .map(|v| Amount::Text(format_micros(v))),
        expires_at: rule.expires_at.map(format_rfc3339),
        error_rate_stop: rule
            .error_rate_stop_per_mille
            .map(|v| f64::from(v) / 1000.0),
        error_rate_min_sample: rule.error_rate_min_sample,
        enabled: rule.enabled,
    }
}

/// A limit's natural key: `scope:name:metric:window`, and what it is narrowed to.
pub(super) fn limit_key(limit: &RawLimit) -> String {
    let (scope, name) = if let Some(t) = &limit.token {
        ("token", t.clone())
    } else if let Some(t) = &limit.team {
        ("team", t.clone())
    } else if let Some(r) = &limit.route {
        ("route", r.clone())
    } else if let Some(c) = &limit.channel {
        ("channel", c.clone())
    } else if let Some(t) = &limit.tag {
        ("tag", t.clone())
    } else if let Some(u) = &limit.end_user {
        ("end_user", u.clone())
    } else if limit.each_end_user {
        ("each_end_user", String::new())
    } else {
        (
            "member",
            limit.member.map(|m| m.to_string()).unwrap_or_default(),
        )
    };
    let mut key = format!(
        "{scope}:{name}:{}:{}",
        limit.metric,
        limit.window.as_deref().unwrap_or("none")
    );
    // A narrowed limit is another limit of the scope (its own counter).
    if let Some(pattern) = &limit.model_pattern {
        key.push_str(&format!(" model={pattern}"));
    }
    if let Some(route) = &limit.on_route {
        key.push_str(&format!(" on_route={route}"));
    }
    key
}

/// A price's natural key: `channel/pattern`.
pub(super) fn price_key(price: &RawPrice) -> String {
    format!("{}/{}", price.channel, price.model_pattern)
}

/// Every resource of a canonical file as (kind, key) → its fields as JSON, the way a plan
/// compares them. A route's members are resources of their own (keyed by id; a member the file
/// gave no id is `route[new N]`).
pub(super) fn index(config: &RawConfig) -> BTreeMap<(&'static str, String), Value> {
    let mut out = BTreeMap::new();
    out.insert(
        ("settings", "settings".to_owned()),
        to_object(&config.settings),
    );
    for c in &config.channels {
        out.insert(("channel", c.name.clone()), to_object(c));
    }
    for r in &config.routes {
        let mut route = to_object(r);
        if let Value::Object(map) = &mut route {
            map.remove("members");
        }
        out.insert(("route", r.model_pattern.clone()), route);
        for (n, m) in r.members.iter().enumerate() {
            let mut member = to_object(m);
            if let Value::Object(map) = &mut member {
                map.remove("id");
                map.insert("route".to_owned(), Value::String(r.model_pattern.clone()));
            }
            let key = match m.id {
                Some(id) => id.to_string(),
                None => format!("{}[new {n}]", r.model_pattern),
            };
            out.insert(("member", key), member);
        }
    }
    for t in &config.teams {
        out.insert(("team", t.name.clone()), to_object(t));
    }
    for t in &config.tokens {
        let hash = t.token_sha256.clone().unwrap_or_default();
        out.insert(("token", hash), to_object(t));
    }
    for p in &config.prices {
        out.insert(("price", price_key(p)), to_object(p));
    }
    for l in &config.limits {
        out.insert(("limit", limit_key(l)), to_object(l));
    }
    for s in &config.shadows {
        out.insert(("shadow", s.name.clone()), to_object(s));
    }
    for c in &config.cache_rules {
        out.insert(("cache_rule", c.name.clone()), to_object(c));
    }
    for g in &config.guardrails {
        out.insert(("guardrail", g.name.clone()), to_object(g));
    }
    for w in &config.webhooks {
        out.insert(("webhook", w.name.clone()), to_object(w));
    }
    out
}

fn to_object<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// A header value as the admin API shows it: `****` and, for 12 characters or more, the last 4
/// (the rule of the channel view's SQL).
pub(super) fn mask_header(value: &str) -> String {
    let n = value.chars().count();
    if n >= 12 {
        let tail: String = value.chars().skip(n - 4).collect();
        format!("****{tail}")
    } else {
        "****".to_owned()
    }
}

/// Whether header `name` of a channel of `provider` is no secret: an Azure channel's
/// `api-version` entries (`api-version`, `api-version-{kind}`), versions (the proxies receive
/// them even when secrets are withheld). Every other header value may carry a key.
pub(super) fn public_header(provider: &str, name: &str) -> bool {
    provider.trim().eq_ignore_ascii_case("azure")
        && switchyard_upstream::is_azure_api_version_entry(name)
}

/// The configuration as an export writes it: header values masked (but an Azure channel's
/// `api-version`) and `base_url` passwords replaced by `***`, as the admin API shows them
/// (they often carry keys).
pub(super) fn mask_secrets(config: &mut RawConfig) {
    for channel in &mut config.channels {
        for (name, value) in channel.headers.iter_mut() {
            if !public_header(&channel.provider, name) {
                *value = mask_header(value);
            }
        }
        if let Some(url) = &mut channel.base_url {
            *url = switchyard_engine::validate::redact_url_userinfo(url);
        }
    }
}

/// A field of a resource of `provider` (a channel's; `""` for other resources) as a plan may
/// show it: a credential's secret as `(secret)` unless it is an `${NAME}` reference, header
/// values masked (but an Azure channel's `api-version`), a `base_url` without its password.
pub(super) fn redact(field: &str, value: &Value, provider: &str) -> Value {
    if field == "headers" {
        let Value::Object(map) = value else {
            return value.clone();
        };
        return Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let text = v.as_str().unwrap_or_default();
                    let shown = if public_header(provider, k) {
                        text.to_owned()
                    } else {
                        mask_header(text)
                    };
                    (k.clone(), Value::String(shown))
                })
                .collect(),
        );
    }
    if field == "base_url" {
        return match value {
            Value::String(url) => {
                Value::String(switchyard_engine::validate::redact_url_userinfo(url))
            }
            other => other.clone(),
        };
    }
    if field != "credentials" {
        return value.clone();
    }
    let Value::Array(items) = value else {
        return value.clone();
    };
    let shown = |secret: &str| {
        if switchyard_config::env_reference(secret).is_some() {
            Value::String(secret.to_owned())
        } else {
            Value::String("(secret)".to_owned())
        }
    };
    Value::Array(
        items
            .iter()
            .map(|item| match item {
                Value::String(s) => shown(s),
                Value::Object(map) => {
                    let mut map = map.clone();
                    if let Some(Value::String(s)) = map.get("secret") {
                        let s = s.clone();
                        map.insert("secret".to_owned(), shown(&s));
                    }
                    Value::Object(map)
                }
                other => other.clone(),
            })
            .collect(),
    )
}
