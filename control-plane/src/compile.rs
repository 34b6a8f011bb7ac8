//! The snapshot compiler: reads every routing table in one consistent (REPEATABLE READ) view and
//! builds the engine's [`Snapshot`] at the revision that view saw.
//!
//! Compilation is a full rebuild, not incremental: a handful of ordered scans over indexed
//! tables, measured at the scale of 10 000 routes / 100 000 members (see `examples/`).

use std::collections::{BTreeMap, HashMap};

use anyhow::{anyhow, Context};
use serde_json::{Map, Value};
use sqlx::PgPool;
use switchyard_engine::cache::{parse_endpoints, CacheRule, CacheScope, SemanticPart};
use switchyard_engine::guard::rule::{GuardChecks, Guardrail, GuardrailSpec};
use switchyard_engine::limit::LimitOnly;
use switchyard_engine::{
    Capabilities, Channel, ChannelAuth, ChannelStatus, Credential, Limit, LimitRule, Member,
    PlanEntry, Price, Provider, Route, RoutingMode, SecretSource, Settings, ShadowRule,
    ShadowTarget, Snapshot, SnapshotParts, StopReason, Team, Token,
};

// The rows below read only the columns a snapshot needs; the admin API reads the same tables
// with their timestamps into its own rows. The field lists overlap on purpose (ARCHITECTURE.md,
// "one copy").
#[derive(sqlx::FromRow)]
struct ChannelRow {
    id: i64,
    name: String,
    provider: String,
    base_url: String,
    status: String,
    auto_ban: bool,
    max_concurrency: Option<i32>,
    #[sqlx(json)]
    capabilities: Capabilities,
    retry_status_codes: Vec<i32>,
    retry_error_patterns: Vec<String>,
    #[sqlx(json)]
    headers: BTreeMap<String, String>,
    responses_api: bool,
    preset: Option<String>,
    passthrough: Vec<String>,
    auth: String,
}

#[derive(sqlx::FromRow)]
struct CredentialRow {
    id: i64,
    channel_id: i64,
    secret: Option<String>,
    secret_env: Option<String>,
    enabled: bool,
}

#[derive(sqlx::FromRow)]
struct RouteRow {
    id: i64,
    model_pattern: String,
    enabled: bool,
    routing_mode: String,
    single_member_id: Option<i64>,
    sticky_session: Option<bool>,
    stable_first: Option<bool>,
    stable_first_denominator: Option<i32>,
    retry_times: Option<i32>,
    channel_retry_times: Option<i32>,
    cooldown_seconds: Option<i32>,
}

#[derive(sqlx::FromRow)]
struct MemberRow {
    id: i64,
    route_id: i64,
    channel_id: i64,
    upstream_model: String,
    group_name: String,
    priority: i32,
    weight: i32,
    enabled: bool,
    canary: bool,
    #[sqlx(json)]
    capabilities: Capabilities,
}

#[derive(sqlx::FromRow)]
struct TeamRow {
    id: i64,
    name: String,
    retry_limit: Option<i32>,
    disable_failover: bool,
}

