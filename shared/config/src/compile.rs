//! Stage two of the standalone config: raw YAML structs → validated [`SnapshotParts`], with the
//! field path of the first problem in the error.

use std::collections::HashMap;

use switchyard_engine::catalog;
use switchyard_engine::model::validate_group;
use switchyard_engine::validate::{
    check_header_name, check_header_value, check_retry_error_pattern, check_retry_error_patterns,
    check_secret, check_single_line, check_upstream_model, redact_url_userinfo,
    truncate_for_display,
};
use switchyard_engine::{
    validate_pattern, Channel, ChannelAuth, ChannelStatus, Credential, Member, Provider, Route,
    RoutingMode, SecretSource, SnapshotParts, Team, Token, UnixMillis, DEFAULT_GROUP,
};

use switchyard_engine::cache::{
    parse_endpoints, CacheRule, CacheScope, SemanticMode, SemanticPart,
};
use switchyard_engine::guard::rule::{Guardrail, GuardrailSpec};
use switchyard_engine::limit::{parse_rfc3339, parse_usd_micros, LimitOnly};
use switchyard_engine::shadow::{fraction_to_per_mille, percent_to_basis_points};
use switchyard_engine::subject::subject_of;
use switchyard_engine::{Limit, LimitRule, Price, ShadowRule, ShadowTarget};

use super::{
    env_reference, err, token_hash, ConfigError, RawCacheRule, RawChannel, RawConfig,
    RawCredential, RawGuardrail, RawLimit, RawMember, RawPrice, RawRoute, RawSemantic, RawShadow,
    RawTeam, RawToken,
};
use switchyard_upstream::MockOptions;

/// Hands out ids for entries that give none: the smallest positive ids no entry claims
/// explicitly, in file order (stable across reloads of an unchanged file).
struct Ids {
    taken: std::collections::HashSet<i64>,
    next: i64,
}

impl Ids {
    fn new(explicit: impl Iterator<Item = Option<i64>>) -> Ids {
        Ids {
            taken: explicit.flatten().collect(),
            next: 1,
        }
    }

    fn next(&mut self) -> i64 {
        while self.taken.contains(&self.next) {
            self.next += 1;
        }
        self.next += 1;
        self.next - 1
    }

    fn or_next(&mut self, id: Option<i64>) -> i64 {
        id.unwrap_or_else(|| self.next())
    }
}

