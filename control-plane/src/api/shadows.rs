//! `/api/v1/shadows`: shadow rules (copy a sample of a model's live traffic to another target
//! after the client's answer is complete, and compare the answers) and
//! `GET /api/v1/shadows/{id}/report`, live and shadow side by side from the comparisons the
//! proxies report (`shadow_minutes`).

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::PgPool;
use switchyard_engine::limit::{format_micros, format_pico_usd, format_rfc3339, parse_rfc3339};
use switchyard_engine::shadow::{fraction_to_per_mille, percent_to_basis_points};
use switchyard_engine::{ShadowRule, ShadowTarget, UnixMillis};
use switchyard_proto::SHADOW_LATENCY_BOUNDS_MS;
use switchyard_state::unix_ms;
use utoipa::{IntoParams, ToSchema};

use super::admin_tokens::refuse_past_expiry;
use super::amount::DecimalText;
use super::crud::{crud, Item};
use super::extract::{nullable, Path, Query};
use super::rows::{
    commit_view, delete_row, fetch_row, lock_row, table_row, By, Change, Db, RowQuery, RowView,
};
use crate::db::ts;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// Default minimum sample before the error-rate stop may fire.
pub const DEFAULT_MIN_SAMPLE: u32 = 20;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShadowView {
    pub id: i64,
    pub name: String,
    /// Matched against the model the client asked for (`*`/`?` wildcards).
    pub model_pattern: String,
    /// The target member, or `null` when the target is a channel and upstream model.
    pub target_member_id: Option<i64>,
    pub target_channel_id: Option<i64>,
    pub target_model: Option<String>,
    /// Percentage of the matching requests copied (0.01 to 100).
    pub sample_percent: f64,
    /// Shadow requests per second, at most, per proxy.
    pub max_rps: i32,
    /// Shadow spend per UTC day, USD (exact decimal string); `null`: no cap.
    pub max_daily_spend_usd: Option<String>,
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// The error rate (0 to 1) of the target at which the rule stops; `null`: never.
    pub error_rate_stop: Option<f64>,
    pub error_rate_min_sample: i32,
    pub enabled: bool,
    /// Why the rule stopped by itself: `expired`, `spend_cap` or `error_rate`; `null`: running.
    pub stopped_reason: Option<String>,
    #[schema(format = DateTime)]
    pub stopped_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

#[derive(sqlx::FromRow)]
pub(super) struct ShadowRow {
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
    stopped_at: Option<String>,
    created_at: String,
    updated_at: String,
}

table_row!(ShadowRow, "shadows", "shadow", columns);

impl RowView for ShadowView {
    type Row = ShadowRow;
}

crud!(
    ShadowView,
    ShadowCreate,
    ShadowPatch,
    Item::new("shadow")
        .invalid("a field is invalid, the target does not exist, or the name is taken",)
);

impl From<ShadowRow> for ShadowView {
    fn from(r: ShadowRow) -> ShadowView {
        ShadowView {
            id: r.id,
            name: r.name,
            model_pattern: r.model_pattern,
            target_member_id: r.target_member_id,
            target_channel_id: r.target_channel_id,
            target_model: r.target_model,
            sample_percent: f64::from(r.sample_basis_points) / 100.0,
            max_rps: r.max_rps,
            max_daily_spend_usd: r
                .max_daily_spend_micros
                .map(|v| format_micros(u64::try_from(v).unwrap_or(0))),
            expires_at: r
                .expires_at_ms
                .map(|ms| format_rfc3339(u64::try_from(ms).unwrap_or(0))),
            error_rate_stop: r.error_rate_stop_per_mille.map(|v| f64::from(v) / 1000.0),
            error_rate_min_sample: r.error_rate_min_sample,
            enabled: r.enabled,
            stopped_reason: r.stopped_reason,
            stopped_at: r.stopped_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

fn columns() -> String {
    format!(
        "id, name, model_pattern, target_member_id, target_channel_id, target_model, \
         sample_basis_points, max_rps, max_daily_spend_micros, \
         (extract(epoch FROM expires_at) * 1000)::bigint AS expires_at_ms, \
         error_rate_stop_per_mille, error_rate_min_sample, enabled, stopped_reason, \
         {} AS stopped_at, {} AS created_at, {} AS updated_at",
        ts("stopped_at"),
        ts("created_at"),
        ts("updated_at")
    )
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShadowCreate {
    pub name: String,
    pub model_pattern: String,
    /// A member as the target (its channel and upstream model)...
    pub target_member_id: Option<i64>,
    /// ...or a channel and an upstream model (both, and no member).
    pub target_channel_id: Option<i64>,
    pub target_model: Option<String>,
    /// 0.01 to 100.
    pub sample_percent: f64,
    /// 1 to 100000 shadow requests per second per proxy.
    pub max_rps: u32,
    /// USD per UTC day; absent or `null`: no cap (shadow calls with no price are not counted).
    #[schema(value_type = Option<super::amount::UsdAmount>)]
    pub max_daily_spend_usd: Option<DecimalText>,
    /// RFC 3339; absent: no expiry.
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// 0 to 1 (at most three decimals); absent: no error-rate stop.
    pub error_rate_stop: Option<f64>,
    /// Shadow requests counted before the error-rate stop may fire (default 20).
    pub error_rate_min_sample: Option<u32>,
    /// Default true.
    pub enabled: Option<bool>,
}

/// Any subset. `enabled: true` also clears a stop, so a stopped rule runs again.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShadowPatch {
    pub name: Option<String>,
    pub model_pattern: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub target_member_id: Option<Option<i64>>,
    #[serde(default, deserialize_with = "nullable")]
    pub target_channel_id: Option<Option<i64>>,
    #[serde(default, deserialize_with = "nullable")]
    pub target_model: Option<Option<String>>,
    pub sample_percent: Option<f64>,
    pub max_rps: Option<u32>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<super::amount::UsdAmount>)]
    pub max_daily_spend_usd: Option<Option<DecimalText>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    pub error_rate_stop: Option<Option<f64>>,
    pub error_rate_min_sample: Option<u32>,
    pub enabled: Option<bool>,
}

fn sample(percent: f64) -> ApiResult<u32> {
    percent_to_basis_points(percent).ok_or_else(|| {
        ApiError::validation(
            "sample_percent",
            format!(
                "sample_percent must be more than 0 and at most 100 (two decimals at most), got {percent}"
            ),
        )
    })
}

fn error_rate(fraction: f64) -> ApiResult<u32> {
    fraction_to_per_mille(fraction).ok_or_else(|| {
        ApiError::validation(
            "error_rate_stop",
            format!(
                "error_rate_stop must be more than 0 and at most 1 (three decimals at most), got {fraction}"
            ),
        )
    })
}

fn expiry(text: &str) -> ApiResult<UnixMillis> {
    parse_rfc3339(text).ok_or_else(|| {
        ApiError::validation(
            "expires_at",
            format!(
                "expires_at must be an RFC 3339 date-time such as 2027-01-31T23:59:59Z, got {:?}",
                crate::error::bounded(text, 64)
            ),
        )
    })
}

fn target(
    member: Option<i64>,
    channel: Option<i64>,
    model: Option<String>,
) -> ApiResult<ShadowTarget> {
    match (member, channel, model) {
        (Some(member), None, None) => Ok(ShadowTarget::Member(member)),
        (None, Some(channel_id), Some(upstream_model)) => Ok(ShadowTarget::Channel {
            channel_id,
            upstream_model,
        }),
        (Some(_), _, _) => Err(ApiError::validation(
            "target_member_id",
            "target_member_id cannot be given with target_channel_id or target_model",
        )),
        (None, Some(_), None) => Err(ApiError::validation(
            "target_model",
            "target_model is required with target_channel_id",
        )),
        (None, None, _) => Err(ApiError::validation(
            "target_member_id",
            "target_member_id, or target_channel_id with target_model, is required",
        )),
    }
}

fn checked(rule: ShadowRule) -> ApiResult<ShadowRule> {
    rule.check()
        .map_err(|(field, message)| ApiError::validation(field, message))?;
    Ok(rule)
}

impl TryFrom<ShadowCreate> for ShadowRule {
    type Error = ApiError;

    fn try_from(raw: ShadowCreate) -> ApiResult<ShadowRule> {
        checked(ShadowRule {
            id: 0,
            name: raw.name.trim().to_owned(),
            model_pattern: raw.model_pattern,
            target: target(
                raw.target_member_id,
                raw.target_channel_id,
                raw.target_model,
            )?,
            sample_basis_points: sample(raw.sample_percent)?,
            max_rps: raw.max_rps,
            max_daily_spend_micros: raw
                .max_daily_spend_usd
                .map(|v| v.usd_micros("max_daily_spend_usd"))
                .transpose()?,
            expires_at: raw.expires_at.as_deref().map(expiry).transpose()?,
            error_rate_stop_per_mille: raw.error_rate_stop.map(error_rate).transpose()?,
            error_rate_min_sample: raw.error_rate_min_sample.unwrap_or(DEFAULT_MIN_SAMPLE),
            enabled: raw.enabled.unwrap_or(true),
            stopped: None,
        })
    }
}

/// The audit log's record of a rule, in the API's terms.
fn detail(rule: &ShadowRule) -> serde_json::Value {
    let (member, channel, model) = target_columns(&rule.target);
    json!({
        "name": rule.name,
        "model_pattern": rule.model_pattern,
        "target_member_id": member,
        "target_channel_id": channel,
        "target_model": model,
        "sample_percent": f64::from(rule.sample_basis_points) / 100.0,
        "max_rps": rule.max_rps,
        "max_daily_spend_usd": rule.max_daily_spend_micros.map(format_micros),
        "expires_at": rule.expires_at.map(format_rfc3339),
        "error_rate_stop": rule.error_rate_stop_per_mille.map(|v| f64::from(v) / 1000.0),
        "error_rate_min_sample": rule.error_rate_min_sample,
        "enabled": rule.enabled,
    })
}

fn target_columns(target: &ShadowTarget) -> (Option<i64>, Option<i64>, Option<&str>) {
    match target {
        ShadowTarget::Member(id) => (Some(*id), None, None),
        ShadowTarget::Channel {
            channel_id,
            upstream_model,
        } => (None, Some(*channel_id), Some(upstream_model.as_str())),
    }
}

/// The target exists and no other rule has the name.
async fn check(tx: &mut sqlx::PgConnection, rule: &ShadowRule, id: Option<i64>) -> ApiResult<()> {
    let (field, exists) = match &rule.target {
        ShadowTarget::Member(member) => (
            "target_member_id",
            sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM route_members WHERE id = $1 FOR KEY SHARE)",
            )
            .bind(member)
            .fetch_one(&mut *tx)
            .await?,
        ),
        ShadowTarget::Channel { channel_id, .. } => (
            "target_channel_id",
            sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM channels WHERE id = $1 FOR KEY SHARE)",
            )
            .bind(channel_id)
            .fetch_one(&mut *tx)
            .await?,
        ),
    };
    if !exists {
        let (what, id) = match &rule.target {
            ShadowTarget::Member(member) => ("member", *member),
            ShadowTarget::Channel { channel_id, .. } => ("channel", *channel_id),
        };
        return Err(ApiError::validation(
            field,
            format!("{field}: {what} {id} does not exist"),
        ));
    }
    let other: Option<i64> =
        sqlx::query_scalar("SELECT id FROM shadows WHERE name = $1 AND id IS DISTINCT FROM $2")
            .bind(&rule.name)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    if let Some(other) = other {
        return Err(duplicate(&rule.name, Some(other)));
    }
    Ok(())
}