#[derive(sqlx::FromRow)]
struct TokenRow {
    id: i64,
    name: String,
    hash: String,
    route_group_name: Option<String>,
    team_id: Option<i64>,
    allow_pinning: bool,
    enabled: bool,
    expires_at_ms: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct PriceRow {
    id: i64,
    channel_id: i64,
    model_pattern: String,
    input_per_million: i64,
    output_per_million: i64,
    cached_input_per_million: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct ShadowRow {
    id: i64,
    name: String,
    model_pattern: String,
    target_member_id: Option<i64>,
    target_channel_id: Option<i64>,
    target_model: Option<String>,
    sample_basis_points: i32,
    max_rps: i32,
    max_daily_spend_micros: Option<i64>,
    expires_at_ms: Option<i64>,
    error_rate_stop_per_mille: Option<i32>,
    error_rate_min_sample: i32,
    enabled: bool,
    stopped_reason: Option<String>,
}

#[derive(sqlx::FromRow)]
struct CacheRuleRow {
    id: i64,
    name: String,
    model_pattern: String,
    endpoints: Vec<String>,
    ttl_seconds: i64,
    max_entry_bytes: i64,
    scope: String,
    deterministic_only: bool,
    enabled: bool,
    semantic_channel_id: Option<i64>,
    semantic_model: Option<String>,
    semantic_threshold: Option<f64>,
    semantic_mode: Option<String>,
    team_id: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct GuardrailRow {
    id: i64,
    name: String,
    scope: String,
    scope_id: Option<i64>,
    stage: String,
    action: String,
    restore: bool,
    mode: String,
    enabled: bool,
    checks: Value,
    uninspectable: String,
}

const GUARDRAILS_SQL: &str = "SELECT id, name, scope, scope_id, stage, action, restore, mode, \
    enabled, checks, uninspectable FROM guardrails ORDER BY id";

const CACHE_RULES_SQL: &str = "SELECT id, name, model_pattern, endpoints, ttl_seconds, \
    max_entry_bytes, scope, deterministic_only, enabled, semantic_channel_id, semantic_model, \
    semantic_threshold, semantic_mode, team_id FROM cache_rules ORDER BY id";

/// The columns [`ShadowRow`] reads (shared with the report, which reads one rule).
pub const SHADOW_COLUMNS: &str = "id, name, model_pattern, target_member_id, target_channel_id, \
     target_model, sample_basis_points, max_rps, max_daily_spend_micros, \
     (extract(epoch FROM expires_at) * 1000)::bigint AS expires_at_ms, \
     error_rate_stop_per_mille, error_rate_min_sample, enabled, stopped_reason";

#[derive(sqlx::FromRow)]
struct LimitRow {
    id: i64,
    scope: String,
    scope_id: i64,
    metric: String,
    period: String,
    value: i64,
    mode: String,
    model_pattern: Option<String>,
    route_id: Option<i64>,
    subject: Option<String>,
}

fn unsigned(value: Option<i32>, what: &str) -> anyhow::Result<Option<u32>> {
    value
        .map(|v| u32::try_from(v).map_err(|_| anyhow!("{what} is negative: {v}")))
        .transpose()
}

/// Reads the tables and builds the snapshot, all at one revision.
pub async fn compile(pool: &PgPool) -> anyhow::Result<Snapshot> {
    let mut tx = pool.begin().await.context("begin")?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await
        .context("set isolation")?;
    let snapshot = compile_in(&mut tx).await?;
    tx.commit().await.context("commit")?;
    Ok(snapshot)
}

/// Builds the snapshot from what `conn` sees: the caller owns the transaction (the publisher's
/// read-only one above, or a dry run's, which sees its own uncommitted changes).
pub async fn compile_in(tx: &mut sqlx::PgConnection) -> anyhow::Result<Snapshot> {
    Ok(Snapshot::new(parts_in(tx).await?))
}

/// The tables as [`SnapshotParts`] (database ids), as `conn` sees them: what [`compile_in`]
/// builds its snapshot from, and what the configuration export writes out.
pub async fn parts_in(tx: &mut sqlx::PgConnection) -> anyhow::Result<SnapshotParts> {
    let revision: i64 = sqlx::query_scalar("SELECT revision FROM snapshot_revision")
        .fetch_one(&mut *tx)
        .await
        .context("revision")?;
    let stored: sqlx::types::Json<Map<String, Value>> =
        sqlx::query_scalar("SELECT value FROM settings")
            .fetch_one(&mut *tx)
            .await
            .context("settings")?;
    let settings = settings_from_stored(stored.0)?;
    let tables = Tables::read(tx).await?;
    let revision = u64::try_from(revision).map_err(|_| anyhow!("negative revision"))?;
    build(revision, settings, tables)
}

/// Every row of `sql`, in its order (`what` names the table in an error).
async fn rows<T>(
    tx: &mut sqlx::PgConnection,
    sql: &str,
    what: &'static str,
) -> anyhow::Result<Vec<T>>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(sql).fetch_all(&mut *tx).await.context(what)
}

struct Tables {
    channel_rows: Vec<ChannelRow>,
    credential_rows: Vec<CredentialRow>,
    route_rows: Vec<RouteRow>,
    member_rows: Vec<MemberRow>,
    team_rows: Vec<TeamRow>,
    team_models: Vec<(i64, String)>,
    team_members: Vec<(i64, i64)>,
    team_plans: Vec<(i64, i64, Option<i32>, Option<i32>)>,
    token_rows: Vec<TokenRow>,
    price_rows: Vec<PriceRow>,
    limit_rows: Vec<LimitRow>,
    shadow_rows: Vec<ShadowRow>,
    cache_rule_rows: Vec<CacheRuleRow>,
    guardrail_rows: Vec<GuardrailRow>,
}

// The statements reading each table, each in the order the build expects its rows.
const CHANNELS_SQL: &str = "SELECT id, name, provider, base_url, status, auto_ban, \
    max_concurrency, capabilities, retry_status_codes, retry_error_patterns, headers, \
    responses_api, preset, passthrough, auth FROM channels ORDER BY id";
const CREDENTIALS_SQL: &str = "SELECT id, channel_id, secret, secret_env, enabled \
    FROM credentials ORDER BY channel_id, id";
const ROUTES_SQL: &str = "SELECT id, model_pattern, enabled, routing_mode, single_member_id, \
    sticky_session, stable_first, stable_first_denominator, retry_times, channel_retry_times, \
    cooldown_seconds FROM routes ORDER BY id";
const MEMBERS_SQL: &str = "SELECT id, route_id, channel_id, upstream_model, group_name, priority, \
    weight, enabled, canary, capabilities FROM route_members ORDER BY route_id, id";
const TEAMS_SQL: &str = "SELECT id, name, retry_limit, disable_failover FROM teams ORDER BY id";
const TEAM_MODELS_SQL: &str =
    "SELECT team_id, model_pattern FROM team_models ORDER BY team_id, model_pattern";
const TEAM_MEMBERS_SQL: &str =
    "SELECT team_id, member_id FROM team_members ORDER BY team_id, member_id";
const TEAM_PLANS_SQL: &str =
    "SELECT team_id, member_id, priority, weight FROM team_plans ORDER BY team_id, member_id";
const TOKENS_SQL: &str = "SELECT id, name, hash, route_group_name, team_id, allow_pinning, \
    enabled, (extract(epoch FROM expires_at) * 1000)::bigint AS expires_at_ms FROM tokens \
    ORDER BY id";
const PRICES_SQL: &str = "SELECT id, channel_id, model_pattern, input_per_million, \
    output_per_million, cached_input_per_million FROM prices ORDER BY id";
const LIMITS_SQL: &str =
    "SELECT id, scope, scope_id, metric, period, value, mode, model_pattern, route_id, subject \
     FROM limits ORDER BY id";

impl Tables {
    /// Every table a snapshot is built from.
    async fn read(tx: &mut sqlx::PgConnection) -> anyhow::Result<Tables> {
        let shadows_sql = format!("SELECT {SHADOW_COLUMNS} FROM shadows ORDER BY id");
        Ok(Tables {
            channel_rows: rows(tx, CHANNELS_SQL, "channels").await?,
            credential_rows: rows(tx, CREDENTIALS_SQL, "credentials").await?,
            route_rows: rows(tx, ROUTES_SQL, "routes").await?,
            member_rows: rows(tx, MEMBERS_SQL, "members").await?,
            team_rows: rows(tx, TEAMS_SQL, "teams").await?,
            team_models: rows(tx, TEAM_MODELS_SQL, "team models").await?,
            team_members: rows(tx, TEAM_MEMBERS_SQL, "team members").await?,
            team_plans: rows(tx, TEAM_PLANS_SQL, "team plans").await?,
            token_rows: rows(tx, TOKENS_SQL, "tokens").await?,
            price_rows: rows(tx, PRICES_SQL, "prices").await?,
            limit_rows: rows(tx, LIMITS_SQL, "limits").await?,
            shadow_rows: rows(tx, &shadows_sql, "shadows").await?,
            cache_rule_rows: rows(tx, CACHE_RULES_SQL, "cache rules").await?,
            guardrail_rows: rows(tx, GUARDRAILS_SQL, "guardrails").await?,
        })
    }
}

/// The stored settings document over the defaults, validated.
pub fn settings_from_stored(stored: Map<String, Value>) -> anyhow::Result<Settings> {
    let mut merged = match serde_json::to_value(Settings::default()) {
        Ok(Value::Object(map)) => map,
        _ => return Err(anyhow!("settings do not serialise to an object")),
    };
    merged.extend(stored);
    let settings: Settings =
        serde_json::from_value(Value::Object(merged)).context("stored settings")?;
    if let Some(error) = settings.validate().into_iter().next() {
        return Err(anyhow!("stored settings: {}", error.message));
    }
    Ok(settings)
}

fn build(revision: u64, settings: Settings, t: Tables) -> anyhow::Result<SnapshotParts> {
    let channels = channels(t.channel_rows, t.credential_rows)?;
    let routes = routes(t.route_rows, t.member_rows)?;
    let teams = teams(t.team_rows, t.team_models, t.team_members, t.team_plans)?;
    let tokens = t.token_rows.into_iter().map(token_from_row).collect();
    let prices = t
        .price_rows
        .into_iter()
        .map(price_from_row)
        .collect::<anyhow::Result<_>>()?;
    let limits = t
        .limit_rows
        .into_iter()
        .map(limit_from_row)
        .collect::<anyhow::Result<_>>()?;
    let shadows = t
        .shadow_rows
        .into_iter()
        .map(shadow_from_row)
        .collect::<anyhow::Result<_>>()?;
    Ok(SnapshotParts {
        revision,
        settings,
        routes,
        channels,
        teams,
        tokens,
        prices,
        limits,
        shadows,
        cache_rules: t
            .cache_rule_rows
            .into_iter()
            .map(cache_rule_from_row)
            .collect::<anyhow::Result<_>>()?,
        guardrails: t
            .guardrail_rows
            .into_iter()
            .map(guardrail_from_row)
            .collect::<anyhow::Result<_>>()?,
    })
}

/// A stored guardrail, checked as every other source of one is.
fn guardrail_from_row(row: GuardrailRow) -> anyhow::Result<Guardrail> {
    let id = row.id;
    let checks = GuardChecks::from_json(&row.checks.to_string())
        .map_err(|m| anyhow!("guardrail {id}: checks: {m}"))?;
    GuardrailSpec {
        name: row.name,
        scope: row.scope,
        scope_id: row.scope_id,
        stage: row.stage,
        action: row.action,
        restore: row.restore,
        mode: row.mode,
        enabled: row.enabled,
        checks,
        uninspectable: row.uninspectable,
    }
    .into_rule(id)
    .map_err(|(field, m)| anyhow!("guardrail {id}: {field}: {m}"))
}

/// A stored cache rule, checked as every other source of one is.
fn cache_rule_from_row(row: CacheRuleRow) -> anyhow::Result<CacheRule> {
    let id = row.id;
    let rule = CacheRule {
        id,
        name: row.name,
        model_pattern: row.model_pattern,
        endpoints: parse_endpoints(&row.endpoints).map_err(|m| anyhow!("cache rule {id}: {m}"))?,
        ttl_seconds: u64::try_from(row.ttl_seconds)?,
        max_entry_bytes: u64::try_from(row.max_entry_bytes)?,
        scope: CacheScope::parse(&row.scope)
            .ok_or_else(|| anyhow!("cache rule {id}: unknown scope {:?}", row.scope))?,
        deterministic_only: row.deterministic_only,
        enabled: row.enabled,
        semantic: SemanticPart::from_columns(
            row.semantic_channel_id,
            row.semantic_model,
            row.semantic_threshold,
            row.semantic_mode.as_deref(),
        )
        .map_err(|m| anyhow!("cache rule {id}: {m}"))?,
        team: row.team_id,
    };
    rule.check()
        .map_err(|(field, m)| anyhow!("cache rule {id}: {field}: {m}"))?;
    Ok(rule)
}

/// The channels, each with its credentials (a keyless preset's placeholder when it has none).
fn channels(
    channel_rows: Vec<ChannelRow>,
    credential_rows: Vec<CredentialRow>,
) -> anyhow::Result<Vec<Channel>> {
    let mut credentials: HashMap<i64, Vec<Credential>> = HashMap::new();
    for row in credential_rows {
        let secret = match (row.secret, row.secret_env) {
            (Some(secret), _) => SecretSource::Inline(secret),
            (None, Some(name)) => SecretSource::Env(name),
            (None, None) => return Err(anyhow!("credential {} has no secret", row.id)),
        };
        credentials
            .entry(row.channel_id)
            .or_default()
            .push(Credential {
                id: row.id,
                enabled: row.enabled,
                secret,
            });
    }
    let mut channels = Vec::with_capacity(channel_rows.len());
    for row in channel_rows {
        let own_credentials = credentials.remove(&row.id).unwrap_or_default();
        channels.push(channel_from_row(row, own_credentials)?);
    }
    Ok(channels)
}

fn channel_from_row(
    row: ChannelRow,
    mut own_credentials: Vec<Credential>,
) -> anyhow::Result<Channel> {
    let keyless = row
        .preset
        .as_deref()
        .and_then(switchyard_engine::catalog::preset);
    if row.auth == ChannelAuth::Workload.as_str() {
        // No stored secret: the proxies' workload identity is the one credential. Its id (the
        // channel's, negated) is no stored credential's; stored ones (the API refuses them)
        // are left out.
        own_credentials = vec![Credential {
            id: -row.id,
            enabled: true,
            secret: SecretSource::Workload,
        }];
    } else if own_credentials.is_empty()
        && keyless.is_some_and(|p| p.auth == switchyard_engine::catalog::Auth::None)
    {
        // A local server checks no key: the placeholder is what the proxy sends. Its id
        // (the channel's, negated) is no stored credential's.
        own_credentials.push(Credential {
            id: -row.id,
            enabled: true,
            secret: SecretSource::Inline(switchyard_engine::catalog::NO_KEY.to_owned()),
        });
    }
    Ok(Channel {
        id: row.id,
        provider: Provider::parse(&row.provider)
            .ok_or_else(|| anyhow!("channel {}: provider {:?}", row.id, row.provider))?,
        status: ChannelStatus::parse(&row.status)
            .ok_or_else(|| anyhow!("channel {}: status {:?}", row.id, row.status))?,
        name: row.name,
        base_url: row.base_url,
        auto_ban: row.auto_ban,
        max_concurrency: unsigned(row.max_concurrency, "max_concurrency")?,
        capabilities: row.capabilities,
        credentials: own_credentials,
        retry_status_codes: row
            .retry_status_codes
            .into_iter()
            .map(|c| u16::try_from(c).map_err(|_| anyhow!("status code {c}")))
            .collect::<anyhow::Result<_>>()?,
        retry_error_patterns: row.retry_error_patterns,
        headers: row.headers.into_iter().collect(),
        secrets_withheld: false,
        responses_api: row.responses_api,
        preset: row.preset,
        passthrough: row.passthrough,
    })
}

/// The routes, each with its members.
fn routes(route_rows: Vec<RouteRow>, member_rows: Vec<MemberRow>) -> anyhow::Result<Vec<Route>> {
    let mut members: HashMap<i64, Vec<Member>> = HashMap::with_capacity(route_rows.len());
    for row in member_rows {
        members.entry(row.route_id).or_default().push(Member {
            id: row.id,
            channel_id: row.channel_id,
            upstream_model: row.upstream_model,
            group_name: row.group_name,
            priority: row.priority,
            weight: row.weight,
            enabled: row.enabled,
            canary: row.canary,
            capabilities: row.capabilities,
        });
    }
    let mut routes = Vec::with_capacity(route_rows.len());
    for row in route_rows {
        routes.push(Route {
            id: row.id,
            routing_mode: RoutingMode::parse(&row.routing_mode)
                .ok_or_else(|| anyhow!("route {}: routing_mode {:?}", row.id, row.routing_mode))?,
            model_pattern: row.model_pattern,
            enabled: row.enabled,
            single_member_id: row.single_member_id,
            sticky_session: row.sticky_session,
            stable_first: row.stable_first,
            stable_first_denominator: unsigned(row.stable_first_denominator, "denominator")?,
            retry_times: unsigned(row.retry_times, "retry_times")?,
            channel_retry_times: unsigned(row.channel_retry_times, "channel_retry_times")?,
            cooldown_seconds: unsigned(row.cooldown_seconds, "cooldown_seconds")?,
            members: members.remove(&row.id).unwrap_or_default(),
        });
    }
    Ok(routes)
}

/// The teams, each with its model patterns, granted members and plan.
fn teams(
    team_rows: Vec<TeamRow>,
    team_models: Vec<(i64, String)>,
    team_members: Vec<(i64, i64)>,
    team_plans: Vec<(i64, i64, Option<i32>, Option<i32>)>,
) -> anyhow::Result<Vec<Team>> {
    let mut models: HashMap<i64, Vec<String>> = HashMap::new();
    for (team, pattern) in team_models {
        models.entry(team).or_default().push(pattern);
    }
    let mut granted: HashMap<i64, Vec<i64>> = HashMap::new();
    for (team, member) in team_members {
        granted.entry(team).or_default().push(member);
    }
    let mut plans: HashMap<i64, BTreeMap<i64, PlanEntry>> = HashMap::new();
    for (team, member, priority, weight) in team_plans {
        plans
            .entry(team)
            .or_default()
            .insert(member, PlanEntry { priority, weight });
    }
    let mut teams = Vec::with_capacity(team_rows.len());
    for row in team_rows {
        teams.push(Team {
            id: row.id,
            name: row.name,
            models: models.remove(&row.id).unwrap_or_default(),
            members: granted.remove(&row.id).unwrap_or_default(),
            plan: plans.remove(&row.id).unwrap_or_default(),
            retry_limit: unsigned(row.retry_limit, "retry_limit")?,
            disable_failover: row.disable_failover,
        });
    }
    Ok(teams)
}

fn token_from_row(row: TokenRow) -> Token {
    Token {
        id: row.id,
        name: row.name,
        hash: row.hash,
        route_group_name: row.route_group_name,
        team_id: row.team_id,
        allow_pinning: row.allow_pinning,
        enabled: row.enabled,
        expires_at: row.expires_at_ms.map(|ms| u64::try_from(ms).unwrap_or(0)),
    }
}

fn price_from_row(row: PriceRow) -> anyhow::Result<Price> {
    let amount = |v: i64, what: &str| {
        u64::try_from(v).map_err(|_| anyhow!("price {}: negative {what}", row.id))
    };
    Ok(Price {
        id: row.id,
        channel_id: row.channel_id,
        input_per_million: amount(row.input_per_million, "input price")?,
        output_per_million: amount(row.output_per_million, "output price")?,
        cached_input_per_million: row
            .cached_input_per_million
            .map(|v| amount(v, "cached input price"))
            .transpose()?,
        model_pattern: row.model_pattern,
    })
}

fn limit_from_row(row: LimitRow) -> anyhow::Result<LimitRule> {
    let window = (row.period != "none").then_some(row.period.as_str());
    let value = u64::try_from(row.value).map_err(|_| anyhow!("limit {}: value", row.id))?;
    let limit = Limit::parse(
        &row.scope,
        row.scope_id,
        &row.metric,
        window,
        value,
        &row.mode,
    )
    .map_err(|(field, message)| anyhow!("limit {}: {field}: {message}", row.id))?;
    let only = LimitOnly {
        model_pattern: row.model_pattern,
        route_id: row.route_id,
    };
    let subject = row.subject.filter(|_| limit.key.scope.attributed());
    Ok(LimitRule::new(row.id, limit, only).about(subject))
}

fn shadow_from_row(row: ShadowRow) -> anyhow::Result<ShadowRule> {
    let id = row.id;
    let count =
        |v: i32, what: &str| u32::try_from(v).map_err(|_| anyhow!("shadow {id}: negative {what}"));
    let target = match (
        row.target_member_id,
        row.target_channel_id,
        row.target_model,
    ) {
        (Some(member), None, None) => ShadowTarget::Member(member),
        (None, Some(channel_id), Some(upstream_model)) => ShadowTarget::Channel {
            channel_id,
            upstream_model,
        },
        _ => {
            return Err(anyhow!(
                "shadow {id}: neither a member nor a channel target"
            ))
        }
    };
    let stopped = match row.stopped_reason.as_deref() {
        None => None,
        Some(text) => Some(
            StopReason::parse(text).ok_or_else(|| anyhow!("shadow {id}: stop reason {text:?}"))?,
        ),
    };
    let rule = ShadowRule {
        id,
        name: row.name,
        model_pattern: row.model_pattern,
        target,
        sample_basis_points: count(row.sample_basis_points, "sample")?,
        max_rps: count(row.max_rps, "max_rps")?,
        max_daily_spend_micros: row
            .max_daily_spend_micros
            .map(|v| u64::try_from(v).map_err(|_| anyhow!("shadow {id}: negative spend cap")))
            .transpose()?,
        expires_at: row.expires_at_ms.map(|ms| u64::try_from(ms).unwrap_or(0)),
        error_rate_stop_per_mille: row
            .error_rate_stop_per_mille
            .map(|v| count(v, "error rate"))
            .transpose()?,
        error_rate_min_sample: count(row.error_rate_min_sample, "minimum sample")?,
        enabled: row.enabled,
        stopped,
    };
    rule.check()
        .map_err(|(field, message)| anyhow!("shadow {id}: {field}: {message}"))?;
    Ok(rule)
}
