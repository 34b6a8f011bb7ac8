//! Writes a validated, canonical file into the tables, inside the caller's transaction: only
//! the resources whose canonical form differs are written, in an order every foreign key and
//! `RESTRICT` accepts (creates and updates first, then deletes from the leaves up).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};
use sqlx::{PgConnection, Row};
use switchyard_config::{env_reference, Amount, RawChannel, RawConfig, RawCredential};
use switchyard_engine::limit::parse_usd_micros;
use switchyard_engine::shadow::{fraction_to_per_mille, percent_to_basis_points};
use switchyard_engine::{ChannelStatus, Settings, DEFAULT_GROUP};

use crate::db::record_status_event;
use crate::error::{ApiError, ApiResult};

/// (kind, key) → canonical fields, as [`super::canonical::index`] builds them.
pub(super) type Index = BTreeMap<(&'static str, String), Value>;

/// The status-event reason an apply records.
const REASON: &str = "config apply";

fn internal(what: &str) -> impl FnOnce(String) -> ApiError + '_ {
    move |message| ApiError::Internal(anyhow::anyhow!("{what}: {message}"))
}

fn differs(before: &Index, after: &Index, kind: &'static str, key: &str) -> bool {
    let k = (kind, key.to_owned());
    before.get(&k) != after.get(&k)
}

fn any_differs(before: &Index, after: &Index, kind: &'static str) -> bool {
    let of = |index: &Index| -> Vec<(String, Value)> {
        index
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|((_, key), v)| (key.clone(), v.clone()))
            .collect()
    };
    of(before) != of(after)
}

/// Binds `channel`'s columns `$2`..`$12` of the channel insert and update (provider through
/// `preset`; what the preset supplies, resolved), with `status` as its status.
fn bind_channel<'q>(
    query: PgQuery<'q>,
    channel: &'q RawChannel,
    status: ChannelStatus,
) -> PgQuery<'q> {
    query
        .bind(channel.resolved_provider())
        .bind(channel.resolved_base_url().unwrap_or_default())
        .bind(status.as_str())
        .bind(channel.auto_ban)
        .bind(i32_of(channel.max_concurrency))
        .bind(sqlx::types::Json(&channel.capabilities))
        .bind(
            channel
                .retry_status_codes
                .iter()
                .map(|c| i32::from(*c))
                .collect::<Vec<i32>>(),
        )
        .bind(&channel.retry_error_patterns)
        .bind(sqlx::types::Json(&channel.headers))
        .bind(channel.resolved_responses_api())
        .bind(channel.preset.as_deref())
}

/// A statement whose arguments are still being bound.
type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

fn i32_of(value: Option<u32>) -> Option<i32> {
    value.and_then(|v| i32::try_from(v).ok())
}

/// The stored settings document: only what differs from the defaults.
fn stored_settings(settings: &Settings) -> ApiResult<Map<String, Value>> {
    let to_map = |s: &Settings| match serde_json::to_value(s) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(ApiError::Internal(anyhow::anyhow!(
            "settings do not serialise to an object"
        ))),
    };
    let defaults = to_map(&Settings::default())?;
    Ok(to_map(settings)?
        .into_iter()
        .filter(|(k, v)| defaults.get(k) != Some(v))
        .collect())
}