fn duplicate(name: &str, other: Option<i64>) -> ApiError {
    let which = other
        .map(|id| format!(" (shadow {id})"))
        .unwrap_or_default();
    ApiError::validation(
        "name",
        format!(
            "name: a shadow rule named {:?} exists already{which}",
            crate::error::bounded(name, 64)
        ),
    )
}

fn write_error(rule: &ShadowRule) -> impl FnOnce(sqlx::Error) -> ApiError + '_ {
    move |error| match &error {
        sqlx::Error::Database(db) if db.constraint() == Some("shadows_name_key") => {
            duplicate(&rule.name, None)
        }
        _ => ApiError::from(error),
    }
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The columns a create or patch writes, in [`bind_rule`]'s order (`expires_at` from Unix ms).
const WRITTEN: &str = "name, model_pattern, target_member_id, target_channel_id, target_model, \
    sample_basis_points, max_rps, max_daily_spend_micros, expires_at, error_rate_stop_per_mille, \
    error_rate_min_sample, enabled";
const WRITTEN_VALUES: &str = "$1, $2, $3, $4, $5, $6, $7, $8, \
    'epoch'::timestamptz + $9 * interval '1 millisecond', $10, $11, $12";

/// Binds `rule` as `$1`..`$12`, the [`WRITTEN`] columns.
fn bind_rule<'q>(query: RowQuery<'q, ShadowRow>, rule: &'q ShadowRule) -> RowQuery<'q, ShadowRow> {
    let (member, channel, model) = target_columns(&rule.target);
    query
        .bind(&rule.name)
        .bind(&rule.model_pattern)
        .bind(member)
        .bind(channel)
        .bind(model)
        .bind(i32::try_from(rule.sample_basis_points).unwrap_or(i32::MAX))
        .bind(i32::try_from(rule.max_rps).unwrap_or(i32::MAX))
        .bind(rule.max_daily_spend_micros.map(i64_of))
        .bind(rule.expires_at.map(i64_of))
        .bind(
            rule.error_rate_stop_per_mille
                .map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
        )
        .bind(i32::try_from(rule.error_rate_min_sample).unwrap_or(i32::MAX))
        .bind(rule.enabled)
}