impl RawConfig {
    pub fn into_parts(
        self,
        revision: u64,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<SnapshotParts, ConfigError> {
        if let Some(e) = self.settings.validate().into_iter().next() {
            return Err(err(format!("settings.{}", e.field), e.message));
        }
        let (channels, channel_ids) = compile_channels(self.channels)?;
        let routes = compile_routes(self.routes, &channel_ids)?;
        let (teams, team_ids) = compile_teams(self.teams)?;
        let tokens = compile_tokens(self.tokens, &team_ids, env)?;
        check_published_tokens(&tokens, &channels)?;
        let prices = compile_prices(self.prices, &channel_ids)?;
        let scopes = Scopes {
            tokens: tokens.iter().map(|t| (t.name.as_str(), t.id)).collect(),
            teams: &team_ids,
            routes: routes
                .iter()
                .map(|r| (r.model_pattern.as_str(), r.id))
                .collect(),
            channels: &channel_ids,
            members: routes
                .iter()
                .flat_map(|r| r.members.iter().map(|m| m.id))
                .collect(),
        };
        let limits = compile_limits(self.limits, &scopes)?;
        let shadows = compile_shadows(self.shadows, &routes, &channel_ids)?;
        let cache_rules = compile_cache_rules(self.cache_rules, &channel_ids, &team_ids)?;
        let guardrails = compile_guardrails(self.guardrails, &scopes)?;
        Ok(SnapshotParts {
            revision,
            settings: self.settings,
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

/// The channels, and their ids by name (what routes, prices, limits and shadow rules name
/// them by).
fn compile_channels(
    raw: Vec<RawChannel>,
) -> Result<(Vec<Channel>, HashMap<String, i64>), ConfigError> {
    let mut channel_ids: HashMap<String, i64> = HashMap::new();
    let mut channels = Vec::with_capacity(raw.len());
    let mut channel_ids_alloc = Ids::new(raw.iter().map(|c| c.id));
    let mut credential_ids = Ids::new(raw.iter().flat_map(|c| {
        c.credentials.iter().map(|k| match k {
            RawCredential::Full { id, .. } => *id,
            RawCredential::Plain(_) => None,
        })
    }));
    for (ci, raw) in raw.into_iter().enumerate() {
        let at = format!("channels[{ci}]");
        let channel = raw.into_channel(&at, &mut channel_ids_alloc, &mut credential_ids)?;
        if channel_ids
            .insert(channel.name.clone(), channel.id)
            .is_some()
        {
            return Err(err(
                format!("{at}.name"),
                format!("duplicate channel name {:?}", channel.name),
            ));
        }
        channels.push(channel);
    }
    check_unique(channels.iter().map(|c| c.id), "channels", "channel id")?;
    Ok((channels, channel_ids))
}

fn compile_routes(
    raw: Vec<RawRoute>,
    channel_ids: &HashMap<String, i64>,
) -> Result<Vec<Route>, ConfigError> {
    let mut routes = Vec::with_capacity(raw.len());
    let mut route_ids = Ids::new(raw.iter().map(|r| r.id));
    let mut member_ids = Ids::new(raw.iter().flat_map(|r| r.members.iter().map(|m| m.id)));
    for (ri, raw) in raw.into_iter().enumerate() {
        let at = format!("routes[{ri}]");
        let id = route_ids.or_next(raw.id);
        routes.push(raw.into_route(id, &at, channel_ids, &mut member_ids)?);
    }
    check_unique(routes.iter().map(|r| r.id), "routes", "route id")?;
    check_unique(
        routes.iter().flat_map(|r| r.members.iter().map(|m| m.id)),
        "routes",
        "member id",
    )?;
    Ok(routes)
}

/// The teams, and their ids by name (what tokens and limits name them by).
fn compile_teams(raw: Vec<RawTeam>) -> Result<(Vec<Team>, HashMap<String, i64>), ConfigError> {
    let mut team_ids = HashMap::new();
    let mut team_alloc = Ids::new(raw.iter().map(|t| t.id));
    let mut teams = Vec::with_capacity(raw.len());
    for (ti, raw) in raw.into_iter().enumerate() {
        let at = format!("teams[{ti}]");
        for (pi, pattern) in raw.models.iter().enumerate() {
            validate_pattern(pattern).map_err(|m| err(format!("{at}.models[{pi}]"), m))?;
        }
        text(&format!("{at}.name"), &raw.name, check_single_line)?;
        let id = team_alloc.or_next(raw.id);
        if team_ids.insert(raw.name.clone(), id).is_some() {
            return Err(err(
                format!("{at}.name"),
                format!("duplicate team name {:?}", raw.name),
            ));
        }
        teams.push(Team {
            id,
            name: raw.name,
            models: raw.models,
            members: raw.members,
            plan: raw.plan,
            retry_limit: raw.retry_limit,
            disable_failover: raw.disable_failover,
        });
    }
    Ok((teams, team_ids))
}

fn compile_tokens(
    raw: Vec<RawToken>,
    team_ids: &HashMap<String, i64>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Token>, ConfigError> {
    let mut token_alloc = Ids::new(raw.iter().map(|t| t.id));
    let mut tokens = Vec::with_capacity(raw.len());
    for (ti, raw) in raw.into_iter().enumerate() {
        let at = format!("tokens[{ti}]");
        let hash = stored_hash(&at, raw.token, raw.token_sha256, env)?;
        let team_id = match raw.team {
            None => None,
            Some(name) => Some(
                *team_ids
                    .get(&name)
                    .ok_or_else(|| err(format!("{at}.team"), format!("unknown team {name:?}")))?,
            ),
        };
        if let Some(group) = &raw.route_group {
            validate_group(group).map_err(|m| err(format!("{at}.route_group"), m))?;
            text(&format!("{at}.route_group"), group, check_single_line)?;
        }
        text(&format!("{at}.name"), &raw.name, check_single_line)?;
        let expires_at = expiry(&at, raw.expires_at.as_deref())?;
        tokens.push(Token {
            id: token_alloc.or_next(raw.id),
            name: raw.name,
            hash,
            route_group_name: raw.route_group,
            team_id,
            allow_pinning: raw.allow_pinning,
            enabled: raw.enabled,
            expires_at,
        });
    }
    check_unique(tokens.iter().map(|t| t.id), "tokens", "token id")?;
    Ok(tokens)
}

/// The hash a token is stored as: of its plaintext (given, or read from the environment
/// variable it references), or given as 64 hex characters; exactly one of the two.
fn stored_hash(
    at: &str,
    token: Option<String>,
    token_sha256: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    match (token, token_sha256) {
        (Some(plain), None) => match env_reference(&plain) {
            Some(name) => Ok(token_hash(&env(name).ok_or_else(|| {
                err(
                    format!("{at}.token"),
                    format!("environment variable {name} is not set"),
                )
            })?)),
            None => Ok(token_hash(&plain)),
        },
        (None, Some(hash)) => {
            let hash = hash.trim().to_ascii_lowercase();
            if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(err(
                    format!("{at}.token_sha256"),
                    "must be 64 hex characters",
                ));
            }
            Ok(hash)
        }
        _ => Err(err(
            at,
            "exactly one of `token` or `token_sha256` is required",
        )),
    }
}

fn compile_prices(
    raw: Vec<RawPrice>,
    channel_ids: &HashMap<String, i64>,
) -> Result<Vec<Price>, ConfigError> {
    let mut price_ids = Ids::new(raw.iter().map(|p| p.id));
    let mut prices = Vec::with_capacity(raw.len());
    for (pi, raw) in raw.into_iter().enumerate() {
        let at = format!("prices[{pi}]");
        let id = price_ids.or_next(raw.id);
        prices.push(raw.into_price(id, &at, channel_ids)?);
    }
    check_unique(prices.iter().map(|p| p.id), "prices", "price id")?;
    let mut seen = std::collections::HashSet::new();
    for (pi, p) in prices.iter().enumerate() {
        if !seen.insert((p.channel_id, p.model_pattern.as_str())) {
            return Err(err(
                format!("prices[{pi}].model_pattern"),
                format!("the channel already has a price for {:?}", p.model_pattern),
            ));
        }
    }
    Ok(prices)
}

fn compile_limits(raw: Vec<RawLimit>, scopes: &Scopes<'_>) -> Result<Vec<LimitRule>, ConfigError> {
    let mut limit_ids = Ids::new(raw.iter().map(|l| l.id));
    let mut limits = Vec::with_capacity(raw.len());
    let mut seen = std::collections::HashSet::new();
    for (li, raw) in raw.into_iter().enumerate() {
        let at = format!("limits[{li}]");
        let id = limit_ids.or_next(raw.id);
        let only = raw.only(&at, scopes)?;
        let (tag, end_user) = (raw.tag.clone(), raw.end_user.clone());
        let limit = raw.into_limit(&at, scopes)?;
        only.check(limit.key.scope)
            .map_err(|(field, message)| err(format!("{at}.{field}"), message))?;
        let subject = subject_of(limit.key.scope, tag, end_user)
            .map_err(|(field, message)| err(format!("{at}.{field}"), message))?;
        if !seen.insert((limit.key, only.clone(), subject.clone())) {
            return Err(err(
                at,
                "another limit already counts this metric over this window for this scope",
            ));
        }
        limits.push(LimitRule::new(id, limit, only).about(subject));
    }
    check_unique(limits.iter().map(|l| l.id), "limits", "limit id")?;
    Ok(limits)
}

fn compile_shadows(
    raw: Vec<RawShadow>,
    routes: &[Route],
    channel_ids: &HashMap<String, i64>,
) -> Result<Vec<ShadowRule>, ConfigError> {
    let member_ids: std::collections::HashSet<i64> = routes
        .iter()
        .flat_map(|r| r.members.iter().map(|m| m.id))
        .collect();
    let mut shadow_ids = Ids::new(raw.iter().map(|s| s.id));
    let mut shadows = Vec::with_capacity(raw.len());
    for (si, raw) in raw.into_iter().enumerate() {
        let at = format!("shadows[{si}]");
        let id = shadow_ids.or_next(raw.id);
        let rule = raw.into_rule(id, &at, channel_ids, &member_ids)?;
        if shadows.iter().any(|s: &ShadowRule| s.name == rule.name) {
            return Err(err(
                format!("{at}.name"),
                format!("another shadow rule is named {:?}", rule.name),
            ));
        }
        shadows.push(rule);
    }
    check_unique(shadows.iter().map(|s| s.id), "shadows", "shadow id")?;
    Ok(shadows)
}

fn compile_guardrails(
    raw: Vec<RawGuardrail>,
    scopes: &Scopes<'_>,
) -> Result<Vec<Guardrail>, ConfigError> {
    let mut ids = Ids::new(raw.iter().map(|g| g.id));
    let mut rules: Vec<Guardrail> = Vec::with_capacity(raw.len());
    for (gi, raw) in raw.into_iter().enumerate() {
        let at = format!("guardrails[{gi}]");
        let id = ids.or_next(raw.id);
        let rule = raw.into_rule(id, &at, scopes)?;
        if rules.iter().any(|r| r.name == rule.name) {
            return Err(err(
                format!("{at}.name"),
                format!("another guardrail is named {:?}", rule.name),
            ));
        }
        rules.push(rule);
    }
    check_unique(rules.iter().map(|r| r.id), "guardrails", "guardrail id")?;
    Ok(rules)
}

impl RawGuardrail {
    fn into_rule(self, id: i64, at: &str, scopes: &Scopes<'_>) -> Result<Guardrail, ConfigError> {
        let unknown = |field: &str, name: &str| {
            err(format!("{at}.{field}"), format!("unknown {field} {name:?}"))
        };
        let named = [&self.route, &self.team, &self.token];
        if named.iter().filter(|n| n.is_some()).count() > 1 {
            return Err(err(
                at,
                "at most one of `route`, `team` or `token` says what the guardrail is attached \
                 to (none: all traffic)",
            ));
        }
        let (scope, scope_id) = if let Some(pattern) = &self.route {
            let id = scopes.routes.get(pattern.as_str());
            ("route", Some(*id.ok_or_else(|| unknown("route", pattern))?))
        } else if let Some(name) = &self.team {
            let id = scopes.teams.get(name);
            ("team", Some(*id.ok_or_else(|| unknown("team", name))?))
        } else if let Some(name) = &self.token {
            let id = scopes.tokens.get(name.as_str());
            ("token", Some(*id.ok_or_else(|| unknown("token", name))?))
        } else {
            ("all", None)
        };
        if let Some(m) = &self.checks.moderation {
            if !scopes.channels.contains_key(&m.channel) {
                return Err(err(
                    format!("{at}.checks.moderation.channel"),
                    format!("unknown channel {:?}", m.channel),
                ));
            }
        }
        GuardrailSpec {
            name: self.name,
            scope: scope.to_owned(),
            scope_id,
            stage: self.stage,
            action: self.action,
            restore: self.restore,
            mode: self.mode,
            enabled: self.enabled,
            checks: self.checks,
            uninspectable: self.uninspectable,
        }
        .into_rule(id)
        .map_err(|(field, message)| err(format!("{at}.{field}"), message))
    }
}

fn compile_cache_rules(
    raw: Vec<RawCacheRule>,
    channel_ids: &HashMap<String, i64>,
    team_ids: &HashMap<String, i64>,
) -> Result<Vec<CacheRule>, ConfigError> {
    let mut ids = Ids::new(raw.iter().map(|c| c.id));
    let mut rules: Vec<CacheRule> = Vec::with_capacity(raw.len());
    for (ci, raw) in raw.into_iter().enumerate() {
        let at = format!("cache_rules[{ci}]");
        let id = ids.or_next(raw.id);
        let rule = raw.into_rule(id, &at, (channel_ids, team_ids))?;
        if rules.iter().any(|r| r.name == rule.name) {
            return Err(err(
                format!("{at}.name"),
                format!("another cache rule is named {:?}", rule.name),
            ));
        }
        rules.push(rule);
    }
    check_unique(rules.iter().map(|r| r.id), "cache_rules", "cache rule id")?;
    Ok(rules)
}

impl RawSemantic {
    fn into_part(
        self,
        at: &str,
        channel_ids: &HashMap<String, i64>,
    ) -> Result<SemanticPart, ConfigError> {
        let channel = *channel_ids.get(&self.channel).ok_or_else(|| {
            err(
                format!("{at}.semantic.channel"),
                format!("no channel is named {:?}", self.channel),
            )
        })?;
        let mode = SemanticMode::parse(&self.mode).ok_or_else(|| {
            err(
                format!("{at}.semantic.mode"),
                format!("unknown mode {:?} (trial or serve)", self.mode),
            )
        })?;
        Ok(SemanticPart {
            channel,
            model: self.model,
            threshold: self.threshold,
            mode,
        })
    }
}

impl RawCacheRule {
    /// The rule, its semantic part's channel and its team named by the ids of those names.
    fn into_rule(
        self,
        id: i64,
        at: &str,
        (channel_ids, team_ids): (&HashMap<String, i64>, &HashMap<String, i64>),
    ) -> Result<CacheRule, ConfigError> {
        let team =
            match &self.team {
                None => None,
                Some(name) => Some(team_ids.get(name).copied().ok_or_else(|| {
                    err(format!("{at}.team"), format!("no team is named {name:?}"))
                })?),
            };
        let semantic = match self.semantic {
            Some(raw) => Some(raw.into_part(at, channel_ids)?),
            None => None,
        };
        let endpoints =
            parse_endpoints(&self.endpoints).map_err(|m| err(format!("{at}.endpoints"), m))?;
        let scope = CacheScope::parse(&self.scope).ok_or_else(|| {
            err(
                format!("{at}.scope"),
                format!("unknown scope {:?} (route, team or token)", self.scope),
            )
        })?;
        let rule = CacheRule {
            id,
            name: self.name,
            model_pattern: self.model_pattern,
            endpoints,
            ttl_seconds: self.ttl_seconds,
            max_entry_bytes: self.max_entry_bytes,
            scope,
            deterministic_only: self.deterministic_only,
            enabled: self.enabled,
            semantic,
            team,
        };
        rule.check()
            .map_err(|(field, message)| err(format!("{at}.{field}"), message))?;
        Ok(rule)
    }
}

impl RawShadow {
    fn into_rule(
        self,
        id: i64,
        at: &str,
        channel_ids: &HashMap<String, i64>,
        member_ids: &std::collections::HashSet<i64>,
    ) -> Result<ShadowRule, ConfigError> {
        let target = match (self.target_member, self.target_channel, self.target_model) {
            (Some(member), None, None) => {
                if !member_ids.contains(&member) {
                    return Err(err(
                        format!("{at}.target_member"),
                        format!("unknown member id {member}"),
                    ));
                }
                ShadowTarget::Member(member)
            }
            (None, Some(channel), Some(upstream_model)) => ShadowTarget::Channel {
                channel_id: *channel_ids.get(&channel).ok_or_else(|| {
                    err(
                        format!("{at}.target_channel"),
                        format!("unknown channel {channel:?}"),
                    )
                })?,
                upstream_model,
            },
            _ => {
                return Err(err(
                    at,
                    "the target is `target_member`, or `target_channel` with `target_model`",
                ))
            }
        };
        let sample_basis_points =
            percent_to_basis_points(self.sample_percent).ok_or_else(|| {
                err(
                    format!("{at}.sample_percent"),
                    "must be more than 0 and at most 100 (two decimals at most)",
                )
            })?;
        let error_rate_stop_per_mille = self
            .error_rate_stop
            .map(|f| {
                fraction_to_per_mille(f).ok_or_else(|| {
                    err(
                        format!("{at}.error_rate_stop"),
                        "must be more than 0 and at most 1 (three decimals at most)",
                    )
                })
            })
            .transpose()?;
        let max_daily_spend_micros = self
            .max_daily_spend_usd
            .as_ref()
            .map(|v| {
                parse_usd_micros(&v.text()).map_err(|m| err(format!("{at}.max_daily_spend_usd"), m))
            })
            .transpose()?;
        let expires_at = expiry(at, self.expires_at.as_deref())?;
        let rule = ShadowRule {
            id,
            name: self.name,
            model_pattern: self.model_pattern,
            target,
            sample_basis_points,
            max_rps: self.max_rps,
            max_daily_spend_micros,
            expires_at,
            error_rate_stop_per_mille,
            error_rate_min_sample: self.error_rate_min_sample,
            enabled: self.enabled,
            stopped: None,
        };
        rule.check()
            .map_err(|(field, message)| err(format!("{at}.{field}"), message))?;
        Ok(rule)
    }
}

/// Client tokens printed in Switchyard's own docs and examples: anyone can read them, so they
/// may only open a configuration whose channels are all simulated.
const PUBLISHED_TOKENS: &[&str] = &["sk-switchyard-demo"];

/// Refuses a configuration in which a published token would reach a real upstream (and so the
/// operator's provider keys): the demo token is for the simulated channels of the quick start.
fn check_published_tokens(tokens: &[Token], channels: &[Channel]) -> Result<(), ConfigError> {
    let Some(real) = channels.iter().find(|c| c.provider != Provider::Mock) else {
        return Ok(());
    };
    for (ti, token) in tokens.iter().enumerate() {
        if token.enabled && PUBLISHED_TOKENS.iter().any(|p| token_hash(p) == token.hash) {
            return Err(err(
                format!("tokens[{ti}].token"),
                format!(
                    "this token is published in Switchyard's documentation and may only be used \
                     while every channel is `provider: mock`; channel {:?} is a real upstream: \
                     set a token of your own (e.g. `token: ${{SWITCHYARD_CLIENT_TOKEN}}`)",
                    real.name
                ),
            ));
        }
    }
    Ok(())
}

/// `{at}.expires_at`, when set: the instant its RFC 3339 timestamp names.
fn expiry(at: &str, when: Option<&str>) -> Result<Option<UnixMillis>, ConfigError> {
    when.map(|when| {
        parse_rfc3339(when).ok_or_else(|| {
            err(
                format!("{at}.expires_at"),
                format!("{when:?} is not an RFC 3339 timestamp (2027-01-31T00:00:00Z)"),
            )
        })
    })
    .transpose()
}

/// Applies one of the engine's text rules (their messages never quote the value) at `path`.
fn text(path: &str, value: &str, rule: fn(&str) -> Result<(), String>) -> Result<(), ConfigError> {
    rule(value).map_err(|m| err(path, m))
}

fn check_unique(ids: impl Iterator<Item = i64>, path: &str, what: &str) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        if !seen.insert(id) {
            return Err(err(path, format!("duplicate {what} {id}")));
        }
    }
    Ok(())
}

/// A channel's pass-through path patterns: each valid, none twice, none on a mock channel.
fn check_passthrough(at: &str, provider: Provider, patterns: &[String]) -> Result<(), ConfigError> {
    if let Err((index, message)) = switchyard_engine::passthrough::validate_patterns(patterns) {
        let path = index.map_or_else(
            || format!("{at}.passthrough"),
            |i| format!("{at}.passthrough[{i}]"),
        );
        return Err(err(path, message));
    }
    if provider == Provider::Mock && !patterns.is_empty() {
        return Err(err(
            format!("{at}.passthrough"),
            "a mock channel has no upstream to pass requests through to",
        ));
    }
    Ok(())
}

impl RawChannel {
    fn into_channel(
        self,
        at: &str,
        channel_ids: &mut Ids,
        credential_ids: &mut Ids,
    ) -> Result<Channel, ConfigError> {
        let (preset, provider) = self.preset_and_provider(at)?;
        let responses_api = self.resolved_responses_api();
        let base_url = self.resolved_base_url();
        let status = ChannelStatus::parse(self.status.trim()).ok_or_else(|| {
            err(
                format!("{at}.status"),
                "must be enabled, disabled or auto_disabled",
            )
        })?;
        if self.name.trim().is_empty() {
            return Err(err(format!("{at}.name"), "must not be empty"));
        }
        text(&format!("{at}.name"), &self.name, check_single_line)?;
        if let Some(url) = &base_url {
            text(&format!("{at}.base_url"), url, check_single_line)?;
        }
        let base_url = channel_base_url(at, provider, base_url, self.mock)?;
        let credentials = match channel_auth(at, self.auth.as_deref())? {
            ChannelAuth::Credentials => {
                channel_credentials(at, provider, preset, self.credentials, credential_ids)?
            }
            ChannelAuth::Workload => {
                workload_credential(at, provider, &base_url, &self.credentials, credential_ids)?
            }
        };
        let headers = channel_headers(at, provider, self.headers)?;
        check_retry_rules(at, &self.retry_error_patterns, &self.retry_status_codes)?;
        if !responses_api && !matches!(provider, Provider::Openai | Provider::Azure) {
            return Err(err(
                format!("{at}.responses_api"),
                format!(
                    "only openai and azure channels can be without the Responses API, not {}",
                    provider.as_str()
                ),
            ));
        }
        check_passthrough(at, provider, &self.passthrough)?;
        Ok(Channel {
            id: channel_ids.or_next(self.id),
            name: self.name.trim().to_owned(),
            provider,
            base_url,
            status,
            auto_ban: self.auto_ban,
            max_concurrency: self.max_concurrency,
            capabilities: self.capabilities,
            credentials,
            retry_status_codes: self.retry_status_codes,
            retry_error_patterns: self.retry_error_patterns,
            headers,
            secrets_withheld: false,
            responses_api,
            preset: preset.map(|p| p.name.to_owned()),
            passthrough: self.passthrough,
        })
    }

    /// The channel's preset, if it names one, and its provider (given, or the preset's).
    fn preset_and_provider(
        &self,
        at: &str,
    ) -> Result<(Option<&'static catalog::Preset>, Provider), ConfigError> {
        let preset = match self.preset.as_deref().map(str::trim) {
            None => None,
            Some(name) => Some(catalog::preset(name).ok_or_else(|| {
                err(
                    format!("{at}.preset"),
                    format!(
                        "unknown preset {:?} (known: {})",
                        truncate_for_display(name, 64),
                        catalog::preset_names()
                    ),
                )
            })?),
        };
        let provider_name = self.resolved_provider().to_owned();
        if provider_name.is_empty() {
            return Err(err(
                format!("{at}.provider"),
                format!("is required (or a `preset`: {})", catalog::preset_names()),
            ));
        }
        let provider = Provider::parse(&provider_name).ok_or_else(|| {
            err(
                format!("{at}.provider"),
                format!(
                    "unknown provider {:?} (openai, azure, anthropic, gemini, vertex, bedrock, mock)",
                    self.provider
                ),
            )
        })?;
        Ok((preset, provider))
    }
}

/// The channel's base URL: a simulated channel's from its `mock` options (or a `mock://` URL),
/// a real one's checked for its provider, without a trailing slash.
fn channel_base_url(
    at: &str,
    provider: Provider,
    base_url: Option<String>,
    mock: Option<MockOptions>,
) -> Result<String, ConfigError> {
    let base_url = match (provider, base_url, mock) {
        (Provider::Mock, None, options) => options.unwrap_or_default().to_url(),
        (Provider::Mock, Some(url), None) => url,
        (Provider::Mock, Some(_), Some(_)) => {
            return Err(err(
                format!("{at}.mock"),
                "give either base_url or mock, not both",
            ));
        }
        (_, _, Some(_)) => {
            return Err(err(
                format!("{at}.mock"),
                "only allowed with provider: mock",
            ));
        }
        (_, None, None) => return Err(err(format!("{at}.base_url"), "is required")),
        (_, Some(url), None) => upstream_base_url(at, provider, &url)?,
    };
    if provider == Provider::Mock {
        MockOptions::from_url(&base_url).map_err(|m| err(format!("{at}.base_url"), m))?;
    }
    Ok(base_url)
}

/// A real upstream's base URL, trimmed and checked (a Vertex or Bedrock one for its shape).
fn upstream_base_url(at: &str, provider: Provider, url: &str) -> Result<String, ConfigError> {
    let trimmed = url.trim().trim_end_matches('/').to_owned();
    if let Err(message) = switchyard_upstream::check_base_url(&trimmed) {
        // Quoted without its password, and not whole if it is huge.
        let shown = redact_url_userinfo(url);
        return Err(err(
            format!("{at}.base_url"),
            format!("{message}: {:?}", truncate_for_display(&shown, 256)),
        ));
    }
    if provider == Provider::Vertex {
        text(
            &format!("{at}.base_url"),
            &trimmed,
            switchyard_upstream::check_vertex_base_url,
        )?;
    }
    if provider == Provider::Bedrock {
        text(
            &format!("{at}.base_url"),
            &trimmed,
            switchyard_upstream::check_bedrock_base_url,
        )?;
    }
    Ok(trimmed)
}

/// The channel's `auth`: `credentials` when absent.
fn channel_auth(at: &str, auth: Option<&str>) -> Result<ChannelAuth, ConfigError> {
    match auth.map(str::trim) {
        None => Ok(ChannelAuth::Credentials),
        Some(value) => ChannelAuth::parse(value)
            .ok_or_else(|| err(format!("{at}.auth"), "must be credentials or workload")),
    }
}

/// An `auth: workload` channel's one credential, the proxy's workload identity: for a provider
/// that has one, with no credentials of its own ([`switchyard_upstream::workload::check_channel`]).
fn workload_credential(
    at: &str,
    provider: Provider,
    base_url: &str,
    raw: &[RawCredential],
    credential_ids: &mut Ids,
) -> Result<Vec<Credential>, ConfigError> {
    if !raw.is_empty() {
        return Err(err(
            format!("{at}.credentials"),
            "must be absent with auth: workload (the proxy's workload identity is the credential)",
        ));
    }
    switchyard_upstream::workload::check_channel(provider, base_url)
        .map_err(|m| err(format!("{at}.auth"), m))?;
    Ok(vec![Credential {
        id: credential_ids.next(),
        enabled: true,
        secret: SecretSource::Workload,
    }])
}

/// The channel's credentials, each with its id; a keyless preset's placeholder, or the
/// simulation's, when none is given (any other channel needs one).
fn channel_credentials(
    at: &str,
    provider: Provider,
    preset: Option<&catalog::Preset>,
    raw: Vec<RawCredential>,
    credential_ids: &mut Ids,
) -> Result<Vec<Credential>, ConfigError> {
    let mut credentials = Vec::new();
    for (ki, raw) in raw.into_iter().enumerate() {
        let (id, secret, enabled) = match raw {
            RawCredential::Plain(secret) => (None, secret, true),
            RawCredential::Full {
                id,
                secret: Some(secret),
                enabled,
            } => (id, secret, enabled),
            RawCredential::Full { secret: None, .. } => {
                return Err(err(
                    format!("{at}.credentials[{ki}].secret"),
                    "is required (a credential without one names a secret stored in the \
                     control plane, which only a control plane apply accepts)",
                ));
            }
        };
        let secret = credential_secret(&format!("{at}.credentials[{ki}]"), provider, &secret)?;
        let id = credential_ids.or_next(id);
        credentials.push(Credential {
            id,
            enabled,
            secret,
        });
    }
    if credentials.is_empty() && preset.is_some_and(|p| p.auth == catalog::Auth::None) {
        // A local server checks no key; the placeholder is what the proxy sends.
        credentials.push(Credential {
            id: credential_ids.next(),
            enabled: true,
            secret: SecretSource::Inline(catalog::NO_KEY.to_owned()),
        });
    }
    if credentials.is_empty() {
        if provider != Provider::Mock {
            return Err(err(
                format!("{at}.credentials"),
                "at least one credential is required",
            ));
        }
        // The simulation needs no key, but the engine wants a usable credential.
        credentials.push(Credential {
            id: credential_ids.next(),
            enabled: true,
            secret: SecretSource::Inline("mock".to_owned()),
        });
    }
    Ok(credentials)
}

/// One credential's secret at `path`: an environment variable it references, or the secret
/// itself checked for the provider's kind of key. No message ever quotes it.
fn credential_secret(
    path: &str,
    provider: Provider,
    secret: &str,
) -> Result<SecretSource, ConfigError> {
    // Trimmed like the admin API does (a YAML block scalar ends with a newline).
    let secret = secret.trim();
    if secret.is_empty() {
        return Err(err(path, "secret must not be empty"));
    }
    match env_reference(secret) {
        Some(name) => return Ok(SecretSource::Env(name.to_owned())),
        // A Vertex credential is a service-account key file (JSON, often on several lines),
        // never sent as is.
        None if provider == Provider::Vertex => {
            text(path, secret, switchyard_upstream::check_service_account)?;
        }
        // A Bedrock credential is an AWS access key (a JSON object), never sent as is.
        None if provider == Provider::Bedrock => {
            text(path, secret, switchyard_upstream::check_aws_credential)?;
        }
        // Sent as a header value: one line.
        None => text(path, secret, check_secret)?,
    }
    Ok(SecretSource::Inline(secret.to_owned()))
}

/// The channel's extra headers, each name and value checked (an Azure `api-version` entry,
/// plain or of one kind, for its form); a value is never quoted, header values often carry keys.
fn channel_headers(
    at: &str,
    provider: Provider,
    raw: std::collections::BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut headers = Vec::with_capacity(raw.len());
    for (name, value) in raw {
        check_header_name(&name).map_err(|m| {
            err(
                format!("{at}.headers"),
                format!("{m}: {:?}", truncate_for_display(&name, 64)),
            )
        })?;
        text(&format!("{at}.headers.{name}"), &value, check_header_value)?;
        if provider == Provider::Azure && switchyard_upstream::is_azure_api_version_entry(&name) {
            text(
                &format!("{at}.headers.{name}"),
                value.trim(),
                switchyard_upstream::check_api_version,
            )?;
        }
        headers.push((name, value));
    }
    Ok(headers)
}

/// The channel's own retry rules: the error patterns within their bounds, the status codes
/// HTTP statuses.
fn check_retry_rules(at: &str, patterns: &[String], codes: &[u16]) -> Result<(), ConfigError> {
    check_retry_error_patterns(patterns)
        .map_err(|m| err(format!("{at}.retry_error_patterns"), m))?;
    for (i, pattern) in patterns.iter().enumerate() {
        text(
            &format!("{at}.retry_error_patterns[{i}]"),
            pattern,
            check_retry_error_pattern,
        )?;
    }
    for (i, code) in codes.iter().enumerate() {
        if !(100..=599).contains(code) {
            return Err(err(
                format!("{at}.retry_status_codes[{i}]"),
                "not an HTTP status",
            ));
        }
    }
    Ok(())
}

impl RawRoute {
    fn into_route(
        self,
        id: i64,
        at: &str,
        channel_ids: &HashMap<String, i64>,
        member_ids: &mut Ids,
    ) -> Result<Route, ConfigError> {
        validate_pattern(&self.model_pattern).map_err(|m| err(format!("{at}.model_pattern"), m))?;
        let routing_mode = RoutingMode::parse(self.routing_mode.trim()).ok_or_else(|| {
            err(
                format!("{at}.routing_mode"),
                "must be auto, weighted, latency, adaptive or single",
            )
        })?;
        for (field, value) in [
            ("retry_times", self.retry_times),
            ("channel_retry_times", self.channel_retry_times),
            ("cooldown_seconds", self.cooldown_seconds),
            ("stable_first_denominator", self.stable_first_denominator),
        ] {
            if let Some(e) =
                value.and_then(|v| switchyard_engine::settings::check_range(field, v.into()))
            {
                return Err(err(format!("{at}.{field}"), e.message));
            }
        }
        let mut members = Vec::with_capacity(self.members.len());
        for (mi, raw) in self.members.into_iter().enumerate() {
            let at = format!("{at}.members[{mi}]");
            let id = member_ids.or_next(raw.id);
            members.push(raw.into_member(id, &at, channel_ids, &self.model_pattern)?);
        }
        if routing_mode == RoutingMode::Single && self.single_member_id.is_none() {
            return Err(err(
                format!("{at}.single_member_id"),
                "required when routing_mode is single",
            ));
        }
        if members
            .iter()
            .any(|m| m.upstream_model.contains(['*', '?']))
        {
            return Err(err(
                format!("{at}.members"),
                "a wildcard route's members need an explicit upstream_model",
            ));
        }
        Ok(Route {
            id,
            model_pattern: self.model_pattern.trim().to_owned(),
            enabled: self.enabled,
            routing_mode,
            single_member_id: self.single_member_id,
            sticky_session: self.sticky_session,
            stable_first: self.stable_first,
            stable_first_denominator: self.stable_first_denominator,
            retry_times: self.retry_times,
            channel_retry_times: self.channel_retry_times,
            cooldown_seconds: self.cooldown_seconds,
            members,
        })
    }
}

impl RawMember {
    /// The member at `at`; without an `upstream_model` it calls its route's model pattern.
    fn into_member(
        self,
        id: i64,
        at: &str,
        channel_ids: &HashMap<String, i64>,
        model_pattern: &str,
    ) -> Result<Member, ConfigError> {
        let channel_id = *channel_ids.get(self.channel.trim()).ok_or_else(|| {
            err(
                format!("{at}.channel"),
                format!("unknown channel {:?}", self.channel),
            )
        })?;
        let group = self.group.unwrap_or_else(|| DEFAULT_GROUP.to_owned());
        validate_group(&group).map_err(|m| err(format!("{at}.group"), m))?;
        text(&format!("{at}.group"), &group, check_single_line)?;
        if let Some(model) = &self.upstream_model {
            // Spliced into request bodies (JSON and multipart): one line.
            text(&format!("{at}.upstream_model"), model, check_upstream_model)?;
        }
        let group = match group.trim() {
            "" => DEFAULT_GROUP.to_owned(),
            g => g.to_owned(),
        };
        Ok(Member {
            id,
            channel_id,
            upstream_model: self
                .upstream_model
                .unwrap_or_else(|| model_pattern.trim().to_owned()),
            group_name: group,
            priority: self.priority,
            weight: self.weight,
            enabled: self.enabled,
            canary: self.canary,
            capabilities: self.capabilities,
        })
    }
}

/// What a limit's scope can name: tokens, teams, routes and channels by name (a route by its
/// model pattern), members by id.
struct Scopes<'a> {
    tokens: HashMap<&'a str, i64>,
    teams: &'a HashMap<String, i64>,
    routes: HashMap<&'a str, i64>,
    channels: &'a HashMap<String, i64>,
    members: std::collections::HashSet<i64>,
}

impl RawPrice {
    fn into_price(
        self,
        id: i64,
        at: &str,
        channel_ids: &HashMap<String, i64>,
    ) -> Result<Price, ConfigError> {
        let channel_id = *channel_ids.get(&self.channel).ok_or_else(|| {
            err(
                format!("{at}.channel"),
                format!("unknown channel {:?}", self.channel),
            )
        })?;
        validate_pattern(&self.model_pattern).map_err(|m| err(format!("{at}.model_pattern"), m))?;
        let amount = |field: &str, value: &super::Amount| {
            parse_usd_micros(&value.text()).map_err(|m| err(format!("{at}.{field}"), m))
        };
        Ok(Price {
            id,
            channel_id,
            input_per_million: amount("input_per_million", &self.input_per_million)?,
            output_per_million: amount("output_per_million", &self.output_per_million)?,
            cached_input_per_million: self
                .cached_input_per_million
                .as_ref()
                .map(|v| amount("cached_input_per_million", v))
                .transpose()?,
            model_pattern: self.model_pattern,
        })
    }
}

impl RawLimit {
    /// What the limit is narrowed to: `model_pattern`, and `on_route` (a route's model pattern).
    fn only(&self, at: &str, scopes: &Scopes<'_>) -> Result<LimitOnly, ConfigError> {
        let route_id = match &self.on_route {
            Some(pattern) => Some(*scopes.routes.get(pattern.as_str()).ok_or_else(|| {
                err(
                    format!("{at}.on_route"),
                    format!("unknown route {pattern:?}"),
                )
            })?),
            None => None,
        };
        Ok(LimitOnly {
            model_pattern: self.model_pattern.clone(),
            route_id,
        })
    }

    fn into_limit(self, at: &str, scopes: &Scopes<'_>) -> Result<Limit, ConfigError> {
        let unknown = |field: &str, name: &str| {
            err(format!("{at}.{field}"), format!("unknown {field} {name:?}"))
        };
        let named = [
            self.token.is_some(),
            self.team.is_some(),
            self.route.is_some(),
            self.channel.is_some(),
            self.member.is_some(),
            self.tag.is_some(),
            self.end_user.is_some(),
            self.each_end_user,
        ];
        if named.iter().filter(|n| **n).count() != 1 {
            return Err(err(
                at,
                "exactly one of `token`, `team`, `route`, `channel`, `member`, `tag`, `end_user` \
                 or `each_end_user` says whom the limit applies to",
            ));
        }
        let (scope, scope_id) = if self.tag.is_some() {
            ("tag", 0)
        } else if self.end_user.is_some() || self.each_end_user {
            ("end_user", 0)
        } else if let Some(name) = &self.token {
            let id = scopes.tokens.get(name.as_str());
            ("token", *id.ok_or_else(|| unknown("token", name))?)
        } else if let Some(name) = &self.team {
            (
                "team",
                *scopes
                    .teams
                    .get(name)
                    .ok_or_else(|| unknown("team", name))?,
            )
        } else if let Some(pattern) = &self.route {
            let id = scopes.routes.get(pattern.as_str());
            ("route", *id.ok_or_else(|| unknown("route", pattern))?)
        } else if let Some(name) = &self.channel {
            let id = scopes.channels.get(name);
            ("channel", *id.ok_or_else(|| unknown("channel", name))?)
        } else {
            let id = self.member.unwrap_or_default();
            if !scopes.members.contains(&id) {
                return Err(err(
                    format!("{at}.member"),
                    format!("unknown member id {id}"),
                ));
            }
            ("member", id)
        };
        let text = self.value.text();
        let value = if self.metric == "spend" {
            parse_usd_micros(&text).map_err(|m| err(format!("{at}.value"), m))?
        } else {
            text.parse::<u64>().map_err(|_| {
                err(
                    format!("{at}.value"),
                    format!("{text:?} is not a whole number"),
                )
            })?
        };
        let window = self.window.as_deref().filter(|w| *w != "none");
        Limit::parse(scope, scope_id, &self.metric, window, value, &self.mode)
            .map_err(|(field, message)| err(format!("{at}.{field}"), message))
    }
}