/// A credential's secret source: an environment variable's name or an inline secret.
enum Source<'a> {
    Stored(i64),
    Env(&'a str),
    Inline(&'a str),
}

fn source(credential: &RawCredential) -> (Source<'_>, bool) {
    match credential {
        RawCredential::Plain(s) => match env_reference(s) {
            Some(name) => (Source::Env(name), true),
            None => (Source::Inline(s.trim()), true),
        },
        RawCredential::Full {
            id,
            secret,
            enabled,
        } => match (secret, id) {
            (Some(s), _) => match env_reference(s) {
                Some(name) => (Source::Env(name), *enabled),
                None => (Source::Inline(s.trim()), *enabled),
            },
            (None, Some(id)) => (Source::Stored(*id), *enabled),
            // Refused by validation.
            (None, None) => (Source::Stored(0), *enabled),
        },
    }
}

#[derive(sqlx::FromRow)]
struct StoredCredential {
    id: i64,
    secret_env: Option<String>,
    enabled: bool,
}

/// Makes the credentials of channel `channel_id` those of `wanted`.
async fn sync_credentials(
    tx: &mut PgConnection,
    channel_id: i64,
    wanted: &[RawCredential],
) -> ApiResult<()> {
    let stored: Vec<StoredCredential> = sqlx::query_as(
        "SELECT id, secret_env, enabled FROM credentials WHERE channel_id = $1 ORDER BY id",
    )
    .bind(channel_id)
    .fetch_all(&mut *tx)
    .await?;
    let mut kept: HashSet<i64> = HashSet::new();
    for credential in wanted {
        let (source, enabled) = source(credential);
        let existing = match source {
            Source::Stored(id) => stored.iter().find(|s| s.id == id),
            Source::Env(name) => stored
                .iter()
                .find(|s| !kept.contains(&s.id) && s.secret_env.as_deref() == Some(name)),
            Source::Inline(_) => None,
        };
        match (existing, source) {
            (Some(row), _) => {
                kept.insert(row.id);
                if row.enabled != enabled {
                    sqlx::query(
                        "UPDATE credentials SET enabled = $2, updated_at = now() WHERE id = $1",
                    )
                    .bind(row.id)
                    .bind(enabled)
                    .execute(&mut *tx)
                    .await?;
                }
            }
            (None, Source::Env(name)) => {
                sqlx::query(
                    "INSERT INTO credentials (channel_id, secret_env, enabled) VALUES ($1, $2, $3)",
                )
                .bind(channel_id)
                .bind(name)
                .bind(enabled)
                .execute(&mut *tx)
                .await?;
            }
            (None, Source::Inline(secret)) => {
                sqlx::query(
                    "INSERT INTO credentials (channel_id, secret, enabled) VALUES ($1, $2, $3)",
                )
                .bind(channel_id)
                .bind(secret)
                .bind(enabled)
                .execute(&mut *tx)
                .await?;
            }
            (None, Source::Stored(id)) => {
                return Err(ApiError::Internal(anyhow::anyhow!(
                    "stored credential {id} vanished during the apply"
                )));
            }
        }
    }
    for row in stored.iter().filter(|s| !kept.contains(&s.id)) {
        sqlx::query("DELETE FROM credentials WHERE id = $1")
            .bind(row.id)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// Deletes the rows of `table` (one of ours, never input) whose key in `ids` is not `wanted`.
async fn delete_unwanted(
    tx: &mut PgConnection,
    table: &'static str,
    ids: &HashMap<String, i64>,
    wanted: HashSet<&str>,
) -> ApiResult<()> {
    let sql = format!("DELETE FROM {table} WHERE id = $1");
    for (key, id) in ids {
        if !wanted.contains(key.as_str()) {
            sqlx::query(&sql).bind(id).execute(&mut *tx).await?;
        }
    }
    Ok(())
}

async fn ids_by(tx: &mut PgConnection, sql: &str) -> ApiResult<HashMap<String, i64>> {
    let rows: Vec<(String, i64)> = sqlx::query_as(sql).fetch_all(&mut *tx).await?;
    Ok(rows.into_iter().collect())
}

fn amount_micros(amount: &Amount, what: &str) -> ApiResult<i64> {
    let micros = parse_usd_micros(&amount.text()).map_err(internal(what))?;
    i64::try_from(micros).map_err(|_| ApiError::Internal(anyhow::anyhow!("{what}: too large")))
}

/// Writes `desired` over the tables: `before` and `after` are the canonical indexes of the
/// tables and of the file, which decide what is written.
pub(super) async fn write(
    tx: &mut PgConnection,
    actor: &str,
    desired: &RawConfig,
    before: &Index,
    after: &Index,
) -> ApiResult<()> {
    if differs(before, after, "settings", "settings") {
        sqlx::query("UPDATE settings SET value = $1, updated_at = now()")
            .bind(sqlx::types::Json(stored_settings(&desired.settings)?))
            .execute(&mut *tx)
            .await?;
    }

    // Channels and their credentials.
    let channel_rows: Vec<(String, i64, String)> =
        sqlx::query_as("SELECT name, id, status FROM channels")
            .fetch_all(&mut *tx)
            .await?;
    let mut channel_ids: HashMap<String, i64> = HashMap::new();
    let mut statuses: HashMap<String, String> = HashMap::new();
    for (name, id, status) in channel_rows {
        channel_ids.insert(name.clone(), id);
        statuses.insert(name, status);
    }
    for channel in &desired.channels {
        if !differs(before, after, "channel", &channel.name) {
            continue;
        }
        let wanted = ChannelStatus::parse(&channel.status).unwrap_or(ChannelStatus::Enabled);
        let id = match channel_ids.get(&channel.name) {
            None => {
                let insert = sqlx::query(
                    "INSERT INTO channels (name, provider, base_url, status, auto_ban, \
                     max_concurrency, capabilities, retry_status_codes, retry_error_patterns, \
                     headers, responses_api, preset) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id",
                )
                .bind(&channel.name);
                let row = bind_channel(insert, channel, wanted)
                    .fetch_one(&mut *tx)
                    .await?;
                let id: i64 = row.try_get(0)?;
                record_status_event(tx, id, None, wanted, "created", actor).await?;
                channel_ids.insert(channel.name.clone(), id);
                id
            }
            Some(&id) => {
                let current = statuses
                    .get(&channel.name)
                    .and_then(|s| ChannelStatus::parse(s))
                    .unwrap_or(ChannelStatus::Enabled);
                // `enabled` in the file leaves an automatic disable to the recovery job.
                let status = match (wanted, current) {
                    (ChannelStatus::Disabled, _) => ChannelStatus::Disabled,
                    (_, ChannelStatus::Disabled) => ChannelStatus::Enabled,
                    (_, current) => current,
                };
                let update = sqlx::query(
                    "UPDATE channels SET provider = $2, base_url = $3, status = $4, \
                     auto_ban = $5, max_concurrency = $6, capabilities = $7, \
                     retry_status_codes = $8, retry_error_patterns = $9, headers = $10, \
                     responses_api = $11, preset = $12, updated_at = now() WHERE id = $1",
                )
                .bind(id);
                bind_channel(update, channel, status)
                    .execute(&mut *tx)
                    .await?;
                if status != current {
                    record_status_event(tx, id, Some(current), status, REASON, actor).await?;
                }
                id
            }
        };
        sync_credentials(tx, id, &channel.credentials).await?;
    }

    // Routes (their single member once the members exist), then members.
    let mut route_ids = ids_by(tx, "SELECT model_pattern, id FROM routes").await?;
    for route in &desired.routes {
        if !differs(before, after, "route", &route.model_pattern) {
            continue;
        }
        let existing = route_ids.get(&route.model_pattern).copied();
        let sql = if existing.is_some() {
            "UPDATE routes SET enabled = $2, routing_mode = $3, sticky_session = $4, \
             stable_first = $5, stable_first_denominator = $6, retry_times = $7, \
             channel_retry_times = $8, cooldown_seconds = $9, updated_at = now() \
             WHERE id = $1 RETURNING id"
        } else {
            "INSERT INTO routes (model_pattern, enabled, routing_mode, sticky_session, \
             stable_first, stable_first_denominator, retry_times, channel_retry_times, \
             cooldown_seconds) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id"
        };
        let query = match existing {
            Some(id) => sqlx::query_scalar::<_, i64>(sql).bind(id),
            None => sqlx::query_scalar::<_, i64>(sql).bind(&route.model_pattern),
        };
        let id = query
            .bind(route.enabled)
            .bind(&route.routing_mode)
            .bind(route.sticky_session)
            .bind(route.stable_first)
            .bind(i32_of(route.stable_first_denominator))
            .bind(i32_of(route.retry_times))
            .bind(i32_of(route.channel_retry_times))
            .bind(i32_of(route.cooldown_seconds))
            .fetch_one(&mut *tx)
            .await?;
        route_ids.insert(route.model_pattern.clone(), id);
    }
    let stored_members: HashSet<i64> = sqlx::query_scalar("SELECT id FROM route_members")
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    let mut wanted_members: HashSet<i64> = HashSet::new();
    let mut explicit_insert = false;
    for route in &desired.routes {
        let route_id = *route_ids.get(&route.model_pattern).ok_or_else(|| {
            ApiError::Internal(anyhow::anyhow!("route {:?} has no id", route.model_pattern))
        })?;
        for (n, member) in route.members.iter().enumerate() {
            let key = match member.id {
                Some(id) => id.to_string(),
                None => format!("{}[new {n}]", route.model_pattern),
            };
            if let Some(id) = member.id {
                wanted_members.insert(id);
            }
            if !differs(before, after, "member", &key) {
                continue;
            }
            let channel_id = *channel_ids.get(&member.channel).ok_or_else(|| {
                ApiError::Internal(anyhow::anyhow!("channel {:?} has no id", member.channel))
            })?;
            let group = member.group.as_deref().unwrap_or(DEFAULT_GROUP);
            let upstream = member
                .upstream_model
                .as_deref()
                .unwrap_or(&route.model_pattern);
            let sql = match member.id {
                Some(id) if stored_members.contains(&id) => {
                    "UPDATE route_members SET route_id = $2, channel_id = $3, \
                     upstream_model = $4, group_name = $5, priority = $6, weight = $7, \
                     enabled = $8, canary = $9, capabilities = $10, updated_at = now() \
                     WHERE id = $1"
                }
                Some(_) => {
                    explicit_insert = true;
                    "INSERT INTO route_members (id, route_id, channel_id, upstream_model, \
                     group_name, priority, weight, enabled, canary, capabilities) \
                     OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                }
                None => {
                    "INSERT INTO route_members (route_id, channel_id, upstream_model, \
                     group_name, priority, weight, enabled, canary, capabilities) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
                }
            };
            let mut query = sqlx::query(sql);
            if let Some(id) = member.id {
                query = query.bind(id);
            }
            query
                .bind(route_id)
                .bind(channel_id)
                .bind(upstream)
                .bind(group)
                .bind(member.priority)
                .bind(member.weight)
                .bind(member.enabled)
                .bind(member.canary)
                .bind(sqlx::types::Json(&member.capabilities))
                .execute(&mut *tx)
                .await?;
        }
    }
    if explicit_insert {
        // Ids the file gave were inserted as they are: the identity continues past them.
        sqlx::query(
            "SELECT setval(pg_get_serial_sequence('route_members', 'id'), \
             (SELECT max(id) FROM route_members))",
        )
        .execute(&mut *tx)
        .await?;
    }

    // Teams, with their models, members and plans.
    let mut team_ids = ids_by(tx, "SELECT name, id FROM teams").await?;
    for team in &desired.teams {
        if !differs(before, after, "team", &team.name) {
            continue;
        }
        let retry_limit = i32_of(team.retry_limit);
        let id: i64 = match team_ids.get(&team.name) {
            Some(&id) => {
                sqlx::query(
                    "UPDATE teams SET retry_limit = $2, disable_failover = $3, \
                     updated_at = now() WHERE id = $1",
                )
                .bind(id)
                .bind(retry_limit)
                .bind(team.disable_failover)
                .execute(&mut *tx)
                .await?;
                for table in ["team_models", "team_members", "team_plans"] {
                    sqlx::query(&format!("DELETE FROM {table} WHERE team_id = $1"))
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                }
                id
            }
            None => {
                sqlx::query_scalar(
                    "INSERT INTO teams (name, retry_limit, disable_failover) \
                     VALUES ($1, $2, $3) RETURNING id",
                )
                .bind(&team.name)
                .bind(retry_limit)
                .bind(team.disable_failover)
                .fetch_one(&mut *tx)
                .await?
            }
        };
        team_ids.insert(team.name.clone(), id);
        for pattern in &team.models {
            sqlx::query("INSERT INTO team_models (team_id, model_pattern) VALUES ($1, $2)")
                .bind(id)
                .bind(pattern)
                .execute(&mut *tx)
                .await?;
        }
        for member in &team.members {
            sqlx::query("INSERT INTO team_members (team_id, member_id) VALUES ($1, $2)")
                .bind(id)
                .bind(member)
                .execute(&mut *tx)
                .await?;
        }
        for (member, entry) in &team.plan {
            sqlx::query(
                "INSERT INTO team_plans (team_id, member_id, priority, weight) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(id)
            .bind(member)
            .bind(entry.priority)
            .bind(entry.weight)
            .execute(&mut *tx)
            .await?;
        }
    }

    // Tokens, by hash.
    let token_ids = ids_by(tx, "SELECT hash, id FROM tokens").await?;
    for token in &desired.tokens {
        let hash = token.token_sha256.as_deref().unwrap_or_default();
        if !differs(before, after, "token", hash) {
            continue;
        }
        let team_id =
            match &token.team {
                Some(name) => Some(*team_ids.get(name).ok_or_else(|| {
                    ApiError::Internal(anyhow::anyhow!("team {name:?} has no id"))
                })?),
                None => None,
            };
        let sql = if token_ids.contains_key(hash) {
            "UPDATE tokens SET name = $2, prefix = $3, route_group_name = $4, team_id = $5, \
             allow_pinning = $6, enabled = $7, expires_at = $8::timestamptz, \
             updated_at = now() WHERE hash = $1"
        } else {
            "INSERT INTO tokens (hash, name, prefix, route_group_name, team_id, allow_pinning, \
             enabled, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::timestamptz)"
        };
        sqlx::query(sql)
            .bind(hash)
            .bind(&token.name)
            .bind(token.prefix.as_deref().unwrap_or_default())
            .bind(&token.route_group)
            .bind(team_id)
            .bind(token.allow_pinning)
            .bind(token.enabled)
            .bind(&token.expires_at)
            .execute(&mut *tx)
            .await?;
    }

    // Single members, now that every member is in place.
    for route in &desired.routes {
        if !differs(before, after, "route", &route.model_pattern) {
            continue;
        }
        sqlx::query("UPDATE routes SET single_member_id = $2 WHERE model_pattern = $1")
            .bind(&route.model_pattern)
            .bind(route.single_member_id)
            .execute(&mut *tx)
            .await?;
    }

    write_shadows(tx, desired, before, after, &channel_ids).await?;

    // Deletes, from the leaves up.
    let wanted_tokens = desired
        .tokens
        .iter()
        .filter_map(|t| t.token_sha256.as_deref());
    delete_unwanted(tx, "tokens", &token_ids, wanted_tokens.collect()).await?;
    let wanted_teams = desired.teams.iter().map(|t| t.name.as_str());
    delete_unwanted(tx, "teams", &team_ids, wanted_teams.collect()).await?;
    for id in stored_members.difference(&wanted_members) {
        sqlx::query("DELETE FROM route_members WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    let wanted_routes = desired.routes.iter().map(|r| r.model_pattern.as_str());
    delete_unwanted(tx, "routes", &route_ids, wanted_routes.collect()).await?;
    let wanted_channels = desired.channels.iter().map(|c| c.name.as_str());
    delete_unwanted(tx, "channels", &channel_ids, wanted_channels.collect()).await?;

    // Prices and limits carry no identity anything else refers to: when any differs, the set
    // is written again as the file gives it.
    if any_differs(before, after, "price") {
        sqlx::query("DELETE FROM prices").execute(&mut *tx).await?;
        for price in &desired.prices {
            let channel_id = *channel_ids.get(&price.channel).ok_or_else(|| {
                ApiError::Internal(anyhow::anyhow!("channel {:?} has no id", price.channel))
            })?;
            sqlx::query(
                "INSERT INTO prices (channel_id, model_pattern, input_per_million, \
                 output_per_million, cached_input_per_million) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(channel_id)
            .bind(&price.model_pattern)
            .bind(amount_micros(&price.input_per_million, "input price")?)
            .bind(amount_micros(&price.output_per_million, "output price")?)
            .bind(
                price
                    .cached_input_per_million
                    .as_ref()
                    .map(|a| amount_micros(a, "cached input price"))
                    .transpose()?,
            )
            .execute(&mut *tx)
            .await?;
        }
    }
    if any_differs(before, after, "limit") {
        sqlx::query("DELETE FROM limits").execute(&mut *tx).await?;
        let token_names = ids_by(tx, "SELECT name, id FROM tokens").await?;
        for limit in &desired.limits {
            let (scope, scope_id) = if let Some(name) = &limit.token {
                ("token", token_names.get(name).copied())
            } else if let Some(name) = &limit.team {
                ("team", team_ids.get(name).copied())
            } else if let Some(pattern) = &limit.route {
                ("route", route_ids.get(pattern).copied())
            } else if let Some(name) = &limit.channel {
                ("channel", channel_ids.get(name).copied())
            } else {
                ("member", limit.member)
            };
            let scope_id = scope_id.ok_or_else(|| {
                ApiError::Internal(anyhow::anyhow!("the scope of a {scope} limit has no id"))
            })?;
            let value = if limit.metric == "spend" {
                amount_micros(&limit.value, "limit value")?
            } else {
                limit
                    .value
                    .text()
                    .parse::<i64>()
                    .map_err(|e| ApiError::Internal(anyhow::anyhow!("limit value: {e}")))?
            };
            sqlx::query(
                "INSERT INTO limits (scope, scope_id, metric, period, value, mode) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(scope)
            .bind(scope_id)
            .bind(&limit.metric)
            .bind(limit.window.as_deref().unwrap_or("none"))
            .bind(value)
            .bind(&limit.mode)
            .execute(&mut *tx)
            .await?;
        }
    }
    Ok(())
}

/// Shadow rules, by name. A rule the file changes runs again if it had stopped by itself (as
/// `enabled: true` in the admin API does): the operator has changed what stopped it. A rule the
/// file leaves as it is keeps its stop.
async fn write_shadows(
    tx: &mut PgConnection,
    desired: &RawConfig,
    before: &Index,
    after: &Index,
    channel_ids: &HashMap<String, i64>,
) -> ApiResult<()> {
    let shadow_ids = ids_by(tx, "SELECT name, id FROM shadows").await?;
    for shadow in &desired.shadows {
        if !differs(before, after, "shadow", &shadow.name) {
            continue;
        }
        let target_channel = match &shadow.target_channel {
            Some(name) => Some(*channel_ids.get(name).ok_or_else(|| {
                ApiError::Internal(anyhow::anyhow!("channel {name:?} has no id"))
            })?),
            None => None,
        };
        let sample = percent_to_basis_points(shadow.sample_percent)
            .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("shadow sample_percent")))?;
        let stop = shadow
            .error_rate_stop
            .map(|f| {
                fraction_to_per_mille(f)
                    .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("shadow error_rate_stop")))
            })
            .transpose()?;
        let spend = shadow
            .max_daily_spend_usd
            .as_ref()
            .map(|a| amount_micros(a, "shadow spend cap"))
            .transpose()?;
        let sql = if shadow_ids.contains_key(&shadow.name) {
            "UPDATE shadows SET model_pattern = $2, target_member_id = $3, \
             target_channel_id = $4, target_model = $5, sample_basis_points = $6, max_rps = $7, \
             max_daily_spend_micros = $8, expires_at = $9::timestamptz, \
             error_rate_stop_per_mille = $10, error_rate_min_sample = $11, enabled = $12, \
             stopped_reason = NULL, stopped_at = NULL, updated_at = now() WHERE name = $1"
        } else {
            "INSERT INTO shadows (name, model_pattern, target_member_id, target_channel_id, \
             target_model, sample_basis_points, max_rps, max_daily_spend_micros, expires_at, \
             error_rate_stop_per_mille, error_rate_min_sample, enabled) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::timestamptz, $10, $11, $12)"
        };
        sqlx::query(sql)
            .bind(&shadow.name)
            .bind(&shadow.model_pattern)
            .bind(shadow.target_member)
            .bind(target_channel)
            .bind(&shadow.target_model)
            .bind(i32_of(Some(sample)))
            .bind(i32_of(Some(shadow.max_rps)))
            .bind(spend)
            .bind(&shadow.expires_at)
            .bind(i32_of(stop))
            .bind(i32_of(Some(shadow.error_rate_min_sample)))
            .bind(shadow.enabled)
            .execute(&mut *tx)
            .await?;
    }
    let wanted = desired.shadows.iter().map(|s| s.name.as_str());
    delete_unwanted(tx, "shadows", &shadow_ids, wanted.collect()).await
}