/// The create of `POST /api/v1/shadows`, in `db` (see [`Db`]).
pub(super) async fn create_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    raw: ShadowCreate,
) -> ApiResult<Response> {
    let rule = ShadowRule::try_from(raw)?;
    let mut tx = db.begin().await?;
    check(&mut tx, &rule, None).await?;
    if let Some(at) = rule.expires_at {
        refuse_past_expiry(&mut tx, i64_of(at)).await?;
    }
    let sql = format!(
        "INSERT INTO shadows ({WRITTEN}) VALUES ({WRITTEN_VALUES}) RETURNING {}",
        columns()
    );
    let row = bind_rule(sqlx::query_as(&sql), &rule)
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error(&rule))?;
    let (id, view) = (row.id, ShadowView::from(row));
    commit_view::<ShadowRow>(tx, by, Change::Create, id, detail(&rule), view).await
}

/// Rule `id` as `patch` leaves it (`current` the stored row), checked.
fn patched(id: i64, current: ShadowRow, patch: ShadowPatch) -> ApiResult<ShadowRule> {
    let touches_target = patch.target_member_id.is_some()
        || patch.target_channel_id.is_some()
        || patch.target_model.is_some();
    checked(ShadowRule {
        id,
        name: patch
            .name
            .map(|n| n.trim().to_owned())
            .unwrap_or(current.name),
        model_pattern: patch.model_pattern.unwrap_or(current.model_pattern),
        target: if touches_target {
            // A target given replaces the old one whole (the other kind's fields are cleared).
            let member = patch.target_member_id.flatten();
            let channel = patch.target_channel_id.flatten();
            let model = patch.target_model.flatten();
            target(member, channel, model)?
        } else {
            target(
                current.target_member_id,
                current.target_channel_id,
                current.target_model,
            )?
        },
        sample_basis_points: match patch.sample_percent {
            Some(p) => sample(p)?,
            None => u32::try_from(current.sample_basis_points).unwrap_or(1),
        },
        max_rps: patch
            .max_rps
            .unwrap_or(u32::try_from(current.max_rps).unwrap_or(1)),
        max_daily_spend_micros: match patch.max_daily_spend_usd {
            Some(Some(v)) => Some(v.usd_micros("max_daily_spend_usd")?),
            Some(None) => None,
            None => current
                .max_daily_spend_micros
                .map(|v| u64::try_from(v).unwrap_or(0)),
        },
        expires_at: match patch.expires_at {
            Some(Some(text)) => Some(expiry(&text)?),
            Some(None) => None,
            None => current.expires_at_ms.map(|v| u64::try_from(v).unwrap_or(0)),
        },
        error_rate_stop_per_mille: match patch.error_rate_stop {
            Some(Some(f)) => Some(error_rate(f)?),
            Some(None) => None,
            None => current
                .error_rate_stop_per_mille
                .map(|v| u32::try_from(v).unwrap_or(1)),
        },
        error_rate_min_sample: patch
            .error_rate_min_sample
            .unwrap_or(u32::try_from(current.error_rate_min_sample).unwrap_or(1)),
        enabled: patch.enabled.unwrap_or(current.enabled),
        stopped: None,
    })
}

/// The update of `PATCH /api/v1/shadows/{id}`, in `db` (see [`Db`]).
pub(super) async fn patch_in<'c>(
    db: impl Db<'c>,
    by: By<'_>,
    id: i64,
    patch: ShadowPatch,
) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<ShadowRow>(db, id).await?;
    let new_expiry = matches!(patch.expires_at, Some(Some(_)));
    let resume = patch.enabled == Some(true);
    let rule = patched(id, current, patch)?;
    check(&mut tx, &rule, Some(id)).await?;
    // A new expiry must be in the future; the stored one is kept even when it has passed.
    if let Some(at) = rule.expires_at.filter(|_| new_expiry) {
        refuse_past_expiry(&mut tx, i64_of(at)).await?;
    }
    let sql = format!(
        "UPDATE shadows SET ({WRITTEN}) = ROW({WRITTEN_VALUES}), updated_at = now(){} \
         WHERE id = $13 RETURNING {}",
        if resume {
            ", stopped_reason = NULL, stopped_at = NULL"
        } else {
            ""
        },
        columns()
    );
    let row = bind_rule(sqlx::query_as(&sql), &rule)
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(write_error(&rule))?;
    let view = ShadowView::from(row);
    commit_view::<ShadowRow>(tx, by, Change::Update, id, detail(&rule), view).await
}

/// The delete of `DELETE /api/v1/shadows/{id}`, in `db` (see [`Db`]).
pub(super) async fn delete_in<'c>(db: impl Db<'c>, by: By<'_>, id: i64) -> ApiResult<Response> {
    let (mut tx, current) = lock_row::<ShadowRow>(db, id).await?;
    // Its comparisons go with it.
    sqlx::query("DELETE FROM shadow_minutes WHERE shadow_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    delete_row::<ShadowRow>(tx, by, id, json!({ "name": current.name })).await
}

/// One side (live or shadow) of a report.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SideReport {
    /// Requests (every pair has one of each).
    pub requests: i64,
    pub succeeded: i64,
    /// `succeeded / requests`; `null` without requests.
    pub success_rate: Option<f64>,
    /// Upper bound of the latency bucket holding the 50th / 95th percentile, in ms (the
    /// histogram's resolution); `null` without requests or beyond the last bound.
    pub latency_p50_ms: Option<u64>,
    pub latency_p95_ms: Option<u64>,
    pub first_byte_p50_ms: Option<u64>,
    pub first_byte_p95_ms: Option<u64>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Cost of the priced requests, USD (exact decimal string); `null` when every request was
    /// unpriced (its cost is unknown, not zero). With `unpriced_requests` above 0 it covers the
    /// priced requests only.
    pub cost_usd: Option<String>,
    /// Requests no price matched (not in `cost_usd`).
    pub unpriced_requests: i64,
    /// Cost per 1 000 requests, USD, over the priced requests; `null` when none was priced.
    pub cost_per_1000_usd: Option<String>,
}

/// How the compared answers agree (pairs where both succeeded).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AgreementReport {
    pub compared: i64,
    /// Share of compared pairs with the same finish reason; `null` when nothing was compared.
    pub same_finish_reason: Option<f64>,
    /// Same tool-call names, in order (also: both called none).
    pub same_tool_names: Option<f64>,
    /// The shadow's tool-call arguments were all valid JSON.
    pub shadow_tool_args_valid: Option<f64>,
    /// Pairs that asked for JSON mode, and the share whose shadow answer was valid JSON.
    pub json_mode_asked: i64,
    pub shadow_json_valid: Option<f64>,
    /// Mean of shadow text length / live text length.
    pub mean_length_ratio: Option<f64>,
    /// Mean text similarity, 0 to 1: the Jaccard index of the two answers' sets of lowercase
    /// word tokens.
    pub mean_similarity: Option<f64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShadowReport {
    pub shadow: ShadowView,
    /// Shadowed pairs reported.
    pub pairs: i64,
    pub live: SideReport,
    pub shadow_side: SideReport,
    pub agreement: AgreementReport,
    /// Why the rule no longer shadows: `expired`, `spend_cap`, `error_rate` (stopped by itself)
    /// or `disabled`; `null` while it runs.
    pub stopped_reason: Option<String>,
}

#[derive(sqlx::FromRow, Default)]
struct MinuteRow {
    pairs: i64,
    live_ok: i64,
    shadow_ok: i64,
    live_total_ms_hist: Vec<i64>,
    live_first_byte_ms_hist: Vec<i64>,
    shadow_total_ms_hist: Vec<i64>,
    shadow_first_byte_ms_hist: Vec<i64>,
    live_input_tokens: i64,
    live_output_tokens: i64,
    shadow_input_tokens: i64,
    shadow_output_tokens: i64,
    live_cost_pico_usd: i64,
    shadow_cost_pico_usd: i64,
    live_unpriced: i64,
    shadow_unpriced: i64,
    compared: i64,
    same_finish_reason: i64,
    same_tool_names: i64,
    shadow_tool_args_valid: i64,
    json_mode_asked: i64,
    shadow_json_valid: i64,
    length_ratio_milli_sum: i64,
    similarity_milli_sum: i64,
}

/// `$t.f += $m.f`, saturating, for each field `f` named.
macro_rules! saturating_sum {
    ($t:ident, $m:ident; $($field:ident),+ $(,)?) => {
        $( $t.$field = $t.$field.saturating_add($m.$field); )+
    };
}

fn add_hist(into: &mut Vec<i64>, from: &[i64]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(from) {
        *a = a.saturating_add(*b);
    }
}

/// The upper bound (ms) of the bucket holding quantile `q`; `None` without samples or past the
/// last bound.
pub fn quantile(hist: &[i64], q: f64) -> Option<u64> {
    let total: i64 = hist.iter().sum();
    if total <= 0 {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as i64;
    let mut seen = 0;
    for (i, n) in hist.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return SHADOW_LATENCY_BOUNDS_MS.get(i).copied();
        }
    }
    None
}

fn ratio(n: i64, of: i64) -> Option<f64> {
    (of > 0).then(|| n as f64 / of as f64)
}

fn side(
    requests: i64,
    ok: i64,
    total: &[i64],
    first: &[i64],
    tokens: (i64, i64),
    cost_pico: i64,
    unpriced: i64,
) -> SideReport {
    let priced = requests - unpriced;
    let cost = u128::try_from(cost_pico).unwrap_or(0);
    SideReport {
        requests,
        succeeded: ok,
        success_rate: ratio(ok, requests),
        latency_p50_ms: quantile(total, 0.5),
        latency_p95_ms: quantile(total, 0.95),
        first_byte_p50_ms: quantile(first, 0.5),
        first_byte_p95_ms: quantile(first, 0.95),
        input_tokens: tokens.0,
        output_tokens: tokens.1,
        cost_usd: (requests == 0 || priced > 0).then(|| format_pico_usd(cost)),
        unpriced_requests: unpriced,
        cost_per_1000_usd: (priced > 0).then(|| {
            format_pico_usd(cost.saturating_mul(1000) / u128::try_from(priced).unwrap_or(1))
        }),
    }
}

/// The report's range.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReportQuery {
    /// Only pairs that finished from this instant on (RFC 3339; minute resolution: the minute
    /// that contains it counts whole); default: every pair since the rule was created.
    #[param(value_type = Option<String>, format = DateTime)]
    pub since: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/shadows/{id}/report", tag = "shadows", operation_id = "shadow_report",
    params(ReportQuery),
    responses((status = 200, body = ShadowReport), (status = 404, body = ErrorBody),
              (status = 422, description = "`since` is not an RFC 3339 date-time", body = ErrorBody)))]
pub async fn report(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    Query(query): Query<ReportQuery>,
) -> ApiResult<Json<ShadowReport>> {
    let since = query.since.as_deref().map(parse_since).transpose()?;
    let row = fetch_row::<ShadowRow>(&state.pool, id, false).await?;
    let t = minutes_total(&state.pool, id, since).await?;
    let stopped_reason = stopped_reason(&row, unix_ms());
    let milli_mean = |sum: i64| (t.compared > 0).then(|| sum as f64 / 1000.0 / t.compared as f64);
    Ok(Json(ShadowReport {
        pairs: t.pairs,
        live: side(
            t.pairs,
            t.live_ok,
            &t.live_total_ms_hist,
            &t.live_first_byte_ms_hist,
            (t.live_input_tokens, t.live_output_tokens),
            t.live_cost_pico_usd,
            t.live_unpriced,
        ),
        shadow_side: side(
            t.pairs,
            t.shadow_ok,
            &t.shadow_total_ms_hist,
            &t.shadow_first_byte_ms_hist,
            (t.shadow_input_tokens, t.shadow_output_tokens),
            t.shadow_cost_pico_usd,
            t.shadow_unpriced,
        ),
        agreement: AgreementReport {
            compared: t.compared,
            same_finish_reason: ratio(t.same_finish_reason, t.compared),
            same_tool_names: ratio(t.same_tool_names, t.compared),
            shadow_tool_args_valid: ratio(t.shadow_tool_args_valid, t.compared),
            json_mode_asked: t.json_mode_asked,
            shadow_json_valid: ratio(t.shadow_json_valid, t.json_mode_asked),
            mean_length_ratio: milli_mean(t.length_ratio_milli_sum),
            mean_similarity: milli_mean(t.similarity_milli_sum),
        },
        stopped_reason,
        shadow: ShadowView::from(row),
    }))
}

/// The report's `since`, a 422 naming it when it is no RFC 3339 date-time.
fn parse_since(text: &str) -> ApiResult<UnixMillis> {
    parse_rfc3339(text).ok_or_else(|| {
        ApiError::validation(
            "since",
            format!(
                "since must be an RFC 3339 date-time such as 2027-01-31T23:59:59Z, got {:?}",
                crate::error::bounded(text, 64)
            ),
        )
    })
}

/// The rule's minutes from the one holding `since` on (every minute without it), summed.
async fn minutes_total(pool: &PgPool, id: i64, since: Option<UnixMillis>) -> ApiResult<MinuteRow> {
    let minutes: Vec<MinuteRow> = sqlx::query_as(
        "SELECT pairs, live_ok, shadow_ok, live_total_ms_hist, live_first_byte_ms_hist, \
         shadow_total_ms_hist, shadow_first_byte_ms_hist, live_input_tokens, live_output_tokens, \
         shadow_input_tokens, shadow_output_tokens, live_cost_pico_usd, shadow_cost_pico_usd, \
         live_unpriced, shadow_unpriced, compared, same_finish_reason, same_tool_names, \
         shadow_tool_args_valid, json_mode_asked, shadow_json_valid, length_ratio_milli_sum, \
         similarity_milli_sum FROM shadow_minutes WHERE shadow_id = $1 \
         AND ($2::bigint IS NULL OR bucket >= date_trunc('minute', \
              'epoch'::timestamptz + $2 * interval '1 millisecond')) ORDER BY bucket",
    )
    .bind(id)
    .bind(since.map(i64_of))
    .fetch_all(pool)
    .await?;
    let mut t = MinuteRow::default();
    for m in &minutes {
        add_hist(&mut t.live_total_ms_hist, &m.live_total_ms_hist);
        add_hist(&mut t.live_first_byte_ms_hist, &m.live_first_byte_ms_hist);
        add_hist(&mut t.shadow_total_ms_hist, &m.shadow_total_ms_hist);
        add_hist(
            &mut t.shadow_first_byte_ms_hist,
            &m.shadow_first_byte_ms_hist,
        );
        saturating_sum!(t, m; pairs, live_ok, shadow_ok, live_input_tokens, live_output_tokens,
            shadow_input_tokens, shadow_output_tokens, live_cost_pico_usd, shadow_cost_pico_usd,
            live_unpriced, shadow_unpriced, compared, same_finish_reason, same_tool_names,
            shadow_tool_args_valid, json_mode_asked, shadow_json_valid, length_ratio_milli_sum,
            similarity_milli_sum);
    }
    Ok(t)
}

/// Why the rule no longer mirrors, when it does not: its stop reason, else `expired` or
/// `disabled`.
fn stopped_reason(row: &ShadowRow, now: u64) -> Option<String> {
    row.stopped_reason.clone().or_else(|| {
        if row
            .expires_at_ms
            .is_some_and(|at| u64::try_from(at).unwrap_or(0) <= now)
        {
            Some("expired".to_owned())
        } else if !row.enabled {
            Some("disabled".to_owned())
        } else {
            None
        }
    })
}
